"""saker-perf rows of Python objects by reference, each beside a same-run baseline.

Run by `saker-perf --only objects` (perf/src/bench/python.rs). One embedded pilot (one
agent, 2 slots) and one ProcessPoolExecutor(2) serve every row; saker and baseline
runs alternate (A, B, A, B) and medians are reported:

- put then get of a 1 GiB float64 array (quick 256 MiB): bytes ÷ (put + get time)
  beside `numpy.copy` of the same array; target >= 0.5 of its bandwidth;
- a worker reading that array by reference: its anonymous memory's growth (the
  array is a view of the store's pages, not a copy), target <= 5 % of the array;
- `pilot.call(f, array)` of a 256 MiB array (quick 64 MiB) end to end (the array goes
  by reference on its own), beside `ProcessPoolExecutor.submit(f, array)`; target
  <= 0.2 of its time (5x faster); and a call returning such an array, likewise;
- a call with a 1 MiB (and a 4 MiB) argument returning as much, round trip, beside
  the pool's; target <= 1.5 x.

`--object-memory SIZE` runs the pilot with that object memory (objects in /dev/shm, or
in the tmpfs `--object-memory-dir DIR` names).
"""

from __future__ import annotations

import concurrent.futures
import statistics
import sys
import time
from typing import Any, Callable, List

import numpy

import saker
from rows import row

QUICK = "--quick" in sys.argv
OBJECT_MEMORY = sys.argv[sys.argv.index("--object-memory") + 1] if "--object-memory" in sys.argv else None
MEMORY_DIR = sys.argv[sys.argv.index("--object-memory-dir") + 1] if "--object-memory-dir" in sys.argv else None
SLOTS = 2
ROUNDS = 3 if QUICK else 5
MIB = 1 << 20


def total(array: Any) -> float:
    return float(array.sum())


def made(size: int) -> Any:
    return numpy.ones(size // 8)


def echoed(array: Any) -> Any:
    return array


def anonymous_growth(array: Any) -> int:
    """Bytes of anonymous memory this process gained reading ``array`` whole."""

    def anonymous() -> int:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no RssAnon")

    before = anonymous()
    float(array.sum())
    return anonymous() - before


def timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def alternated(saker_side: Callable[[], float], baseline_side: Callable[[], float]) -> "tuple[float, float]":
    """Medians of ROUNDS runs of each, baseline first in each round."""
    saker_runs: List[float] = []
    baseline_runs: List[float] = []
    for _ in range(ROUNDS):
        baseline_runs.append(baseline_side())
        saker_runs.append(saker_side())
    return statistics.median(saker_runs), statistics.median(baseline_runs)


def main() -> None:
    big = (256 if QUICK else 1024) * MIB
    mid = (64 if QUICK else 256) * MIB
    memory = {"object_memory": OBJECT_MEMORY, "object_memory_dir": MEMORY_DIR}
    with saker.Pilot.start(slots=SLOTS, **memory) as pilot, concurrent.futures.ProcessPoolExecutor(SLOTS) as pool:
        pilot.call(total, numpy.ones(8)).result()
        pool.submit(total, numpy.ones(8)).result()

        array = numpy.random.default_rng(1).random(big // 8)

        def put_get() -> float:
            start = time.perf_counter()
            ref = pilot.put(array)
            got = pilot.get(ref)
            float(got[-1])
            seconds = time.perf_counter() - start
            saker.stores.discard(ref)
            return seconds

        saker_s, copy_s = alternated(put_get, lambda: timed(lambda: numpy.copy(array)))
        row(f"objects: put then get, {big // MIB} MiB array", "mebibytes_per_second",
            big / MIB / saker_s, big / MIB / copy_s, "numpy.copy", {"ratio_at_least": 0.5})

        ref = pilot.put(array)
        growth = pilot.call(anonymous_growth, ref).result()
        saker.stores.discard(ref)
        row(f"objects: a worker's memory reading a {big // MIB} MiB ref", "mebibytes",
            growth / MIB, None, "", {"at_most": 0.05 * big / MIB})
        del array

        argument = numpy.ones(mid // 8)
        saker_s, pool_s = alternated(
            lambda: timed(lambda: pilot.call(total, argument).result()),
            lambda: timed(lambda: pool.submit(total, argument).result()),
        )
        row(f"objects: call(f, {mid // MIB} MiB array), end to end", "seconds", saker_s, pool_s,
            f"ProcessPoolExecutor({SLOTS}).submit", {"ratio_at_most": 0.2})
        del argument

        saker_s, pool_s = alternated(
            lambda: timed(lambda: pilot.call(made, mid).result()),
            lambda: timed(lambda: pool.submit(made, mid).result()),
        )
        row(f"objects: a call returning a {mid // MIB} MiB array", "seconds", saker_s, pool_s,
            f"ProcessPoolExecutor({SLOTS}).submit", {"ratio_at_most": 0.2})

        for size in (1 * MIB, 4 * MIB):
            data = numpy.ones(size // 8)

            def round_trips(submit: Callable[[Any], Any]) -> float:
                times = []
                for _ in range(20):
                    times.append(timed(lambda: submit(data)))
                return statistics.median(times)

            saker_s, pool_s = alternated(
                lambda: round_trips(lambda d: pilot.call(echoed, d).result()),
                lambda: round_trips(lambda d: pool.submit(echoed, d).result()),
            )
            row(f"objects: call round trip, {size // MIB} MiB argument and result", "seconds",
                saker_s, pool_s, f"ProcessPoolExecutor({SLOTS})", {"ratio_at_most": 1.5})


if __name__ == "__main__":
    main()
