"""Exceptions of the saker package.

Everything the package raises on its own derives from :class:`SakerError`, so that a
caller can tell "the pilot or a task said no" from bugs in its own code.
"""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from .results import Result

__all__ = [
    "SakerError",
    "PilotNotFound",
    "PilotClosed",
    "ProtocolError",
    "SpecError",
    "TaskFailed",
    "TaskLost",
    "DependencyFailed",
    "RemoteError",
    "RemoteTraceback",
]


class SakerError(Exception):
    """Base of every error raised by the saker package itself."""


class PilotNotFound(SakerError):
    """No pilot serves clients from that directory (or it refused the connection)."""


class PilotClosed(SakerError):
    """The connection to the pilot ended; futures still pending fail with this."""


class ProtocolError(SakerError):
    """The pilot answered with an error, or with something this client cannot read.

    ``kind`` is the protocol's error kind (``"unavailable"``, ``"internal"``, ...) when
    the pilot sent one, else ``None``.
    """

    def __init__(self, message: str, kind: Optional[str] = None) -> None:
        super().__init__(message)
        self.kind = kind


class SpecError(ProtocolError, ValueError):
    """The pilot refused a task's spec (``invalid_spec``); nothing was submitted."""

    def __init__(self, message: str, kind: Optional[str] = "invalid_spec") -> None:
        super().__init__(message, kind)


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


class RemoteError(SakerError):
    """Stands in for a remote exception that could not be pickled or unpickled."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name = type_name
        self.message = message

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.type_name, self.message))


class RemoteTraceback(Exception):
    """The worker's traceback text, attached as ``__cause__`` of a remote exception.

    Same idea as ``concurrent.futures.process._RemoteTraceback``: the traceback objects
    cannot travel, their text can, and Python prints it as the direct cause.
    """

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb
