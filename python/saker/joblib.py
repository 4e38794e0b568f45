"""A joblib backend: ``joblib.Parallel`` (and scikit-learn's ``n_jobs=``, and whatever
else runs on joblib) runs its batches as function calls on a Saker pilot, on every
node of its allocation.

Importing this module registers the backend as ``"saker"``::

    import joblib
    import saker.joblib  # noqa: F401 (registers the backend)

    with joblib.parallel_config(backend="saker", slots=4):
        squares = joblib.Parallel(n_jobs=-1)(joblib.delayed(pow)(i, 2) for i in range(100))

Which pilot: ``pilot=`` a :class:`saker.Pilot` you opened; else ``pilot_dir=`` (or
``$SAKER_PILOT_DIR``) a running pilot's directory, connected to once and kept; else
an embedded pilot started on first use with ``slots=`` (default: this machine's
cores) and stopped when this process ends. ``n_jobs=-1`` (and ``None``) means every
slot the pilot has now; a positive ``n_jobs`` is how many batches joblib keeps in
flight (more than the slots queue on the pilot). joblib's auto-batching, its
``return_as="generator"`` and ``timeout``, and its cancellation of what is left after
the first error work as with its own backends; an exception comes back as itself, the
worker's traceback as its ``__cause__``. A large argument (a numpy array, a pandas
frame, a sparse matrix of 256 KiB or more) goes by reference when this process sees a
node's store: put there once for every batch that passes the same object (as loky
maps large arrays and Dask scatters them), read by workers on that node without a
copy, fetched node to node by others, and freed once the object is garbage here. Each call holds one core by default
(``cores=`` gives more, ``options=`` any other task option); a nested ``Parallel``
inside a call runs as joblib runs nested calls (threads, then sequentially).
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import Any, Dict, Optional, Set, Tuple

from joblib.parallel import AutoBatchingMixin, ParallelBackendBase, register_parallel_backend

from .objects import BY_REFERENCE_FROM, Ref
from .pilot import Pilot
from .serialize import SIMPLE_TYPES

__all__ = ["SakerBackend"]

_embedded_lock = threading.Lock()
#: Embedded pilots by slots asked for, started on first use, stopped at exit.
_embedded: Dict[Optional[int], Pilot] = {}
#: Pilots connected to by directory.
_connected: Dict[str, Pilot] = {}


def _close_all() -> None:
    with _embedded_lock:
        pilots = list(_embedded.values()) + list(_connected.values())
        _embedded.clear()
        _connected.clear()
    for pilot in pilots:
        try:
            pilot.close()
        except Exception:  # noqa: BLE001 (at exit: nothing to tell)
            pass


atexit.register(_close_all)


class SakerBackend(AutoBatchingMixin, ParallelBackendBase):
    """joblib's batches as calls on a Saker pilot (see the module doc)."""

    supports_retrieve_callback = True
    supports_timeout = True
    uses_threads = False
    supports_sharedmem = False
    default_n_jobs = -1

    def __init__(
        self,
        pilot: Optional[Pilot] = None,
        pilot_dir: Optional[str] = None,
        slots: Optional[int] = None,
        cores: int = 1,
        options: Optional[Dict[str, Any]] = None,
        nesting_level: Optional[int] = None,
        inner_max_num_threads: Optional[int] = None,
        **backend_kwargs: Any,
    ) -> None:
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads, **backend_kwargs)
        self._given = pilot
        self._dir = pilot_dir
        self._slots = slots
        self._options = dict(options or {})
        self._options.setdefault("cores", cores)
        self._pilot: Optional[Pilot] = None
        self._pending: Set[Any] = set()
        self._lock = threading.Lock()

    def _target(self) -> Pilot:
        if self._pilot is not None:
            return self._pilot
        pilot = self._given
        if pilot is None:
            directory = self._dir or os.environ.get("SAKER_PILOT_DIR")
            with _embedded_lock:
                if directory:
                    pilot = _connected.get(directory)
                    if pilot is None:
                        pilot = _connected[directory] = Pilot.connect(directory)
                else:
                    pilot = _embedded.get(self._slots)
                    if pilot is None:
                        pilot = _embedded[self._slots] = Pilot.start(slots=self._slots)
        self._pilot = pilot
        return pilot

    def effective_n_jobs(self, n_jobs: Optional[int]) -> int:
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is not None and n_jobs > 0:
            return n_jobs
        slots = int(self._target().status().get("slots") or 1)
        if n_jobs is None:
            return slots
        # -1: every slot, -2: all but one, ... as joblib counts CPUs.
        return max(slots + 1 + n_jobs, 1)

    def configure(self, n_jobs: Optional[int] = 1, parallel: Any = None, prefer: Any = None,
                  require: Any = None, **backend_kwargs: Any) -> int:
        if require == "sharedmem":
            raise ValueError("the saker backend runs calls in other processes: it has no shared memory")
        self.parallel = parallel
        return self.effective_n_jobs(n_jobs)

    def submit(self, func: Any, callback: Any = None) -> Any:
        pilot = self._target()
        items = getattr(func, "items", None)
        if isinstance(items, list) and _any_large(items) and pilot._object_stores().seen():
            func.items = [
                (fn, tuple(_by_reference(pilot, a) for a in args), {k: _by_reference(pilot, v) for k, v in kwargs.items()})
                for fn, args, kwargs in items
            ]
        future = pilot.options(**self._options).call(func)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._finished)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def compute_batch_size(self) -> int:
        """joblib's auto-batching, growing faster: up to :data:`GROWTH` times per
        completed batch where joblib doubles. A batch here costs a round trip through
        the pilot (two to three times loky's), and the batch size grows only as batches
        complete, so doubling made short calls wait through ten round trips before their
        batches were large enough. The ideal size joblib aims at stays the same, and
        stays cautious: the duration it is computed from includes the round trip."""
        old = self._effective_batch_size
        duration = self._smoothed_batch_duration
        if 0 < duration < self.MIN_IDEAL_BATCH_DURATION:
            ideal = 2 * int(old * self.MIN_IDEAL_BATCH_DURATION / duration)
            size = max(min(GROWTH * old, ideal), 1)
            if size != old:
                self._effective_batch_size = size
                self._smoothed_batch_duration = self._DEFAULT_SMOOTHED_BATCH_DURATION
            return size
        return int(super().compute_batch_size())

    def _finished(self, future: Any) -> None:
        with self._lock:
            self._pending.discard(future)

    def retrieve_result_callback(self, future: Any) -> Any:
        return future.result()

    def abort_everything(self, ensure_ready: bool = True) -> None:
        """After a batch failed: what is queued or running of this backend is cancelled
        on the pilot."""
        with self._lock:
            pending, self._pending = list(self._pending), set()
        for future in pending:
            future.cancel()

    def terminate(self) -> None:
        # The pilot stays for later Parallel calls; ours stops at exit.
        self.abort_everything()
        self.reset_batch_stats()


