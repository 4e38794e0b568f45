"""saker-perf rows of a map-reduce whose intermediates go by reference, on the local
Slurm cluster, beside the same workflow through files on the cluster's shared
directory.

Run by `saker-perf --only mapreduce-slurm` (perf/src/bench/python.rs) with the cluster
up (`source .slurm-cluster/env.sh`), or by hand:

    SAKER_BIN=target/release/saker python perf/python/mapreduce_rows.py [--quick] [--local]

One service pilot across three nodes (`sbatch sbatch-templates/service.sbatch`; with
`--local`, an embedded pilot of three agents on this machine instead) runs both
workflows, alternated (A, B, A, B; medians): 48 maps (quick 12) each make a 64 MiB
(quick 16 MiB) float64 array, then pairwise sums, level by level, down to one array,
whose total is checked. By reference, every map and sum is a call with `ref=True`: its
array stays in its node's store, and a sum runs where one of its two arrays is and
fetches the other node to node. Through files, each call writes its array as a `.npy`
file in one directory all nodes see and returns the path, and a sum reads its two
files (mapped). Rows: the makespans, and the bytes the root passed on while the
by-reference runs ran (target 0: every byte went node to node).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, List

import numpy

import saker
from rows import row

QUICK = "--quick" in sys.argv
LOCAL = "--local" in sys.argv
MAPS = 12 if QUICK else 48
MIB = 1 << 20
ARRAY = (16 if QUICK else 64) * MIB
ROUNDS = 2 if QUICK else 3
NODES = 3
REPO = Path(__file__).resolve().parents[2]


def make(i: int, n: int) -> Any:
    return numpy.full(n, float(i))


def add(a: Any, b: Any) -> Any:
    return numpy.add(a, b)


def total(a: Any) -> float:
    return float(a.sum())


def make_file(i: int, n: int, directory: str) -> str:
    path = os.path.join(directory, f"m{i}.npy")
    numpy.save(path, numpy.full(n, float(i)))
    return path


def add_files(p: str, q: str, directory: str, k: int) -> str:
    a, b = numpy.load(p, mmap_mode="r"), numpy.load(q, mmap_mode="r")
    path = os.path.join(directory, f"s{k}.npy")
    numpy.save(path, numpy.add(a, b))
    os.unlink(p)
    os.unlink(q)
    return path


def total_file(p: str) -> float:
    value = float(numpy.load(p, mmap_mode="r").sum())
    os.unlink(p)
    return value


def tree(pilot: saker.Pilot, leaves: List[Any], pair: Callable[[Any, Any, int], Any]) -> Any:
    """Sums `leaves` pairwise, level by level; a level's odd one out goes up as is."""
    level = leaves
    k = 0
    while len(level) > 1:
        futures = []
        for a, b in zip(level[0::2], level[1::2]):
            futures.append(pair(a, b, k))
            k += 1
        carried = [level[-1]] if len(level) % 2 else []
        level = [future.result(600) for future in futures] + carried
    return level[0]


def by_reference(pilot: saker.Pilot, n: int) -> float:
    stored = pilot.options(ref=True)
    maps = [stored.call(make, i, n) for i in range(MAPS)]
    refs = [future.result(600) for future in maps]
    last = tree(pilot, refs, lambda a, b, _k: stored.call(add, a, b))
    return pilot.call(total, last).result(600)


def through_files(pilot: saker.Pilot, n: int, directory: str) -> float:
    maps = [pilot.call(make_file, i, n, directory) for i in range(MAPS)]
    paths = [future.result(600) for future in maps]
    last = tree(pilot, paths, lambda p, q, k: pilot.call(add_files, p, q, directory, k))
    return pilot.call(total_file, last).result(600)


def slurm(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def start_pilot(scratch: Path) -> Any:
    """The pilot (and the Slurm job to cancel at the end, if any)."""
    if LOCAL:
        return saker.Pilot.start(agents=NODES, saker_bin=os.environ.get("SAKER_BIN")), None
    directory = scratch / "pilot"
    # The workers run this Python (and its cloudpickle), with the saker package beside it.
    python_path = os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PILOT=str(directory), SAKER=os.environ.get("SAKER_BIN", "saker"),
               PYTHON=sys.executable, PYTHONPATH=python_path)
    job = subprocess.run(
        ["sbatch", "--parsable", f"--nodes={NODES}", f"--output={scratch / 'job.log'}",
         str(REPO / "sbatch-templates" / "service.sbatch")],
        check=True, capture_output=True, text=True, env=env,
    ).stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while True:
        try:
            pilot = saker.Pilot.connect(str(directory))
            if pilot.status()["agents"] >= NODES:
                return pilot, job
            pilot.close()
        except (saker.SakerError, OSError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the pilot never had {NODES} agents: {(scratch / 'job.log').read_text()}")
        time.sleep(0.5)


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="saker-mapreduce-"))
    shared = scratch / "shared"
    shared.mkdir()
    pilot, job = start_pilot(scratch)
    n = ARRAY // 8
    expected = float(sum(range(MAPS))) * n
    try:
        # Every worker started, both ways, before anything is timed.
        small = 1 << 10
        for _ in range(2):
            by_reference(pilot, small)
            through_files(pilot, small, str(shared))
        saker_runs: List[float] = []
        file_runs: List[float] = []
        root_bytes = 0
        moved = 0
        for _ in range(ROUNDS):
            before = pilot.status()
            started = time.perf_counter()
            result = by_reference(pilot, n)
            saker_runs.append(time.perf_counter() - started)
            after = pilot.status()
            root_bytes += after["data_root_bytes"] - before["data_root_bytes"]
            moved += after["data_moved_bytes"] - before["data_moved_bytes"]
            assert result == expected, (result, expected)

            started = time.perf_counter()
            result = through_files(pilot, n, str(shared))
            file_runs.append(time.perf_counter() - started)
            assert result == expected, (result, expected)
        where = "an embedded pilot of 3 agents" if LOCAL else "3 Slurm nodes"
        name = f"map-reduce of {MAPS} x {ARRAY // MIB} MiB by reference on {where}"
        row(f"{name}, makespan", "seconds", statistics.median(saker_runs),
            statistics.median(file_runs), "the same workflow through .npy files in one shared directory")
        row(f"{name}, bytes through the root", "mebibytes", root_bytes / MIB, moved / MIB / ROUNDS,
            "bytes moved node to node per run", {"at_most": 0.0})
    finally:
        if job is None:
            pilot.close()
        else:
            pilot.shutdown()
            slurm("scancel", job)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
