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
