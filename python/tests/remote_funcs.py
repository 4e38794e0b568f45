"""Functions the tests run on workers (importable there: Pilot.start puts this
directory on the workers' PYTHONPATH)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, Optional


def add(a: int, b: int = 0) -> int:
    return a + b


def identity(x: Any) -> Any:
    return x


def square(x: int) -> int:
    return x * x


def environment() -> Dict[str, Optional[str]]:
    return {name: os.environ.get(name) for name in ("SAKER_TASK_ID", "SAKER_ATTEMPT_ID", "SAKER_WORKER_KIND")}


def cores_seen() -> Dict[str, Optional[str]]:
    """What tells this call how many threads to run, and the CPUs it may run on."""
    names = ("SAKER_CORES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    seen: Dict[str, Optional[str]] = {name: os.environ.get(name) for name in names}
    seen["cpus"] = str(len(os.sched_getaffinity(0)))
    return seen


def devices() -> Dict[str, Optional[str]]:
    """What binds this call: its GPUs and its worker's CPUs."""
    names = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "SAKER_GPUS")
    seen: Dict[str, Optional[str]] = {name: os.environ.get(name) for name in names}
    seen["pid"] = str(os.getpid())
    return seen


def sleep_then(seconds: float, value: Any) -> Any:
    time.sleep(seconds)
    return value


def fail(message: str) -> None:
    raise ValueError(message)


class NeedsTwoArgs(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"needs {a} and {b}")


def fail_custom() -> None:
    raise NeedsTwoArgs(1, 2)


class Unpicklable(Exception):
    def __reduce__(self):  # type: ignore[no-untyped-def]
        raise TypeError("not today")


def fail_unpicklable() -> None:
    raise Unpicklable("secret")


def return_unpicklable() -> Any:
    import threading

    return threading.Lock()  # neither pickle nor cloudpickle takes a lock


def block_until(started: str, release: str, timeout: float = 30.0) -> str:
    """Marks itself started, then waits (bounded) for the release file."""
    with open(started, "a") as f:
        f.write(os.environ.get("SAKER_ATTEMPT_ID", "") + "\n")
    deadline = time.monotonic() + timeout
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            return "timed out"
        time.sleep(0.01)
    return "released"


def crash_first_attempt(marker: str) -> str:
    """Kills its worker the first time (no answer: the attempt is lost and replayed)."""
    attempt = os.environ["SAKER_ATTEMPT_ID"]
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(attempt)
        sys.stdout.flush()
        os._exit(1)
    return attempt


def hello_print(text: str) -> str:
    print(text)
    sys.stdout.flush()
    return "printed"


def read_stdin() -> str:
    return sys.stdin.read()


def pid() -> int:
    return os.getpid()


def log_then_sleep(log: str, seconds: float, value: Any) -> Any:
    """Appends ``value`` to the file ``log`` (one line a start), sleeps, returns it."""
    with open(log, "a") as out:
        out.write(f"{value}\n")
    time.sleep(seconds)
    return value


def described(value: Any) -> Dict[str, Any]:
    """What a call got: its type, its length and, for an array, whether it is a
    read-only view of a mapped file (an object read from the node's store)."""
    import mmap

    described: Dict[str, Any] = {"type": type(value).__name__}
    try:
        described["len"] = len(value)
    except TypeError:
        pass
    if type(value).__name__ == "ndarray":
        base = value
        while getattr(base, "base", None) is not None:
            base = base.base
        if isinstance(base, memoryview):
            base = base.obj
        described["mapped"] = isinstance(base, mmap.mmap)
        described["writeable"] = bool(value.flags.writeable)
        described["sum"] = int(value.sum())
    return described


def total(values: Any) -> int:
    """The sum of a list of objects' lengths, or of a dict's values' lengths."""
    if isinstance(values, dict):
        values = list(values.values())
    return sum(len(value) for value in values)


def node() -> Optional[str]:
    return os.environ.get("SAKER_NODE")


def filled(byte: int, size: int) -> bytes:
    return bytes([byte]) * size


def total_beside(values: Any, other: Any) -> int:
    """:func:`total` of ``values``; ``other`` only rides along."""
    return total(values)


def array_of(value: float, count: int) -> Any:
    """A numpy array of ``count`` copies of ``value``, with the node that made it."""
    import numpy

    return {"node": os.environ.get("SAKER_NODE"), "array": numpy.full(count, value)}


def logged_range(log: str, n: int) -> list:
    """``list(range(n))``, noting each run in the file ``log``."""
    with open(log, "a") as file:
        file.write("ran\n")
    return list(range(n))


def nested_squares(n: int) -> Any:
    """A joblib.Parallel inside a call: the backend it ran on, and its squares."""
    import joblib
    from joblib.parallel import get_active_backend

    squares = joblib.Parallel(n_jobs=2)(joblib.delayed(square)(i) for i in range(n))
    backend, _ = get_active_backend()
    inner = joblib.Parallel(n_jobs=2)(joblib.delayed(active_backend)() for _ in range(2))
    return type(backend).__name__, squares, inner


def active_backend() -> str:
    from joblib.parallel import get_active_backend

    return type(get_active_backend()[0]).__name__
