#!/usr/bin/env python3
"""saker-perf rows of Snakemake with the Saker executor plugin, beside Snakemake's
local executor on the same cores, measured in the same run.

Run by `saker-perf --only snakemake` (perf/src/bench/python.rs), which sets SAKER_BIN
and PYTHONPATH=python and reads one JSON row per line from stdout. By hand:

    PYTHONPATH=python .venv/bin/python perf/python/snakemake_rows.py [--quick] [--table]

The workflow is the plugin's bench.py (python/snakemake-executor-plugin-saker/): N
short rule instances (`echo … > out/{i}.txt`), 1,000 (quick: 200), each its own
Snakemake job. Each run is one `snakemake` command from spawn to exit (DAG building,
and for the plugin the embedded pilot's start and stop, included) in a fresh copy of
the workflow: `--executor saker --saker-slots C` (the plugin's default job path,
warm Python workers) and `--cores C` (the local executor, which runs each job's shell
command from its own process), C = 2. Runs alternate local, saker, local, saker, …,
2 of each (quick: 1); rows give the medians.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
from typing import Dict, List

from rows import makespan_rows

REPO = pathlib.Path(__file__).resolve().parents[2]
PLUGIN = REPO / "python" / "snakemake-executor-plugin-saker"
sys.path.insert(0, str(PLUGIN))

import bench  # noqa: E402  (the plugin's benchmark: its workflow and run())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 instances, one run of each")
    parser.add_argument("--instances", type=int, help="rule instances (1,000; quick 200)")
    parser.add_argument("--runs", type=int, help="runs of each executor (2; quick 1)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--table", action="store_true", help="a table for people, not JSON rows")
    args = parser.parse_args()
    instances = args.instances or (200 if args.quick else 1000)
    runs = args.runs or (1 if args.quick else 2)

    # The spawned `snakemake` finds the plugin (and, through PYTHONPATH, the saker
    # client of this checkout) where saker-perf did not put them.
    env = dict(os.environ)
    paths = [str(REPO / "python"), str(PLUGIN)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("SAKER_BIN", str(REPO / "target" / "release" / "saker"))

    configs = {
        "local": ["--cores", str(args.cores)],
        "saker": ["--executor", "saker", "--jobs", str(instances), "--saker-slots", str(args.cores)],
    }
    took: Dict[str, List[float]] = {name: [] for name in configs}
    root = pathlib.Path(tempfile.mkdtemp(prefix="snakemake-rows-"))
    try:
        for _ in range(runs):
            for name, extra in configs.items():
                took[name].append(bench.run(name, extra, instances, root, env=env, quiet=True))
                print(f"snakemake_rows: {name} {took[name][-1]:.1f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    if args.table:
        bench.print_makespans(took, instances)
        return 0
    makespan_rows(f"snakemake: {instances} short rules", instances, took["saker"], took["local"],
                  f"local executor, --cores {args.cores}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
