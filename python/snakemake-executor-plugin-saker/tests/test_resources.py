"""Snakemake resources → Saker options, and the requests refused before queueing."""

import pytest

from snakemake_executor_plugin_saker.resources import ResourceError, parse_extra, saker_options


def test_plain_resources_map_to_task_options():
    options, hpc = saker_options(4, {"_cores": 4, "_nodes": 1, "tmpdir": "/tmp", "mem_mb": 1000,
                                     "mem_mib": 954, "disk_mb": 1000, "runtime": 90, "gpu": 1})
    assert not hpc
    assert options == {"cores": 4, "memory_mib": 954, "gpus": 1, "time_limit": 5400}


def test_mem_mb_alone_rounds_up_to_whole_mib():
    options, _ = saker_options(1, {"mem_mb": 1})
    assert options["memory_mib"] == 1
    options, _ = saker_options(1, {"mem_mb": 2000})
    assert options["memory_mib"] == 1908  # 2e9 bytes = 1907.35 MiB


def test_mpi_jobs_become_hpc_jobs():
    options, hpc = saker_options(1, {"nodes": 3, "tasks": 12, "mpi": "mpirun", "cpus_per_task": 2})
    assert hpc
    assert options == {"nodes": 3, "ranks": 12, "cores_per_rank": 2, "mpi": "none"}


def test_saker_extra_adds_options_in_saker_submit_spelling():
    options, _ = saker_options(1, {"saker_extra": "--priority 7 --resource licence=2 --tag a "
                                                  "--tag=b --idempotent --max-replays 1 --env X='a b'"})
    assert options == {"cores": 1, "priority": 7, "resources": {"licence": 2}, "tags": ["a", "b"],
                       "idempotent": True, "max_replays": 1, "env": {"X": "a b"}}


@pytest.mark.parametrize("threads, resources, message", [
    (1, {"licence": 1}, "licence have no Saker meaning"),
    (1, {"nodes": 2}, "needs mpi= set"),
    (1, {"tasks": 4}, "needs mpi= set"),
    (0, {}, "threads=0 must be at least 1"),
    (1, {"gpu": 1, "gpus": 2}, "disagree"),
    (1, {"mem_mb": "lots"}, "mem_mb='lots' must be a whole number"),
    (1, {"saker_extra": "--array 1-10"}, "'--array' is not an option"),
    (1, {"saker_extra": "--priority high"}, "--priority takes a whole number"),
    (1, {"saker_extra": "--exclusive"}, "needs an MPI job"),
    (1, {"saker_extra": "--priority"}, "--priority needs a value"),
])
def test_requests_saker_cannot_honour_are_refused(threads, resources, message):
    with pytest.raises(ResourceError, match=None) as caught:
        saker_options(threads, resources)
    assert message in str(caught.value)


def test_names_left_to_snakemake_are_not_refused():
    options, _ = saker_options(1, {"licence": 1, "slurm_partition": "x"}, ignored={"licence", "slurm_partition"})
    assert options == {"cores": 1}


def test_parse_extra_refuses_non_strings():
    with pytest.raises(ResourceError, match="must be a string"):
        parse_extra(5)
