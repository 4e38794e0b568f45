"""Exceptions of the saker package, and the one for an error answer of the pilot.

Everything the package raises on its own derives from :class:`SakerError`, so that a
caller can tell "the pilot or a task said no" from bugs in its own code. The errors
that carry a task's :class:`~saker.Result` (``TaskFailed``, ``TaskLost``,
``DependencyFailed``) live beside it in :mod:`saker.results`: a result's ``value()``
raises them, so they and the Result are one module. This one imports no other
module of the package: every other module may import it.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "SakerError",
    "PilotNotFound",
    "PilotClosed",
    "ProtocolError",
    "SpecError",
    "RemoteError",
    "RemoteTraceback",
    "error_of",
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


def error_of(body: Any) -> SakerError:
    """The exception for the ``error`` body of a pilot's answer (docs/protocol.md)."""
    if not isinstance(body, dict):
        return ProtocolError(f"malformed error answer: {body!r}")
    kind = body.get("kind")
    message = str(body.get("message", "")) or str(kind)
    if kind == "invalid_spec":
        return SpecError(message)
    if kind == "shutting_down":
        return PilotClosed(f"the pilot is shutting down: {message}")
    return ProtocolError(message, kind)
