"""Nothing is read or written outside a run directory through a planted link (issue 38, items 1
and 2): the checked writers of ``mnframe.runtime.fs``, the checkpoint directory, and the run
directory's lock."""

import json
import os
import subprocess
import sys

import pytest

from mnframe.checkpoint.store import CheckpointStore
from mnframe.runtime import run_lock, settings
from mnframe.runtime.safe_paths import LinkRefused, open_dir, refuse_links, write_inside


def solo():
    from mpi4py import MPI

    return MPI.COMM_SELF


@pytest.fixture
def dirs(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    run.mkdir()
    outside.mkdir()
    return run, outside


def test_write_inside_refuses_a_linked_directory_and_a_linked_file(dirs):
    run, outside = dirs
    (run / "eval").symlink_to(outside)
    with pytest.raises(LinkRefused, match=r"eval is a symbolic link to .*outside.*rm ") as info:
        write_inside(run, run / "eval" / "metrics.json", b"{}")
    assert "\n" not in str(info.value) and list(outside.iterdir()) == []
    (run / "predict").mkdir()
    victim = outside / "victim.txt"
    victim.write_text("precious")
    (run / "predict" / "out.npz").symlink_to(victim)
    with pytest.raises(LinkRefused, match="out.npz is a symbolic link"):
        write_inside(run, run / "predict" / "out.npz", b"x")
    assert victim.read_text() == "precious"
    with pytest.raises(LinkRefused):
        refuse_links(run, run / "predict" / "out.npz")


def test_write_inside_creates_what_is_missing_and_publishes_whole(dirs):
    run, _ = dirs
    write_inside(run, run / "a" / "b" / "f.json", b"[1]")
    assert json.loads((run / "a" / "b" / "f.json").read_text()) == [1]
    write_inside(run, run / "a" / "b" / "f.json", b"[2]")
    assert (run / "a" / "b" / "f.json").read_text() == "[2]"
    assert sorted(os.listdir(run / "a" / "b")) == ["f.json"]  # no temporary left
    os.close(open_dir(run, run / "a"))


def test_a_path_outside_the_run_directory_is_the_users_choice_but_not_through_its_last_link(dirs, tmp_path):
    run, outside = dirs
    (tmp_path / "alias").symlink_to(outside)
    write_inside(run, tmp_path / "alias" / "m.json", b"{}")  # the user named it: followed above the file
    assert (outside / "m.json").read_text() == "{}"
    (outside / "link.json").symlink_to(tmp_path / "x")
    with pytest.raises(LinkRefused):
        write_inside(run, outside / "link.json", b"{}")


def test_a_linked_checkpoint_directory_is_never_read_or_written(dirs):
    run, outside = dirs
    (run / "checkpoints").symlink_to(outside)
    store = CheckpointStore(run / "checkpoints", solo(), base=run)
    for call in (store.scan, lambda: store.select("never"), lambda: store.save(1, lambda _tmp: [])):
        with pytest.raises(LinkRefused, match=r"checkpoint.dir: .*checkpoints is a symbolic link") as info:
            call()
        assert "\n" not in str(info.value)
    assert list(outside.iterdir()) == []


def test_a_linked_lock_stops_the_job_unless_the_documented_opt_out_is_set(dirs, monkeypatch):
    run, outside = dirs
    target = outside / "lock"
    (run / run_lock.LOCK_NAME).symlink_to(target)
    problem = run_lock.acquire(run)
    assert problem is not None and "\n" not in problem
    assert f"{run / run_lock.LOCK_NAME} is a symbolic link" in problem and "MNFRAME_UNSAFE_NO_LOCK=1" in problem
    assert not run_lock.owns(run) and not target.exists()
    monkeypatch.setenv("MNFRAME_UNSAFE_NO_LOCK", "1")
    monkeypatch.setattr(settings, "_values", {})
    assert run_lock.acquire(run) is None and run_lock.owns(run)
    run_lock.release(run)
    assert not target.exists()


def test_a_lock_that_is_not_a_regular_file_stops_the_job(dirs):
    run, _ = dirs
    os.mkfifo(run / run_lock.LOCK_NAME)  # opening it for reading would block without O_NONBLOCK
    problem = run_lock.acquire(run)
    assert problem is not None and "is not a regular file" in problem


def test_the_lock_still_excludes_a_second_process(dirs):
    run, _ = dirs
    assert run_lock.acquire(run) is None
    probe = "import sys; from mnframe.runtime import run_lock; print(run_lock.acquire(sys.argv[1]) or 'acquired')"
    other = subprocess.run([sys.executable, "-c", probe, str(run)], capture_output=True, text=True, timeout=60)
    assert "is in use by another mnframe job" in other.stdout
    run_lock.release(run)
    other = subprocess.run([sys.executable, "-c", probe, str(run)], capture_output=True, text=True, timeout=60)
    assert other.stdout.strip() == "acquired"
