#!/usr/bin/env python3
"""saker-perf rows of Parsl with SakerExecutor, beside HighThroughputExecutor and
ThreadPoolExecutor, all measured in the same run.

Run by `saker-perf --only parsl` (perf/src/bench/python.rs), which sets SAKER_BIN,
PYTHONPATH=python and PATH (HTEX starts its interchange from the venv's bin/) and reads
one JSON row per line from stdout. By hand:

    PATH=.venv/bin:$PATH PYTHONPATH=python .venv/bin/python perf/python/parsl_rows.py \
        [--quick] [--tasks N] [--calls N] [--sync] [--table]

Executors: SakerExecutor (embedded pilot, 2 slots; its temporary pilot does not fsync
its journal, SakerExecutor's default, unless --sync), HighThroughputExecutor
(max_workers_per_node=2, local provider) and ThreadPoolExecutor(max_threads=2), which
runs apps in the workflow process itself: about the DataFlowKernel's own ceiling.

- throughput: N no-op python_apps submitted at once (after a warm-up of 200, so pilot,
  interchange and worker start-up are not in it), tasks per second from the first
  submit to the last result; 20,000 (quick: 5,000);
- round trip: N apps one after another (submit, wait for the result, next), each
  call's latency; p50 and p99 rows; 500 (quick: 200).

--table prints the same figures as a table for people instead of JSON rows. Every Parsl
run dir goes to a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import parsl
from parsl.app.app import python_app
from parsl.config import Config
from rows import row, samples

REPO = pathlib.Path(__file__).resolve().parents[2]
WORKERS = 2
# --log-off: every executor's DataFlowKernel runs with initialize_logging=False (Parsl
# then writes no per-task debug log), to measure the executors rather than the log.
LOG = [True]


@python_app
def noop():
    return None


def saker_config(run_dir: str, sync: Optional[bool]) -> Config:
    from saker.parsl import SakerExecutor

    binary = os.environ.get("SAKER_BIN") or str(REPO / "target" / "release" / "saker")
    return Config(executors=[SakerExecutor(label="saker", slots=WORKERS, saker_bin=binary, sync=sync)],
                  run_dir=run_dir, strategy="none", initialize_logging=LOG[0])


def htex_config(run_dir: str, sync: Optional[bool]) -> Config:
    from parsl.executors import HighThroughputExecutor
    from parsl.providers import LocalProvider

    return Config(executors=[HighThroughputExecutor(
        label="htex", max_workers_per_node=WORKERS, cores_per_worker=1, encrypted=False,
        provider=LocalProvider(init_blocks=1, max_blocks=1))],
        run_dir=run_dir, strategy="none", initialize_logging=LOG[0])


def threads_config(run_dir: str, sync: Optional[bool]) -> Config:
    from parsl.executors.threads import ThreadPoolExecutor

    return Config(executors=[ThreadPoolExecutor(label="threads", max_threads=WORKERS)],
                  run_dir=run_dir, strategy="none", initialize_logging=LOG[0])


CONFIGS = {"saker": saker_config, "htex": htex_config, "threads": threads_config}
NAMES = {"saker": "SakerExecutor", "htex": "HighThroughputExecutor",
         "threads": "ThreadPoolExecutor"}


def measure(name: str, tasks: int, calls: int, base: str, sync: Optional[bool]) -> Dict[str, Any]:
    run_dir = tempfile.mkdtemp(prefix=f"{name}-", dir=base)
    dfk = parsl.load(CONFIGS[name](run_dir, sync))
    try:
        for f in [noop() for _ in range(200)]:
            f.result()
        start = time.perf_counter()
        futures = [noop() for _ in range(tasks)]
        for f in futures:
            f.result()
        rate = tasks / (time.perf_counter() - start)
        del futures

        latencies_us: List[float] = []
        for _ in range(calls):
            t0 = time.perf_counter()
            noop().result()
            latencies_us.append(round((time.perf_counter() - t0) * 1e6, 1))
    finally:
        dfk.cleanup()
    return {"rate": rate, "latencies_us": latencies_us}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--tasks", type=int, help="throughput tasks (20,000; quick 5,000)")
    parser.add_argument("--calls", type=int, help="sequential calls (500; quick 200)")
    parser.add_argument("--sync", action="store_true",
                        help="the pilot fsyncs its journal before each result")
    parser.add_argument("--table", action="store_true", help="a table for people, not JSON rows")
    parser.add_argument("--log-off", action="store_true",
                        help="initialize_logging=False for every executor's DataFlowKernel")
    args = parser.parse_args()
    LOG[0] = not args.log_off
    label = "parsl, DFK log off:" if args.log_off else "parsl:"

    tasks = args.tasks or (5_000 if args.quick else 20_000)
    calls = args.calls or (200 if args.quick else 500)
    sync = True if args.sync else None

    base = tempfile.mkdtemp(prefix="parsl-rows-")
    results: Dict[str, Dict[str, Any]] = {}
    try:
        # Baselines first, then saker, in one process (one DataFlowKernel at a time).
        for name in ("htex", "threads", "saker"):
            results[name] = measure(name, tasks, calls, base, sync)
            print(f"parsl_rows: {name} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    saker, htex, threads = results["saker"], results["htex"], results["threads"]
    if args.table:
        def q(values: List[float], p: int) -> float:
            return statistics.quantiles(values, n=100, method="inclusive")[p - 1] / 1e3

        print(f"{'row':42} {'saker':>12} {'htex':>12} {'threads':>12}")
        print(f"{f'parsl: no-op apps, {tasks} at once':42} "
              + " ".join(f"{results[n]['rate']:>10.0f}/s" for n in ("saker", "htex", "threads")))
        for p in (50, 99):
            print(f"{f'parsl: round trip p{p}, {calls} sequential':42} "
                  + " ".join(f"{q(results[n]['latencies_us'], p):>9.2f} ms" for n in ("saker", "htex", "threads")))
        return 0

    row(f"{label} no-op python_apps, {tasks} at once", "per_second", saker["rate"], htex["rate"],
        NAMES["htex"], {"ratio_at_least": 1.5})
    row(f"{label} no-op python_apps, {tasks} at once, vs in-process threads", "per_second",
        saker["rate"], threads["rate"], NAMES["threads"])
    row(f"{label} round trip p50, {calls} sequential", "microseconds",
        samples(saker["latencies_us"], 50), samples(htex["latencies_us"], 50), NAMES["htex"],
        {"ratio_at_most": 0.5})
    row(f"{label} round trip p50, {calls} sequential, vs in-process threads", "microseconds",
        samples(saker["latencies_us"], 50), samples(threads["latencies_us"], 50),
        NAMES["threads"])
    row(f"{label} round trip p99, {calls} sequential", "microseconds",
        samples(saker["latencies_us"], 99), samples(htex["latencies_us"], 99), NAMES["htex"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