#: How many times larger a batch may grow per completed batch (joblib: 2).
GROWTH = 8

#: Arguments put by reference, by pilot and object identity: the object (weakly, so
#: an id reused by a later object is told apart) and its ref, dropped with the object.
_by_identity: Dict[Tuple[int, int], Tuple["weakref.ref[Any]", Ref[Any]]] = {}
_by_identity_lock = threading.Lock()


def _any_large(items: Any) -> bool:
    """Whether an argument of a batch's calls may go by reference."""
    scalars = SIMPLE_TYPES  # never large, and most arguments of short calls
    for _fn, args, kwargs in items:
        for value in args:
            if type(value) not in scalars and _size(value) >= BY_REFERENCE_FROM:
                return True
        if kwargs:
            for value in kwargs.values():
                if type(value) not in scalars and _size(value) >= BY_REFERENCE_FROM:
                    return True
    return False


def _size(value: Any) -> int:
    """Bytes of an array-like argument, without pickling it (0 for anything else)."""
    size = getattr(value, "nbytes", None)  # numpy, pandas series
    if isinstance(size, int):
        return size
    try:
        if hasattr(value, "nnz"):  # scipy.sparse
            return int(sum(getattr(value, part).nbytes for part in ("data", "indices", "indptr")))
        if type(value).__name__ == "DataFrame" and hasattr(value, "memory_usage"):
            return int(value.memory_usage(index=True).sum())
    except Exception:  # noqa: BLE001 (not what it looked like: goes inline)
        return 0
    return 0


def _by_reference(pilot: Pilot, value: Any) -> Any:
    """``value``, or a ref on it if it is large (put once per object and pilot)."""
    if _size(value) < BY_REFERENCE_FROM:
        return value
    key = (id(pilot), id(value))
    with _by_identity_lock:
        known = _by_identity.get(key)
    if known is not None and known[0]() is value:
        return known[1]
    try:
        alive = weakref.ref(value, lambda gone: _forget(key, gone))
    except TypeError:
        return value  # cannot tell when it goes: inline, as without a store
    ref = pilot.put(value)
    with _by_identity_lock:
        _by_identity[key] = (alive, ref)
    return ref


def _forget(key: Tuple[int, int], gone: "weakref.ref[Any]") -> None:
    """An object put by reference was collected: its ref goes (and the object with it,
    once no call that reads it is left)."""
    with _by_identity_lock:
        known = _by_identity.get(key)
        if known is not None and known[0] is gone:
            del _by_identity[key]


register_parallel_backend("saker", SakerBackend)
