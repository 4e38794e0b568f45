"""The connection to a pilot: the client protocol (docs/protocol.md), over the pilot
directory's local socket on the root's host, else over TCP with mutual TLS.

One connection carries everything. Two threads drive it: a writer that batches queued
submissions into ``submit`` requests (many jobs per request, without waiting for an
answer before sending the next), and a reader that parses answers and the one
``results`` stream (``new_only`` and ``follow``, requested right after the hello) and
completes futures by task id. TLS runs over ``ssl.MemoryBIO`` objects, under a lock held only for
in-memory work, so neither thread ever blocks the other on socket I/O (an
``SSLSocket`` cannot be read and written from two threads at once). Over the local
socket there is no TLS (the directory admits only its owner): lines go as they are.

Whoever sends (the writer, or a thread sending a lone submission itself) holds
``_send_lock`` from registering a request in ``_pending`` until its bytes are sent, so
``_pending`` holds exactly the requests that were (or were being) sent and not
answered, and everything else waits in ``_queue``.

**Reconnecting.** When the connection is lost (the reader meets end of file or an
error; a failed send shuts the socket down so that the reader does) and neither this
side closed it nor the pilot said it stops (``end`` on the results stream), the
reader reconnects: a standby root that took over (``saker pilot --standby``) rewrote
``client.json``, and resumed the pilot from its journal with the same task ids and
result ``seq`` numbers. Under ``_send_lock`` the reader sets ``_reconnecting`` (from
then on senders leave everything queued) and takes ``_pending``: requests sent and
not answered fail with :class:`PilotClosed` at once, submissions among them included
(the pilot may or may not have recorded one, and sending it again could run it
twice), except cancels, which are queued again (cancelling twice is harmless). Then it
tries every 50 ms to 1 s, for up to ``reconnect_for`` seconds: read ``client.json``,
connect, hello (the pilot id must not change), and, still under ``_send_lock``, ask for
the results stream from ``_next_seq``, one past the highest ``seq`` seen (or what a
``results`` probe sent right after the first stream said the journal's next one
was), so results accepted meanwhile come first from the journal. Then it clears
``_reconnecting`` and wakes the writer, which sends what was queued. Futures of
accepted tasks (``_tasks``) wait through all this; ``_closed`` stays ``None`` and
``closed`` false. If no root answers in time (or another pilot answers), everything
fails as without reconnecting, with the loss named. ``close()`` (``_closing``,
``_stop``) ends a reconnection at once.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import json
import os
import socket
import ssl
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Collection, Deque, Dict, Iterable, List, Optional, Set, Union

from .errors import PilotClosed, PilotNotFound, ProtocolError, SakerError, SpecError, error_of
from .futures import SakerFuture
from .results import Result, complete
from .running import RunningProbe

__all__ = ["Result", "Connection", "PROTOCOL"]

PROTOCOL = 2
# Oldest protocol this client still speaks (command tasks only, no `output`).
_OLDEST_PROTOCOL = 1
# Each pilot certificate names its role; only the root serves the client socket, so
# the ordinary hostname check verifies that the server is the pilot's root.
SERVER_NAME = "root.saker.pilot"
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH.
_HOSTNAME_MISMATCH = 62
ALPN = "saker/1"

# A submit request holds at most this many jobs / payload characters: the pilot's
# line limit is 64 MiB, and smaller batches keep the pipeline moving.
_BATCH_JOBS = 4096
_BATCH_CHARS = 24 << 20
# Bytes handed to one sendall.
_SEND_CHUNK = 4 << 20

# A submission this long after the previous one is sent by the submitting thread.
_LONE_GAP = 0.0002

# Reconnecting after a lost connection: for this long by default (seconds), with
# attempts this far apart at first, doubling up to the most.
RECONNECT_FOR = 60.0
_RECONNECT_FIRST = 0.05
_RECONNECT_MOST = 1.0
# A `from` past every result's seq: a `results` request without `follow` from here
# answers at once with just `end`, whose `next` is the journal's next seq.
_PAST_EVERY_SEQ = (1 << 63) - 1

_monotonic = time.monotonic
_loads = json.loads
_dumps = json.dumps


# ----------------------------------------------------------------------- connection

_JOB, _BATCH, _REQUEST, _CANCEL = 0, 1, 2, 3


def read_endpoint(directory: Path) -> Dict[str, Any]:
    """The pilot's ``client.json``, or PilotNotFound saying what is missing."""
    if not directory.is_dir():
        raise PilotNotFound(f"{directory} is not a pilot directory: no such directory")
    path = directory / "client.json"
    try:
        text = path.read_text()
    except FileNotFoundError:
        if (directory / "saker-pilot.json").exists() or (directory / "journal").exists():
            raise PilotNotFound(
                f"no pilot is serving clients from {directory}: it has no client.json "
                "(the pilot has stopped, or has not started listening yet)"
            ) from None
        raise PilotNotFound(
            f"{directory} is not a pilot directory: it has no client.json "
            "(start one with `saker pilot --dir DIR` or saker.Pilot.start)"
        ) from None
    except OSError as exc:
        raise PilotNotFound(f"cannot read {path}: {exc}") from None
    try:
        endpoint = json.loads(text)
        str(endpoint["addr"]).rsplit(":", 1)[1]
    except (ValueError, KeyError, IndexError, TypeError):
        raise PilotNotFound(f"{path} is not a valid client.json") from None
    if not isinstance(endpoint, dict):
        raise PilotNotFound(f"{path} is not a valid client.json")
    return endpoint


