"""``Pilot``: a connection to a running pilot, or a local pilot started for the caller.

Everything that submits work lives on :class:`_Target`, shared by the pilot itself and
by the views that ``pilot.options(...)`` returns (same methods, other default options).
"""

from __future__ import annotations

import atexit
import gc
import binascii
import datetime
import itertools
import json
import os
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import (
    IO,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    TypeVar,
    Union,
)

from .client import RECONNECT_FOR, Connection
from .options import job_ids, timestamp, normalize_options, split_options
from .results import Result
from .errors import PilotClosed, PilotNotFound, SakerError, error_of
from .futures import MODE_AUTO, MODE_CALL, MODE_COMMAND, MODE_RAW, Executor, Progress, SakerFuture, map_results
from . import objects, serialize
from .objects import Ref
from .serialize import PayloadTooLarge, check_payload_size, dumps_call, prepare_chunk_function, prepare_function
from .results import ObjectLost
from .stores import NotSeen, Stores, discard
from .transport import Transport

__all__ = ["Pilot"]

T = TypeVar("T")
PathLike = Union[str, "os.PathLike[str]"]
_b2a = binascii.b2a_base64


class _Target:
    """What submits tasks: a pilot, or a view of it with other default options."""

    _pilot: "Pilot"
    _options: Dict[str, Any]

    def _connection(self) -> Connection:
        return self._pilot._require_connection()

    def _merged(self, options: Mapping[str, Any]) -> Dict[str, Any]:
        if not options:
            return self._options
        merged = dict(self._options)
        merged.update(normalize_options(options))
        return merged

    def options(self, **options: Any) -> "PilotView":
        """A view submitting with these options as defaults (e.g. ``cores=4``)."""
        return PilotView(self._pilot, self._merged(options))

    def executor(self, **options: Any) -> Executor:
        """A ``concurrent.futures.Executor`` running calls as function tasks here."""
        return Executor(self.options(**options) if options else self)

    def submit(self, cmd: Union[str, Sequence[str]], **options: Any) -> "SakerFuture[Result]":
        """Runs a command: a string runs with ``/bin/sh -c``, a sequence directly.

        Resolves to the :class:`Result` when it succeeds; fails with
        :class:`TaskFailed` (whose ``result`` says why) when it fails.
        """
        merged = self._merged(options)
        spec, job = split_options(merged, command=True)
        if isinstance(cmd, str):
            spec["argv"] = [cmd]
            spec.setdefault("shell", True)
        else:
            argv = [os.fspath(part) for part in cmd]
            if not argv:
                raise ValueError("the command is empty")
            spec["argv"] = argv
        job["spec"] = spec
        connection = self._connection()
        future: SakerFuture[Result] = SakerFuture(connection, MODE_COMMAND)
        if _waits(spec):
            future._waits = True
        connection.submit_job(job, future, sum(len(arg) for arg in spec["argv"]))
        return future

    def submit_function(self, payload: bytes, *, kind: str = "python", **options: Any) -> "SakerFuture[bytes]":
        """Runs an opaque payload on a worker of ``kind``; resolves to its output bytes.

        Fails with :class:`TaskFailed` when the worker raised (``result.output`` holds
        its serialized exception) and with :class:`TaskLost` when no answer came.
        """
        payload = bytes(payload)
        check_payload_size(len(payload))
        return self._function(payload, kind, self._merged(options), MODE_RAW)

    def _function(self, payload: bytes, kind: str, options: Dict[str, Any], mode: int) -> "SakerFuture[Any]":
        self._pilot._free_dropped()
        spec, job = split_options(options, command=False)
        encoded = _b2a(payload, newline=False).decode("ascii")
        spec["function"] = {"kind": kind, "payload": encoded}
        job["spec"] = spec
        connection = self._connection()
        future: SakerFuture[Any] = SakerFuture(connection, mode)
        if _waits(spec):
            future._waits = True
        connection.submit_job(job, future, len(encoded))
        return future

    def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> "SakerFuture[T]":
        """Runs ``fn(*args, **kwargs)`` on a Python worker; resolves to its return value.

        An exception raised there is raised again by ``result()``, with the worker's
        traceback as its ``__cause__``. A :class:`Ref` among the arguments reaches
        ``fn`` as the object it names.
        """
        options = self._options
        stores = self._pilot._object_stores()
        if options.get("ref"):
            id = objects.new_id()
            objects.own(id, self._pilot)
            name = objects.ITEM_PREFIX + id
            fn, args = objects.store_result, (name, fn) + args  # type: ignore[assignment]
            options = _with_items(options, "writes", [name])
        else:
            fn = _returning(stores, fn)
        payload = stored = None
        # Inline unless a large argument can go by reference, or it must.
        if not (objects.large_arguments(args, kwargs) and stores.seen()):
            try:
                payload, refs = _with_refs(dumps_call, fn, args, kwargs)
            except PayloadTooLarge:
                # Past what a call carries inline: by reference, on a node this client
                # sees, else sent to one directly.
                if not stores.seen() and stores.binary() is None:
                    raise
        if payload is None:
            # Function and arguments stored as one object; the worker maps it.
            stored, nested = _with_refs(stores.put_anywhere, (fn, args, kwargs), self._pilot)
            payload, refs = _with_refs(dumps_call, objects.call_stored, (stored,), {})
            refs = nested + refs
        if refs:
            options = _with_items(options, "reads", [objects.ITEM_PREFIX + ref for ref in refs])
        future: SakerFuture[T] = self._function(payload, "python", options, MODE_CALL)
        if stored is not None:
            # The stored call is this call's alone: it goes when the call ends.
            pilot = self._pilot
            future.add_done_callback(lambda _: discard(stored, pilot))
        return future

    def put(self, obj: Any, timeout: Optional[float] = 30.0) -> "Ref[Any]":
        """Stores ``obj`` in the store of a node this client runs on; returns its
        :class:`Ref`. Pass the ref to calls instead of the object: it is not sent again
        with each, tasks run where it is, and large buffers (numpy arrays) reach the
        function without a copy.

        A client that sees no node's store (it runs on no node of the pilot, and no
        scratch is on a filesystem it shares) sends the object to a node's agent
        directly with ``saker object put`` (any size, never through the pilot's root);
        without a saker binary, inline through the pilot to a worker, which stores it
        on its node: at most 16 MiB pickled.
        """
        self._pilot._free_dropped()
        stores = self._pilot._object_stores()
        try:
            return stores.put(obj, self._pilot, timeout)
        except NotSeen as exc:
            not_seen = exc
        if stores.binary() is not None:
            return stores.put_remote(obj, self._pilot, timeout)
        # No binary to reach a node with: the object travels inline through the pilot
        # to a worker, which stores it on its node.
        try:
            future = self.options(ref=True).call(objects.value_of, obj)
        except PayloadTooLarge as exc:
            raise objects.ObjectError(
                f"{not_seen}. From here an object travels inline through the pilot to a "
                f"node, at most {serialize.MAX_PAYLOAD >> 20} MiB pickled: {exc}"
            ) from None
        return future.result(timeout)  # type: ignore[no-any-return]

    def free(self, *refs: "Ref[Any]", timeout: Optional[float] = 30.0) -> None:
        """Frees these objects now: each is removed from the nodes that hold it once no
        call that reads it is left (a call submitted later that reads one fails with
        :class:`ObjectLost`). Objects this client made (``put``, ``ref=True``) are
        freed by themselves once every :class:`Ref` on them here is garbage; this is
        for sooner, or for refs made elsewhere.
        """
        ids = [ref.id for ref in refs]
        objects.disown(ids)
        self._pilot._free_dropped()
        if ids:
            freed = self._connection().request("free_objects", {"objects": ids})
            if not self._connection().on_reader_thread():
                freed.result(timeout)

    def get(self, ref: "Ref[T]", timeout: Optional[float] = 30.0) -> T:
        """The object ``ref`` names, read from a node's store this client sees.

        If none of those holds it, a call on such a node reads it, so that the node
        fetches it from a holder (node to node), and it is read there. A client that
        sees no store at all reads it from its holders directly with ``saker object
        get``; without a saker binary, inline through the pilot (at most 16 MiB).
        """
        stores = self._pilot._object_stores()
        try:
            return stores.get(ref, timeout)  # type: ignore[no-any-return]
        except NotSeen as exc:
            not_seen = exc
        seen = stores.seen()
        if not seen and stores.binary() is not None:
            return stores.get_remote(ref, timeout)
        try:
            if seen:
                # On a node whose store this client sees, a call that reads it has
                # that node fetch it from a holder, node to node; then it is read here.
                self.options(node=seen[0][0]).call(objects.value_of, ref, False).result(timeout)
                return stores.get(ref, timeout)  # type: ignore[no-any-return]
            # On no node: the value comes back inline through the pilot.
            return self.call(objects.value_of, ref).result(timeout)  # type: ignore[no-any-return]
        except ObjectLost as lost:
            raise objects.ObjectError(f"{not_seen}, and no node could give it: {lost}") from lost

    def map(
        self,
        fn: Callable[..., T],
        *iterables: Iterable[Any],
        timeout: Optional[float] = None,
        chunksize: int = 1,
        ordered: bool = True,
        progress: bool = False,
        _track: Optional[Callable[[SakerFuture[Any]], None]] = None,
    ) -> Iterator[T]:
        """Like ``Executor.map``: submits everything now, yields results in order.

        ``ordered=False`` yields them as they come. ``chunksize`` calls share a task.
        Leaving the loop early cancels what has not finished. ``progress=True`` shows
        how many calls have completed: a tqdm bar when tqdm is importable, else a
        plain line on standard error.
        """
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1")
        self._pilot._free_dropped()
        by_ref = bool(self._options.get("ref"))
        if by_ref and chunksize > 1:
            raise ValueError("ref=True stores each call's value apart: use chunksize=1")
        deadline = None if timeout is None else time.monotonic() + timeout
        options = self._options
        connection = self._connection()
        spec_options, job_options = split_options(options, command=False)
        stores = self._pilot._object_stores()
        seen = () if by_ref else stores.visible_nodes()
        prepared = prepare_function(fn if by_ref else _returning(stores, fn))
        call_stored = prepare_function(objects.call_stored) if seen else None
        futures: List[SakerFuture[Any]] = []
        append = futures.append
        b2a = _b2a
        submit_job = connection.submit_job
        calls = [0]  # counted by the chunks
        if chunksize == 1:
            argument_tuples: Iterable[Any] = zip(*iterables)
            function: Any = prepared
        else:
            source = zip(*iterables)

            def chunks() -> Iterator[Any]:
                for chunk in iter(lambda: list(itertools.islice(source, chunksize)), []):
                    calls[0] += len(chunk)
                    yield (prepared, chunk)

            argument_tuples = chunks()
            function = prepare_chunk_function()
        empty: Dict[str, Any] = {}
        store = prepare_function(objects.store_result) if by_ref else None
        waits = _waits(spec_options)
        # Collections triggered by creating a future per call would more than double
        # the cost of this loop; whatever it leaves is collected after it.
        collecting = gc.isenabled()
        if collecting:
            gc.disable()
        try:
            for args in argument_tuples:
                written = None
                if by_ref:
                    id = objects.new_id()
                    objects.own(id, self._pilot)
                    written = objects.ITEM_PREFIX + id
                    args = (written, function) + tuple(args)
                stored = None
                # (Arguments of small types are never large: the no-op path checks no more.)
                if seen and chunksize == 1 and objects.may_be_large(args) and objects.large_arguments(args, empty):
                    payload = None
                else:
                    try:
                        payload, refs = _with_refs(dumps_call, store if by_ref else function, args, empty)
                    except PayloadTooLarge:
                        if not (seen and chunksize == 1):
                            raise
                        payload = None
                if payload is None:
                    # As call's: the function and arguments stored as one object.
                    stored, nested = _with_refs(stores.put, (function, args, empty), self._pilot)
                    payload, refs = _with_refs(dumps_call, call_stored, (stored,), empty)
                    refs = nested + refs
                encoded = b2a(payload, newline=False).decode("ascii")
                spec = {"function": {"kind": "python", "payload": encoded}}
                if spec_options:
                    spec.update(spec_options)
                if refs:
                    spec.update(_with_items(spec, "reads", [objects.ITEM_PREFIX + ref for ref in refs]))
                if written:
                    spec.update(_with_items(spec, "writes", [written]))
                job = {"spec": spec}
                if job_options:
                    job.update(job_options)
                future: SakerFuture[Any] = SakerFuture(connection, MODE_CALL)
                if waits:
                    future._waits = True
                submit_job(job, future, len(encoded))
                if stored is not None:
                    future.add_done_callback(lambda _, stored=stored: discard(stored, self._pilot))
                if _track is not None:
                    _track(future)
                append(future)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        finally:
            if collecting:
                gc.enable()
        shown = None
        if progress:
            shown = Progress(len(futures) if chunksize == 1 else calls[0])
        return map_results(futures, deadline, ordered, chunksize > 1, shown)


