"""Bad input on 2 ranks as a user meets it (issue 17): `mpiexec -n 2 python -m
mnframe ...` ends every rank with status 2 and one message (rank 0's), no
traceback, naming the keys the user wrote. Each job runs under an outer timeout."""

from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent


def mnframe_on_2_ranks(*overrides, run_dir):
    r = run_mpi(
        ["-m", "mnframe", "extensions=minimal", *overrides, f"hydra.run.dir={run_dir}"], n=2, timeout=120, cwd=str(REPO)
    )
    assert not r.timed_out, r.output[-3000:]
    return r


@pytest.mark.parametrize(
    "overrides,needles,absent",
    [
        # two problems found by different checks, reported together
        (
            ["dataset.batch_size=-1", "dataset.strategy=scater"],
            ["2 problems", "dataset.batch_size", "did you mean 'scatter'"],
            [],
        ),
        # the top-level key is `resume`; there is no checkpoint in a fresh run directory
        (
            ["resume=must", "trainer.stop=[1,iteration]"],
            ["resume=must but there is no complete checkpoint"],
            ["checkpoint.resume"],
        ),
        # Adam's lr is an alias of alpha: both set is refused
        (["optimizer.lr=0.1", "optimizer.alpha=0.2"], ["optimizer.lr", "both are set"], []),
    ],
    ids=["two_stages", "resume_must", "lr_and_alpha"],
)
def test_bad_input_ends_both_ranks_with_one_message(overrides, needles, absent, tmp_path):
    r = mnframe_on_2_ranks(*overrides, run_dir=tmp_path / "run")
    assert r.returncode == 2, r.output[-3000:]
    for needle in needles:
        assert needle in r.output, r.output[-3000:]
    for needle in absent:
        assert needle not in r.output
    assert "Traceback" not in r.output
    assert r.output.count("configuration error") == 1  # said once, by rank 0
