"""saker-perf rows of the joblib backend (saker.joblib), each beside joblib's own
process backend (loky) with as many workers, in the same run.

Run by `saker-perf --only joblib` (perf/src/bench/python.rs), which reads one JSON row
per line from stdout. The sides alternate (loky, saker, loky, saker, ...), each
warmed up first (its workers started); medians are reported:

- `joblib.Parallel(n_jobs=2)` of 10,000 short calls (auto-batched), calls per second;
  target >= 1.0 x loky;
- scikit-learn's `GridSearchCV(n_jobs=2)` of 48 fits (16 settings x 3 folds of an
  SVC on the digits data), wall time; target <= 1.1 x loky;
- the short calls beside Dask's and Ray's joblib backends (2 worker processes of one
  thread each), when they are installed (they are not in CI's venv); target >= 2 x.
"""

from __future__ import annotations

import statistics
import sys
import time

import joblib
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC

import saker
import saker.joblib  # noqa: F401 (registers the backend)
from rows import row

QUICK = "--quick" in sys.argv
SLOTS = 2
ROUNDS = 2 if QUICK else 3


def short(x: int) -> int:
    return x * x


def calls(count: int) -> float:
    start = time.perf_counter()
    results = joblib.Parallel(n_jobs=SLOTS)(joblib.delayed(short)(i) for i in range(count))
    took = time.perf_counter() - start
    assert results[-1] == (count - 1) ** 2
    return count / took


def search() -> float:
    features, labels = load_digits(return_X_y=True)
    grid = {"C": [0.5, 1.0, 5.0, 10.0], "gamma": [0.0005, 0.001, 0.002, "scale"]}
    start = time.perf_counter()
    GridSearchCV(SVC(), grid, cv=3, n_jobs=SLOTS).fit(features, labels)
    return time.perf_counter() - start


def peer_rates(count: int) -> list:
    """``(name, median calls/s)`` of Dask's and Ray's joblib backends, those installed."""
    found = []
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        print("joblib rows: no Dask row (dask.distributed is not installed)", file=sys.stderr)
    else:
        cluster = LocalCluster(n_workers=SLOTS, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        with Client(cluster), cluster:
            found.append(("Dask", backend_rate("dask", count)))
    try:
        import ray
        from ray.util.joblib import register_ray
    except ImportError:
        print("joblib rows: no Ray row (ray is not installed)", file=sys.stderr)
    else:
        register_ray()
        ray.init(num_cpus=SLOTS, include_dashboard=False, log_to_driver=False)
        try:
            found.append(("Ray", backend_rate("ray", count)))
        finally:
            ray.shutdown()
    return found


def backend_rate(backend: str, count: int) -> float:
    """Median calls/s of ``backend``, warmed up (its workers started)."""
    with joblib.parallel_config(backend=backend):
        calls(200)
        return statistics.median(calls(count) for _ in range(ROUNDS))


def main() -> None:
    count = 2_000 if QUICK else 10_000
    with saker.Pilot.start(slots=SLOTS) as pilot:
        with joblib.parallel_config(backend="saker", pilot=pilot):
            calls(200)  # workers started
        calls(200)  # loky's too
        loky_rates, rates, loky_times, times = [], [], [], []
        for _ in range(ROUNDS):
            loky_rates.append(calls(count))
            with joblib.parallel_config(backend="saker", pilot=pilot):
                rates.append(calls(count))
        for _ in range(ROUNDS):
            loky_times.append(search())
            with joblib.parallel_config(backend="saker", pilot=pilot):
                times.append(search())
    for name, rate in peer_rates(count):
        row(f"joblib: Parallel of {count} short calls, beside {name}", "per_second",
            statistics.median(rates), rate, f"{name}'s joblib backend, {SLOTS} workers",
            {"ratio_at_least": 2.0})
    row(f"joblib: Parallel of {count} short calls", "per_second", statistics.median(rates),
        statistics.median(loky_rates), f"loky backend, n_jobs={SLOTS}", {"ratio_at_least": 1.0})
    row("joblib: GridSearchCV of 48 fits", "seconds", statistics.median(times),
        statistics.median(loky_times), f"loky backend, n_jobs={SLOTS}", {"ratio_at_most": 1.1})


if __name__ == "__main__":
    main()
