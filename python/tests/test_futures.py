"""SakerFuture keeps the concurrent.futures.Future contract although it creates its
Condition lazily: races between finishing, cancelling, waiting and callbacks."""

from __future__ import annotations

import concurrent.futures
import random
import threading
from typing import Any, List

import pytest

import saker
from saker.futures import MODE_CALL, SakerFuture


def futures(n: int) -> List[SakerFuture[Any]]:
    return [SakerFuture(None, MODE_CALL) for _ in range(n)]


def test_basic_contract() -> None:
    done, failed, cancelled = futures(3)
    seen: List[Any] = []
    done.add_done_callback(seen.append)
    assert not done.done() and not done.running()
    done.set_result(5)
    assert done.done() and done.result() == 5 and done.exception() is None and seen == [done]
    done.add_done_callback(seen.append)  # already done: called at once
    assert seen == [done, done]
    with pytest.raises(concurrent.futures.InvalidStateError):
        done.set_result(6)
    failed.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        failed.result()
    assert isinstance(failed.exception(), KeyError)
    assert cancelled.cancel() and cancelled.cancelled() and cancelled.done()
    assert not done.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        cancelled.result()
    with pytest.raises(concurrent.futures.TimeoutError):
        SakerFuture(None, MODE_CALL).result(timeout=0.01)
    assert "finished returned int" in repr(done)


def test_as_completed_while_finishing() -> None:
    fs = futures(20_000)
    order = list(fs)
    random.shuffle(order)

    def finish() -> None:
        for i, f in enumerate(order):
            if i % 7 == 0:
                f.cancel()
            elif i % 5 == 0:
                f.set_exception(ValueError(i))
            else:
                f.set_result(i)

    finisher = threading.Thread(target=finish)
    finisher.start()
    yielded = list(saker.as_completed(fs, timeout=60))
    finisher.join()
    assert len(yielded) == len(fs) and set(yielded) == set(fs)


def test_cancel_races_finish_and_waiters() -> None:
    fs = futures(5_000)
    calls: List[Any] = []
    lock = threading.Lock()

    def record(f: Any) -> None:
        with lock:
            calls.append(f)

    for f in fs[::2]:
        f.add_done_callback(record)
    barrier = threading.Barrier(3)

    def finisher() -> None:
        barrier.wait()
        for i, f in enumerate(fs):
            try:
                f.set_result(i)
            except concurrent.futures.InvalidStateError:
                pass

    def canceller() -> None:
        barrier.wait()
        for f in reversed(fs):
            f.cancel()

    threads = [threading.Thread(target=finisher), threading.Thread(target=canceller)]
    for t in threads:
        t.start()
    barrier.wait()
    for f in fs[1::2]:
        f.add_done_callback(record)
    done, not_done = saker.wait(fs, timeout=60)
    for t in threads:
        t.join()
    assert not not_done and len(done) == len(fs)
    assert sorted(map(id, calls)) == sorted(map(id, fs))  # each callback exactly once
    for i, f in enumerate(fs):
        assert f.cancelled() or f.result() == i


def test_result_waits_across_threads() -> None:
    fs = futures(200)
    results: List[Any] = []

    def waiter() -> None:
        results.extend(f.result(timeout=30) for f in fs)

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    for i, f in enumerate(fs):
        f.set_result(i)
    for t in threads:
        t.join()
    assert sorted(results) == sorted(list(range(200)) * 4)
