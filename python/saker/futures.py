"""Futures of Saker tasks, ``map``, and a ``concurrent.futures.Executor`` over a pilot.

A :class:`SakerFuture` is a genuine ``concurrent.futures.Future``, so the standard
``as_completed`` and ``wait`` work on it (``wait`` is re-exported here, ``as_completed``
wrapped to show progress on request). Cancelling one cancels its job on the pilot.

This module imports no other module of the package: what a future needs of its
connection is :class:`TaskConnection`, and what an :class:`Executor` submits through
is :class:`Submitter` (``client.Connection`` and ``pilot.Pilot`` are those).
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import sys
import threading
import time
import weakref
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION, wait
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING, RUNNING
from typing import (
    Any,
    Callable,
    Iterable,
    Iterator,
    List,
    Optional,
    Protocol,
    Set,
    TypeVar,
    cast,
)

T = TypeVar("T")

__all__ = [
    "SakerFuture",
    "Executor",
    "as_completed",
    "wait",
    "FIRST_COMPLETED",
    "FIRST_EXCEPTION",
    "ALL_COMPLETED",
]

# What a future resolves to when its task succeeds.
MODE_COMMAND = 0  # a Result
MODE_RAW = 1  # the worker's output bytes
MODE_CALL = 2  # the unpickled return value
MODE_AUTO = 3  # as MODE_CALL for a function task's answer, else as MODE_COMMAND


# Serializes state changes of SakerFutures (finish, cancel): one lock for all of them,
# held for a few attribute writes, instead of a Condition per future.
_transition = threading.Lock()
_DONE = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
_REFUSED, _CHANGED, _UNCHANGED = 0, 1, 2
_LOGGER = logging.getLogger("concurrent.futures")


class TaskConnection(Protocol):
    """What a future asks of the connection its task went through (``client.Connection``)."""

    #: Notified whenever a submission is answered (its futures learn their job ids).
    answered: threading.Condition
    #: Futures named in ``after=``/``after_any=`` options, by job id: a task cancelled
    #: because one failed says how (``DependencyFailed``).
    dependencies: "weakref.WeakValueDictionary[int, SakerFuture[Any]]"

    def started(self, future: "SakerFuture[Any]") -> bool:
        """Whether the future's task was reported started (``SakerFuture.running``)."""

    def cancel_job(self, job: int) -> None:
        """Asks the pilot to cancel job ``job``."""

    def job_state(self, job: int, then: Callable[[str], object]) -> None:
        """Calls ``then`` with how ended job ``job`` ended."""


