"""Python client of Saker, the HPC pilot-job runtime.

Connect to a running pilot (``saker.Pilot.connect(dir)``) or start a local one
(``saker.Pilot.start()``), then run commands (``pilot.submit``) and Python calls
(``pilot.call``, ``pilot.map``, ``pilot.executor()``) as the pilot's tasks; Python calls
run on persistent workers (``python -m saker.worker``), one per slot.
"""

from __future__ import annotations

from .transport import PROTOCOL
from .results import DependencyFailed, ObjectLost, Result, TaskFailed, TaskLost
from .errors import (
    PilotClosed,
    PilotNotFound,
    ProtocolError,
    RemoteError,
    RemoteTraceback,
    SakerError,
    SpecError,
)
from .futures import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    FIRST_EXCEPTION,
    Executor,
    SakerFuture,
    as_completed,
    wait,
)
from .objects import ObjectError, Ref
from .pilot import Pilot, PilotView

__version__ = "0.1.0"

__all__ = [
    "Pilot",
    "PilotView",
    "Result",
    "Ref",
    "ObjectError",
    "ObjectLost",
    "SakerFuture",
    "Executor",
    "as_completed",
    "wait",
    "FIRST_COMPLETED",
    "FIRST_EXCEPTION",
    "ALL_COMPLETED",
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
    "PROTOCOL",
    "__version__",
]