def _with_refs(pickling: Callable[..., T], *args: Any) -> "tuple[T, List[str]]":
    """``(pickling(*args), ids of the refs it pickled)``."""
    objects.start_collecting()
    try:
        return pickling(*args), objects.collected()
    finally:
        objects.collected()  # stops collecting when it raised


def _with_items(options: Mapping[str, Any], key: str, items: List[str]) -> Dict[str, Any]:
    """``options`` with ``items`` added, once each, to the data items of ``key``
    (``reads`` or ``writes``)."""
    merged = dict(options)
    known = merged.get(key) or []
    known = [known] if isinstance(known, str) else list(known)
    merged[key] = list(dict.fromkeys(known + items))
    return merged


def _waits(spec: Mapping[str, Any]) -> bool:
    """Whether tasks of this spec may wait for other jobs or a time (see running())."""
    return bool(spec.get("after") or spec.get("after_any") or spec.get("not_before"))


class PilotView(_Target):
    """``pilot.options(...)``: the pilot's submit methods with other default options."""

    def __init__(self, pilot: "Pilot", options: Dict[str, Any]) -> None:
        self._pilot = pilot
        self._options = options

    def __repr__(self) -> str:
        return f"<PilotView of {self._pilot!r} options={self._options!r}>"


# Pilots started here and not closed yet: stopped at exit (a forgotten one would
# otherwise outlive this process).
_started: "Set[Pilot]" = set()