class SakerFuture(concurrent.futures.Future[T]):
    """The future of one task; ``job`` and ``task`` are known once the pilot accepted it.

    ``running()`` is True once the task's node has started it (see :meth:`running`). ``cancel()`` succeeds until the result is in, running or not: the
    future is cancelled at once and a ``cancel`` for its job goes to the pilot (a
    result that still arrives is ignored). A task the pilot cancelled because a job it
    depends on failed raises :class:`~saker.DependencyFailed` (a ``CancelledError``)
    from ``result()``.

    ``Future.__init__`` gives every future a Condition (with its lock, deque and bound
    methods) and two lists: eleven objects for the garbage collector, which then costs
    more than everything else a call does on the client (``map`` keeps 100,000 futures
    alive). Here they are made on first use; ``concurrent.futures.wait`` and
    ``as_completed`` still find them where they look (``_condition``, ``_waiters``,
    ``_done_callbacks``, ``_state``).
    """

    _cond: Optional[threading.Condition] = None
    _waiter_list: Optional[List[Any]] = None
    _callback_list: Optional[List[Callable[[Any], Any]]] = None
    # Why the pilot cancelled the task (DependencyFailed), raised by result().
    _cancel_error: Optional[BaseException] = None
    # The task waits for other jobs or a time (after=, not_before=): see running().
    _waits = False

    def __init__(self, connection: Optional[TaskConnection], mode: int) -> None:
        # Deliberately not Future.__init__ (see the class docstring).
        self._state = PENDING
        self._result: Any = None
        self._exception: Optional[BaseException] = None
        self._connection = connection
        self._mode = mode
        self._job: Optional[int] = None
        self._task: Optional[int] = None

    # -- Future's internals, created when first used

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        condition = self._cond
        if condition is None:
            with _transition:
                condition = self._cond
                if condition is None:
                    condition = self._cond = threading.Condition()
        return condition

    @property
    def _waiters(self) -> List[Any]:  # type: ignore[override]
        waiters = self._waiter_list
        if waiters is None:
            with _transition:
                waiters = self._waiter_list
                if waiters is None:
                    waiters = self._waiter_list = []
        return waiters

    @property
    def _done_callbacks(self) -> List[Callable[[Any], Any]]:
        callbacks = self._callback_list
        if callbacks is None:
            with _transition:
                callbacks = self._callback_list
                if callbacks is None:
                    callbacks = self._callback_list = []
        return callbacks

    # -- state (reads of one attribute need no lock)

    @property
    def job(self) -> Optional[int]:
        """The job id, once the pilot answered the submission."""
        return self._job

    def _wait_job(self, timeout: float) -> int:
        """The job id, waiting up to ``timeout`` seconds for the submission's answer."""
        connection = self._connection
        if self._job is None and connection is not None:
            answered = connection.answered
            with answered:
                answered.wait_for(lambda: self._job is not None or self.done(), timeout)
        if self._job is None:
            raise ValueError("a dependency's own submission was not accepted, so it has no job id")
        return self._job

    @property
    def task(self) -> Optional[int]:
        """The task id, once the pilot answered the submission."""
        return self._task

    def done(self) -> bool:
        return self._state in _DONE

    def cancelled(self) -> bool:
        return self._state in (CANCELLED, CANCELLED_AND_NOTIFIED)

    def running(self) -> bool:
        """True once the task's node reported it started, until the future is done.

        This asks the pilot for the task's job (``status`` with ``jobs``): True when
        its counts show the task ``running``, the agent having started it. A task
        dispatched to a node but not started there (``assigned``: it waits in the
        node's queue for a free slot) is not running yet, unlike a call in
        ``ProcessPoolExecutor``'s worker queue. At most one request per 50 ms goes
        out per connection, for the futures asked about meanwhile (an answer less
        than 50 ms old is reused; a caller may wait out the rest of the 50 ms), so
        this lags a start by up to that much. Once True it stays True. False before
        the pilot answered the submission, and from the thread that completes
        futures (callbacks).

        A pilot too old to answer ``status`` with ``jobs`` is asked for its whole
        ``status`` instead, and then this guesses: a status taken after the task was
        accepted that shows no task ready and waiting for a slot (``queued`` minus
        ``waiting`` is 0; ``queued`` for a task with ``after``/``not_before``) proves
        the task was dispatched, so it is True from its dispatch, and False while
        other tasks wait for slots.
        """
        state = self._state
        if state == RUNNING:
            return True
        if state != PENDING or self._task is None or self._connection is None:
            return False
        return self._connection.started(self)

    def _mark_running(self) -> None:
        with _transition:
            if self._state == PENDING:
                self._state = RUNNING

    def result(self, timeout: Optional[float] = None) -> T:
        if self._state == FINISHED:
            exception = self._exception
            if exception is None:
                value: T = self._result
                return value
            try:
                raise exception
            finally:
                exception = None
        if self._state not in _DONE:
            try:
                return super().result(timeout)
            except concurrent.futures.CancelledError:
                if self._cancel_error is None:
                    raise
        raise self._cancelled_error()

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        if self._state == FINISHED:
            return self._exception
        if self._state not in _DONE:
            try:
                return super().exception(timeout)
            except concurrent.futures.CancelledError:
                if self._cancel_error is None:
                    raise
        raise self._cancelled_error()

    def _cancelled_error(self) -> BaseException:
        """What result() of this cancelled future raises."""
        return self._cancel_error or concurrent.futures.CancelledError()

    # -- state changes

    def _finish(self, result: Any, exception: Optional[BaseException]) -> bool:
        """FINISHED with a result or an exception; False if already done."""
        return self._change(True, result, exception) == _CHANGED

    def _change(self, finished: bool, result: Any, exception: Optional[BaseException]) -> int:
        """Finishes or cancels; notifies waiters and runs callbacks if the state changed.

        Whoever waits (result(), wait(), as_completed()) first creates the Condition,
        under ``_transition``, then reads the state under the Condition. So: without a
        Condition, changing the state under ``_transition`` is enough (a later waiter
        sees it); with one, the change happens under it too, so that a waiter sees
        the state and its notification consistently.
        """
        condition = self._cond
        if condition is None:
            with _transition:
                if self._cond is None:
                    outcome = self._set_state(finished, result, exception)
                    condition = None
                else:
                    condition = self._cond
        if condition is not None:
            with condition:
                with _transition:
                    outcome = self._set_state(finished, result, exception)
                if outcome == _CHANGED:
                    for waiter in self._waiter_list or ():
                        if not finished:
                            waiter.add_cancelled(self)
                        elif exception is None:
                            waiter.add_result(self)
                        else:
                            waiter.add_exception(self)
                    condition.notify_all()
        # Callbacks are added under _transition while the future is not done: all
        # that were added before the change are in the list now.
        if outcome == _CHANGED and self._callback_list:
            self._invoke_callbacks()
        return outcome

    def _set_state(self, finished: bool, result: Any, exception: Optional[BaseException]) -> int:
        state = self._state
        if finished:
            if state in _DONE:
                return _REFUSED
            self._result = result
            self._exception = exception
            self._state = FINISHED
            return _CHANGED
        if state == FINISHED:
            return _REFUSED
        if state in (CANCELLED, CANCELLED_AND_NOTIFIED):
            return _UNCHANGED
        self._cancel_error = exception
        self._state = CANCELLED_AND_NOTIFIED
        return _CHANGED

    def set_result(self, result: T) -> None:
        if not self._finish(result, None):
            raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")

    def set_exception(self, exception: Optional[BaseException]) -> None:
        if not self._finish(None, exception):
            raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")

    def set_running_or_notify_cancel(self) -> bool:
        with self._condition:
            with _transition:
                state = self._state
                if state == PENDING:
                    self._state = RUNNING
                    return True
                if state == CANCELLED_AND_NOTIFIED:
                    return False  # cancel() here notifies at once
                if state != CANCELLED:
                    raise RuntimeError(f"Future in unexpected state: {state}")
                self._state = CANCELLED_AND_NOTIFIED
            for waiter in self._waiter_list or ():
                waiter.add_cancelled(self)
        return False

    def cancel(self) -> bool:
        if not self._cancel_here():
            return False
        job = self._job
        connection = self._connection
        if job is not None and connection is not None:
            connection.cancel_job(job)
        # Otherwise the submission is not answered yet; the connection sees the
        # cancelled future when the answer comes and cancels the job then.
        return True

    def add_done_callback(self, fn: Callable[["concurrent.futures.Future[T]"], object]) -> None:
        # As Future's, without its Condition: _finish() reads the list after changing
        # the state under the same lock.
        with _transition:
            if self._state not in _DONE:
                callbacks = self._callback_list
                if callbacks is None:
                    callbacks = self._callback_list = []
                callbacks.append(fn)
                return
        try:
            fn(self)
        except Exception:
            _LOGGER.exception("exception calling callback for %r", self)

    def _cancel_here(self, error: Optional[BaseException] = None) -> bool:
        """Cancelled, here only; ``error`` is what result() raises (None: CancelledError)."""
        # Straight to CANCELLED_AND_NOTIFIED: plain CANCELLED is only noticed by
        # as_completed() and wait() after set_running_or_notify_cancel(), which an
        # executor's worker thread calls, and there is none here.
        return self._change(False, None, error) != _REFUSED

    def _invoke_callbacks(self) -> None:
        for callback in self._callback_list or ():
            try:
                callback(self)
            except Exception:
                _LOGGER.exception("exception calling callback for %r", self)

    def __repr__(self) -> str:
        state = self._state
        if state == FINISHED:
            if self._exception is not None:
                text = f"finished raised {type(self._exception).__name__}"
            else:
                text = f"finished returned {type(self._result).__name__}"
        else:
            text = {PENDING: "pending", RUNNING: "running"}.get(state, "cancelled")
        where = f" task={self._task} job={self._job}" if self._task is not None else ""
        return f"<SakerFuture at {id(self):#x} state={text}{where}>"


