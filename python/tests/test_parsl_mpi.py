"""Parsl MPI apps on SakerExecutor: the function runs once, on the first node of a
Saker job of ``mpi="pmi"``, ``launcher="script"``, and ``$PARSL_MPI_PREFIX`` is
``saker mpiexec``: the ranks are started by the agents and served PMI, no mpiexec.

One DataFlowKernel (an embedded pilot of two agents, two slots each) for the module.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import parsl_kernel

parsl = pytest.importorskip("parsl")

from parsl.app.app import bash_app, python_app  # noqa: E402
from parsl.executors.errors import InvalidResourceSpecification  # noqa: E402

from saker.parsl import SakerExecutor, SakerTaskError  # noqa: E402

SOURCE = Path(__file__).resolve().parents[2] / "pilot" / "tests" / "mpi" / "probe.c"


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> str:
    binary = tmp_path_factory.mktemp("mpi") / "probe"
    try:
        subprocess.run(["mpicc.mpich", "-O2", "-o", str(binary), str(SOURCE)], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        if os.environ.get("SAKER_REQUIRE_MPI") == "1":
            raise
        pytest.skip(f"no MPICH to build the probe with: {exc}")
    return str(binary)


@pytest.fixture(scope="module")
def dfk(tmp_path_factory, saker_bin):
    with parsl_kernel(tmp_path_factory.mktemp("parsl-mpi-run"), saker_bin, agents=2, slots=4) as kernel:
        yield kernel


@bash_app
def mpi_run(program, *args, stdout=None, stderr=None, parsl_resource_specification={}):
    return f"$PARSL_MPI_PREFIX {program} {' '.join(args)}"


@python_app
def parsl_variables(parsl_resource_specification={}):
    import os

    return {key: value for key, value in os.environ.items() if key.startswith("PARSL_")}


@python_app
def raises(parsl_resource_specification={}):
    raise ValueError("from the leader")


TWO_BY_TWO = {"num_nodes": 2, "ranks_per_node": 2}


def test_a_bash_mpi_app_runs_its_ranks_on_both_nodes_with_no_mpiexec(dfk, probe, tmp_path):
    out = tmp_path / "ranks.out"
    future = mpi_run(probe, stdout=str(out), stderr=str(tmp_path / "ranks.err"),
                     parsl_resource_specification=TWO_BY_TWO)
    assert future.result(timeout=120) == 0
    lines = [line for line in out.read_text().splitlines() if line.startswith("probe rank=")]
    assert len(lines) == 4, out.read_text()
    assert all(" size=4 " in line and " sum=10 " in line for line in lines), lines
    nodes = {line.split(" saker_node=")[1].split()[0] for line in lines}
    assert len(nodes) == 2, lines


def test_an_mpi_app_sees_what_htex_mpi_mode_sets(dfk):
    seen = parsl_variables(parsl_resource_specification=TWO_BY_TWO).result(timeout=120)
    assert seen["PARSL_NUM_NODES"] == "2"
    assert seen["PARSL_NUM_RANKS"] == "4"
    assert seen["PARSL_RANKS_PER_NODE"] == "2"
    assert len(seen["PARSL_MPI_NODELIST"].split(",")) == 2
    assert seen["PARSL_MPI_PREFIX"].endswith("mpiexec -n 4 -ppn 2"), seen
    assert seen["PARSL_MPIEXEC_PREFIX"] == seen["PARSL_MPI_PREFIX"]
    # num_ranks alone: one node, that many ranks on it.
    seen = parsl_variables(parsl_resource_specification={"num_ranks": 2}).result(timeout=120)
    assert (seen["PARSL_NUM_NODES"], seen["PARSL_RANKS_PER_NODE"]) == ("1", "2")


def test_an_mpi_apps_exception_and_a_failed_rank_reach_the_caller(dfk, probe, tmp_path):
    with pytest.raises(ValueError, match="from the leader"):
        raises(parsl_resource_specification=TWO_BY_TWO).result(timeout=120)
    future = mpi_run(probe, "fail=3", stdout=str(tmp_path / "f.out"), stderr=str(tmp_path / "f.err"),
                     parsl_resource_specification=TWO_BY_TWO)
    with pytest.raises(SakerTaskError) as info:
        future.result(timeout=120)
    assert "failed" in str(info.value)


def test_mpi_layouts_map_to_script_jobs_and_bad_ones_are_refused():
    options = SakerExecutor()._task_options
    got = options({"num_nodes": 2, "ranks_per_node": 3, "cores": 2})
    assert {key: got[key] for key in ("nodes", "ranks", "ranks_per_node", "cores_per_rank", "mpi",
                                      "launcher")} == {
        "nodes": 2, "ranks": 6, "ranks_per_node": 3, "cores_per_rank": 2, "mpi": "pmi",
        "launcher": "script"}
    assert "cores" not in got
    got = options({"num_nodes": 3, "num_ranks": 5})
    assert (got["nodes"], got["ranks"], got["ranks_per_node"]) == (3, 5, 2)
    assert "launcher" not in options({"num_nodes": 1})
    for spec in ({"num_nodes": 2, "num_ranks": 5, "ranks_per_node": 2}, {"num_ranks": 0},
                 {"num_nodes": 1.5}, {"num_nodes": 2, "launcher_options": 3}):
        with pytest.raises(InvalidResourceSpecification):
            options(spec)