@atexit.register
def _stop_leftover_pilots() -> None:
    for pilot in list(_started):
        try:
            pilot.close(timeout=5.0)
        except Exception:
            pass


def _refuse_in_worker_import() -> None:
    """Refuses to open a pilot from a script a worker runs to find what it was sent.

    Without cloudpickle, functions of a script travel by reference and each worker
    runs the script as ``__mp_main__``: top-level code that starts (or connects to)
    a pilot would start more pilots from every worker, each running the script again.
    ``multiprocessing`` refuses the same way.
    """
    script = serialize.loading_main
    if script is not None:
        raise SakerError(
            f"{script} opens a pilot at its top level, and a saker worker runs that top "
            "level to find the functions sent to it; put the code that opens the pilot "
            'under `if __name__ == "__main__":`'
        )


# The distribution whose wheel carries the binary beside this package (python/pyproject.toml).
_DISTRIBUTION = "saker-pilot"


def _find_binary(saker_bin: Optional[PathLike]) -> str:
    """The ``saker`` binary to start: ``saker_bin``, ``$SAKER_BIN``, the one installed
    with this package, then ``saker`` on PATH."""
    if saker_bin is not None:
        return os.fspath(saker_bin)
    from_env = os.environ.get("SAKER_BIN")
    if from_env:
        return from_env
    found = _installed_binary() or shutil.which("saker")
    if found is None:
        raise SakerError(
            "cannot find the saker binary: pass saker_bin=, set SAKER_BIN, put saker on PATH, "
            f"or pip install {_DISTRIBUTION} (its wheel carries the binary)"
        )
    return found