def _result_before(future: "concurrent.futures.Future[T]", deadline: Optional[float]) -> T:
    if deadline is None:
        return future.result()
    return future.result(max(0.0, deadline - time.monotonic()))


class Progress:
    """A progress display: a tqdm bar when tqdm is importable, else a plain line.

    The plain line goes to standard error, rewritten in place (``\r``) at most every
    0.2 s on a terminal (every 5 s otherwise) and once more, whole, at the end::

        saker: 812/1000 done (81%), 4.1s, 198/s

    ``update`` may be called from any thread.
    """

    def __init__(self, total: int, label: str = "saker") -> None:
        self.total = total
        self.label = label
        self.done = 0
        self._start = time.monotonic()
        self._shown = 0.0
        self._lock = threading.Lock()
        self._closed = False
        self._bar: Any = None
        try:
            from tqdm.auto import tqdm  # type: ignore[import-not-found, import-untyped, unused-ignore]
        except Exception:
            tqdm = None
        if tqdm is not None:
            self._bar = tqdm(total=total, desc=label, unit="call")
            return
        stream = sys.stderr
        try:
            tty = stream is not None and stream.isatty()
        except Exception:
            tty = False
        self._interval = 0.2 if tty else 5.0
        self._show()

    def update(self, count: int = 1) -> None:
        with self._lock:
            if self._closed:
                return
            self.done += count
            if self._bar is not None:
                self._bar.update(count)
            elif time.monotonic() - self._shown >= self._interval:
                self._show()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._bar is not None:
                self._bar.close()
            else:
                self._show(end="\n")

    def line(self) -> str:
        """The plain line as it stands."""
        elapsed = time.monotonic() - self._start
        percent = f" ({100 * self.done // self.total}%)" if self.total else ""
        rate = f", {self.done / elapsed:.0f}/s" if elapsed > 0 and self.done else ""
        return f"{self.label}: {self.done}/{self.total} done{percent}, {elapsed:.1f}s{rate}"

    def _show(self, end: str = "") -> None:
        self._shown = time.monotonic()
        stream = sys.stderr
        if stream is None:
            return
        try:
            stream.write("\r" + self.line() + end)
            stream.flush()
        except Exception:
            pass


