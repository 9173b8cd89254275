"""Config errors found after the broadcast are raised on every rank, the same."""

import pytest

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 60


def test_config_error_is_raised_on_every_rank(mpi_comm, tmp_path):
    from mnframe.commands import cli
    from mnframe.config.issues import ConfigError

    bad = ["dataset.batch_size=-1", "optimizer.alpha=fast"]
    with pytest.raises(ConfigError) as info:
        cli.train(["recipe=mnist", *bad, f"hydra.run.dir={tmp_path}"])
    text = str(info.value)
    assert "dataset.batch_size" in text
    assert "optimizer.alpha" in text
    # every rank holds the same message
    assert len(set(mpi_comm.allgather(text))) == 1
