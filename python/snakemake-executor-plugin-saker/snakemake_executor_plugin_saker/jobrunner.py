"""Runs one Snakemake job in an already-warm Python process (the ``worker`` job path).

The plugin sends :func:`run` as a function task to the pilot's persistent Python
workers (``saker.worker``). Unpickling it imports this module there once per worker,
and with it Snakemake, so a job no longer pays for a fresh ``python -m snakemake``
(about 1 s of CPU importing). Each job runs Snakemake's own command line entry,
``snakemake.cli.main(argv)``, with the very arguments ``format_job_exec`` gives the
command path, in a child ``os.fork()``ed from the worker: Snakemake's global state
(its logger, its workflow, the current directory, the environment) lives and dies with
the child, and the worker stays as clean as it was for the next job.

The child's stdout and stderr go to files; the worker waits for it, and answers with
``{"exit_code": 0}`` or raises :class:`JobFailed` (exit code, signal, both outputs), so
that the pilot records a failed job as a failed task. A cancel or time limit kills
the worker's process group, the child with it (the agent starts a new worker).

Importing this module has no side effect beyond importing Snakemake: the plugin's own
process imports it to pickle :func:`run` by reference. The worker-only warm-up (plugin
registries, modules the first job imported) runs at the first job.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import io
import os
import stat
import sys
import tempfile
import threading
import traceback
from typing import Any, Dict, List, NoReturn, Optional, Set

import snakemake
import snakemake.cli

__all__ = ["run", "JobFailed", "WorkerMismatch", "SNAKEMAKE_VERSION"]

SNAKEMAKE_VERSION: str = getattr(snakemake, "__version__", "unknown")

# The most of each output a failed job's answer carries (its tail): the plugin shows
# the last lines and writes what it got to the job's log in .snakemake/saker_logs/.
_OUTPUT_CAP = 1 << 20
# sys.argv[0] of `python -m snakemake`, which the child's Snakemake sees.
_MAIN = os.path.join(os.path.dirname(snakemake.__file__), "__main__.py")


class JobFailed(Exception):
    """The job's Snakemake exited non-zero or was killed by a signal."""

    def __init__(self, message: str, exit_code: Optional[int], signal: Optional[int],
                 stdout: str, stderr: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.signal = signal
        self.stdout = stdout
        self.stderr = stderr

    def __reduce__(self) -> Any:
        return (type(self), (self.args[0], self.exit_code, self.signal, self.stdout, self.stderr))


class WorkerMismatch(Exception):
    """This worker's Snakemake is not the one of the run that sent the job."""


def run(request: Dict[str, Any]) -> Dict[str, Any]:
    """Runs one job: ``request`` holds ``argv`` (after ``python -m snakemake``),
    ``cwd`` (or None), ``env``, ``stdout``/``stderr`` paths (or None: temporary files)
    and the sender's ``snakemake_version``."""
    wanted = request.get("snakemake_version")
    if wanted != SNAKEMAKE_VERSION:
        # Jobs must run with the Snakemake that planned them (its arguments and
        # metadata formats); the plugin then runs them as commands instead.
        raise WorkerMismatch(
            f"this worker ({sys.executable}) has Snakemake {SNAKEMAKE_VERSION}, the run uses {wanted}"
        )
    _warm_up()
    stdout_path, stderr_path, temporary = _output_paths(request)
    read_end, write_end = os.pipe()
    # Buffered output must not be written twice (by the worker and by the child).
    _flush()
    # The worker's objects out of the collector's reach: a child's collections would
    # otherwise touch every page of them, and copy each (fork's copy on write): 2.3×
    # the jobs per second. Collected first, so that the last job's cyclic garbage is
    # not kept for good; after the first job that is a small collection.
    gc.collect()
    gc.freeze()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _child(request, stdout_path, stderr_path, write_end)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as report:
        imported = report.read().decode("utf-8", "replace").split()
    _, status = os.waitpid(pid, 0)
    _learn(imported)
    try:
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            return {"exit_code": 0}
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        why = f"exit code {exit_code}" if signal is None else f"killed by signal {signal}"
        raise JobFailed(f"the job's Snakemake ended with {why}", exit_code, signal,
                        _tail(stdout_path), _tail(stderr_path))
    finally:
        for path in (stdout_path, stderr_path):
            try:
                os.unlink(path)
            except OSError:
                pass
        if temporary:
            try:
                os.rmdir(temporary)
            except OSError:
                pass


def _output_paths(request: Dict[str, Any]) -> tuple[str, str, Optional[str]]:
    stdout, stderr = request.get("stdout"), request.get("stderr")
    if stdout and stderr:
        os.makedirs(os.path.dirname(stdout), exist_ok=True)
        os.makedirs(os.path.dirname(stderr), exist_ok=True)
        return stdout, stderr, None
    base = os.environ.get("SAKER_SCRATCH") or None
    if base:
        try:
            os.makedirs(base, exist_ok=True)
        except OSError:
            base = None
    directory = tempfile.mkdtemp(prefix="snakemake-job-", dir=base)
    return os.path.join(directory, "stdout"), os.path.join(directory, "stderr"), directory


def _child(request: Dict[str, Any], stdout_path: str, stderr_path: str, report_fd: int) -> NoReturn:
    """The forked child: runs the job's Snakemake, then leaves with its exit code."""
    code = 1
    try:
        try:
            # Output first: anything failing from here on is in the job's stderr.
            for fd, path in ((1, stdout_path), (2, stderr_path)):
                opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(opened, fd)
                os.close(opened)
            cwd = request.get("cwd")
            if cwd:
                os.chdir(cwd)
            os.environ.update(request.get("env") or {})
            _close_worker_pipes(keep=report_fd)
            argv: List[str] = list(request["argv"])
            sys.argv = [_MAIN] + argv
            before = set(sys.modules)
            code = _run_main(argv)
            # Snakemake's job rate limiter leaves a threading.Timer (1 s) behind; a
            # process would wait for it at exit, this one does not wait for threads.
            for thread in threading.enumerate():
                if isinstance(thread, threading.Timer):
                    thread.cancel()
            try:
                atexit._run_exitfuncs()
            except BaseException:
                pass
            new = " ".join(name for name in sys.modules if name not in before)
            try:
                os.write(report_fd, new.encode("utf-8", "replace"))
            except OSError:
                pass
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            _flush_open_files()
            _flush()
    finally:
        # Like a multiprocessing child: no interpreter teardown (0.3 s of CPU here),
        # no waiting for the worker's or Snakemake's leftover threads.
        os._exit(code)


def _run_main(argv: List[str]) -> int:
    try:
        snakemake.cli.main(argv)
    except SystemExit as exit:
        return _exit_code(exit.code)
    return 0


def _exit_code(code: Any) -> int:
    """The process exit status ``sys.exit(code)`` would give."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _close_worker_pipes(keep: int) -> None:
    """Closes the worker's frame pipes in the child (it must never write a frame)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd <= 2 or fd == keep:
            continue
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.close(fd)
        except OSError:
            pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass


def _flush_open_files() -> None:
    """Flushes every file the job left open (a ``run:`` block's unclosed one), as
    interpreter teardown would: the child ends with ``os._exit``."""
    for stream in gc.get_objects():
        try:
            # type(): isinstance() asks some proxies for a __class__ that is no class.
            if issubclass(type(stream), io.IOBase) and not stream.closed:
                stream.flush()
        except Exception:
            pass


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _OUTPUT_CAP))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    if size > _OUTPUT_CAP:
        text = f"[... {size - _OUTPUT_CAP} bytes before this left out]\n" + text.split("\n", 1)[-1]
    return text