def as_completed(
    fs: Iterable["concurrent.futures.Future[T]"],
    timeout: Optional[float] = None,
    *,
    progress: bool = False,
) -> Iterator["concurrent.futures.Future[T]"]:
    """``concurrent.futures.as_completed``, with a progress display if ``progress``.

    The display is a tqdm bar when tqdm is importable, else a plain line on standard
    error (:class:`Progress`).
    """
    if not progress:
        return concurrent.futures.as_completed(fs, timeout)
    futures = set(fs)
    return _counted(concurrent.futures.as_completed(futures, timeout), Progress(len(futures)))


def _counted(iterator: Iterator[Any], progress: Progress) -> Iterator[Any]:
    try:
        for item in iterator:
            progress.update()
            yield item
    finally:
        progress.close()


def map_results(
    futures: List["SakerFuture[Any]"],
    deadline: Optional[float],
    ordered: bool,
    chunked: bool,
    progress: Optional[Progress] = None,
) -> Iterator[Any]:
    """The generator behind ``map``: results in order (or as they come), then cleanup.

    ``deadline`` is on the ``time.monotonic()`` clock. Like ``Executor.map``, leaving
    the loop early (or an exception) cancels the tasks that have not finished.
    ``progress`` counts calls as their tasks complete (in any order), not as they are
    yielded.
    """
    if progress is not None:
        show = progress

        def count(future: "concurrent.futures.Future[Any]") -> None:
            if chunked and not future.cancelled() and future.exception() is None:
                show.update(len(future.result()))
            elif not chunked:
                show.update()

        for future in futures:
            future.add_done_callback(count)
    try:
        if ordered:
            futures.reverse()  # pop() from the end: O(1), and drops our reference
            while futures:
                future = futures.pop()
                try:
                    value = _result_before(future, deadline)
                except BaseException:
                    future.cancel()
                    raise
                if chunked:
                    yield from value
                else:
                    yield value
        else:
            # A queue fed by done-callbacks: as_completed() would give every future a
            # Condition and hold all their locks at once.
            finished: "queue.SimpleQueue[SakerFuture[Any]]" = queue.SimpleQueue()

            def put(done: "concurrent.futures.Future[Any]") -> None:
                finished.put(cast("SakerFuture[Any]", done))

            for future in futures:
                future.add_done_callback(put)
            for _ in range(len(futures)):
                if deadline is None:
                    done = finished.get()
                else:
                    try:
                        done = finished.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        raise concurrent.futures.TimeoutError() from None
                value = done.result()
                if chunked:
                    yield from value
                else:
                    yield value
    finally:
        for future in futures:
            if not future.done():
                future.cancel()
        if progress is not None:
            progress.close()


