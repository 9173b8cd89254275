"""``python -m mnframe checkpoint list|verify RUN_DIR`` (issue 31): what it shows, the damaged file
it names, its exit statuses (0 well, 1 damaged, 2 bad input, one line), and that it starts no MPI."""

import json
import os
import subprocess
import sys

import pytest

from mnframe.checkpoint.layout import make_layout
from mnframe.checkpoint.manifest import Manifest
from mnframe.checkpoint.store import CheckpointStore
from mnframe.commands import checkpoint_inspect as inspect_cli


def _write(payload):
    def write(tmp):
        for rank in (0, 1):
            with open(os.path.join(tmp, f"rank_{rank:05d}.bin"), "wb") as f:
                f.write(payload + bytes([rank]))
        return ["rank_00000.bin", "rank_00001.bin"]

    return write


@pytest.fixture
def run_dir(tmp_path):
    from mpi4py import MPI

    (tmp_path / "config.yaml").write_text("checkpoint:\n  dir: ckpts\n  interval: 2\n")
    store = CheckpointStore(tmp_path / "ckpts", MPI.COMM_SELF)
    store.save(2, _write(b"x" * 100), reason="interval")
    store.save(4, _write(b"y" * 2000), reason="final")
    return tmp_path


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "mnframe", "checkpoint", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, **(env or {})),
    )


def test_list_shows_iteration_reason_world_size_layout_and_size(run_dir, capsys):
    assert inspect_cli.main(["list", str(run_dir)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"checkpoints in {run_dir / 'ckpts'} (newest first):"
    assert lines[1].split() == ["checkpoint", "iteration", "reason", "world", "size", "layout", "size", "status"]
    assert lines[2].split()[:4] == ["iter_00000004", "4", "final", "1"]
    assert "data parallel, 1 rank " in lines[2] and "3.9 KiB" in lines[2] and lines[2].endswith("ok")
    assert lines[3].split()[:4] == ["iter_00000002", "2", "interval", "1"] and "202 bytes" in lines[3]


def test_layout_summary_reads_a_layout_record_when_there_is_one():
    manifest = Manifest(iteration=1, world_size=4, config_hash=None, files={})
    assert inspect_cli.layout_summary(manifest) == "data parallel, 4 ranks"
    manifest.layout = make_layout(4, {"kind": "model_parallel", "ranks": [{"stages": []}, {"stages": []}]})
    assert inspect_cli.layout_summary(manifest) == "model parallel, 2 stages x 2 replicas"


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_verify_names_the_damaged_file_and_exits_1(run_dir, capsys):
    assert inspect_cli.main(["verify", str(run_dir)]) == 0
    assert "all 2 checkpoint(s) verified" in capsys.readouterr().out
    victim = run_dir / "ckpts" / "iter_00000004" / "rank_00001.bin"
    data = bytearray(victim.read_bytes())
    data[10] ^= 1
    victim.write_bytes(bytes(data))
    result = _cli("verify", str(run_dir))  # through python -m mnframe
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "iter_00000004: DAMAGED" in result.stdout
    assert f"{victim} (written by rank 0) has a wrong SHA-256 (corrupted)" in result.stdout
    assert "iter_00000002: ok" in result.stdout and "1 of 2 checkpoint(s) damaged" in result.stdout
    assert inspect_cli.main(["list", str(run_dir)]) == 0  # same size: only the hashes tell
    victim.write_bytes(b"short")
    capsys.readouterr()
    assert inspect_cli.main(["list", str(run_dir)]) == 1
    assert "has 5 bytes, the manifest says 2001" in capsys.readouterr().out


def test_a_missing_manifest_is_damaged(run_dir, capsys):
    os.remove(run_dir / "ckpts" / "iter_00000002" / "manifest.json")
    assert inspect_cli.main(["verify", str(run_dir)]) == 1
    assert "iter_00000002: DAMAGED" in capsys.readouterr().out
    assert inspect_cli.main(["list", str(run_dir)]) == 1
    assert "no manifest.json" in capsys.readouterr().out


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_verify_checks_the_signature_when_a_key_is_set(run_dir):
    key = {"MNFRAME_CHECKPOINT_KEY": "a-key-of-sixteen-or-more"}
    result = _cli("verify", str(run_dir), env=key)
    assert result.returncode == 1 and "is not signed but MNFRAME_CHECKPOINT_KEY(_FILE) is set" in result.stdout
    from mnframe.checkpoint import signing

    path = run_dir / "ckpts" / "iter_00000004" / "manifest.json"
    manifest = Manifest.read(str(path.parent))
    manifest.signature = signing.sign(manifest, key["MNFRAME_CHECKPOINT_KEY"].encode())
    path.write_text(manifest.to_json())
    result = _cli("verify", str(run_dir), "iter_00000004", env=key)
    assert result.returncode == 0 and "signature verified" in result.stdout, result.stdout + result.stderr
    raw = json.loads(path.read_text())
    raw["iteration"] = 5
    path.write_text(json.dumps(raw))
    result = _cli("verify", str(run_dir), "iter_00000004", env=key)
    assert result.returncode == 1 and "signature that does not verify" in result.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["list", "{tmp}/nowhere"], "nowhere: no such directory"),
        (["verify", "{tmp}/empty"], "is not a run directory"),
        (["show", "{tmp}"], "unknown checkpoint command 'show'"),
        (["list"], "needs a run directory"),
        ([], "which command?"),
        (["verify", "{run}", "iter_00000009"], "iter_00000009: no such checkpoint"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_dir, tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    args = [a.format(tmp=tmp_path, run=run_dir) for a in args]
    assert inspect_cli.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.slow  # a subprocess or many config compositions: the full tier
def test_the_command_starts_no_mpi_and_exits_2_in_one_line(tmp_path):
    code = (
        "import sys\n"
        "from mnframe.commands.cli import main\n"
        "try:\n"
        f"    main(['checkpoint', 'list', {str(tmp_path / 'nowhere')!r}])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 2, exc.code\n"
        "assert 'mpi4py' not in sys.modules, 'mpi4py was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "no such directory" in result.stderr


def test_a_world_size_the_graph_does_not_fit_names_the_layout_it_would_resume(run_dir, tmp_path):
    """The configuration error for a rank graph that does not fit also names the newest
    checkpoint's layout (issue 31: old and new layouts in one message), above the advice."""
    from mnframe.commands.cli import _with_resumed_layout
    from mnframe.config.issues import ConfigIssue, ConfigIssues

    assert inspect_cli.newest_layout(run_dir, {"checkpoint": {"dir": "ckpts"}}) == (
        "its newest checkpoint iter_00000004 was written by data parallel, 1 rank"
    )
    assert inspect_cli.newest_layout(tmp_path / "nowhere") is None
    graph = ConfigIssues([ConfigIssue("topology.ranks", "the world size 3 is not a multiple of ...")])
    text = _with_resumed_layout(graph, {"checkpoint": {"dir": "ckpts"}}, str(run_dir), 3)
    lines = text.splitlines()
    assert lines[1].startswith("  topology.ranks:")
    assert "iter_00000004 was written by data parallel, 1 rank; 3 ranks were started" in lines[2]
    assert lines[3].startswith("Fix the recipe")
    other = ConfigIssues([ConfigIssue("dataset.batch_size", "must be positive")])
    assert _with_resumed_layout(other, {}, str(run_dir), 3) == str(other)
    assert _with_resumed_layout(graph, {}, None, 3) == str(graph)