class _GiveUp(SakerError):
    """Reconnecting cannot succeed: another pilot took the directory."""


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
                 threads: bool = True, reconnect_for: float = RECONNECT_FOR) -> None:
        if isinstance(reconnect_for, bool) or not isinstance(reconnect_for, (int, float)) or not reconnect_for >= 0:
            raise ValueError(f"reconnect_for must be a non-negative number of seconds, not {reconnect_for!r}")
        self.directory = Path(directory).expanduser()
        #: How long to try to reconnect after losing the connection (0: never).
        self.reconnect_for = float(reconnect_for)
        #: How many times this connection was re-established.
        self.reconnects = 0
        self._timeout = timeout
        endpoint = read_endpoint(self.directory)
        self._endpoint = endpoint
        self.addr: str = str(endpoint["addr"])
        self.pilot_id: str = str(endpoint.get("pilot_id", ""))
        self.server = ""
        self.protocol = 0
        self._client = client or f"saker-python (python {sys.version.split()[0]}, pid {os.getpid()})"
        self._ids = itertools.count(1)
        self._ssl_lock = threading.Lock()
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
        self._partial: List[bytes] = []
        self._results_id = -1
        self._flush_needed = False
        # Held by whoever turns queued items into bytes and sends them, so that requests
        # leave in the order they were queued.
        self._send_lock = threading.Lock()
        self._last_submit = 0.0

        spoken = endpoint.get("protocols") or [endpoint.get("protocol", PROTOCOL)]
        candidates = sorted(
            {int(v) for v in spoken if isinstance(v, int) and _OLDEST_PROTOCOL <= v <= PROTOCOL} or {PROTOCOL},
            reverse=True,
        )
        last: Optional[BaseException] = None
        for protocol in candidates:
            try:
                self._open(timeout)
                hello = self._hello(protocol)
            except PilotNotFound:
                raise
            except SakerError as exc:
                self._sock.close()
                last = exc
                if getattr(exc, "kind", None) == "protocol_mismatch":
                    continue
                raise
            break
        else:
            raise PilotNotFound(f"the pilot in {self.directory} speaks no protocol this client knows: {last}")
        self.protocol = int(hello.get("protocol", protocol))
        self.pilot_id = str(hello.get("pilot_id", self.pilot_id))
        self.server = str(hello.get("server", ""))

        self._sock.settimeout(None)
        if not threads:
            # One blocking conversation on the caller's thread (results()).
            return
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

    # -- opening

    def _open(self, timeout: float) -> None:
        self._tls: Optional[ssl.SSLObject] = None
        self._partial = []
        if self._open_local(timeout):
            return
        directory = self.directory
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            context.load_verify_locations(str(directory / "ca.pem"))
            context.load_cert_chain(str(directory / "client.pem"), str(directory / "client.key"))
        except (OSError, ssl.SSLError) as exc:
            raise PilotNotFound(f"cannot load the client credentials of {directory}: {exc}") from None
        context.set_alpn_protocols([ALPN])
        host, _, port = self.addr.rpartition(":")
        host = host.strip("[]")
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout)
        except ConnectionRefusedError:
            raise PilotNotFound(
                f"the pilot of {directory} refused the connection at {self.addr}: it has "
                "probably stopped (its client.json is stale)"
            ) from None
        except (OSError, ValueError) as exc:
            raise PilotNotFound(f"cannot reach the pilot of {directory} at {self.addr}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=SERVER_NAME)
        self._partial = []
        try:
            while True:
                try:
                    self._tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    self._flush_blocking()
                    data = sock.recv(65536)
                    if not data:
                        raise PilotNotFound(f"the pilot at {self.addr} closed the connection during the TLS handshake")
                    self._incoming.write(data)
            self._flush_blocking()
        except ssl.SSLError as exc:
            sock.close()
            hint = ""
            if getattr(exc, "verify_code", None) == _HOSTNAME_MISMATCH:
                hint = (
                    " (the pilot's certificate carries no root role: it was started by an older "
                    "saker; resume it with this one, which renews its credentials)"
                )
            raise PilotNotFound(f"TLS with the pilot of {directory} at {self.addr} failed: {exc}{hint}") from None
        except OSError as exc:
            sock.close()
            raise PilotNotFound(f"cannot talk to the pilot of {directory} at {self.addr}: {exc}") from None

    def _open_local(self, timeout: float) -> bool:
        """Connects to the local socket when this is the root's host; False if not."""
        name = self._endpoint.get("socket")
        if not isinstance(name, str) or self._endpoint.get("host") != socket.gethostname():
            return False
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(self.directory / name))
        except (OSError, ValueError):
            # Stale, or a path too long for a socket address: TCP and TLS instead.
            sock.close()
            return False
        self._sock = sock
        return True

    def _flush_blocking(self) -> None:
        if self._tls is None:
            return
        data = self._outgoing.read()
        if data:
            self._sock.sendall(data)

    def _hello(self, protocol: int) -> Dict[str, Any]:
        line = _dumps({"hello": {"protocol": protocol, "client": self._client}}) + "\n"
        try:
            self._send(line.encode())
            while True:
                messages = self._receive_blocking()
                if messages:
                    break
        except (OSError, ssl.SSLError) as exc:
            self._sock.close()
            raise PilotNotFound(f"the pilot at {self.addr} did not answer the hello: {exc}") from None
        answer = messages[0]
        if len(messages) > 1:
            raise ProtocolError(f"unexpected messages after the hello answer: {messages[1:]!r}")
        if "error" in answer:
            raise error_of(answer["error"])
        ok = answer.get("ok")
        if not isinstance(ok, dict):
            raise ProtocolError(f"unexpected hello answer: {answer!r}")
        return ok

    def _receive_blocking(self) -> List[Any]:
        data = self._sock.recv(65536)
        if not data:
            raise ConnectionResetError("the pilot closed the connection")
        return self._decrypt_and_parse(data)

    def _decrypt_and_parse(self, data: bytes) -> List[Any]:
        chunks: List[bytes] = []
        tls = self._tls
        if tls is None:
            chunks.append(data)
        else:
            self._decrypt(tls, data, chunks)
        if not chunks:
            return []
        return self._parse(chunks)

    def _decrypt(self, tls: ssl.SSLObject, data: bytes, chunks: List[bytes]) -> None:
        with self._ssl_lock:
            self._incoming.write(data)
            try:
                while True:
                    chunk = tls.read(1 << 20)
                    if not chunk:
                        raise ConnectionResetError("the pilot closed the connection")
                    chunks.append(chunk)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                raise ConnectionResetError("the pilot closed the connection") from None
            if self._outgoing.pending:
                self._flush_needed = True
        if self._flush_needed:
            self._wake.set()

    def _parse(self, chunks: List[bytes]) -> List[Any]:
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if data.rfind(b"\n") < 0:
            self._partial.append(data)
            return []
        head, _, rest = data.rpartition(b"\n")
        if self._partial:
            self._partial.append(head)
            head = b"".join(self._partial)
            self._partial = []
        if rest:
            self._partial.append(rest)
        lines = [line for line in head.split(b"\n") if line.strip()]
        if not lines:
            return []
        try:
            messages: List[Any] = _loads(b"[" + b",".join(lines) + b"]")
            return messages
        except ValueError:
            messages = []
            for line in lines:
                try:
                    messages.append(_loads(line))
                except ValueError:
                    sys.stderr.write(f"saker: ignoring a malformed line from the pilot: {line[:200]!r}\n")
            return messages

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
            except (OSError, ssl.SSLError) as exc:
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
        future: concurrent.futures.Future[Dict[str, Any]] = concurrent.futures.Future()
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
                    except (OSError, ssl.SSLError):
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
        if out or self._flush_needed:
            self._send(b"".join(out))

    def _submit_line(self, jobs: List[Dict[str, Any]], futures: List["SakerFuture[Any]"]) -> bytes:
        request_id = next(self._ids)
        self._pending[request_id] = (_BATCH, jobs, futures)
        self._submits_in_flight.add(request_id)
        return _dumps({"id": request_id, "submit": {"jobs": jobs}}).encode() + b"\n"

    def _send(self, data: bytes) -> None:
        if self._tls is None:
            if data:
                self._sock.sendall(data)
            return
        with self._ssl_lock:
            if data:
                self._tls.write(data)
            self._flush_needed = False
            encrypted = self._outgoing.read()
        if encrypted:
            self._sock.sendall(encrypted)

    # -- what the results stream does not say

    def started(self, future: "SakerFuture[Any]") -> bool:
        """Whether ``future``'s task was reported started (``SakerFuture.running``)."""
        return self._running.started(future)

    def on_reader_thread(self) -> bool:
        """Whether the caller is the reader thread, which must never wait for an answer."""
        return threading.current_thread() is getattr(self, "_reader", None)

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
            parse = self._decrypt_and_parse
            while True:
                sock = self._sock
                try:
                    while True:
                        data = sock.recv(1 << 18)
                        if not data:
                            raise ConnectionResetError("the pilot closed the connection")
                        for message in parse(data):
                            dispatch(message)
                except (OSError, ssl.SSLError) as exc:
                    if not self._may_reconnect():
                        raise
                    if not self._reconnect(exc):
                        return
        except BaseException as exc:
            if self._closing:
                reason = PilotClosed("the connection was closed")
            elif isinstance(exc, (OSError, ssl.SSLError)):
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
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _reconnect(self, lost: BaseException) -> bool:
        """Re-establishes the lost connection (on the reader thread); False when it
        could not, everything pending having failed then (or ``close()`` failing it)."""
        loss = f"lost the connection to the pilot: {lost}"
        old = self._sock
        try:
            old.shutdown(socket.SHUT_RDWR)  # wakes a sender blocked on it
        except OSError:
            pass
        with self._send_lock:
            self._reconnecting = True
            pending, self._pending = self._pending, {}
            self._submits_in_flight.clear()
            self._early.clear()
            self._partial = []
        try:
            old.close()
        except OSError:
            pass
        self._fail_unanswered(pending, loss)

        deadline = _monotonic() + self.reconnect_for
        delay = _RECONNECT_FIRST
        last: Optional[BaseException] = None
        while True:
            if self._closing or self._closed is not None:
                return False
            try:
                if self._attach(deadline):
                    return True
                return False  # closed meanwhile
            except _GiveUp as exc:
                self._fail(PilotClosed(f"{loss}; {exc}"))
                return False
            except (SakerError, OSError, ssl.SSLError, ValueError) as exc:
                last = exc
            remaining = deadline - _monotonic()
            if remaining <= 0:
                break
            self._stop.wait(min(delay, remaining))
            delay = min(delay * 2, _RECONNECT_MOST)
        self._fail(PilotClosed(
            f"{loss}; no root of the pilot in {self.directory} answered within {self.reconnect_for:g} s "
            f"(last attempt: {last})"
        ))
        return False

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

    def _attach(self, deadline: float) -> bool:
        """One attempt at a connection to the pilot's root as it is now; False when
        this side closed meanwhile."""
        # Missing for a moment, too: a standby that takes over removes the dead root's
        # before it writes its own, so that is no sign of a pilot that stopped.
        endpoint = read_endpoint(self.directory)
        timeout = max(1.0, min(self._timeout, deadline - _monotonic()))
        with self._send_lock:
            self._endpoint = endpoint
            self.addr = str(endpoint["addr"])
            self._open(timeout)
            try:
                hello = self._hello(self.protocol)
                pilot_id = str(hello.get("pilot_id", ""))
                if self.pilot_id and pilot_id and pilot_id != self.pilot_id:
                    raise _GiveUp(f"{self.directory} now holds another pilot ({pilot_id}, not {self.pilot_id})")
                self._sock.settimeout(None)
                if self._closing or self._closed is not None:
                    self._sock.close()
                    return False
                self.server = str(hello.get("server", self.server))
                if self._next_seq >= 0:
                    stream: Dict[str, Any] = {"from": self._next_seq, "follow": True}
                elif not self._tasks and self.protocol >= 2:
                    stream = {"new_only": True, "follow": True}
                else:
                    stream = {"from": 0, "follow": True}  # all of it: results of ours may be anywhere
                self._results_id = next(self._ids)
                self._send(_dumps({"id": self._results_id, "results": stream}).encode() + b"\n")
            except BaseException:
                try:
                    self._sock.close()
                except OSError:
                    pass
                raise
            self._reconnecting = False
            self.reconnects += 1
        self._wake.set()  # the writer sends what was queued meanwhile
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
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reader
        except OSError:
            pass
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
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._wake.set()
        for thread in (self._reader, self._writer):
            if thread is not threading.current_thread():
                thread.join(timeout)
        self._fail(PilotClosed("the connection was closed"))
        try:
            self._sock.close()
        except OSError:
            pass
