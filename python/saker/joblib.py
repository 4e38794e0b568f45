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
worker's traceback as its ``__cause__``. Each call holds one core by default
(``cores=`` gives more, ``options=`` any other task option); a nested ``Parallel``
inside a call runs as joblib runs nested calls (threads, then sequentially).
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any, Dict, Optional, Set

from joblib.parallel import AutoBatchingMixin, ParallelBackendBase, register_parallel_backend

from .pilot import Pilot

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
        future = self._target().options(**self._options).call(func)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._finished)
        if callback is not None:
            future.add_done_callback(callback)
        return future

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


register_parallel_backend("saker", SakerBackend)
