"""A new driver collects what an earlier one submitted (``pilot.result``,
``pilot.future``, ``pilot.results``), and progress displays of ``map`` and
``as_completed``."""

from __future__ import annotations

import concurrent.futures
import pickle
import sys
import types
from pathlib import Path
from typing import Any, List

import pytest

import remote_funcs
import saker
from conftest import wait_for


def test_a_new_driver_collects_what_an_earlier_one_submitted(saker_bin: str, tmp_path: Path) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    with saker.Pilot.start(tmp_path / "pilot", slots=2, saker_bin=saker_bin) as owner:
        first = saker.Pilot.connect(owner.dir)
        squared = first.call(remote_funcs.square, 7)
        raised = first.call(remote_funcs.fail, "boom")
        command = first.submit("echo hi")
        blocked = first.call(remote_funcs.block_until, str(started), str(release), 60.0)
        assert squared.result(30) == 49
        with pytest.raises(ValueError):
            raised.result(30)
        command.result(30)
        wait_for(started.exists, what="the blocked call to start")
        tasks = [f.task for f in (squared, raised, command, blocked)]
        first.close()  # the first driver goes away; its tasks stay in the pilot

        second = saker.Pilot.connect(owner.dir)
        try:
            assert second.result(tasks[0], timeout=30) == 49
            assert pickle.loads(second.result(tasks[0], timeout=30, raw=True)) == 49
            with pytest.raises(ValueError, match="boom") as info:
                second.result(tasks[1], timeout=30)
            assert isinstance(info.value.__cause__, saker.RemoteTraceback)
            result = second.result(tasks[2], timeout=30)
            assert isinstance(result, saker.Result) and result.stdout == "hi\n"
            pending = second.future(tasks[3])
            assert second.future(tasks[3]) is pending
            with pytest.raises(concurrent.futures.TimeoutError):
                pending.result(timeout=0.2)  # blocked until released: not done
            release.touch()
            assert pending.result(30) == "released"
            assert pending.job == blocked.job

            # Every result, in the order the pilot accepted them.
            results: List[saker.Result] = list(second.results())
            assert [r.seq for r in results] == sorted(r.seq for r in results)
            by_task = {r.task: r for r in results}
            assert set(tasks) <= set(by_task)
            assert by_task[tasks[0]].value() == 49
            with pytest.raises(ValueError, match="boom"):
                by_task[tasks[1]].value()
            assert by_task[tasks[2]].value().stdout == "hi\n"
            assert by_task[tasks[3]].value() == "released"
            # From a sequence number on: the rest of the same list.
            later = list(second.results(from_=results[2].seq))
            assert [r.task for r in later] == [r.task for r in results[2:]]
            assert list(second.results(from_=results[-1].seq + 1)) == []
            # follow=True goes on with results to come.
            stream = second.results(from_=results[-1].seq + 1, follow=True)
            fresh = second.call(remote_funcs.add, 20, 22)
            assert next(stream).value() == 42
            stream.close()
            assert fresh.result(30) == 42
            with pytest.raises(TypeError):
                second.future("3")  # type: ignore[arg-type]
        finally:
            second.close()


def _last_line(text: str) -> str:
    return text.rstrip("\n").split("\r")[-1]


def test_map_and_as_completed_show_a_plain_progress_line(pilot: saker.Pilot, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # tqdm not importable
    assert list(pilot.map(remote_funcs.square, range(20), progress=True)) == [i * i for i in range(20)]
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.startswith("\rsaker: 0/20 done (0%)"), repr(err)
    assert _last_line(err).startswith("saker: 20/20 done (100%), "), repr(err)
    # Chunked: counted in calls, not tasks.
    assert list(pilot.map(remote_funcs.square, range(7), chunksize=3, progress=True)) == [i * i for i in range(7)]
    assert _last_line(capsys.readouterr().err).startswith("saker: 7/7 done (100%)")
    futures = [pilot.call(remote_funcs.add, i, 1) for i in range(5)]
    assert sorted(f.result() for f in saker.as_completed(futures, timeout=30, progress=True)) == list(range(1, 6))
    assert _last_line(capsys.readouterr().err).startswith("saker: 5/5 done (100%)")
    # Without progress=True, nothing is shown.
    assert list(pilot.map(remote_funcs.square, range(3))) == [0, 1, 4]
    list(saker.as_completed(futures))
    assert capsys.readouterr().err == ""


def test_progress_uses_tqdm_when_it_is_importable(pilot: saker.Pilot, monkeypatch: pytest.MonkeyPatch) -> None:
    bars: List[Any] = []

    class FakeBar:
        def __init__(self, total: int, desc: str, unit: str) -> None:
            self.total, self.n, self.closed = total, 0, False
            bars.append(self)

        def update(self, count: int = 1) -> None:
            self.n += count

        def close(self) -> None:
            self.closed = True

    package = types.ModuleType("tqdm")
    auto = types.ModuleType("tqdm.auto")
    auto.tqdm = FakeBar  # type: ignore[attr-defined]
    package.auto = auto  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tqdm", package)
    monkeypatch.setitem(sys.modules, "tqdm.auto", auto)
    with pilot.executor() as executor:
        assert list(executor.map(remote_funcs.square, range(6), progress=True)) == [i * i for i in range(6)]
    futures = [pilot.call(remote_funcs.add, i) for i in range(4)]
    assert len(list(saker.as_completed(futures, timeout=30, progress=True))) == 4
    assert [(bar.total, bar.n, bar.closed) for bar in bars] == [(6, 6, True), (4, 4, True)]


def test_results_and_result_over_tls(pilot: saker.Pilot, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "another-host")  # not the root's host: TLS
    with saker.Pilot.connect(pilot.dir) as remote:
        assert remote._require_connection().transport.encrypted
        future = remote.call(remote_funcs.add, 40, 2)
        assert future.result(30) == 42
        assert remote.result(future.task, timeout=30) == 42
        values = [r.value() for r in remote.results() if r.task == future.task]
        assert values == [42]
