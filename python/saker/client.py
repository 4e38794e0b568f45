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

import binascii
import collections
import concurrent.futures
import dataclasses
import datetime
import itertools
import json
import os
import re
import socket
import ssl
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Set, Tuple, Union

from .errors import (
    DependencyFailed,
    PilotClosed,
    PilotNotFound,
    ProtocolError,
    SakerError,
    SpecError,
    TaskFailed,
    TaskLost,
)
from .futures import MODE_AUTO, MODE_CALL, MODE_COMMAND, MODE_RAW, PENDING, RUNNING, SakerFuture
from .serialize import loads_exception, loads_output

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

# running(): at most one `status` request per this many seconds per connection. Each
# asks for the jobs of the futures asked about in the last _WATCH_SECONDS (at most
# _WATCH_JOBS of them), and of every pending future when there are at most
# _ASK_ALL_PENDING: one request answers a loop over them all.
_STATUS_INTERVAL = 0.05
_WATCH_SECONDS = 1.0
_WATCH_JOBS = 4096
_ASK_ALL_PENDING = 64

# Reconnecting after a lost connection: for this long by default (seconds), with
# attempts this far apart at first, doubling up to the most.
RECONNECT_FOR = 60.0
_RECONNECT_FIRST = 0.05
_RECONNECT_MOST = 1.0
# A `from` past every result's seq: a `results` request without `follow` from here
# answers at once with just `end`, whose `next` is the journal's next seq.
_PAST_EVERY_SEQ = (1 << 63) - 1

_monotonic = time.monotonic
_a2b = binascii.a2b_base64
_loads = json.loads
_dumps = json.dumps


@dataclasses.dataclass
class Result:
    """One task's result object (protocol section 5); ``output`` is decoded bytes."""

    task: int
    job: int
    index: Optional[int]
    state: str
    exit_code: Optional[int]
    signal: Optional[int]
    reason: Optional[str]
    attempts: int
    node: Optional[str]
    executor: Optional[int]
    stdout: str
    stderr: str
    stdout_path: Optional[str]
    stderr_path: Optional[str]
    seq: int
    output: Optional[bytes]
    history: List[Dict[str, Any]]
    submit_time: Optional[str]
    start_time: Optional[str]
    end_time: Optional[str]
    #: An HPC job's nodes and how each of its processes ended (docs/hpc-jobs.md);
    #: ``None`` for other tasks.
    gang: Optional[Dict[str, Any]] = None
    #: When the root accepted the result; ``None`` from pilots that do not say.
    accept_time: Optional[str] = None
    #: The number of the node (agent) that ran it, which tells agents apart when host
    #: names repeat; ``None`` from pilots that do not say.
    node_id: Optional[int] = None
    #: When the root sent the task's last attempt to a node; ``None`` when it never
    #: did or the pilot does not say.
    dispatch_time: Optional[str] = None
    #: When the node's agent received that dispatch (its clock); ``None`` when not
    #: known.
    received_time: Optional[str] = None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Result":
        """Builds a Result from a ``result`` message body (unknown keys ignored)."""
        output = body.get("output")
        return cls(
            task=body["task"],
            job=body["job"],
            index=body.get("index"),
            state=body["state"],
            exit_code=body.get("exit_code"),
            signal=body.get("signal"),
            reason=body.get("reason"),
            attempts=body.get("attempts", 0),
            node=body.get("node"),
            executor=body.get("executor"),
            stdout=body.get("stdout") or "",
            stderr=body.get("stderr") or "",
            stdout_path=body.get("stdout_path"),
            stderr_path=body.get("stderr_path"),
            seq=body.get("seq", 0),
            output=None if output is None else _a2b(output),
            history=list(body.get("history") or ()),
            submit_time=body.get("submit_time"),
            start_time=body.get("start_time"),
            end_time=body.get("end_time"),
            gang=body.get("gang"),
            accept_time=body.get("accept_time"),
            node_id=body.get("node_id"),
            dispatch_time=body.get("dispatch_time"),
            received_time=body.get("received_time"),
        )

    @property
    def ok(self) -> bool:
        """Whether the task succeeded."""
        return self.state == "succeeded"

    def value(self) -> Any:
        """What ``result()`` of the task's future gives, from this result alone.

        A Python call's return value (its exception raised, with the worker's
        traceback as ``__cause__``); for a command task this Result itself, or
        :class:`TaskFailed` when it failed; ``CancelledError`` (``DependencyFailed``
        when a dependency failed) when it was cancelled. For worker kinds other than
        ``python`` read ``output`` instead.
        """
        value, error = _outcome(_body_of(self), MODE_AUTO)
        if error is not None:
            raise error
        return value