# ------------------------------------------------------------------------ warm-up

_warmed = False
# Top-level modules the worker may import for its jobs (see _learn); None: not known yet.
_importable: Optional[Set[str]] = None
_learned: Set[str] = set()


def _warm_up() -> None:
    """Once per worker: what every job's Snakemake does before it reads its Snakefile.

    Snakemake's plugin registries are singletons that walk all of sys.path
    (pkgutil.iter_modules) and import every plugin: 0.15 s per job otherwise.
    """
    global _warmed
    if _warmed:
        return
    _warmed = True
    try:
        snakemake.cli.get_argument_parser()
    except Exception:
        pass
    for module, name in (
        ("snakemake_interface_report_plugins.registry", "ReportPluginRegistry"),
        ("snakemake_interface_scheduler_plugins.registry", "SchedulerPluginRegistry"),
        ("snakemake_interface_logger_plugins.registry", "LoggerPluginRegistry"),
        ("snakemake_interface_storage_plugins.registry", "StoragePluginRegistry"),
        ("snakemake_interface_executor_plugins.registry", "ExecutorPluginRegistry"),
    ):
        try:
            getattr(importlib.import_module(module), name)()
        except Exception:
            pass


def _snakemake_modules() -> Set[str]:
    """Top-level names of the standard library, Snakemake and what it depends on.

    Only these are imported ahead in the worker: a user's own packages (numpy, say)
    may read the job's environment at import (OMP_NUM_THREADS) or start threads, which
    must happen in the job's child, not once in the worker that forks every job.
    """
    names: Set[str] = set(getattr(sys, "stdlib_module_names", ()))
    names.discard("__main__")
    try:
        from importlib import metadata
        import re

        provided = metadata.packages_distributions()
        by_dist: Dict[str, Set[str]] = {}
        for top, dists in provided.items():
            for dist in dists:
                by_dist.setdefault(_canonical(dist), set()).add(top)
        pending, seen = ["snakemake"], set()
        while pending:
            dist = _canonical(pending.pop())
            if dist in seen:
                continue
            seen.add(dist)
            names.update(by_dist.get(dist, ()))
            try:
                requires = metadata.requires(dist) or []
            except metadata.PackageNotFoundError:
                continue
            for requirement in requires:
                if "extra ==" in requirement.replace('"', "").replace("'", ""):
                    continue  # optional features the run may not have installed
                match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
                if match:
                    pending.append(match.group(1))
        for dist in list(by_dist):
            # Snakemake's plugins and their interfaces
            if dist.startswith("snakemake"):
                names.update(by_dist[dist])
    except Exception:
        names.update({"snakemake"})
    return names


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _learn(imported: List[str]) -> None:
    """Imports here what the last job's child imported (Snakemake's own modules and
    their dependencies only), so that the next child finds them loaded."""
    global _importable
    missing = [name for name in imported if name not in sys.modules and name not in _learned]
    if not missing:
        return
    if _importable is None:
        _importable = _snakemake_modules()
    for name in missing:
        _learned.add(name)
        if name.split(".", 1)[0] not in _importable:
            continue
        try:
            importlib.import_module(name)
        except (Exception, SystemExit):
            pass  # a module the job could import only in its own directory or env