def _returning(stores: Stores, fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, wrapped so that a large value comes back by reference: from a node
    whose store this client sees, or, on no node, past what an answer carries inline,
    read from its node directly (:class:`saker.objects.Returning`)."""
    seen = stores.visible_nodes()
    if seen:
        return objects.Returning(seen, fn)
    if stores.sees_none() and stores.binary() is not None:
        return objects.Returning((), fn, anywhere=True)
    return fn


def _binary_if_any() -> Optional[str]:
    """The ``saker`` binary as :func:`_find_binary` finds it, or None."""
    try:
        return _find_binary(None)
    except SakerError:
        return None


def _installed_binary() -> Optional[str]:
    """The ``saker`` script the saker-pilot wheel installed with this very package.

    It lands in its environment's scripts directory (a venv's ``bin/``), which need not
    be on PATH: a venv's python run without activating the venv. Only when this
    package is that distribution's (not a checkout on ``sys.path``), so that client and
    binary are one release.
    """
    try:
        from importlib import metadata

        distribution = metadata.distribution(_DISTRIBUTION)
        files = distribution.files or []
        own = os.path.realpath(__file__)
        if not any(
            file.parts[:1] == ("saker",) and file.name == "pilot.py"
            and os.path.realpath(str(distribution.locate_file(file))) == own
            for file in files
        ):
            return None
        for file in files:
            if file.name == "saker" and file.parts[:1] != ("saker",):
                path = os.path.realpath(str(distribution.locate_file(file)))
                if os.path.isfile(path) and os.access(path, os.X_OK):
                    return path
    except Exception:  # no such distribution, unreadable metadata: look on PATH
        return None
    return None


def python_path() -> str:
    """PYTHONPATH for workers: this saker package first, then the caller's own paths.

    Functions travel by reference (module and name), so workers must import what the
    caller imports: test modules, a script's directory, an uninstalled checkout.
    """
    own = str(Path(__file__).resolve().parent.parent)
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    paths = [own]
    for entry in sys.path:
        entry = os.path.realpath(entry or os.getcwd())
        if not os.path.isdir(entry) or any(entry.startswith(prefix + os.sep) for prefix in prefixes):
            continue
        if entry not in paths:
            paths.append(entry)
    inherited = os.environ.get("PYTHONPATH")
    if inherited:
        paths.append(inherited)
    return os.pathsep.join(paths)


class Pilot(_Target):
    """A pilot this process talks to: ``Pilot.connect(dir)`` or ``Pilot.start(...)``.

    Use it as a context manager. ``close()`` closes the connection, and stops the pilot
    too when ``start`` started it.
    """

    def __init__(self, connection: Connection, *, process: Optional["subprocess.Popen[bytes]"] = None,
                 temporary: Optional[str] = None, log: Optional[IO[bytes]] = None,
                 log_path: Optional[str] = None) -> None:
        self._pilot = self
        self._options = {}
        self._conn: Optional[Connection] = connection
        self._process = process
        self._temporary = temporary
        self._log = log
        self._log_path = log_path
        self._close_lock = threading.Lock()
        self.dir = connection.directory
        self.pilot_id = connection.pilot_id
        self._stores: Optional[Stores] = None
        #: Ids of objects this client owned whose handles are all gone, to free at the
        #: next request (see ``objects.own``).
        self._dropped: List[str] = []
        objects.open_pilots.append(self)

    # -- opening

    @classmethod
    def connect(cls, dir: PathLike, *, timeout: float = 10.0, reconnect_for: float = RECONNECT_FOR) -> "Pilot":
        """Connects to the pilot serving clients from directory ``dir``.

        When the connection is lost (the pilot's root died, and a standby root of
        ``saker pilot --standby`` took over, say), it is re-established for up to
        ``reconnect_for`` seconds, and pending futures complete as if nothing happened;
        0 fails them at once instead.
        """
        _refuse_in_worker_import()
        return cls(Connection(dir, timeout=timeout, reconnect_for=reconnect_for))

    @classmethod
    def start(
        cls,
        dir: Optional[PathLike] = None,
        agents: int = 1,
        slots: Optional[int] = None,
        *,
        saker_bin: Optional[PathLike] = None,
        workers: Optional[Mapping[str, str]] = None,
        log: Union[None, PathLike, IO[bytes]] = None,
        extra_args: Sequence[str] = (),
        timeout: float = 60.0,
        sync: Optional[bool] = None,
        reconnect_for: Optional[float] = None,
        object_memory: Union[None, int, str] = None,
        object_memory_dir: Optional[PathLike] = None,
    ) -> "Pilot":
        """Starts ``saker pilot`` on this machine and connects to it.

        ``dir`` must not hold a pilot yet (None: a temporary directory, removed at
        close). The pilot stops when this process ends, even killed, and a temporary
        one then removes its directory itself (``saker pilot --owner``). Python workers run ``<this interpreter> -m saker.worker`` with this
        saker package on their PYTHONPATH; ``workers`` adds or overrides worker
        commands by kind. The pilot's stdout and stderr go to ``log`` (a path or a
        binary file), else to a temporary file quoted when the start fails.
        ``sync`` fsyncs the journal before each result is reported; by default only
        a pilot in a directory of your own does (a temporary one is never resumed).
        ``reconnect_for`` is as for :meth:`connect` (``extra_args=["--standby", "1"]``
        runs a standby root that takes over if this one dies); by default 60 s with
        ``--standby`` among ``extra_args``, else 0: without a standby nothing takes
        over, so pending futures fail as soon as the pilot is gone.
        ``object_memory`` (bytes, or a size such as ``"4G"``) keeps up to that much
        of each node's objects in shared memory (``--object-memory``), the least
        recently used moved to the node's scratch directory past it;
        ``object_memory_dir`` puts it in that shared-memory filesystem instead of
        ``/dev/shm`` (a tmpfs mounted with huge pages maps objects faster).
        """
        _refuse_in_worker_import()
        binary = _find_binary(saker_bin)
        temporary = None
        if dir is None:
            temporary = tempfile.mkdtemp(prefix="saker-")
            directory = Path(temporary) / "pilot"
        else:
            directory = Path(dir).expanduser().resolve()
        commands = {"python": f"{shlex.quote(sys.executable)} -m saker.worker"}
        commands.update(workers or {})
        argv = [binary, "pilot", "--dir", str(directory), "--agents", str(agents)]
        # It stops when this process ends, however (killed, say), and a temporary one
        # removes its directory then, as close() does.
        argv += ["--owner", str(os.getpid())]
        if temporary:
            argv += ["--remove-when-done", temporary]
        if slots is not None:
            argv += ["--slots", str(slots)]
        for kind, command in commands.items():
            argv += ["--worker", f"{kind}={command}"]
        # A temporary pilot is removed at close: nothing will ever resume from its
        # journal, so fsyncing each result (about 0.3 ms per call here) buys nothing.
        fsync = temporary is None if sync is None else sync
        if not fsync and "--no-sync" not in extra_args:
            argv.append("--no-sync")
        if object_memory is not None:
            size = f"{-(-object_memory // (1 << 20))}M" if isinstance(object_memory, int) else object_memory
            argv += ["--object-memory", size]
            if object_memory_dir is not None:
                argv += ["--object-memory-dir", os.fspath(object_memory_dir)]
        argv += list(extra_args)
        env = dict(os.environ)
        env["PYTHONPATH"] = python_path()

        log_file: IO[bytes]
        log_path: Optional[str] = None
        if log is None:
            log_file = tempfile.TemporaryFile(prefix="saker-pilot-", suffix=".log")
        elif isinstance(log, (str, os.PathLike)):
            log_path = os.fspath(log)
            log_file = open(log_path, "ab")
        else:
            log_file = log
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                       stderr=subprocess.STDOUT, env=env)
        except OSError as exc:
            if log is None or log_path is not None:
                log_file.close()
            if temporary:
                shutil.rmtree(temporary, ignore_errors=True)
            raise SakerError(f"cannot run {binary}: {exc}") from None
        pilot: Optional[Pilot] = None
        try:
            if reconnect_for is None:
                reconnect_for = RECONNECT_FOR if "--standby" in extra_args else 0.0
            connection = _wait_for_pilot(directory, process, timeout, lambda: _tail(log_file, log_path),
                                         reconnect_for)
            pilot = cls(connection, process=process, temporary=temporary,
                        log=log_file if (log is None or log_path is not None) else None,
                        log_path=log_path)
            _started.add(pilot)
            return pilot
        finally:
            if pilot is None:
                _stop_process(process, 5.0)
                if log is None or log_path is not None:
                    log_file.close()
                if temporary:
                    shutil.rmtree(temporary, ignore_errors=True)

    # -- state

    def _require_connection(self) -> Connection:
        connection = self._conn
        if connection is None:
            raise PilotClosed("this Pilot is closed")
        return connection

    def _free_dropped(self) -> None:
        """Frees the objects whose handles the garbage collector found gone since the
        last request (sent after every task submitted before, which may read them;
        not waited for)."""
        if self._dropped and self._conn is not None:
            ids, self._dropped = self._dropped, []
            self._conn.request("free_objects", {"objects": ids})

    def _object_stores(self) -> Stores:
        stores = self._stores
        if stores is None:
            stores = self._stores = Stores(self._require_connection(), self.pilot_id, _binary_if_any)
            objects.remote_readers.setdefault(self.pilot_id, []).append(stores.value_on_node)
        return stores

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"<saker.Pilot {self.dir} {self.pilot_id} {state}>"

    def __enter__(self) -> "Pilot":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def status(self, timeout: Optional[float] = 30.0) -> Dict[str, Any]:
        """The pilot's counters (``queued``, ``running``, ``succeeded``, ``slots``, ...)."""
        return self._require_connection().request("status", {}).result(timeout)

    def update(self, *jobs: Any, priority: Optional[int] = None, not_before: Any = ...,
               time_limit: Any = ..., timeout: Optional[float] = 60.0) -> int:
        """Changes the tasks of ``jobs`` (job ids or futures) that have not started.

        ``priority``: queued tasks move to that level. ``not_before``: a datetime or
        RFC 3339 text; they start no earlier (``None`` clears it). ``time_limit``:
        seconds, a timedelta or text such as ``"10m"``, for attempts not started yet
        (``None`` clears it). Leave an argument out to keep what the jobs have. All the
        jobs are updated or none (an unknown or ended job raises). Returns how many
        were updated, once the update is durable.
        """
        body: Dict[str, Any] = {"jobs": job_ids("update", list(jobs))}
        if priority is not None:
            if isinstance(priority, bool) or not isinstance(priority, int):
                raise TypeError(f"priority must be an int, not {priority!r}")
            body["priority"] = priority
        if not_before is not ...:
            body["not_before"] = None if not_before is None else timestamp(not_before)
        if time_limit is not ...:
            if isinstance(time_limit, datetime.timedelta):
                time_limit = time_limit.total_seconds()
            body["time_limit"] = time_limit
        answer = self._require_connection().request("update", body).result(timeout)
        return int(answer["updated"])

    def future(self, task: int, *, raw: bool = False) -> "SakerFuture[Any]":
        """The future of task ``task``, whoever submitted it (an earlier driver, say).

        It resolves as the submitter's did: to a Python call's return value (or its
        exception), to the :class:`Result` of a command (or :class:`TaskFailed`); with
        ``raw=True`` to a function task's output bytes (other worker kinds). A task
        that has ended resolves at once (from the pilot's journal), one still queued
        or running when its result comes. The pilot cannot tell a task id it never
        gave from one not finished yet: such a future stays pending (use a timeout).
        """
        if isinstance(task, bool) or not isinstance(task, int) or task < 0:
            raise TypeError(f"a task id is a non-negative int, not {task!r}")
        return self._require_connection().task_future(task, MODE_RAW if raw else MODE_AUTO)

    def result(self, task: int, timeout: Optional[float] = None, *, raw: bool = False) -> Any:
        """``pilot.future(task).result(timeout)``: what task ``task`` gave (see :meth:`future`)."""
        return self.future(task, raw=raw).result(timeout)

    def results(self, from_: int = 0, *, follow: bool = False,
                timeout: float = 10.0) -> Iterator[Result]:
        """The pilot's results, as :class:`Result` objects in the order it accepted them.

        Every result whose journal sequence number (``Result.seq``) is at least
        ``from_``; to go on later, pass the last one's ``seq + 1``. ``follow=True``
        goes on with new results as they come, until the pilot stops.
        ``result.value()`` gives what a Python call returned (or raises what it
        raised). The stream has its own connection, read as the loop asks for more,
        so a long history is never held in memory.
        """
        if isinstance(from_, bool) or not isinstance(from_, int) or from_ < 0:
            raise TypeError(f"from_ is a non-negative journal sequence number, not {from_!r}")
        self._require_connection()
        return _stream_results(self.dir, from_, follow, timeout)

    def cancel(self, future: "SakerFuture[Any]") -> bool:
        """Cancels the future's task (queued or running); same as ``future.cancel()``."""
        return future.cancel()

    def shutdown(self, kill_running: bool = False, timeout: Optional[float] = 30.0) -> None:
        """Asks the pilot to stop (whoever started it); then closes this connection."""
        connection = self._require_connection()
        try:
            connection.request("shutdown", {"kill_running": kill_running}).result(timeout)
        except PilotClosed:
            pass  # the pilot stopped before its answer reached us: done all the same
        finally:
            self.close()

    @property
    def log_tail(self) -> str:
        """The end of the pilot's own output (for pilots started here)."""
        if self._log is None and self._log_path is None:
            return ""
        return _tail(self._log, self._log_path)

    def close(self, timeout: float = 30.0) -> None:
        """Closes the connection; stops the pilot (and removes its temp dir) if started here."""
        with self._close_lock:
            connection, self._conn = self._conn, None
            process, self._process = self._process, None
        if self in objects.open_pilots:
            objects.open_pilots.remove(self)
        if self._stores is not None:
            readers = objects.remote_readers.get(self.pilot_id, [])
            if self._stores.value_on_node in readers:
                readers.remove(self._stores.value_on_node)
        asked = False
        if connection is not None and process is None and self._dropped:
            # A pilot that goes on: what this client dropped is freed (a pilot
            # started here removes its scratch when it stops).
            try:
                ids, self._dropped = self._dropped, []
                connection.request("free_objects", {"objects": ids}).result(min(timeout, 10.0))
            except Exception:
                pass
        if connection is not None:
            if process is not None and connection.closed:
                asked = True  # lost: the pilot is stopping or gone; give it time to exit
            elif process is not None:
                try:
                    connection.request("shutdown", {"kill_running": True}).result(min(timeout, 10.0))
                    asked = True
                except PilotClosed:
                    asked = True  # it is stopping already
                except Exception:
                    pass
            connection.close()
        if process is not None:
            _stop_process(process, timeout if asked else 2.0)
            _started.discard(self)
            if self._log is not None:
                self._log.close()
            if self._temporary:
                shutil.rmtree(self._temporary, ignore_errors=True)