# ------------------------------------------------------------------------- options

_INT_OPTIONS = ("cores", "gpus", "memory_mib", "priority", "max_retries", "max_replays", "nodes",
                "ranks_per_node", "ranks", "cores_per_rank", "node")
#: Options naming jobs to wait for (docs/runtime-semantics.md, "Dependencies").
_DEPENDENCY_OPTIONS = ("after", "after_any")
#: How long a dependency's own submission may take to be answered.
_DEPENDENCY_TIMEOUT = 60.0


def _timestamp(value: Any) -> str:
    """RFC 3339 UTC text for a datetime (naive ones are taken as UTC) or such text."""
    if isinstance(value, str):
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    raise TypeError(f"option not_before must be a datetime or RFC 3339 text, not {value!r}")


def _job_ids(name: str, value: Any) -> List[Any]:
    """Job ids (or names) from ints, strings, futures, or a list of them."""
    items = value if isinstance(value, (list, tuple, set)) else [value]
    ids: List[Any] = []
    for item in items:
        if isinstance(item, bool):
            raise TypeError(f"option {name} takes job ids, names or futures, not {item!r}")
        if isinstance(item, (int, str)):
            ids.append(item)
            continue
        wait_job = getattr(item, "_wait_job", None)
        if wait_job is None:
            raise TypeError(f"option {name} takes job ids, names or futures, not {item!r}")
        job = wait_job(_DEPENDENCY_TIMEOUT)
        connection = getattr(item, "_connection", None)
        if connection is not None:
            # So that a dependent it fails can say how (DependencyFailed).
            connection._dependencies[job] = item
        ids.append(job)
    return ids
#: What starts an HPC job's ranks (docs/hpc-jobs.md).
_MPI_KINDS = ("none", "openmpi", "mpich")
_COMMAND_OPTIONS = ("env", "cwd", "shell", "inline_output")


def normalize_options(options: Mapping[str, Any]) -> Dict[str, Any]:
    """Checks task options and names them as in the protocol's spec.

    Checked here because a submit request is accepted or refused whole: a bad option
    caught now fails one call instead of a batch of them.
    """
    spec: Dict[str, Any] = {}
    for name, value in options.items():
        if name == "retries":
            name = "max_retries"
        if value is None and name not in ("cwd",):
            continue
        if name in _INT_OPTIONS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"option {name} must be an int, not {value!r}")
            if value < 0 and name != "priority":
                raise ValueError(f"option {name} must not be negative")
            if name in ("cores", "nodes", "ranks_per_node", "ranks", "cores_per_rank") and value < 1:
                raise ValueError(f"option {name} must be at least 1")
        elif name == "mpi":
            if value not in _MPI_KINDS:
                raise ValueError(f"option mpi must be one of {', '.join(_MPI_KINDS)}, not {value!r}")
        elif name == "time_limit":
            if isinstance(value, datetime.timedelta):
                value = value.total_seconds()
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise TypeError(f"option time_limit must be seconds or a string like '5m', not {value!r}")
        elif name in ("tags", "reads", "writes"):
            # One string or several; reads and writes name data items (docs/data.md).
            if isinstance(value, str):
                value = [value]
            value = list(value)
            if not all(isinstance(tag, str) for tag in value):
                raise TypeError(f"option {name} must be strings")
        elif name in ("idempotent", "shell", "exclusive"):
            if not isinstance(value, bool):
                raise TypeError(f"option {name} must be a bool, not {value!r}")
        elif name == "resources":
            value = dict(value)
            for key, amount in value.items():
                if not isinstance(key, str) or isinstance(amount, bool) or not isinstance(amount, int):
                    raise TypeError("option resources must map names to ints")
        elif name == "env":
            value = {str(key): str(item) for key, item in dict(value).items()}
        elif name == "cwd":
            value = None if value is None else os.fspath(value)
        elif name in _DEPENDENCY_OPTIONS:
            value = _job_ids(name, value)
        elif name == "name":
            if not isinstance(value, str):
                raise TypeError(f"option name must be a string, not {value!r}")
        elif name == "not_before":
            value = _timestamp(value)
        elif name == "inline_output":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TypeError(f"option inline_output must be a non-negative int, not {value!r}")
        else:
            raise TypeError(f"unknown task option {name!r}")
        spec[name] = value
    return spec


