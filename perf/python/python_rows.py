"""saker-perf rows of the Python client, each beside a same-run baseline.

Run by `saker-perf --only python` (perf/src/bench/python.rs), which reads one JSON row
per line from stdout. Each row's baseline runs right before its saker figure:

- no-op calls through `pilot.map` beside `ProcessPoolExecutor(2).map` (the standard
  library's way to run functions on other processes); target >= 20,000 calls/s;
- sequential `call().result()` round trips (p50, p99) beside `ProcessPoolExecutor`;
- `/bin/true` command tasks through the client beside two threads of
  `subprocess.run` (raw spawns from Python);
- idle worker memory (proportional set size) beside an idle ProcessPoolExecutor worker;
- time to the first result from a cold start (`Pilot.start` to the first call's
  value) beside a new ProcessPoolExecutor's first result.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import threading
import time

import saker
from rows import row, samples

QUICK = "--quick" in sys.argv
SLOTS = 2


def noop(x: int) -> int:
    return x


def pss_mib(pid: int) -> float:
    """Proportional set size: shared pages count once across the processes sharing
    them, so a worker forked from this process is not charged for its parent's memory
    (its RSS would be) and a spawned one is charged the same way."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Pss for {pid}")


def throughput() -> None:
    count = 20_000 if QUICK else 100_000
    with concurrent.futures.ProcessPoolExecutor(SLOTS) as pool:
        list(pool.map(noop, range(100)))  # started
        start = time.perf_counter()
        done = sum(1 for _ in pool.map(noop, range(count)))
        pool_rate = done / (time.perf_counter() - start)
    with saker.Pilot.start(slots=SLOTS) as pilot:
        list(pilot.map(noop, range(100)))  # workers started
        start = time.perf_counter()
        done = sum(1 for _ in pilot.map(noop, range(count)))
        rate = done / (time.perf_counter() - start)
    row(f"python: no-op calls, map of {count}", "per_second", rate, pool_rate,
        f"ProcessPoolExecutor({SLOTS})", {"at_least": 20_000})


def round_trips() -> None:
    count = 300 if QUICK else 2_000
    with concurrent.futures.ProcessPoolExecutor(SLOTS) as pool:
        pool.submit(noop, 0).result()
        pool_times = []
        for i in range(count):
            start = time.perf_counter()
            pool.submit(noop, i).result()
            pool_times.append((time.perf_counter() - start) * 1e6)
    with saker.Pilot.start(slots=SLOTS) as pilot:
        for i in range(2 * SLOTS):
            pilot.call(noop, i).result()
        times = []
        for i in range(count):
            start = time.perf_counter()
            pilot.call(noop, i).result()
            times.append((time.perf_counter() - start) * 1e6)
    for percentile in (50, 99):
        row(f"python: call round trip p{percentile}", "microseconds", samples(times, percentile),
            samples(pool_times, percentile), "ProcessPoolExecutor")


def commands() -> None:
    count = 1_000 if QUICK else 5_000
    lock = threading.Lock()
    left = [count]

    def spawn_loop() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            subprocess.run(["/bin/true"], check=True)

    start = time.perf_counter()
    threads = [threading.Thread(target=spawn_loop) for _ in range(SLOTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    raw_rate = count / (time.perf_counter() - start)
    with saker.Pilot.start(slots=SLOTS) as pilot:
        start = time.perf_counter()
        futures = [pilot.submit(["/bin/true"]) for _ in range(count)]
        for future in futures:
            future.result()
        rate = count / (time.perf_counter() - start)
    row(f"python: /bin/true commands, {count}", "per_second", rate, raw_rate,
        f"{SLOTS} threads of subprocess.run")


def memory() -> None:
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        pid = pool.submit(os.getpid).result()
        pool_memory = pss_mib(pid)
    with saker.Pilot.start(slots=1) as pilot:
        pid = pilot.call(os.getpid).result()
        memory = pss_mib(pid)
    row("python: idle worker memory (PSS)", "mebibytes", memory, pool_memory,
        "ProcessPoolExecutor worker")


def cold_start() -> None:
    start = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(SLOTS) as pool:
        pool.submit(noop, 1).result()
        pool_seconds = time.perf_counter() - start
    start = time.perf_counter()
    with saker.Pilot.start(slots=SLOTS) as pilot:
        pilot.call(noop, 1).result()
        seconds = time.perf_counter() - start
    row("python: first result on a cold pilot", "seconds", seconds, pool_seconds,
        "a new ProcessPoolExecutor")


if __name__ == "__main__":
    throughput()
    round_trips()
    commands()
    memory()
    cold_start()