class Submitter(Protocol):
    """What an :class:`Executor` submits through: a pilot, or a view of it (``pilot.py``)."""

    def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> "SakerFuture[T]":
        """Runs ``fn(*args, **kwargs)`` as a task."""

    def map(
        self,
        fn: Callable[..., T],
        *iterables: Iterable[Any],
        timeout: Optional[float] = None,
        chunksize: int = 1,
        ordered: bool = True,
        progress: bool = False,
        _track: Optional[Callable[["SakerFuture[Any]"], None]] = None,
    ) -> Iterator[T]:
        """Like ``Executor.map``; ``_track`` sees each future as it is made."""


class Executor(concurrent.futures.Executor):
    """A ``concurrent.futures.Executor`` whose calls run as function tasks of a pilot.

    ``shutdown()`` waits for (or cancels) the futures of this executor only; the pilot
    keeps running, and closing it stays the business of whoever opened it.
    """

    def __init__(self, target: Submitter) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._shutdown = False
        self._futures: Set["concurrent.futures.Future[Any]"] = set()
        self._prune_at = 1024

    def _track(self, future: "concurrent.futures.Future[Any]") -> None:
        # Not a done-callback per future (that would give each one its Condition, see
        # SakerFuture): finished futures are pruned when the set has doubled.
        futures = self._futures
        futures.add(future)
        if len(futures) > self._prune_at:
            self._futures = {f for f in list(futures) if not f.done()}
            self._prune_at = max(1024, 2 * len(self._futures))

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> "SakerFuture[T]":
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            try:
                future: SakerFuture[T] = self._target.call(fn, *args, **kwargs)
            except Exception as exc:
                # A call that cannot be sent (unpicklable, too large, the pilot gone)
                # fails its future, as ProcessPoolExecutor reports what it cannot
                # pickle: a submit from a done-callback would lose the exception.
                future = SakerFuture(None, MODE_CALL)
                future.set_exception(exc)
            self._track(future)
        return future

    def map(
        self,
        fn: Callable[..., T],
        *iterables: Iterable[Any],
        timeout: Optional[float] = None,
        chunksize: int = 1,
        ordered: bool = True,
        progress: bool = False,
    ) -> Iterator[T]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            return self._target.map(
                fn,
                *iterables,
                timeout=timeout,
                chunksize=chunksize,
                ordered=ordered,
                progress=progress,
                _track=self._track,
            )

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            pending = [f for f in list(self._futures) if not f.done()]
            self._futures = set()
        if cancel_futures:
            for future in pending:
                future.cancel()
        if wait and pending:
            concurrent.futures.wait(pending)
