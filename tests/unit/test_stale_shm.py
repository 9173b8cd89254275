"""mnframe.runtime.stale_shm: which /dev/shm entries are a Slurm job's MPICH segments, and removing them."""

from mnframe.runtime import stale_shm


def test_world_id_is_mpichs_name_for_a_slurm_step():
    # seen on the simulated cluster: srun --mpi=pmi2 step 1.0 (PMI_JOBID=1.0), two ranks on a node,
    # made /dev/shm/mpich_shm_eb421bf2_0 (mpich wheel 5.0.2)
    assert f"{stale_shm.world_id('1.0'):x}" == "eb421bf2"
    assert f"{stale_shm.world_id('1.1'):x}" == "ec421d85"


def test_only_the_jobs_own_segments_are_chosen():
    names = [
        "mpich_shm_ec421d85_0",  # job 1 step 1, node 0
        "mpich_vci_ec421d85_1",  # job 1 step 1, node 1
        f"mpich_shm_{stale_shm.world_id('1.37'):x}_2",
        f"mpich_shm_{stale_shm.world_id('12.1'):x}_0",  # job 12: not job 1's
        f"mpich_shm_{stale_shm.world_id('kvs_4242_0'):x}_0",  # an mpiexec job
        "mpich_shm_ec421d85_0.bak",
        "other",
    ]
    assert stale_shm.job_segments("1", names) == sorted(names[:3])
    assert stale_shm.job_segments("12", names) == [names[3]]


def test_remove_takes_the_jobs_segments_and_leaves_the_rest(tmp_path):
    keep = f"mpich_shm_{stale_shm.world_id('7.0'):x}_0"
    for name in ("mpich_shm_ec421d85_0", "mpich_vci_ec421d85_0", keep, "unrelated"):
        (tmp_path / name).write_bytes(b"x")
    assert stale_shm.remove("1", str(tmp_path)) == ["mpich_shm_ec421d85_0", "mpich_vci_ec421d85_0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([keep, "unrelated"])
    assert stale_shm.remove("1", str(tmp_path / "missing")) == []


def test_main_wants_one_job_id(capsys):
    assert stale_shm.main(["abc"]) == 2
    assert "usage: python -m mnframe.runtime.stale_shm SLURM_JOB_ID" in capsys.readouterr().err