def split_options(options: Mapping[str, Any], command: bool) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(spec fields, job fields) of normalized options; command options refused for functions."""
    spec = dict(options)
    job: Dict[str, Any] = {}
    if "inline_output" in spec:
        job["inline_output"] = spec.pop("inline_output")
    if not command:
        for name in _COMMAND_OPTIONS:
            if name in options:
                raise TypeError(f"option {name} applies to command tasks only")
    return spec, job


# ----------------------------------------------------------------------- completion


def _body_of(result: Result) -> Dict[str, Any]:
    """A result body again, with ``output`` already decoded (see :func:`_outcome`)."""
    body = dataclasses.asdict(result)
    body["_output"] = result.output
    return body


def _output_of(body: Dict[str, Any]) -> Optional[bytes]:
    if "_output" in body:
        decoded: Optional[bytes] = body["_output"]
        return decoded
    output = body.get("output")
    return None if output is None else _a2b(output)


_DEPENDENCY_REASON = re.compile(r"dependency (\d+) failed")


def _outcome(body: Dict[str, Any], mode: int, dependency: Any = None) -> Tuple[Any, Optional[BaseException]]:
    """``(value, exception)`` of a task from its result body, as a future of ``mode``.

    A cancelled task gives ``CancelledError`` (or :class:`DependencyFailed`).
    """
    state = body["state"]
    if mode == MODE_AUTO:
        mode = MODE_CALL if body.get("output") is not None or body.get("_output") is not None else MODE_COMMAND
    if state == "succeeded":
        if mode == MODE_CALL:
            output = _output_of(body)
            if output is None:
                return None, ProtocolError(f"task {body['task']} succeeded without output")
            try:
                return loads_output(output), None
            except Exception as exc:
                return None, exc
        if mode == MODE_RAW:
            output = _output_of(body)
            return (b"" if output is None else output), None
        return _result_of(body), None
    if state == "cancelled":
        error = _dependency_failed(body, dependency)
        return None, error if error is not None else concurrent.futures.CancelledError()
    result = _result_of(body)
    if mode == MODE_COMMAND:
        return None, TaskFailed(result)
    if result.output is None:
        reason = result.reason or "no answer from the worker"
        return None, TaskLost(result, f"function task {result.task} ended without an answer: {reason}")
    if mode == MODE_CALL:
        return None, loads_exception(result.output, result.reason)
    return None, TaskFailed(result)


def _result_of(body: Dict[str, Any]) -> Result:
    if "_output" in body:
        fields = {key: value for key, value in body.items() if key != "_output"}
        fields["output"] = body["_output"]
        return Result(**fields)
    return Result.from_json(body)


def _dependency_job(body: Dict[str, Any]) -> Optional[int]:
    """The dependency's job id, when the pilot cancelled the task because it failed."""
    match = _DEPENDENCY_REASON.fullmatch(body.get("reason") or "")
    return int(match.group(1)) if match else None


def _dependency_failed(body: Dict[str, Any], dependency: Any, state: Optional[str] = None) -> Optional[DependencyFailed]:
    """DependencyFailed for a task cancelled because of a dependency, else None.

    ``dependency`` is the dependency's future when this process knows it; ``state``
    what the pilot said of its job (its counts) otherwise.
    """
    job = _dependency_job(body)
    if job is None:
        return None
    cause: Optional[BaseException] = None
    if dependency is not None and dependency.done():
        if dependency.cancelled():
            inner = dependency._cancel_error
            state = f"was cancelled ({inner})" if inner is not None else "was cancelled"
            cause = inner
        else:
            cause = dependency.exception()
            if cause is not None:
                lines = str(cause).strip().splitlines()
                first = f": {lines[0]}" if lines else ""
                state = f"failed: {type(cause).__name__}{first}"
            else:
                state = "succeeded"  # cannot be: the pilot said it failed
    if state is None:
        state = "failed or was cancelled"
    result = _result_of(body)
    where = f"job {result.job}" if result.index is None else f"job {result.job}[{result.index}]"
    error = DependencyFailed(
        f"task {result.task} ({where}) was cancelled: it depends on job {job}, which {state}",
        result,
        job,
        state,
        dependency,
    )
    error.__cause__ = cause
    return error


def _complete(future: "SakerFuture[Any]", body: Dict[str, Any]) -> None:
    """Resolves ``future`` from its task's result body (called on the reader thread)."""
    state = body["state"]
    mode = future._mode
    if state == "succeeded" and mode == MODE_CALL:
        # The hot path of every call.
        output = body.get("output")
        if output is None:
            future._finish(None, ProtocolError(f"task {body['task']} succeeded without output"))
            return
        try:
            value = loads_output(_a2b(output))
        except Exception as exc:
            future._finish(None, exc)
            return
        future._finish(value, None)
        return
    if state == "cancelled":
        job = _dependency_job(body)
        connection = future._connection
        if job is None or connection is None:
            future._cancel_here()
            return
        if future._job is None:  # a future of Pilot.future(task)
            future._job = body.get("job")
        dependency = connection._dependencies.get(job)
        if dependency is not None and dependency.done():
            future._cancel_here(_dependency_failed(body, dependency))
            return
        # Ask the pilot how the dependency's job ended, then cancel (on the reader).
        connection._job_state(job, lambda state: future._cancel_here(_dependency_failed(body, None, state)))
        return
    if future._job is None:  # a future of Pilot.future(task)
        future._job = body.get("job")
    value, error = _outcome(body, mode)
    future._finish(value, error)