def _stream_results(directory: Path, start: int, follow: bool, timeout: float) -> Iterator[Result]:
    """A ``results`` stream on a connection of its own, read on the caller's thread."""
    transport = Transport(directory, timeout=timeout)
    try:
        line = json.dumps({"id": 1, "results": {"from": start, "follow": follow}}) + "\n"
        transport.send(line.encode())
        while True:
            for message in transport.receive():
                transport.flush()
                body = message.get("result")
                if body is not None:
                    yield Result.from_json(body)
                elif "end" in message:
                    return
                elif "error" in message:
                    raise error_of(message["error"])
    except (OSError, ssl.SSLError) as exc:
        raise PilotClosed(f"the results stream from the pilot ended: {exc}") from None
    finally:
        transport.close()


def _tail(log_file: Optional[IO[bytes]], log_path: Optional[str], limit: int = 4000) -> str:
    try:
        if log_path is not None:
            with open(log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - limit))
                data = f.read()
        elif log_file is not None:
            fd = log_file.fileno()
            size = os.fstat(fd).st_size
            # pread: the pilot shares this file's offset, which must not move.
            data = os.pread(fd, limit, max(0, size - limit))
        else:
            return ""
    except (OSError, ValueError):
        return ""
    return data.decode("utf-8", "replace")


