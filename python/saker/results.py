"""What a task's result is, and how a result completes its future: the ``Result`` a
command task gives, and the value or exception of a function call, a failed
dependency, a lost task (docs/python.md, "Results and errors").

The exceptions that carry a Result (:class:`TaskFailed`, :class:`TaskLost`,
:class:`DependencyFailed`) are defined here, beside it: ``Result.value()`` raises
them and they hold a Result, so apart they would import each other. Start with
:func:`complete`, which the connection's reader thread calls for every result.
"""

from __future__ import annotations

import binascii
import concurrent.futures
import dataclasses
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import ProtocolError, SakerError
from .futures import MODE_AUTO, MODE_CALL, MODE_COMMAND, MODE_RAW, SakerFuture
from .serialize import loads_exception, loads_output

__all__ = ["Result", "TaskFailed", "TaskLost", "DependencyFailed", "complete"]

_a2b = binascii.a2b_base64


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
    #: How a failed task's counted attempt failed, one word to match on (``reason`` is
    #: for people): ``"exit"``, ``"signal"``, ``"time_limit"``, ``"out_of_memory"``,
    #: ``"spawn"``, ``"worker_start"`` (its Python worker could not start),
    #: ``"raised"``, ``"lost"``; ``None`` when it did not fail, or from pilots that do
    #: not say.
    failure: Optional[str] = None
    #: How long its attempt waited on its node for the data items (objects) it reads
    #: to be fetched, in microseconds; ``None`` when it fetched none.
    fetch_us: Optional[int] = None

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
            failure=body.get("failure"),
            fetch_us=body.get("fetch_us"),
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


# ------------------------------------------------------- errors that carry a result

def _describe(result: "Result") -> str:
    if result.reason:
        why = result.reason
    elif result.signal is not None:
        why = f"killed by signal {result.signal}"
    elif result.exit_code is not None:
        why = f"exit {result.exit_code}"
    else:
        why = result.state
    text = f"task {result.task} {result.state}: {why}"
    stderr = (result.stderr or "").strip()
    if stderr:
        tail = stderr[-500:]
        text += "\n--- stderr (tail) ---\n" + tail
    return text


class TaskFailed(SakerError):
    """A task ended ``failed``; ``result`` is the pilot's whole account of it."""

    def __init__(self, result: "Result", message: Optional[str] = None) -> None:
        super().__init__(message if message is not None else _describe(result))
        self.result = result

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.result, str(self)))


class TaskLost(TaskFailed):
    """A function task ended without an answer from its worker.

    Its worker was lost beyond the task's replays, killed at its time limit, or could
    not be started: ``result.output`` is ``None`` and ``result.reason`` says which.
    """


class ObjectLost(TaskLost):
    """A call could not run because an object it reads (a :class:`saker.Ref`
    argument, or one of its large arguments) could not be had: no live node holds it,
    or its holders could not give it. ``object`` is its id, ``reason`` what the pilot
    said. Never a wrong value: the call did not run.
    """

    def __init__(self, result: "Result", message: Optional[str] = None) -> None:
        super().__init__(result, message)
        match = _OBJECT_REASON.fullmatch(result.reason or "")
        self.object: Optional[str] = match.group(1) if match else None
        self.reason: str = match.group(2) if match else (result.reason or "")


# The reason an attempt fails with when a data item it reads cannot be had (the
# agent's ItemError), for an item that is an object.
_OBJECT_REASON = re.compile(r'data item "obj-([0-9a-f]{32})": (.+)', re.DOTALL)


class DependencyFailed(SakerError, concurrent.futures.CancelledError):
    """A task the pilot cancelled because a job it depends on (``after=``) failed.

    A ``concurrent.futures.CancelledError``, as ``result()`` of a cancelled future
    raises, carrying why: ``job`` is the dependency's job id, ``state`` what is known
    of how it ended (``"failed: ValueError: boom"``, ``"was cancelled"``, or its
    counts, ``"ended with 1 failed, 0 cancelled, 3 succeeded"``), ``dependency`` its
    future when this process submitted it, ``result`` the cancelled task's result and
    ``reason`` the pilot's words (``"dependency 17 failed"``). The dependency's own
    exception, when known, is the ``__cause__``.
    """

    def __init__(self, message: str, result: Optional["Result"] = None, job: Optional[int] = None,
                 state: Optional[str] = None, dependency: Any = None) -> None:
        super().__init__(message)
        self.result = result
        self.job = job
        self.state = state
        self.dependency = dependency
        self.reason = result.reason if result is not None else None

    @property
    def task(self) -> Optional[int]:
        """The cancelled task's id."""
        return self.result.task if self.result is not None else None

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (str(self), self.result, self.job, self.state))



# ------------------------------------------------------------ from a result body

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
        match = _OBJECT_REASON.fullmatch(reason)
        if match:
            message = f"function task {result.task} could not run: object {match.group(1)}: {match.group(2)}"
            return None, ObjectLost(result, message)
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


def complete(future: "SakerFuture[Any]", body: Dict[str, Any]) -> None:
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
        dependency = connection.dependencies.get(job)
        if dependency is not None and dependency.done():
            future._cancel_here(_dependency_failed(body, dependency))
            return
        # Ask the pilot how the dependency's job ended, then cancel (on the reader).
        connection.job_state(job, lambda state: future._cancel_here(_dependency_failed(body, None, state)))
        return
    if future._job is None:  # a future of Pilot.future(task)
        future._job = body.get("job")
    value, error = _outcome(body, mode)
    future._finish(value, error)