def _fail_all(futures: Iterable["concurrent.futures.Future[Any]"], error: BaseException) -> None:
    """Fails each of ``futures`` that is not done yet with ``error``."""
    for future in futures:
        try:
            future.set_exception(error)
        except concurrent.futures.InvalidStateError:
            pass


def _error_of(body: Any) -> SakerError:
    if not isinstance(body, dict):
        return ProtocolError(f"malformed error answer: {body!r}")
    kind = body.get("kind")
    message = str(body.get("message", "")) or str(kind)
    if kind == "invalid_spec":
        return SpecError(message)
    if kind == "shutting_down":
        return PilotClosed(f"the pilot is shutting down: {message}")
    return ProtocolError(message, kind)


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
        self._answered = threading.Condition()
        # Results that came before the answer to their submit request.
        self._early: Dict[int, Dict[str, Any]] = {}
        # Futures named in after=/after_any= options, by job id (DependencyFailed).
        self._dependencies: "weakref.WeakValueDictionary[int, SakerFuture[Any]]" = weakref.WeakValueDictionary()
        # How ended jobs of dependencies ended (their counts), asked once each.
        self._job_states: Dict[int, Any] = {}
        # The highest task id the pilot has answered a submission of.
        self._max_task = -1
        # running(): held by the thread that asks for `status` (one at a time).
        self._status_lock = threading.Lock()
        self._status_time = -1.0
        # running(): job -> [future, when last asked about, when the last request whose
        # answer said it had not started was sent], most recently asked last.
        self._watch: Dict[int, List[Any]] = {}
        self._watch_lock = threading.Lock()
        # False once the pilot refused `status` with `jobs` (it predates them).
        self._job_counts = True
        # The guess for such pilots: every task up to this id has been handed to a
        # node; every one that does not wait for other jobs or a time, up to this id.
        self._dispatched_through = -1
        self._ready_through = -1
        self._status_max = -1
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
            raise _error_of(answer["error"])
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

    def _started(self, future: "SakerFuture[Any]") -> bool:
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
        if self._closed is not None or threading.current_thread() is getattr(self, "_reader", None):
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
                status = self.request("status", {"jobs": jobs}).result(10.0)
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
        :meth:`_started`)."""
        now = _monotonic()
        with self._watch_lock:
            watch = self._watch
            for stale in [other for other, (future, asked, _) in watch.items()
                          if future._state != PENDING or now - asked > _WATCH_SECONDS]:
                del watch[stale]
            jobs = list(watch)[-_WATCH_JOBS:]
            if job not in jobs:
                jobs.append(job)
            if len(self._tasks) <= _ASK_ALL_PENDING:
                try:
                    pending = list(self._tasks.values())  # the reader thread changes it
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
        that predate ``status`` with ``jobs`` (see :meth:`_started`).

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
            if self._closed is not None or threading.current_thread() is getattr(self, "_reader", None):
                return False
            with self._status_lock:
                if task > (self._dispatched_through if waits else self._ready_through):
                    if _monotonic() - self._status_time < _STATUS_INTERVAL and self._status_max >= task:
                        return False  # a fresh answer said no
                    known = self._max_task
                    try:
                        status = self.request("status", {}).result(10.0)
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

    def _job_state(self, job: int, then: Callable[[str], None]) -> None:
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
        waiting: List[Callable[[str], None]] = [then]
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
                _complete(future, body)
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
                _complete(future, body)
            elif self._submits_in_flight:
                self._early[task] = body
            return
        request_id: Any = message.get("id")
        if request_id == self._results_id:
            # The stream ended: the pilot is stopping (or could not read its journal).
            # Without it no future can complete, so the connection is done.
            if "error" in message:
                why = f"the results stream failed: {_error_of(message['error'])}"
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
                    future.set_exception(_error_of(message.get("error")))
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
                        _complete(future, body)
                    else:
                        tasks[task] = future
                return
            error = _error_of(message.get("error"))
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
            with self._answered:
                self._answered.notify_all()

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
        with self._answered:
            self._answered.notify_all()

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
