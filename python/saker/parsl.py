"""A Parsl executor that runs Parsl apps as Saker function tasks.

::

    import parsl
    from parsl.config import Config
    from saker.parsl import SakerExecutor

    parsl.load(Config(executors=[SakerExecutor(label="saker", slots=4)]))

Each Parsl task becomes one Saker *function task* of worker kind ``python``: its payload
is the tag byte ``0x02`` followed by ``parsl.serialize.pack_apply_message(func, args,
kwargs)``, the same buffer HighThroughputExecutor sends to its workers. The persistent
Python worker of the slot runs it with :func:`saker._parsl_payload.run` and answers with
the serialized result, or with a serialized ``RemoteExceptionWrapper`` that this
executor re-raises, as HTEX does. See ``docs/parsl.md`` for the resource specification
mapping, monitoring and the differences from HTEX.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
from concurrent.futures import CancelledError, Future
from typing import Any, Callable, Dict, Optional, Sequence

from parsl.app.errors import RemoteExceptionWrapper
from parsl.executors.base import ParslExecutor
from parsl.executors.errors import ExecutorError, InvalidResourceSpecification
from parsl.monitoring.radios.base import RadioConfig
from parsl.monitoring.radios.filesystem import FilesystemRadio
from parsl.serialize import deserialize, pack_apply_message
from parsl.serialize.errors import DeserializationError, SerializationError
from parsl.utils import RepresentationMixin

from .stores import discard as _discard

logger = logging.getLogger(__name__)

__all__ = ["SakerExecutor", "SakerTaskError", "PAYLOAD_TAG", "saker_priority"]

#: First payload byte of a Parsl task (the worker dispatches on it).
PAYLOAD_TAG = b"\x02"

#: Saker refuses function payloads above this size at submit (docs/workers.md).
MAX_PAYLOAD = 16 * 1024 * 1024

_I32_MAX = 2**31 - 1

#: Resource specification keys the executor understands (see _task_options).
ACCEPTED_RESOURCE_KEYS = frozenset(
    {"cores", "priority", "walltime", "running_time_min", "num_nodes", "memory", "gpus",
     "num_ranks", "ranks_per_node", "launcher_options"}
)

#: Resource specification keys that make a task an MPI app (see _mpi_layout).
MPI_RESOURCE_KEYS = frozenset({"num_nodes", "num_ranks", "ranks_per_node"})

#: Most bytes of an MPI app's function and arguments: they travel on its command line.
MAX_MPI_PAYLOAD = 1 << 20

#: An MPI app's answer comes back in its job's inline output.
_MPI_ANSWER_BYTES = 16 << 20


class SakerTaskError(ExecutorError):
    """A task ended without an answer from its worker: lost with its agent or worker
    (after the pilot's replays), stopped at its time limit, cancelled, or its worker
    could not start. ``reason`` is the pilot's reason; ``result`` the pilot's result
    object when there is one."""

    def __init__(self, executor: ParslExecutor, reason: str, result: Any = None):
        super().__init__(executor, reason)
        self.result = result

    def __reduce__(self):  # picklable without the executor (Parsl may serialize it)
        return (_rebuild_task_error, (self.executor.label, self.reason))


class _LabelOnly:
    def __init__(self, label: str):
        self.label = label


def _rebuild_task_error(label: str, reason: str) -> SakerTaskError:
    return SakerTaskError(_LabelOnly(label), reason)  # type: ignore[arg-type]


#: Parsl priority 0 maps to this Saker priority (see saker_priority).
PRIORITY_OFFSET = 2**30


def saker_priority(priority: float) -> int:
    """Saker priority (higher runs first, 0 by default) of a Parsl priority (lower runs
    first, as HTEX orders them): ``2**30 - priority``, rounded and kept within 1 .. 2**31-1.

    Parsl priorities from about -2**30 to 2**30 keep their exact order; every task with
    a priority runs before tasks without one (Saker's default 0), as with HTEX, where
    tasks without a priority come last.
    """
    if isinstance(priority, float) and not math.isfinite(priority):
        return 1 if priority > 0 else _I32_MAX
    return max(1, min(_I32_MAX, PRIORITY_OFFSET - int(round(priority))))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class SakerExecutor(ParslExecutor, RepresentationMixin):
    """Runs Parsl apps on a Saker pilot.

    Parameters
    ----------
    label : str
        Executor label.
    pilot_dir : str or None
        The pilot directory. With ``local=False``: the directory of a running pilot to
        connect to (``saker pilot`` started elsewhere, e.g. by a batch job). With
        ``local=True``: where the embedded pilot keeps its state (None: a fresh
        temporary directory).
    local : bool or None
        True: start an embedded pilot (``saker pilot`` subprocess on this node) in
        :meth:`start` and stop it in :meth:`shutdown`. False: connect to the pilot at
        ``pilot_dir``. None (default): local when ``pilot_dir`` is None, connect
        otherwise.
    agents, slots : embedded pilot only
        Number of agents, and executor slots across all of them (``saker pilot
        --agents/--slots``); ``slots=None``: the pilot's default, one per core. Inside
        a Slurm allocation ``saker pilot`` spans the allocation; ``pilot_args=["--local"]``
        keeps it on this machine.
    saker_bin : str or None
        The ``saker`` binary for the embedded pilot (None: ``$SAKER_BIN`` or the
        client's default lookup).
    worker_command : str or None
        Embedded pilot only: command line of the workers of ``worker_kind``. None:
        the client's default for ``python``, ``<sys.executable> -m saker.worker`` with
        the saker package and this process's import paths on PYTHONPATH, so workers
        import the same Parsl and the same functions as the submit side.
    pilot_log : str or None
        Embedded pilot only: file for the pilot's own log.
    pilot_args : sequence of str
        Embedded pilot only: further ``saker pilot`` arguments.
    sync : bool or None
        Embedded pilot only: fsync the journal before each result is reported. None:
        the client's default (only a pilot in a ``pilot_dir`` of your own does; a
        temporary one is never resumed).
    worker_kind : str
        Saker worker kind the tasks run on (``python``).
    task_options : dict or None
        Saker task options applied to every task (e.g. ``{"max_replays": 1,
        "tags": ["parsl"]}``); the resource specification of a task overrides
        ``cores``, ``priority`` and ``time_limit``.
    default_priority : int or None
        Parsl priority (lower runs first, as with HTEX) of tasks that give none.
        None: after every task that gives one, as HTEX orders them.
    storage_access : list of Staging or None
        Parsl staging providers (None: Parsl's default).
    working_dir : str or None
        Working directory for staging providers that need one.
    remote_monitoring_radio : RadioConfig or None
        How workers send Parsl monitoring messages. None: ``FilesystemRadio``, through
        ``<run_dir>/monitor-fs-radio`` (the run directory must be reachable from the
        workers' nodes, as a pilot directory is).
    buffer_threshold : int
        Passed to ``pack_apply_message`` (Parsl logs a warning above it).
    mpi_python : str or None
        The Python that runs an MPI app's function on its job's first node (None:
        this interpreter, with this process's import paths, as the embedded pilot's
        workers have). See ``docs/parsl.md``, "MPI apps".
    """

    def __init__(
        self,
        label: str = "saker",
        pilot_dir: Optional[str] = None,
        local: Optional[bool] = None,
        agents: int = 1,
        slots: Optional[int] = None,
        saker_bin: Optional[str] = None,
        worker_command: Optional[str] = None,
        pilot_log: Optional[str] = None,
        pilot_args: Sequence[str] = (),
        sync: Optional[bool] = None,
        worker_kind: str = "python",
        task_options: Optional[Dict[str, Any]] = None,
        default_priority: Optional[int] = None,
        storage_access: Optional[list] = None,
        working_dir: Optional[str] = None,
        remote_monitoring_radio: Optional[RadioConfig] = None,
        buffer_threshold: int = 1 << 20,
        mpi_python: Optional[str] = None,
    ):
        ParslExecutor.__init__(self)
        self.label = label
        self.pilot_dir = pilot_dir
        self.local = local
        self.agents = agents
        self.slots = slots
        self.saker_bin = saker_bin
        self.worker_command = worker_command
        self.pilot_log = pilot_log
        self.pilot_args = tuple(pilot_args)
        self.mpi_python = mpi_python
        self.sync = sync
        self.worker_kind = worker_kind
        self.task_options = dict(task_options or {})
        self.default_priority = default_priority
        self.storage_access = storage_access
        self.working_dir = working_dir
        self.buffer_threshold = buffer_threshold
        if remote_monitoring_radio is not None:
            self.remote_monitoring_radio = remote_monitoring_radio
        else:
            self.remote_monitoring_radio = FilesystemRadio()

        if local is False and pilot_dir is None:
            raise ValueError("SakerExecutor(local=False) needs pilot_dir: the running pilot to connect to")
        if "kind" in self.task_options:
            raise ValueError("task_options must not contain 'kind': use worker_kind")

        self.pilot: Any = None
        self._lock = threading.Lock()
        self._outstanding: Dict[Future, Any] = {}
        self._counter = 0
        self._done: "queue.SimpleQueue[Optional[tuple]]" = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    @property
    def is_local(self) -> bool:
        return self.pilot_dir is None if self.local is None else bool(self.local)

    def start(self) -> None:
        import saker

        if self.is_local:
            # Pilot.start runs python workers with this interpreter and this saker
            # package on their PYTHONPATH: they import the same Parsl and functions.
            workers = {self.worker_kind: self.worker_command} if self.worker_command else None
            logger.info("Starting an embedded Saker pilot (agents=%s, slots=%s, dir=%s)",
                        self.agents, self.slots, self.pilot_dir)
            self.pilot = saker.Pilot.start(
                dir=self.pilot_dir,
                agents=self.agents,
                slots=self.slots,
                saker_bin=self.saker_bin,
                workers=workers,
                log=self.pilot_log,
                extra_args=self.pilot_args,
                **({} if self.sync is None else {"sync": self.sync}),
            )
        else:
            logger.info("Connecting to the Saker pilot at %s", self.pilot_dir)
            self.pilot = saker.Pilot.connect(self.pilot_dir)

        self._thread = threading.Thread(
            target=self._complete_loop, name=f"SakerExecutor-{self.label}-results", daemon=True
        )
        self._thread.start()

    def shutdown(self) -> None:
        """Stops the embedded pilot (or disconnects from a running one). Tasks still
        outstanding fail with :class:`SakerTaskError`."""
        if self._closed:
            return
        self._closed = True
        pilot, self.pilot = self.pilot, None
        if pilot is not None:
            with self._lock:
                pending = [inner for inner in self._outstanding.values() if not inner.done()]
            for inner in pending:
                try:
                    pilot.cancel(inner)
                except Exception:
                    logger.debug("cancelling an outstanding task at shutdown failed", exc_info=True)
            try:
                pilot.close()
            except Exception:
                logger.exception("Closing the Saker pilot failed")
        if self._thread is not None:
            self._done.put(None)
            self._thread.join()
            self._thread = None
        with self._lock:
            left = list(self._outstanding)
            self._outstanding.clear()
        for fut in left:
            self._set_exception(fut, SakerTaskError(self, "the executor shut down before the task finished"))
        super().shutdown()

    @property
    def outstanding(self) -> int:
        """Tasks submitted whose future is not done yet."""
        with self._lock:
            return len(self._outstanding)

    def monitor_resources(self) -> bool:
        # Workers are processes of their own: Parsl's resource monitor works there.
        return True

    # ------------------------------------------------------------------ submission

    def _task_options(self, resource_specification: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        """Saker task options for one Parsl resource specification.

        cores            → cores (integer ≥ 1)
        priority         → priority: see saker_priority(); tasks without one keep
                           Saker's default 0 and so come after every task that gives
                           one (HTEX's order), unless default_priority
        walltime         → time_limit in seconds
        running_time_min → time_limit in minutes × 60 (the smaller of both if both)
        num_nodes, num_ranks, ranks_per_node, launcher_options
                         → an MPI app: see _mpi_layout
        memory           → memory_mib (MB, rounded up): placed where that much is
                           free, and limited to it where the agent can
        gpus             → gpus (whole number ≥ 0): the task sees exactly its own;
                           more than any node offers is refused by the pilot
        anything else    → InvalidResourceSpecification
        """
        spec = resource_specification or {}
        options: Dict[str, Any] = dict(self.task_options)

        unknown = set(spec) - ACCEPTED_RESOURCE_KEYS
        if unknown:
            message = ("SakerExecutor accepts only these resource specification keys: "
                       + ", ".join(sorted(ACCEPTED_RESOURCE_KEYS)))
            raise InvalidResourceSpecification(unknown, message)

        def bad(key: str, why: str) -> InvalidResourceSpecification:
            return InvalidResourceSpecification({key}, f"{key}={spec[key]!r}: {why}")

        if "cores" in spec:
            cores = spec["cores"]
            if not _is_number(cores) or cores != int(cores) or int(cores) < 1:
                raise bad("cores", "must be a whole number ≥ 1")
            options["cores"] = int(cores)

        priority = spec.get("priority", self.default_priority)
        if "priority" in spec and not _is_number(spec["priority"]):
            raise bad("priority", "must be a number (lower runs first, as with HTEX)")
        if priority is not None:
            options["priority"] = saker_priority(priority)

        limits = []
        if "walltime" in spec:
            value = spec["walltime"]
            if not _is_number(value) or not value > 0:
                raise bad("walltime", "must be a number of seconds > 0")
            limits.append(float(value))
        if "running_time_min" in spec:
            value = spec["running_time_min"]
            if not _is_number(value) or not value > 0:
                raise bad("running_time_min", "must be a number of minutes > 0")
            limits.append(float(value) * 60.0)
        if limits:
            limit = min(limits)
            options["time_limit"] = int(limit) if limit == int(limit) else limit

        layout = self._mpi_layout(spec)
        if layout is not None:
            nodes, ranks, per_node = layout
            options.update(nodes=nodes, ranks=ranks, ranks_per_node=per_node, mpi="pmi",
                           launcher="script")
            if "cores" in options:
                options["cores_per_rank"] = options.pop("cores")

        if "gpus" in spec:
            gpus = spec["gpus"]
            if not _is_number(gpus) or gpus != int(gpus) or gpus < 0:
                raise bad("gpus", "must be a whole number ≥ 0")
            if gpus > 0:
                options["gpus"] = int(gpus)

        if "memory" in spec:
            memory = spec["memory"]
            if not _is_number(memory) or memory < 0:
                raise bad("memory", "must be a number of MB ≥ 0")
            if memory > 0:
                options["memory_mib"] = int(math.ceil(memory))

        return options

    @staticmethod
    def _mpi_layout(spec: Dict[str, Any]) -> Optional[tuple]:
        """``(nodes, ranks, ranks_per_node)`` of an MPI app, or None for a task that
        asks for none of ``num_nodes`` (above 1), ``num_ranks``, ``ranks_per_node``.

        As HTEX's MPI mode reads them: ``num_ranks`` defaults to ``num_nodes ×
        ranks_per_node``, ``ranks_per_node`` to ``num_ranks / num_nodes`` (rounded up),
        ``num_nodes`` to 1. The ranks must fill the nodes in order, each node getting at
        least one.
        """
        asked = {key: spec[key] for key in MPI_RESOURCE_KEYS if key in spec}
        if not asked or asked == {"num_nodes": 1}:
            return None
        for key, value in asked.items():
            if not _is_number(value) or value != int(value) or int(value) < 1:
                raise InvalidResourceSpecification({key}, f"{key}={value!r}: must be a whole number ≥ 1")
        nodes = int(asked.get("num_nodes", 1))
        ranks = asked.get("num_ranks")
        per_node = asked.get("ranks_per_node")
        if per_node is None:
            per_node = -(-int(ranks) // nodes) if ranks is not None else 1
        per_node = int(per_node)
        ranks = int(ranks) if ranks is not None else nodes * per_node
        if not (nodes - 1) * per_node < ranks <= nodes * per_node:
            raise InvalidResourceSpecification(
                set(asked), f"{ranks} ranks at {per_node} per node do not fill {nodes} nodes "
                "(every node needs at least one rank)")
        if "launcher_options" in spec and not isinstance(spec["launcher_options"], str):
            raise InvalidResourceSpecification({"launcher_options"}, "launcher_options must be a string")
        return nodes, ranks, per_node

    def submit(self, func: Callable, resource_specification: Dict[str, Any], *args: Any, **kwargs: Any) -> Future:
        pilot = self.pilot
        if pilot is None:
            raise ExecutorError(self, "submit after shutdown" if self._closed else "submit before start")
        options = self._task_options(resource_specification)
        if options.get("launcher") == "script":
            return self._submit_mpi(pilot, func, resource_specification, options, args, kwargs)
        # Where this client sees a node's store, large arguments go by reference and
        # large values come back so (docs/data.md), as they do for saker's own calls.
        from . import objects

        stores = pilot._object_stores()
        seen = stores.visible_nodes()
        large = objects.large_arguments(args, kwargs)
        if large and not seen:
            # Too large to go inline: worth waiting for the pilot's list of stores,
            # which a first submit right after start has not had yet.
            seen = tuple(node for node, _ in stores.seen())
        # On no node, with a saker binary: arguments go to a node directly, and a value
        # past what an answer carries comes back from its node.
        remote = not seen and stores.sees_none() and stores.binary() is not None
        refs: list = []
        if seen or remote:
            if large:
                args, kwargs, refs = self._by_reference(pilot, args, kwargs)
                reads = list(options.get("reads") or []) + [ref.item for ref in refs]
                options = dict(options, reads=reads)
            func = objects.Returning(seen, func, anywhere=remote)

        try:
            buffer = pack_apply_message(func, args, kwargs, buffer_threshold=self.buffer_threshold)
        except TypeError:
            raise SerializationError(getattr(func, "__name__", repr(func)))
        payload = PAYLOAD_TAG + buffer
        if len(payload) > MAX_PAYLOAD:
            raise ExecutorError(
                self,
                f"task {getattr(func, '__name__', func)!s} serializes to {len(payload)} bytes, above "
                f"Saker's {MAX_PAYLOAD} byte payload limit: pass large data as files",
            )

        fut: Future = Future()
        inner = pilot.submit_function(payload, kind=self.worker_kind, **options)
        with self._lock:
            self._counter += 1
            # The executor's own count: Saker's task id is known only once the pilot
            # has answered the submit (inner.task).
            fut.parsl_executor_task_id = self._counter  # type: ignore[attr-defined]
            self._outstanding[fut] = inner
        # Completed on our own thread: the client's callback thread must never run
        # Parsl's callbacks (which submit further tasks) nor deserialize results.
        inner.add_done_callback(lambda done, fut=fut: self._done.put((fut, done)))
        for ref in refs:
            # Each is this task's alone: it goes when the task ends.
            inner.add_done_callback(lambda _, ref=ref: _discard(ref, pilot))
        return fut

    def _submit_mpi(self, pilot: Any, func: Callable, spec: Dict[str, Any], options: Dict[str, Any],
                    args: Sequence[Any], kwargs: Dict[str, Any]) -> Future:
        """An MPI app: a Saker job of ``mpi="pmi"``, ``launcher="script"`` whose
        command runs the function once on the job's first node, with the variables
        Parsl's MPI apps read (``saker._parsl_mpi``)."""
        import sys

        from . import _parsl_mpi
        from .pilot import python_path

        try:
            buffer = pack_apply_message(func, args, kwargs, buffer_threshold=self.buffer_threshold)
        except TypeError:
            raise SerializationError(getattr(func, "__name__", repr(func)))
        if len(buffer) > MAX_MPI_PAYLOAD:
            raise ExecutorError(
                self,
                f"MPI app {getattr(func, '__name__', func)!s} serializes to {len(buffer)} bytes, above "
                f"the {MAX_MPI_PAYLOAD} bytes an MPI app's command line carries: pass large data as files",
            )
        env = {
            "PYTHONPATH": python_path(),
            _parsl_mpi.RANKS_VAR: str(options["ranks"]),
            _parsl_mpi.PER_NODE_VAR: str(options["ranks_per_node"]),
            _parsl_mpi.OPTIONS_VAR: spec.get("launcher_options", ""),
        }
        python = self.mpi_python or sys.executable
        argv = [python, "-m", "saker._parsl_mpi", *_parsl_mpi.chunks(buffer)]
        inner = pilot.submit(argv, env=env, inline_output=_MPI_ANSWER_BYTES, **options)
        fut: Future = Future()
        with self._lock:
            self._counter += 1
            fut.parsl_executor_task_id = self._counter  # type: ignore[attr-defined]
            fut._saker_mpi = True  # type: ignore[attr-defined]
            self._outstanding[fut] = inner
        inner.add_done_callback(lambda done, fut=fut: self._done.put((fut, done)))
        return fut

    @staticmethod
    def _by_reference(pilot: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        """``(args, kwargs, refs)`` with each large argument put in a store and
        replaced by its ref (which a Saker worker unpickles as the object)."""
        from . import objects

        refs: list = []

        def put(value: Any) -> Any:
            if not objects.is_large(value):
                return value
            ref = pilot.put(value)
            refs.append(ref)
            return ref

        return tuple(put(arg) for arg in args), {key: put(arg) for key, arg in kwargs.items()}, refs

    # ------------------------------------------------------------------ completion

    def _complete_loop(self) -> None:
        while True:
            item = self._done.get()
            if item is None:
                return
            fut, inner = item
            try:
                self._complete(fut, inner)
            except Exception as e:  # never let one bad result stop the thread
                logger.exception("completing a Saker task failed")
                self._set_exception(fut, e)
            finally:
                with self._lock:
                    self._outstanding.pop(fut, None)

    def _complete(self, fut: Future, inner: Future) -> None:
        import saker

        task = getattr(fut, "parsl_executor_task_id", "?")
        try:
            output = inner.result()
        except saker.TaskLost as e:
            reason = getattr(getattr(e, "result", None), "reason", None) or str(e)
            self._set_exception(fut, SakerTaskError(self, f"task {task} ended without an answer: {reason}",
                                                    getattr(e, "result", None)))
            return
        except saker.TaskFailed as e:
            result = getattr(e, "result", None)
            data = getattr(result, "output", None)
            reason = getattr(result, "reason", None) or str(e)
            if data:
                self._set_remote_exception(fut, data, f"task {task} failed: {reason}")
            else:
                self._set_exception(fut, SakerTaskError(self, f"task {task} failed: {reason}", result))
            return
        except CancelledError:
            why = "the executor shut down before it finished" if self._closed else "it was cancelled"
            self._set_exception(fut, SakerTaskError(self, f"task {task} ended without an answer: {why}"))
            return
        except BaseException as e:  # the connection to the pilot failed
            self._set_exception(fut, SakerTaskError(self, f"task {task}: {type(e).__name__}: {e}"))
            return

        if getattr(fut, "_saker_mpi", False):
            from . import _parsl_mpi

            try:
                ok, output, message = _parsl_mpi.read_answer(output.stdout)
            except ValueError as e:
                self._set_exception(fut, SakerTaskError(self, f"task {task}: {e}", output))
                return
            if not ok:
                self._set_remote_exception(fut, output, f"task {task} failed: {message}")
                return
        try:
            value = deserialize(output)
        except Exception as e:
            self._set_exception(fut, DeserializationError(f"result of task {task}: {type(e).__name__}: {e}"))
            return
        self._set_result(fut, value)

    def _set_remote_exception(self, fut: Future, data: bytes, failed: str) -> None:
        # As HTEX's result thread: a RemoteExceptionWrapper is re-raised so that the
        # future holds the task's own exception, with its remote traceback.
        try:
            wrapped = deserialize(data)
            if isinstance(wrapped, RemoteExceptionWrapper):
                try:
                    wrapped.reraise()
                except BaseException as e:
                    self._set_exception(fut, e)
            elif isinstance(wrapped, BaseException):
                self._set_exception(fut, wrapped)
            else:
                raise ValueError(f"unknown exception-like type received: {type(wrapped)}")
        except Exception as e:
            # Not a Parsl-serialized exception (e.g. the worker could not import Parsl):
            # the pilot's reason carries the worker's one-line message.
            self._set_exception(fut, SakerTaskError(
                self, f"{failed} (its exception could not be deserialized: {type(e).__name__}: {e})"))

    @staticmethod
    def _set_result(fut: Future, value: Any) -> None:
        if not fut.done():
            try:
                fut.set_result(value)
            except Exception:  # cancelled meanwhile
                pass

    @staticmethod
    def _set_exception(fut: Future, exc: BaseException) -> None:
        if not fut.done():
            try:
                fut.set_exception(exc)
            except Exception:
                pass