def _wait_for_pilot(directory: Path, process: "subprocess.Popen[bytes]", timeout: float,
                    tail: Callable[[], str], reconnect_for: float = RECONNECT_FOR) -> Connection:
    deadline = time.monotonic() + timeout
    path = directory / "client.json"
    delay = 0.005
    last_error: Optional[BaseException] = None
    while True:
        code = process.poll()
        if code is not None:
            raise SakerError(f"saker pilot exited with code {code} before serving clients:\n{tail().rstrip()}")
        try:
            endpoint = json.loads(path.read_text())
            ours = endpoint.get("pid") == process.pid
        except (OSError, ValueError, AttributeError):
            ours = False
        if ours:
            try:
                return Connection(directory, timeout=max(1.0, deadline - time.monotonic()),
                                  reconnect_for=reconnect_for)
            except PilotNotFound as exc:
                last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise SakerError(
                f"saker pilot did not serve clients from {directory} within {timeout:g}s{detail}:\n"
                f"{tail().rstrip()}"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _stop_process(process: "subprocess.Popen[bytes]", timeout: float) -> None:
    """Waits for the pilot to exit, then SIGTERM (it stops its agents), then SIGKILL."""
    try:
        process.wait(timeout)
        return
    except subprocess.TimeoutExpired:
        pass
    process.terminate()
    try:
        process.wait(5.0)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
