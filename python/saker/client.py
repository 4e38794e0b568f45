"""The connection to a pilot as its requests and futures see it (docs/protocol.md):
request ids and the answers they wait for, the batching of submissions, the futures of
accepted tasks, the one ``results`` stream, and failing what is left unanswered when
the connection is lost or closed. The socket, TLS, the hello and re-attaching to a
new root are :mod:`saker.transport`'s: this module sends and receives through a
:class:`~saker.transport.Transport` only, and never touches a socket. Start with
:class:`Connection` (``submit_job``, ``request``), then ``_dispatch``.

One connection carries everything. Two threads drive it: a writer that batches queued
submissions into ``submit`` requests (many jobs per request, without waiting for an
answer before sending the next), and a reader that takes the answers and the one
``results`` stream (``new_only`` and ``follow``, requested right after the hello) from
the transport and completes futures by task id. The transport lets them send and
receive at once, neither ever blocking the other on socket I/O; what this module uses
of it is listed in :mod:`saker.transport` ("The seam").

Whoever sends (the writer, or a thread sending a lone submission itself) holds the
transport's ``send_lock`` (``_send_lock`` here) from registering a request in
``_pending`` until its bytes are sent, so ``_pending`` holds exactly the requests that
were (or were being) sent and not answered, and everything else waits in ``_queue``.

**Reconnecting.** When the connection is lost (the reader meets end of file or an
error; a failed send shuts the socket down so that the reader does) and neither this
side closed it nor the pilot said it stops (``end`` on the results stream), the
reader reconnects: a standby root that took over (``saker pilot --standby``) rewrote
``client.json``, and resumed the pilot from its journal with the same task ids and
result ``seq`` numbers. Under ``_send_lock`` the reader sets ``_reconnecting`` (from
then on senders leave everything queued) and takes ``_pending``: requests sent and
not answered fail with :class:`PilotClosed` at once, submissions among them included
(the pilot may or may not have recorded one, and sending it again could run it
twice), except cancels, which are queued again (cancelling twice is harmless). Then
the transport tries every 50 ms to 1 s, for up to ``reconnect_for`` seconds, to
re-attach (read ``client.json``, connect, hello: the pilot id must not change), and,
still under ``_send_lock``, this side asks for the results stream from ``_next_seq``,
one past the highest ``seq`` seen (or what a ``results`` probe sent right after the
first stream said the journal's next one was), so results accepted meanwhile come
first from the journal. Then it clears ``_reconnecting`` and wakes the writer, which
sends what was queued. Futures of accepted tasks (``_tasks``) wait through all this;
``_closed`` stays ``None`` and ``closed`` false. If no root answers in time (or another
pilot answers), everything fails as without reconnecting, with the loss named.
``close()`` (``_closing``, ``_stop``) ends a reconnection at once.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import json
import os
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Collection, Deque, Dict, Iterable, List, Optional, Set, Union

from .errors import PilotClosed, ProtocolError, SakerError, SpecError, error_of
from .futures import SakerFuture
from .results import Result, complete
from .running import RunningProbe
from .transport import PROTOCOL, GaveUp, Transport

__all__ = ["Result", "Connection", "PROTOCOL", "RECONNECT_FOR"]

# A submit request holds at most this many jobs / payload characters: the pilot's
# line limit is 64 MiB, and smaller batches keep the pipeline moving.
_BATCH_JOBS = 4096
_BATCH_CHARS = 24 << 20
# Bytes handed to one sendall.
_SEND_CHUNK = 4 << 20

# A submission this long after the previous one is sent by the submitting thread.
_LONE_GAP = 0.0002

# Reconnecting after a lost connection: for this long by default (seconds).
RECONNECT_FOR = 60.0
# A `from` past every result's seq: a `results` request without `follow` from here
# answers at once with just `end`, whose `next` is the journal's next seq.
_PAST_EVERY_SEQ = (1 << 63) - 1

_monotonic = time.monotonic
_dumps = json.dumps

# What waits in the queue and in _pending: (kind, ...).
_JOB, _BATCH, _REQUEST, _CANCEL = 0, 1, 2, 3


class _Unanswered(PilotClosed):
    """A request (not a submission) sent on a connection lost before its answer came;
    the connection is being re-established."""


def _fail_all(futures: Iterable["concurrent.futures.Future[Any]"], error: BaseException) -> None:
    """Fails each of ``futures`` that is not done yet with ``error``."""
    for future in futures:
        try:
            future.set_exception(error)
        except concurrent.futures.InvalidStateError:
            pass


class Connection:
    """A live connection to a pilot; see the module docstring for its threads.

    ``reconnect_for``: for how many seconds to try to reconnect when the connection
    is lost (not closed by either side on purpose), as when a standby root takes
    over from one that died; 0 fails everything pending at once instead.
    """

    def __init__(self, directory: Union[str, "os.PathLike[str]"], *, timeout: float = 10.0, client: str = "",
                 reconnect_for: float = RECONNECT_FOR) -> None:
        if isinstance(reconnect_for, bool) or not isinstance(reconnect_for, (int, float)) or not reconnect_for >= 0:
            raise ValueError(f"reconnect_for must be a non-negative number of seconds, not {reconnect_for!r}")
        #: How long to try to reconnect after losing the connection (0: never).
        self.reconnect_for = float(reconnect_for)
        #: How many times this connection was re-established.
        self.reconnects = 0
        self._ids = itertools.count(1)
        self._queue: Deque[Any] = collections.deque()
        self._wake = threading.Event()
        self._closed: Optional[BaseException] = None
        self._closing = False
        self._close_lock = threading.Lock()
        # Set by close() and _fail(): ends a reconnection's waits.
        self._stop = threading.Event()
        # True from losing the connection until it is re-established: senders leave
        # everything queued (changed under _send_lock).
        self._reconnecting = False
        # The `from` that resumes the results stream after a reconnection: one past the
        # highest seq it brought, or past the journal when it began (-1: not known).
        self._next_seq = -1
        self._probe_id = -1
        # id -> (kind, ...) of requests sent and not answered yet.
        self._pending: Dict[int, Any] = {}
        self._submits_in_flight: Set[int] = set()
        # task id -> future, for accepted tasks whose result has not come yet.
        self._tasks: Dict[int, SakerFuture[Any]] = {}
        #: Notified whenever a submission is answered (its futures learn their job ids).
        self.answered = threading.Condition()
        # Results that came before the answer to their submit request.
        self._early: Dict[int, Dict[str, Any]] = {}
        #: Futures named in after=/after_any= options, by job id (DependencyFailed).
        self.dependencies: "weakref.WeakValueDictionary[int, SakerFuture[Any]]" = weakref.WeakValueDictionary()
        # How ended jobs of dependencies ended (their counts), asked once each.
        self._job_states: Dict[int, Any] = {}
        # The highest task id the pilot has answered a submission of.
        self._max_task = -1
        self._running = RunningProbe(self)
        self._results_id = -1
        self._last_submit = 0.0

        # Connected and past the hello; reading TLS that leaves bytes to send wakes
        # the writer, which sends them.
        self._transport = transport = Transport(Path(directory).expanduser(), timeout=timeout, client=client,
                                                on_flush_needed=self._wake.set)
        # Held by whoever turns queued items into bytes and sends them, so that requests
        # leave in the order they were queued (the transport's: re-attaching holds it too).
        self._send_lock = transport.send_lock
        self._send = transport.send

        self._reader = threading.Thread(target=self._read_loop, name="saker-reader", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name="saker-writer", daemon=True)
        self._reader.start()
        self._writer.start()
        # Requests are handled in order: this stream, sent before any submit, carries
        # the result of every later submission and none of the pilot's history.
        if self.protocol >= 2:
            stream: Dict[str, Any] = {"new_only": True, "follow": True}
            if self.reconnect_for > 0:
                # Where the journal is (sent first, so at or before where the stream
                # begins): a stream resumed from there misses none of this one's.
                self._probe_id = next(self._ids)
                self._push((_REQUEST, self._probe_id, "results", {"from": _PAST_EVERY_SEQ, "follow": False}, None))
        else:
            stream = {"from": 0, "follow": True}
            self._next_seq = 0
        self._results_id = next(self._ids)  # known before its first message can come
        self._push((_REQUEST, self._results_id, "results", stream, None))

    # -- what the transport says of the pilot

    @property
    def transport(self) -> Transport:
        """The socket under this connection (re-attached after a takeover)."""
        return self._transport

    @property
    def directory(self) -> Path:
        """The pilot directory."""
        return self._transport.directory

    @property
    def addr(self) -> str:
        """Where the pilot's root listens (as of the last re-attachment)."""
        return self._transport.addr

    @property
    def pilot_id(self) -> str:
        """The pilot's id, as its hello said (it never changes for a connection)."""
        return self._transport.pilot_id

    @property
    def server(self) -> str:
        """The pilot's name and version, from its hello."""
        return self._transport.server

    @property
    def protocol(self) -> int:
        """The protocol version agreed in the hello."""
        return self._transport.protocol

    # -- queueing (any thread)

    def _check_open(self) -> None:
        if self._closed is not None:
            raise PilotClosed(f"the connection to the pilot is closed: {self._closed}")

    def _push(self, item: Any) -> None:
        self._queue.append(item)
        if not self._wake.is_set():
            self._wake.set()
        if self._closed is not None:
            # Closed meanwhile: the writer may be gone, so fail what is queued here.
            self._fail_queued()

    def submit_job(self, job: Dict[str, Any], future: "SakerFuture[Any]", size: int) -> None:
        """Queues one job; ``future`` completes from its result.

        A lone submission (none in the last moment, nothing queued, the writer idle)
        is sent from this thread: waking the writer would add a thread switch to the
        round trip of every sequential ``call().result()``. Bursts go to the writer,
        which batches them.
        """
        if self._closed is not None:
            self._check_open()
        now = _monotonic()
        lone = now - self._last_submit > _LONE_GAP
        self._last_submit = now
        if lone and not self._queue and self._send_lock.acquire(False):
            try:
                if not self._queue and not self._reconnecting:
                    self._send(self._submit_line([job], [future]))
                    return
            except OSError as exc:  # ssl.SSLError among them
                if self._may_reconnect():
                    self._send_failed()  # the reader fails it as unanswered, and reconnects
                else:
                    self._fail(PilotClosed(f"lost the connection to the pilot: {exc}"))
                return
            finally:
                self._send_lock.release()
        self._push((_JOB, job, future, size))

    def cancel_job(self, job: int) -> None:
        """Queues a cancel of ``job`` (consecutive ones share a request)."""
        if self._closed is None:
            self._push((_CANCEL, job))

    def request(self, name: str, body: Dict[str, Any]) -> "concurrent.futures.Future[Dict[str, Any]]":
        """Sends a request; the future resolves to its ``ok`` body or fails with its error."""
        self._check_open()
        future: concurrent.futures.Future[Dict[str, Any]] = _Answer(self._reader)
        self._enqueue_request(name, body, future)
        return future

    def _enqueue_request(self, name: str, body: Dict[str, Any], future: Any) -> int:
        request_id = next(self._ids)
        self._push((_REQUEST, request_id, name, body, future))
        return request_id

    # -- writer thread

    def _write_loop(self) -> None:
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._closing or self._closed is not None:
                    return
                with self._send_lock:
                    if self._reconnecting:
                        continue  # the reader wakes this thread once reconnected
                    try:
                        self._write_queued()
                    except OSError:
                        if not self._may_reconnect():
                            raise
                        self._send_failed()
                if self._closed is not None:
                    # Closed while writing: fail what was registered meanwhile.
                    self._fail(self._closed)
                    return
        except BaseException as exc:  # socket errors end the connection
            self._fail(PilotClosed(f"lost the connection to the pilot: {exc}"))

    def _write_queued(self) -> None:
        queue = self._queue
        out: List[bytes] = []
        out_size = 0
        while queue:
            item = queue.popleft()
            kind = item[0]
            if kind == _JOB:
                jobs = [item[1]]
                futures = [item[2]]
                size = item[3]
                while queue and len(jobs) < _BATCH_JOBS and size < _BATCH_CHARS:
                    item = queue[0]
                    if item[0] != _JOB:
                        break
                    queue.popleft()
                    jobs.append(item[1])
                    futures.append(item[2])
                    size += item[3]
                line = self._submit_line(jobs, futures)
            elif kind == _BATCH:
                line = self._submit_line(item[1], item[2])
            elif kind == _CANCEL:
                job_ids = [item[1]]
                while queue and queue[0][0] == _CANCEL and len(job_ids) < 65536:
                    job_ids.append(queue.popleft()[1])
                request_id = next(self._ids)
                self._pending[request_id] = (_CANCEL, job_ids)
                line = _dumps({"id": request_id, "cancel": {"jobs": job_ids}}).encode() + b"\n"
            else:
                _, request_id, name, body, future = item
                self._pending[request_id] = (_REQUEST, future)
                line = _dumps({"id": request_id, name: body}).encode() + b"\n"
            out.append(line)
            out_size += len(line)
            if out_size >= _SEND_CHUNK:
                self._send(b"".join(out))
                out = []
                out_size = 0
        if out or self._transport.flush_needed:
            self._send(b"".join(out))

    def _submit_line(self, jobs: List[Dict[str, Any]], futures: List["SakerFuture[Any]"]) -> bytes:
        request_id = next(self._ids)
        self._pending[request_id] = (_BATCH, jobs, futures)
        self._submits_in_flight.add(request_id)
        return _dumps({"id": request_id, "submit": {"jobs": jobs}}).encode() + b"\n"

    # -- what the results stream does not say

    def started(self, future: "SakerFuture[Any]") -> bool:
        """Whether ``future``'s task was reported started (``SakerFuture.running``)."""
        return self._running.started(future)

    def on_reader_thread(self) -> bool:
        """Whether the caller is the reader thread, which must never wait for an answer."""
        return threading.current_thread() is self._reader

    def pending(self) -> Collection["SakerFuture[Any]"]:
        """The futures of accepted tasks whose result has not come (the reader changes it)."""
        return self._tasks.values()

    @property
    def max_task(self) -> int:
        """The highest task id the pilot has answered a submission of (-1: none yet)."""
        return self._max_task

    def job_state(self, job: int, then: Callable[[str], object]) -> None:
        """Calls ``then`` with how ended job ``job`` ended, asked of the pilot once.

        ``wait`` for an ended job answers at once with its counts. ``then`` runs on
        the reader thread (or here, when the answer is known already).
        """
        known = self._job_states.get(job)
        if isinstance(known, str):
            then(known)
            return
        if known is not None:
            known.append(then)
            return
        waiting: List[Callable[[str], object]] = [then]
        self._job_states[job] = waiting
        if len(self._job_states) > 4096:
            for old in [key for key, value in self._job_states.items() if isinstance(value, str)]:
                del self._job_states[old]

        def answered(answer: "concurrent.futures.Future[Dict[str, Any]]") -> None:
            try:
                counts = answer.result()
                state = (
                    f"ended with {counts.get('failed', 0)} failed, {counts.get('cancelled', 0)} "
                    f"cancelled, {counts.get('succeeded', 0)} succeeded"
                )
                self._job_states[job] = state
            except Exception:
                state = "failed or was cancelled"
                self._job_states.pop(job, None)
            for callback in waiting:
                callback(state)

        try:
            self.request("wait", {"jobs": [job]}).add_done_callback(answered)
        except Exception:
            self._job_states.pop(job, None)
            for callback in waiting:
                callback("failed or was cancelled")

    def task_future(self, task: int, mode: int) -> "SakerFuture[Any]":
        """A future of task ``task``, whoever submitted it (``Pilot.future``).

        Registered for this connection's results stream first, then the pilot is
        asked for the result: a result that was in before the stream began comes with
        the answer, a later one on the stream.
        """
        self._check_open()
        known = self._tasks.get(task)
        if known is not None:
            return known  # submitted on this connection, and pending
        future: SakerFuture[Any] = SakerFuture(self, mode)
        future._task = task
        self._tasks[task] = future

        def answered(answer: "concurrent.futures.Future[Dict[str, Any]]") -> None:
            try:
                body = answer.result()
            except ProtocolError as error:
                if error.kind == "no_result":
                    return  # not finished: its result comes on the stream
                failure: BaseException = error
            except _Unanswered as error:
                if self._closed is None:
                    # Lost with the connection, which is being re-established: asked
                    # again after the resumed stream, which brings it if this does not.
                    try:
                        self.request("result", {"task": task}).add_done_callback(answered)
                        return
                    except PilotClosed:
                        pass
                failure = error
            except Exception as error:
                failure = error
            else:
                if future._job is None:
                    future._job = body.get("job")
                if self._tasks.get(task) is future:
                    del self._tasks[task]
                complete(future, body)
                return
            if self._tasks.get(task) is future:
                del self._tasks[task]
            try:
                future.set_exception(failure)
            except concurrent.futures.InvalidStateError:
                pass

        self.request("result", {"task": task}).add_done_callback(answered)
        return future

    # -- reader thread

    def _read_loop(self) -> None:
        reason: BaseException
        try:
            dispatch = self._dispatch
            receive = self._transport.receive
            while True:
                try:
                    while True:
                        for message in receive(1 << 18):
                            dispatch(message)
                except OSError as exc:  # ssl.SSLError among them
                    if not self._may_reconnect():
                        raise
                    if not self._reconnect(exc):
                        return
        except BaseException as exc:
            if self._closing:
                reason = PilotClosed("the connection was closed")
            elif isinstance(exc, OSError):
                reason = PilotClosed(f"lost the connection to the pilot: {exc}")
            else:
                reason = PilotClosed(f"connection failed: {type(exc).__name__}: {exc}")
                if not isinstance(exc, Exception):
                    self._fail(reason)
                    raise
            self._fail(reason)

    def _dispatch(self, message: Dict[str, Any]) -> None:
        body = message.get("result")
        if body is not None:
            seq = body.get("seq", 0)
            if seq >= self._next_seq:
                self._next_seq = seq + 1
            task = body["task"]
            future = self._tasks.pop(task, None)
            if future is not None:
                complete(future, body)
            elif self._submits_in_flight:
                self._early[task] = body
            return
        request_id: Any = message.get("id")
        if request_id == self._results_id:
            # The stream ended: the pilot is stopping (or could not read its journal).
            # Without it no future can complete, so the connection is done.
            if "error" in message:
                why = f"the results stream failed: {error_of(message['error'])}"
            else:
                why = "the pilot stopped"
            self._fail(PilotClosed(why))
            return
        if request_id == self._probe_id:
            self._pending.pop(request_id, None)
            end = message.get("end")
            following = end.get("next") if isinstance(end, dict) else None
            if isinstance(following, int) and following > self._next_seq:
                self._next_seq = following
            return
        entry = self._pending.pop(request_id, None)
        if entry is None:
            if "error" in message:
                sys.stderr.write(f"saker: error from the pilot: {message['error']}\n")
            return
        kind = entry[0]
        if kind == _BATCH:
            self._on_submit_answer(request_id, entry[1], entry[2], message)
        elif kind == _REQUEST:
            future = entry[1]
            if future is None:
                return
            try:
                if "ok" in message:
                    future.set_result(message["ok"])
                else:
                    future.set_exception(error_of(message.get("error")))
            except concurrent.futures.InvalidStateError:
                pass

    def _on_submit_answer(
        self,
        request_id: int,
        jobs: List[Dict[str, Any]],
        futures: List["SakerFuture[Any]"],
        message: Dict[str, Any],
    ) -> None:
        ok = message.get("ok")
        try:
            if ok is not None:
                tasks = self._tasks
                early = self._early
                answers = ok["jobs"]
                if answers:
                    last = answers[-1]
                    highest = last["first_task"] + last.get("count", 1) - 1
                    if highest > self._max_task:
                        self._max_task = highest
                for future, answer in zip(futures, answers):
                    task = answer["first_task"]
                    job = answer["job"]
                    future._job = job
                    future._task = task
                    if future.done():  # cancelled before its job id was known
                        early.pop(task, None)
                        if future.cancelled():
                            self.cancel_job(job)
                        continue
                    body = early.pop(task, None)
                    if body is not None:
                        complete(future, body)
                    else:
                        tasks[task] = future
                return
            error = error_of(message.get("error"))
            refused = isinstance(error, SpecError) or getattr(error, "kind", None) == "malformed"
            if refused and len(jobs) > 1:
                # All or nothing: find the bad job(s) by halving, resubmitting the rest
                # (a value the pilot cannot read, a bad duration say, is `malformed`).
                half = len(jobs) // 2
                self._queue.appendleft((_BATCH, jobs[half:], futures[half:]))
                self._queue.appendleft((_BATCH, jobs[:half], futures[:half]))
                self._wake.set()
                return
            _fail_all(futures, error)
        finally:
            self._submits_in_flight.discard(request_id)
            if not self._submits_in_flight and self._early:
                self._early.clear()  # results of other clients' tasks
            with self.answered:
                self.answered.notify_all()

    # -- reconnecting (see the module docstring)

    def _may_reconnect(self) -> bool:
        return self.reconnect_for > 0 and not self._closing and self._closed is None

    def _send_failed(self) -> None:
        """A send failed (called under ``_send_lock``): nothing more is sent, and the
        socket is shut down, so that the reader notices and reconnects."""
        self._reconnecting = True
        self._transport.shutdown()

    def _reconnect(self, lost: BaseException) -> bool:
        """Re-establishes the lost connection (on the reader thread); False when it
        could not, everything pending having failed then (or ``close()`` failing it)."""
        loss = f"lost the connection to the pilot: {lost}"
        transport = self._transport
        transport.shutdown()  # wakes a sender blocked on it
        with self._send_lock:
            self._reconnecting = True
            pending, self._pending = self._pending, {}
            self._submits_in_flight.clear()
            self._early.clear()
        transport.close()
        self._fail_unanswered(pending, loss)
        try:
            if not transport.reconnect(self.reconnect_for, self._stop, self._resume):
                return False  # closed meanwhile
        except GaveUp as exc:
            self._fail(PilotClosed(f"{loss}; {exc}"))
            return False
        self._wake.set()  # the writer sends what was queued meanwhile
        return True

    def _fail_unanswered(self, pending: Dict[int, Any], loss: str) -> None:
        """Fails the requests sent on a lost connection and not answered; queues its
        cancels again."""
        submitted = PilotClosed(
            f"{loss}. The root died or was replaced (a standby taking over) while this "
            "submission was unanswered: the pilot may or may not have accepted it, and it "
            "is not sent again (that could run it twice)"
        )
        asked = _Unanswered(f"{loss}, before this request was answered (it may be sent again)")
        cancels: List[int] = []
        for entry in pending.values():
            kind = entry[0]
            if kind == _BATCH:
                futures = entry[2]
                error = submitted
            elif kind == _REQUEST and entry[1] is not None:
                futures = [entry[1]]
                error = asked
            elif kind == _CANCEL:
                cancels.extend(entry[1])
                continue
            else:
                continue
            _fail_all(futures, error)
        for job in reversed(cancels):
            self._queue.appendleft((_CANCEL, job))
        with self.answered:
            self.answered.notify_all()

    def _resume(self) -> bool:
        """Asks for the results stream again, first on a re-attached transport (under
        ``_send_lock``); False when this side closed meanwhile."""
        if self._closing or self._closed is not None:
            return False
        if self._next_seq >= 0:
            stream: Dict[str, Any] = {"from": self._next_seq, "follow": True}
        elif not self._tasks and self.protocol >= 2:
            stream = {"new_only": True, "follow": True}
        else:
            stream = {"from": 0, "follow": True}  # all of it: results of ours may be anywhere
        self._results_id = next(self._ids)
        self._send(_dumps({"id": self._results_id, "results": stream}).encode() + b"\n")
        self._reconnecting = False
        self.reconnects += 1
        return True

    # -- failure and closing

    def _fail_tasks(self, error: BaseException) -> None:
        tasks = self._tasks
        self._tasks = {}
        _fail_all(tasks.values(), error)

    def _fail_queued(self) -> None:
        error = PilotClosed(f"the connection to the pilot is closed: {self._closed}")
        while True:
            try:
                item = self._queue.popleft()
            except IndexError:
                return
            if item[0] == _JOB:
                futures = [item[2]]
            elif item[0] == _BATCH:
                futures = item[2]
            elif item[0] == _REQUEST:
                futures = [item[4]] if item[4] is not None else []
            else:
                futures = []
            _fail_all(futures, error)

    def _fail(self, error: BaseException) -> None:
        """Marks the connection closed and fails everything pending (repeatable)."""
        with self._close_lock:
            if self._closed is None:
                self._closed = error
            else:
                error = self._closed
        self._stop.set()
        self._wake.set()
        self._transport.shutdown()  # wakes the reader
        pending = self._pending
        self._pending = {}
        for entry in pending.values():
            if entry[0] == _BATCH:
                futures = entry[2]
            elif entry[0] == _REQUEST and entry[1] is not None:
                futures = [entry[1]]
            else:
                continue
            _fail_all(futures, error)
        self._fail_tasks(error)
        self._fail_queued()

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (closed here or lost)."""
        return self._closed is not None

    def close(self, timeout: float = 5.0) -> None:
        """Closes the connection; pending futures fail with PilotClosed."""
        self._closing = True
        self._stop.set()
        self._transport.shutdown()
        self._wake.set()
        for thread in (self._reader, self._writer):
            if thread is not threading.current_thread():
                thread.join(timeout)
        self._fail(PilotClosed("the connection was closed"))
        self._transport.close()


class _Answer(concurrent.futures.Future):  # type: ignore[type-arg]
    """A request's answer. Waiting for it on the thread that reads answers (inside a
    future's done-callback) would wait for ever: that raises at once instead."""

    def __init__(self, reader: threading.Thread) -> None:
        super().__init__()
        self._reader = reader

    def result(self, timeout: Optional[float] = None) -> Any:
        if not self.done() and threading.current_thread() is self._reader:
            raise SakerError(
                "cannot wait for the pilot's answer inside a future's done-callback (it "
                "would come on the thread running the callback): do it from another thread"
            )
        return super().result(timeout)
