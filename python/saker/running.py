"""``SakerFuture.running()``: whether a task has started, asked of the pilot.

The results stream says when a task ends, not when it starts, so running() asks
``status`` for its job's counts, sharing one request among every caller of the same
50 ms (a loop over many futures costs one request). A pilot that predates ``status``
with ``jobs`` gets a guess from the queue's counts instead.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from concurrent.futures._base import PENDING, RUNNING
from typing import Any, Collection, Dict, List, Protocol

from .errors import ProtocolError
from .futures import SakerFuture

__all__ = ["RunningProbe", "StatusConnection"]

# running(): at most one `status` request per this many seconds per connection. Each
# asks for the jobs of the futures asked about in the last _WATCH_SECONDS (at most
# _WATCH_JOBS of them), and of every pending future when there are at most
# _ASK_ALL_PENDING: one request answers a loop over them all.
_STATUS_INTERVAL = 0.05
_WATCH_SECONDS = 1.0
_WATCH_JOBS = 4096
_ASK_ALL_PENDING = 64

_monotonic = time.monotonic


class StatusConnection(Protocol):
    """What a :class:`RunningProbe` asks of its connection (``client.Connection``)."""

    @property
    def closed(self) -> bool:
        """Whether the connection has ended."""

    @property
    def max_task(self) -> int:
        """The highest task id the pilot has answered a submission of (-1: none)."""

    def request(self, name: str, body: Dict[str, Any]) -> "concurrent.futures.Future[Dict[str, Any]]":
        """Sends a request; the future resolves to its ``ok`` body."""

    def on_reader_thread(self) -> bool:
        """Whether the caller is the thread that reads answers (and must not wait for one)."""

    def pending(self) -> Collection["SakerFuture[Any]"]:
        """The futures of accepted tasks without a result yet (changed by the reader)."""


class RunningProbe:
    """The started-or-not state of one connection's futures (see the module)."""

    def __init__(self, connection: StatusConnection) -> None:
        self._connection = connection
        # Held by the thread that asks for `status` (one at a time).
        self._status_lock = threading.Lock()
        self._status_time = -1.0
        # job -> [future, when last asked about, when the last request whose answer
        # said it had not started was sent], most recently asked last.
        self._watch: Dict[int, List[Any]] = {}
        self._watch_lock = threading.Lock()
        # False once the pilot refused `status` with `jobs` (it predates them).
        self._job_counts = True
        # The guess for such pilots: every task up to this id has been handed to a
        # node; every one that does not wait for other jobs or a time, up to this id.
        self._dispatched_through = -1
        self._ready_through = -1
        self._status_max = -1

    def started(self, future: "SakerFuture[Any]") -> bool:
        """Whether ``future``'s task was reported started by its agent (see running()).

        Asks ``status`` for the job's counts, unless an answer to a request sent
        less than 50 ms ago said no: at most one request per 50 ms, which asks for
        every job asked about meanwhile (the asker waits out the rest of the 50 ms),
        in the last second, and, when the connection has few pending futures, all of
        theirs. Never from the reader thread, which must stay free to read the
        answer. A pilot that predates ``status`` with ``jobs`` refuses it (as
        ``malformed``): then, and from then on, :meth:`_dispatched` guesses.
        """
        job = future._job
        if job is None:
            return False
        if not self._job_counts:
            return self._dispatched(future)
        if self._connection.closed or self._connection.on_reader_thread():
            return False
        asked = _monotonic()
        with self._watch_lock:
            entry = self._watch.pop(job, None)
            if entry is None or entry[0] is not future:
                entry = [future, asked, -1.0]
            entry[1] = asked
            self._watch[job] = entry
        if asked - entry[2] < _STATUS_INTERVAL:
            return False  # a fresh answer said it had not started
        with self._status_lock:
            if future._state != PENDING or entry[2] >= asked:
                # Answered by a request sent since this call began.
                return future._state == RUNNING
            wait = self._status_time + _STATUS_INTERVAL - _monotonic()
            if wait > 0:
                time.sleep(wait)  # whoever asks meanwhile is in the same request
            jobs = self._watched_jobs(job)
            sent = self._status_time = _monotonic()
            try:
                status = self._connection.request("status", {"jobs": jobs}).result(10.0)
            except ProtocolError as error:
                if error.kind != "malformed":
                    return False
                self._job_counts = False
            except Exception:
                return False
            else:
                self._note_counts(status, sent)
                return future._state == RUNNING
        with self._watch_lock:
            self._watch.clear()
        return self._dispatched(future)

    def _watched_jobs(self, job: int) -> List[int]:
        """The jobs a ``status`` for running() asks for, ``job`` among them (see
        :meth:`started`)."""
        now = _monotonic()
        with self._watch_lock:
            watch = self._watch
            for stale in [other for other, (future, asked, _) in watch.items()
                          if future._state != PENDING or now - asked > _WATCH_SECONDS]:
                del watch[stale]
            jobs = list(watch)[-_WATCH_JOBS:]
            if job not in jobs:
                jobs.append(job)
            tasks = self._connection.pending()
            if len(tasks) <= _ASK_ALL_PENDING:
                try:
                    pending = list(tasks)  # the reader thread changes it
                except RuntimeError:
                    pending = []
                for future in pending:
                    other = future._job
                    if other is not None and other not in watch and future._state == PENDING:
                        watch[other] = [future, now, -1.0]
                        jobs.append(other)
        return jobs

    def _note_counts(self, status: Dict[str, Any], sent: float) -> None:
        """Marks running the futures whose jobs ``status`` shows started."""
        for counts in status.get("job_counts") or ():
            job = counts.get("job")
            with self._watch_lock:
                entry = self._watch.get(job)
                if entry is None:
                    continue
                if int(counts.get("running", 0)) > 0:
                    del self._watch[job]
                else:
                    entry[2] = sent
                    continue
            entry[0]._mark_running()

    def _dispatched(self, future: "SakerFuture[Any]") -> bool:
        """Whether the pilot has handed ``future``'s task to a node: a guess for pilots
        that predate ``status`` with ``jobs`` (see :meth:`started`).

        A ``status`` requested after the task was accepted that shows no task ready
        and waiting for a slot (``queued`` minus ``waiting``) proves it; for a task
        that waits itself (``after``, ``not_before``: counted in ``waiting``) only
        one with nothing queued does. Asked at most every 50 ms (one answer serves
        every task accepted before it), and never from the reader thread, which
        must stay free to read the answer.
        """
        task = future._task
        if task is None:
            return False
        waits = future._waits
        if task > (self._dispatched_through if waits else self._ready_through):
            if self._connection.closed or self._connection.on_reader_thread():
                return False
            with self._status_lock:
                if task > (self._dispatched_through if waits else self._ready_through):
                    if _monotonic() - self._status_time < _STATUS_INTERVAL and self._status_max >= task:
                        return False  # a fresh answer said no
                    known = self._connection.max_task
                    try:
                        status = self._connection.request("status", {}).result(10.0)
                    except Exception:
                        return False
                    self._status_time = _monotonic()
                    self._status_max = known
                    queued = int(status.get("queued", 1))
                    if queued == 0:
                        self._dispatched_through = max(self._dispatched_through, known)
                    if queued - int(status.get("waiting", 0)) == 0:
                        self._ready_through = max(self._ready_through, known)
                    if task > (self._dispatched_through if waits else self._ready_through):
                        return False
        future._mark_running()
        return True
