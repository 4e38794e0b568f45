"""The joblib backend (saker.joblib) on a real pilot: joblib.Parallel and
scikit-learn's n_jobs run their batches as the pilot's function calls."""

from __future__ import annotations

import os
import time

import joblib
import pytest

import remote_funcs
import saker
from conftest import wait_for
import saker.joblib  # noqa: F401 (registers the backend)


def worker_kind(_: int) -> str:
    return os.environ.get("SAKER_WORKER_KIND", "")


def slow_unless_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is refused")
    time.sleep(0.2)
    return x


def test_parallel_runs_on_the_pilot_in_order_and_as_a_generator(pilot: saker.Pilot) -> None:
    before = pilot.status()["succeeded"]
    with joblib.parallel_config(backend="saker", pilot=pilot):
        squares = joblib.Parallel(n_jobs=-1)(joblib.delayed(remote_funcs.square)(i) for i in range(200))
        kinds = joblib.Parallel(n_jobs=2)(joblib.delayed(worker_kind)(i) for i in range(4))
        generated = joblib.Parallel(n_jobs=2, return_as="generator")(
            joblib.delayed(remote_funcs.square)(i) for i in range(7))
        assert list(generated) == [i * i for i in range(7)]
    assert squares == [i * i for i in range(200)]
    assert kinds == ["python"] * 4
    # Auto-batching packs the short calls: fewer tasks than calls, more than none.
    ran = pilot.status()["succeeded"] - before
    assert 0 < ran <= 200 + 4 + 7


def test_the_first_error_comes_back_and_the_rest_is_cancelled(pilot: saker.Pilot) -> None:
    cancelled = pilot.status()["cancelled"]
    with joblib.parallel_config(backend="saker", pilot=pilot):
        with pytest.raises(ValueError, match="three is refused") as raised:
            joblib.Parallel(n_jobs=2, batch_size=1)(joblib.delayed(slow_unless_three)(i) for i in range(40))
    assert isinstance(raised.value.__cause__, saker.RemoteTraceback)
    assert "slow_unless_three" in str(raised.value.__cause__)
    # What was in flight after the failure is cancelled on the pilot, not run.
    wait_for(lambda: pilot.status()["cancelled"] > cancelled, what="the rest to be cancelled")


def test_grid_search_scores_match_joblibs_own_backend(pilot: saker.Pilot) -> None:
    from sklearn.datasets import load_iris
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC

    features, labels = load_iris(return_X_y=True)
    grid = {"C": [0.1, 1.0, 10.0], "gamma": ["scale", 0.1]}

    def search() -> GridSearchCV:
        return GridSearchCV(SVC(), grid, cv=3, n_jobs=-1).fit(features, labels)

    local = search()
    with joblib.parallel_config(backend="saker", pilot=pilot):
        ours = search()
    assert list(ours.cv_results_["mean_test_score"]) == list(local.cv_results_["mean_test_score"])
    assert ours.best_params_ == local.best_params_


def _objects_in_stores(pilot: saker.Pilot) -> set:
    """The object files in the stores this client sees."""
    found = set()
    for _node, dirs in pilot._object_stores().dirs_seen(refresh=True):
        for directory in dirs:
            found.update(name for name in os.listdir(directory) if name.startswith("obj-"))
    return found


def test_a_large_argument_is_put_once_read_without_a_copy_and_freed_with_it(pilot: saker.Pilot) -> None:
    np = pytest.importorskip("numpy")
    before = _objects_in_stores(pilot)
    array = np.arange(1 << 17, dtype=np.int64)  # 1 MiB
    with joblib.parallel_config(backend="saker", pilot=pilot):
        seen = joblib.Parallel(n_jobs=2, batch_size=1)(joblib.delayed(remote_funcs.described)(array) for _ in range(12))
        # Beside a small argument, and as a keyword: the same object, the same ref.
        beside = joblib.Parallel(n_jobs=2)(
            joblib.delayed(remote_funcs.total_beside)([b"ab"], other=array) for _ in range(3))
    assert beside == [2, 2, 2]
    assert all(one == {"type": "ndarray", "len": 1 << 17, "mapped": True, "writeable": False,
                       "sum": int(array.sum())} for one in seen), seen
    put = _objects_in_stores(pilot) - before
    assert len(put) == 1, put
    del array
    # Frees go with the client's next request after the garbage collector found the
    # ref gone (here, the next Parallel call's).
    with joblib.parallel_config(backend="saker", pilot=pilot):
        assert joblib.Parallel(n_jobs=2)(joblib.delayed(remote_funcs.square)(i) for i in range(3)) == [0, 1, 4]
    wait_for(lambda: not (_objects_in_stores(pilot) & put), what="the object freed once the array is garbage")


def test_batches_grow_up_to_eight_times_per_completed_batch() -> None:
    backend = saker.joblib.SakerBackend()
    backend.parallel = joblib.Parallel(verbose=0)  # joblib sets it in configure()
    # A batch of one took 1 ms: joblib would double; ideal is 400.
    backend._smoothed_batch_duration = 0.001
    assert backend.compute_batch_size() == 8
    # Eight took 150 ms: the ideal (twice 0.2 s worth, 20) is below eight times.
    backend._smoothed_batch_duration = 0.15
    assert backend.compute_batch_size() == 20
    # Past joblib's upper bound (2 s): joblib's own shrinking.
    backend._smoothed_batch_duration = 4.0
    assert backend.compute_batch_size() == 2


def test_a_nested_parallel_runs_as_under_joblibs_own_backend(pilot: saker.Pilot) -> None:
    # joblib runs a Parallel inside a worker's call on threads, and one inside that
    # sequentially: the same under loky and here.
    local = joblib.Parallel(n_jobs=2)(joblib.delayed(remote_funcs.nested_squares)(n) for n in (3, 4))
    with joblib.parallel_config(backend="saker", pilot=pilot):
        ours = joblib.Parallel(n_jobs=2)(joblib.delayed(remote_funcs.nested_squares)(n) for n in (3, 4))
    assert ours == local
    assert ours[0] == ("ThreadingBackend", [0, 1, 4], ["SequentialBackend", "SequentialBackend"])
