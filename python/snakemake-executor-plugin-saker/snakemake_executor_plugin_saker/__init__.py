"""Snakemake executor plugin: runs a workflow's jobs as tasks of a Saker pilot.

``snakemake --executor saker`` starts an embedded pilot on this machine (stopped when
Snakemake ends), or with ``--saker-pilot-dir D`` attaches to a running one (e.g. started
by ``sbatch-templates/snakemake.sbatch`` across an allocation). Each Snakemake job (a
rule instance or a group job) becomes one task running Snakemake's command line for
that job, as every remote executor spawns it: by default a function task on the pilot's
persistent Python workers (``jobrunner``: Snakemake imported once per worker, each job
in a forked child), else (``--saker-job-path command``, MPI jobs) a command task. Its
status comes from the pilot's result stream (the client's futures), never from
polling. See docs/snakemake.md.
"""


import asyncio
import concurrent.futures
import os
import shlex
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncGenerator, Dict, List, Optional, Set, Tuple

from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface
from snakemake_interface_executor_plugins.settings import CommonSettings, ExecutorSettingsBase

from .resources import ResourceError, describe, saker_options

# `saker` (the saker-pilot client) is imported when an Executor starts: every
# `snakemake` command imports all installed plugins to build its command line, and
# must not fail, or pay for the client, because of this one.
saker: Any = None


def _import_saker() -> Any:
    global saker
    if saker is None:
        try:
            import saker as client
            import saker.serialize  # dumps_call and loads_exception of the worker path
        except ImportError as exc:
            raise WorkflowError(
                f"the Saker executor needs the saker-pilot package (pip install saker-pilot): {exc}"
            ) from None
        saker = client
    return saker

__all__ = ["ExecutorSettings", "Executor", "common_settings", "ResourceError"]

# Lines of a failed job's stderr shown in Snakemake's log.
_TAIL_LINES = 40
# Bytes of each job's stdout/stderr the result carries inline; a longer stderr is read
# from its spill file for the tail.
_INLINE_OUTPUT = 16384
# How long the status loop waits when no result arrived: results wake it at once,
# so this only bounds how late it notices a shutdown it was not told about.
_BACKSTOP_SECONDS = 5.0

#: Values of --saker-job-path; the first is the default.
JOB_PATHS = ("worker", "command")

# What the command path runs instead of `python -m snakemake`: the same entry point,
# then an exit that neither waits for the 1 s threading.Timer Snakemake's job rate
# limiter leaves behind (1 s of an idle slot per job) nor tears the interpreter down
# (0.3 s of CPU), as jobrunner's forked child does. Self-contained: the task's Python
# needs Snakemake only, not this plugin.
_LAUNCHER = """\
import atexit, os, sys, threading
import snakemake, snakemake.cli
sys.argv[0] = os.path.join(os.path.dirname(snakemake.__file__), "__main__.py")
code = 0
try:
    snakemake.cli.main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
except BaseException:
    import traceback; traceback.print_exc(); code = 1
for thread in threading.enumerate():
    if isinstance(thread, threading.Timer):
        thread.cancel()
if code is None:
    code = 0
elif not isinstance(code, int):
    print(code, file=sys.stderr); code = 1
try:
    atexit._run_exitfuncs()
finally:
    # Every file still open (a run: block's unclosed one among them) is flushed, as
    # teardown would; stdout and stderr last.
    import gc, io
    for stream in gc.get_objects() + [sys.stdout, sys.stderr]:
        try:
            # type(): isinstance() asks some proxies for a __class__ that is no class.
            if issubclass(type(stream), io.IOBase) and not stream.closed:
                stream.flush()
        except Exception:
            pass
    os._exit(code & 0xFF)
"""


@dataclass
class ExecutorSettings(ExecutorSettingsBase):
    pilot_dir: Optional[str] = field(
        default=None,
        metadata={
            "help": "Directory of a running Saker pilot to run the jobs on (e.g. started by "
            "sbatch-templates/snakemake.sbatch). Without it, an embedded pilot is started on "
            "this machine and stopped when Snakemake ends.",
            "env_var": True,
            "required": False,
        },
    )
    slots: Optional[int] = field(
        default=None,
        metadata={
            "help": "Embedded pilot: cores it offers, across all its agents (default: one per "
            "core of this machine).",
            "required": False,
        },
    )
    agents: int = field(
        default=1,
        metadata={
            "help": "Embedded pilot: agents (nodes) it runs on this machine; more than one lets "
            "MPI rules (nodes > 1) run locally.",
            "required": False,
        },
    )
    pilot_args: Optional[str] = field(
        default=None,
        metadata={
            "help": "Embedded pilot: further `saker pilot` arguments, as one shell-quoted string.",
            "required": False,
        },
    )
    pilot_log: Optional[str] = field(
        default=None,
        metadata={
            "help": "Embedded pilot: file for its own output (default: a temporary file, quoted "
            "if it fails to start).",
            "required": False,
        },
    )
    binary: Optional[str] = field(
        default=None,
        metadata={
            "help": "Embedded pilot: the saker binary (default: $SAKER_BIN, the one installed "
            "with saker-pilot, then saker on PATH).",
            "required": False,
        },
    )
    ignore_resources: Optional[str] = field(
        default=None,
        metadata={
            "help": "Comma-separated resource names left to Snakemake (not refused, not sent to "
            "Saker), e.g. resources of a Slurm profile: slurm_partition,slurm_account.",
            "required": False,
        },
    )
    memory_overhead: int = field(
        default=256,
        metadata={
            "help": "MiB added to a job's mem_mb/mem_mib for the Snakemake process that runs the "
            "job's rule(s) in the task (about 70 MiB resident; default 256): Saker places the task "
            "by, and limits it to, the sum.",
            "required": False,
        },
    )
    strict_threads: bool = field(
        default=False,
        metadata={
            "help": "Refuse a job asking for more threads than the pilot's widest node has, "
            "rather than run it with that node's cores (the default, as Snakemake's local "
            "executor scales threads down to --cores, with one warning per rule).",
            "required": False,
        },
    )
    tag: str = field(
        default="snakemake",
        metadata={"help": "Tag of every task this run submits (saker status lists tags).", "required": False},
    )
    job_path: str = field(
        default=JOB_PATHS[0],
        metadata={
            "help": "How a job runs on the pilot: 'worker' (default), a function task on the "
            "pilot's persistent Python workers, which import Snakemake once and fork a child per "
            "job; 'command', a command task spawning a new Snakemake per job (about 1 s of CPU "
            "more per job). MPI jobs always take the command path, and so does the rest of the "
            "run when the workers' Python cannot start, cannot import this plugin, or has another "
            "Snakemake.",
            "choices": list(JOB_PATHS),
            "required": False,
        },
    )


common_settings = CommonSettings(
    non_local_exec=True,
    # The pilot's nodes share the workflow's filesystem in the usual HPC setting; with
    # --shared-fs-usage none Snakemake stages through its storage plugins instead.
    implies_no_shared_fs=False,
    job_deploy_sources=False,
    pass_default_storage_provider_args=True,
    pass_default_resources_args=True,
    # --envvars travel as the task's environment, not on its command line.
    pass_envvar_declarations_to_cmd=False,
    auto_deploy_default_storage_provider=False,
    init_seconds_before_status_checks=0,
)


class Executor(RemoteExecutor):
    # The status loop's wake-up: class defaults, because RemoteExecutor starts the
    # status thread before __post_init__ runs, and its first check (at once:
    # init_seconds_before_status_checks=0) may come first. It once met no such
    # attribute, died (Snakemake's handler reports to a scheduler that did not exist
    # yet) and left the run waiting forever.
    _loop: Optional[asyncio.AbstractEventLoop] = None
    _event: Optional[asyncio.Event] = None
    _wake_lock = threading.Lock()

    def _wait_thread(self) -> None:
        """Snakemake's status thread, started again should its loop ever end while
        the run still waits for jobs (an error there is printed and, before the
        scheduler exists, reported to nobody)."""
        while True:
            super()._wait_thread()
            with self.lock:
                if not self.wait:
                    return
            self.logger.warning("the Saker executor's status loop ended early; starting it again")
            time.sleep(0.1)

    def __post_init__(self) -> None:
        settings: ExecutorSettings = self.workflow.executor_settings or ExecutorSettings()
        self._settings = settings
        self._ignored = {name.strip() for name in (settings.ignore_resources or "").split(",") if name.strip()}
        # Global --resources are Snakemake's own limits: not Saker's business.
        self._ignored.update(name for name in getattr(self.workflow, "global_resources", {}) or {})
        self._log_dir = Path(".snakemake") / "saker_logs"
        self._formatting_cores: Optional[int] = None
        self._widest: Optional[Tuple[float, Optional[int]]] = None
        #: Rules already warned of threads scaled down to the widest node.
        self._scaled: Set[str] = set()
        if settings.job_path not in JOB_PATHS:
            raise WorkflowError(f"--saker-job-path must be one of {', '.join(JOB_PATHS)}, "
                                f"not {settings.job_path!r}")
        self._job_path = settings.job_path
        self._jobrunner: Any = None
        if self.workflow.remote_execution_settings.immediate_submit:
            raise WorkflowError("the Saker executor does not support --immediate-submit: it submits "
                                "each job when Snakemake finds it ready")
        _import_saker()
        self._embedded = not settings.pilot_dir
        self.pilot = self._open_pilot(settings)

    # -- the pilot

    def _open_pilot(self, settings: ExecutorSettings) -> Any:
        if settings.pilot_dir:
            try:
                return saker.Pilot.connect(settings.pilot_dir)
            except saker.SakerError as exc:
                raise WorkflowError(f"cannot attach to the Saker pilot in {settings.pilot_dir}: {exc}") from None
        extra = shlex.split(settings.pilot_args) if settings.pilot_args else []
        try:
            pilot = saker.Pilot.start(
                agents=settings.agents, slots=settings.slots, saker_bin=settings.binary,
                log=settings.pilot_log, extra_args=extra,
            )
        except saker.SakerError as exc:
            raise WorkflowError(f"cannot start an embedded Saker pilot: {exc}") from None
        self.logger.info(f"Started an embedded Saker pilot in {pilot.dir}")
        return pilot

    # -- submitting

    def run_job(self, job: JobExecutorInterface) -> None:
        job_info = SubmittedJobInfo(job=job, aux={})
        try:
            options, hpc = saker_options(job.threads, dict(job.resources.items()), ignored=self._ignored)
        except ResourceError as exc:
            self._refuse(job_info, f"Saker cannot run {self._what(job)}: {exc}")
            return
        if "cores" in options and (job.is_group() or not self._settings.strict_threads):
            # Snakemake sums the threads of a group's jobs that could run at once; the
            # group gets at most a whole node, and its Snakemake shares it out. A job
            # asking for more threads than a node has runs with a node's cores, its
            # Snakemake scaling the rule's threads down to them, as the local executor
            # does with --cores.
            widest = self._widest_node()
            if widest and options["cores"] > widest:
                if not job.is_group():
                    self._warn_scaled(job, options["cores"], widest)
                options["cores"] = widest
        if options.get("memory_mib"):
            options["memory_mib"] += self._settings.memory_overhead
        # The spawned Snakemake uses exactly the cores the task holds.
        self._formatting_cores = options.get("cores", options.get("cores_per_rank", 1))
        try:
            command = self.format_job_exec(job)
        finally:
            self._formatting_cores = None
        if _single_rule_instance(job):
            # One job to schedule: the job's Snakemake would still set up and solve
            # its ILP scheduler (a cbc process, ~10 ms) to pick it. The last
            # --scheduler given wins.
            command += " --scheduler greedy"
        env = {str(key): str(value) for key, value in self.envvars().items()}
        env.update(options.pop("env", {}))
        options["tags"] = [self._settings.tag] + options.pop("tags", [])
        cwd = os.getcwd() if self.workflow.storage_settings.assume_common_workdir else None
        argv = None if hpc or self._job_path != "worker" else self._snakemake_argv(command)
        try:
            if argv is not None:
                self._submit_worker(job_info, argv, command, cwd, env, options)
            else:
                self._submit_command(job_info, command, hpc, cwd, env, options)
        except (saker.SakerError, TypeError, ValueError) as exc:
            self._refuse(job_info, f"Saker cannot run {self._what(job)}: {exc}")
            return
        self.logger.debug(f"Submitted {self._what(job)} to Saker ({job_info.aux['path']} path): "
                          f"{' '.join(describe(options))}")
        self.report_job_submission(job_info)

    def _submit_command(self, job_info: SubmittedJobInfo, command: str, hpc: bool, cwd: Optional[str],
                        env: Dict[str, str], options: Dict[str, Any]) -> None:
        """A command task: a new Snakemake process for the job."""
        command = self._launcher(command)
        if hpc:
            # Saker starts one process per rank; the Snakemake job must run once, on the
            # leader, and start its ranks itself with the rule's launcher (mpi resource).
            command = f'if [ "${{SAKER_RANK:-0}}" = 0 ]; then {command}; fi'
        future = self.pilot.submit(command, shell=True, cwd=cwd, env=env or None,
                                   inline_output=_INLINE_OUTPUT, **options)
        job_info.aux.update(saker=future, path="command")
        future.add_done_callback(self._completed)

    def _submit_worker(self, job_info: SubmittedJobInfo, argv: List[str], command: str, cwd: Optional[str],
                       env: Dict[str, str], options: Dict[str, Any]) -> None:
        """A function task: jobrunner.run, on a warm Python worker of the pilot."""
        jobrunner = self._import_jobrunner()
        request: Dict[str, Any] = {
            "argv": argv, "cwd": cwd, "env": env, "stdout": None, "stderr": None,
            "snakemake_version": jobrunner.SNAKEMAKE_VERSION,
        }
        if cwd is not None:
            # In the workflow's directory (shared, as cwd is): the output of a job killed
            # at its time limit, or lost with its node, stays where the plugin reads it.
            # Removed when the job is reported; the directory stays, empty.
            job = job_info.job
            base = Path(cwd) / self._log_dir / "running" / f"{self._log_name(job)}.{job.jobid}.attempt{job.attempt}"
            request["stdout"] = f"{base}.stdout"
            request["stderr"] = f"{base}.stderr"
        payload = saker.serialize.dumps_call(jobrunner.run, (request,), {})
        future = self.pilot.submit_function(payload, kind="python", **options)
        # The command path's arguments, for when this pilot's workers cannot run jobs.
        job_info.aux.update(saker=future, path="worker", request=request,
                            fallback=(command, cwd, env, options))
        future.add_done_callback(self._completed)

    def _import_jobrunner(self) -> Any:
        if self._jobrunner is None:
            from . import jobrunner  # imports snakemake.cli, which this process has already
            self._jobrunner = jobrunner
        return self._jobrunner

    def _snakemake_argv(self, command: str) -> Optional[List[str]]:
        """The arguments after `python -m snakemake`, or None when the command line is
        something else (a software deployment's precommand): that job takes the
        command path."""
        try:
            words = shlex.split(command)
        except ValueError:
            return None
        if len(words) < 3 or words[0] != self.get_python_executable() or words[1:3] != ["-m", "snakemake"]:
            return None
        return words[3:]

    def _launcher(self, command: str) -> str:
        """`python -m snakemake ARGS` as `python -c LAUNCHER ARGS` (see _LAUNCHER)."""
        python = self.get_python_executable()
        prefix = f"{python} -m snakemake "
        if not command.startswith(prefix):
            return command
        return f"{python} -c {shlex.quote(_LAUNCHER)} {command[len(prefix):]}"

    @property
    def cores(self) -> Any:
        # RealExecutor.get_job_args passes this as the spawned Snakemake's --cores.
        formatting = getattr(self, "_formatting_cores", None)
        return super().cores if formatting is None else formatting

    def _warn_scaled(self, job: JobExecutorInterface, threads: int, widest: int) -> None:
        """Says once per rule that its jobs run with fewer threads than they ask for."""
        rule = getattr(job, "name", None) or str(job)
        if rule in self._scaled:
            return
        self._scaled.add(rule)
        self.logger.warning(
            f"rule {rule} asks for {threads} threads; the pilot's widest node has {widest} "
            f"cores, so its jobs run with {widest} (--saker-strict-threads refuses them instead)"
        )

    def _widest_node(self) -> Optional[int]:
        """Cores of the pilot's largest node (None: none yet), asked at most every 10 s
        once one is known."""
        now = time.monotonic()
        if self._widest is None or self._widest[1] is None or now - self._widest[0] > 10.0:
            # An embedded pilot answers before its agents have registered: a group job
            # submitted then would keep its summed cores (say 50) and be refused.
            deadline = now + (30.0 if self._embedded else 0.0)
            while True:
                try:
                    nodes = self.pilot.status(timeout=30).get("nodes") or []
                except (saker.SakerError, concurrent.futures.TimeoutError):
                    nodes = []
                widest = max((int(node.get("cores") or 0) for node in nodes), default=0) or None
                if widest is not None or time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
            self._widest = (time.monotonic(), widest)
        return self._widest[1]

    def _refuse(self, job_info: SubmittedJobInfo, message: str) -> None:
        # Never queued: report it as the job's error (Snakemake's retries and
        # --keep-going apply as for any failed job).
        self._log_error(job_info, message)

    @staticmethod
    def _what(job: JobExecutorInterface) -> str:
        return f"group job {job.groupid}" if job.is_group() else f"rule {job.name} (jobid {job.jobid})"

    # -- results

    def _completed(self, _future: Any) -> None:
        """Runs on the client's reader thread: wakes the status loop."""
        with self._wake_lock:
            loop, event = self._loop, self._event
            if loop is None or event is None:
                return  # the first status check has not run yet: it will see the result
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:
            pass  # the status loop has ended

    async def check_active_jobs(self, active_jobs: List[SubmittedJobInfo]) -> AsyncGenerator[SubmittedJobInfo, None]:
        if self._event is None:
            with self._wake_lock:
                self._loop = asyncio.get_running_loop()
                self._event = asyncio.Event()
        # Cleared before looking: a result arriving from here on sets it again, so the
        # next sleep() returns at once instead of missing it.
        self._event.clear()
        for job_info in active_jobs:
            try:
                future = job_info.aux["saker"]
                still_active = not future.done() or self._report(job_info, future)
            except Exception as exc:
                # Never out of the status loop: Snakemake's scheduler would wait for
                # the jobs it was checking. This job fails, named, and the run goes on.
                self.logger.exception(f"checking {self._what(job_info.job)}")
                self._log_error(job_info, f"the Saker executor could not check {self._what(job_info.job)}: {exc!r}")
                continue
            if still_active:
                yield job_info

    async def sleep(self) -> None:
        if self._event is None:
            await super().sleep()
            return
        interval = self.next_seconds_between_status_checks or 0
        try:
            await asyncio.wait_for(self._event.wait(), max(interval, _BACKSTOP_SECONDS))
        except (asyncio.TimeoutError, asyncio.CancelledError):
            # CancelledError too, a BaseException: out of this loop it would end
            # Snakemake's status thread without a word (its handler takes Exceptions
            # only), leaving the run waiting forever. Nothing else cancels this task.
            pass

    def _report(self, job_info: SubmittedJobInfo, future: "concurrent.futures.Future[Any]") -> bool:
        """Reports a finished job to Snakemake; True when it was submitted again instead
        (the command path taking over from workers that cannot run it)."""
        job = job_info.job
        worker = job_info.aux.get("path") == "worker"
        try:
            future.result(0)
        except saker.TaskLost as exc:
            # No answer from the worker (time limit, lost node, a worker that could not
            # start): its child's output is in its files, if they are reachable.
            if worker and _worker_cannot_start(exc.result):
                return self._fall_back(job_info, exc.result.reason)
            if worker:
                stdout, stderr = self._take_outputs(job_info.aux["request"])
                self._report_failure(job_info, exc.result, stdout=stdout, stderr=stderr)
            else:
                self._report_failure(job_info, exc.result)
            return False
        except saker.TaskFailed as exc:
            if not worker:
                self._report_failure(job_info, exc.result)
                return False
            return self._report_raised(job_info, exc.result)
        except concurrent.futures.CancelledError:
            self._log_error(job_info, f"{self._what(job)} was cancelled on the Saker pilot")
            return False
        except saker.SakerError as exc:  # refused by the pilot, or the pilot is gone
            self._log_error(job_info, f"Saker did not run {self._what(job)}: {exc}")
            return False
        job_info.external_jobid = f"{future.job}"
        self.report_job_success(job_info)
        return False

    def _report_raised(self, job_info: SubmittedJobInfo, result: Any) -> bool:
        """A worker-path job whose function raised: the job failed, or the worker
        could not run it at all (then the command path takes it, and the run's rest)."""
        jobrunner = self._import_jobrunner()
        error = saker.serialize.loads_exception(result.output, result.reason)
        if isinstance(error, jobrunner.JobFailed):
            why = f"exit code {error.exit_code}" if error.signal is None else f"killed by signal {error.signal}"
            self._report_failure(job_info, result, why=why, stdout=error.stdout, stderr=error.stderr)
            return False
        if _unusable_worker(error, jobrunner):
            return self._fall_back(job_info, str(error))
        # A fault of the runner itself (not of the job): its traceback is the stderr.
        cause = error.__cause__
        self._report_failure(job_info, result, stdout="", stderr=str(cause) if cause else "")
        return False

    def _fall_back(self, job_info: SubmittedJobInfo, why: str) -> bool:
        """Submits a worker-path job again as a command; the rest of the run takes the
        command path too."""
        if self._job_path == "worker":
            self._job_path = "command"
            self.logger.warning(
                f"The Saker pilot's Python workers cannot run Snakemake jobs ({why}); this run "
                "takes the command path (--saker-job-path command) from here on: install "
                "saker-pilot, Snakemake and this plugin, the same versions, in the workers' "
                "Python to avoid it."
            )
        command, cwd, env, options = job_info.aux["fallback"]
        try:
            self._submit_command(job_info, command, False, cwd, env, options)
        except (saker.SakerError, TypeError, ValueError) as exc:
            self._log_error(job_info, f"Saker cannot run {self._what(job_info.job)}: {exc}")
            return False
        return True

    def _take_outputs(self, request: Dict[str, Any]) -> Tuple[str, str]:
        """The output files of a worker-path job that ended without an answer."""
        found = []
        for key in ("stdout", "stderr"):
            path = request.get(key)
            text = _full("", path) if path else ""
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            found.append(text)
        return found[0], found[1]

    def _report_failure(self, job_info: SubmittedJobInfo, result: Any, *, why: Optional[str] = None,
                        stdout: Optional[str] = None, stderr: Optional[str] = None) -> None:
        job = job_info.job
        job_info.external_jobid = f"{result.job}"
        if why is None:
            if result.reason:
                why = result.reason
            elif result.signal is not None:
                why = f"killed by signal {result.signal}"
            else:
                why = f"exit code {result.exit_code}"
        where = f" on {result.node}" if result.node else ""
        message = f"{self._what(job)} failed{where} (Saker job {result.job}, task {result.task}): {why}"
        if stderr is None:
            stderr = _full(result.stderr, result.stderr_path)
        if stdout is None:
            stdout = _full(result.stdout, result.stdout_path)
        tail = "\n".join(stderr.rstrip().splitlines()[-_TAIL_LINES:])
        if tail:
            message += f"\n--- stderr (last {_TAIL_LINES} lines) ---\n{tail}"
        log = self._write_log(job, stdout, stderr)
        self._log_error(job_info, message, aux_logs=[log] if log else None)

    @staticmethod
    def _log_name(job: JobExecutorInterface) -> str:
        return f"group-{job.groupid}" if job.is_group() else job.name

    def _write_log(self, job: JobExecutorInterface, stdout: str, stderr: str) -> Optional[str]:
        """The failed job's whole output in .snakemake/saker_logs/<rule or group>/
        <jobid>.attempt<N>.log, for aux_logs."""
        path = self._log_dir / self._log_name(job) / f"{job.jobid}.attempt{job.attempt}.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n")
        except OSError:
            return None
        return str(path)

    def _log_error(self, job_info: SubmittedJobInfo, message: str, **kwargs: Any) -> None:
        if job_info.job.is_group():
            # A group job's log_error drops the message: log it here.
            self.logger.error(message)
        self.report_job_error(job_info, msg=message + "\n", **kwargs)

    # -- ending

    def cancel_jobs(self, active_jobs: List[SubmittedJobInfo]) -> None:
        futures = [job_info.aux["saker"] for job_info in active_jobs if "saker" in job_info.aux]
        for future in futures:
            future.cancel()
        if futures and not self.pilot._require_connection().closed:
            # A request answered after the cancels were sent: closing the connection
            # sooner could drop them (the writer sends in order).
            try:
                self.pilot.status(timeout=10)
                self.pilot.status(timeout=10)  # and cancels of jobs answered meanwhile
            except (saker.SakerError, concurrent.futures.TimeoutError):
                pass
        for job_info in active_jobs:
            if job_info.aux.get("path") == "worker":
                self._take_outputs(job_info.aux["request"])  # a cancelled job's output files

    def shutdown(self) -> None:
        # Told before it is woken: a status loop woken first would check once more
        # and sleep again, up to the status-check interval (10 s), before it ends.
        with self.lock:
            self.wait = False
        with self._wake_lock:
            loop, event = self._loop, self._event
        if loop is not None and event is not None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass
        try:
            super().shutdown()
        finally:
            # An attached pilot keeps running (the connection closes); an embedded one stops.
            self.pilot.close()


def _single_rule_instance(job: JobExecutorInterface) -> bool:
    """A rule instance, or a group job of one (a rule with `group:` left alone)."""
    if not job.is_group():
        return True
    try:
        return len(list(getattr(job, "jobs"))) == 1
    except (AttributeError, TypeError):
        return False


def _unusable_worker(error: BaseException, jobrunner: Any) -> bool:
    """Whether a worker's raise says it cannot run Snakemake jobs at all: it cannot
    import this plugin (or Snakemake), or has another Snakemake than this run."""
    if isinstance(error, (ImportError, jobrunner.WorkerMismatch)):
        return True
    return isinstance(error, saker.RemoteError) and error.type_name in (
        "ImportError", "ModuleNotFoundError", "WorkerMismatch")


def _worker_cannot_start(result: Any) -> bool:
    """Whether a call was lost because its Python worker could not start at all (its
    Python has no saker-pilot, its command is wrong): the result's ``failure`` says
    ``worker_start``. A pilot older than that key says it only in its reason's text
    (the worker's log tail), which is matched instead."""
    failure = getattr(result, "failure", None)
    if failure is not None:
        return failure == "worker_start"
    reason = result.reason or ""
    return "worker ended" in reason and ("No module named 'saker'" in reason
                                         or "No module named saker" in reason)


def _full(inline: str, path: Optional[str]) -> str:
    """The whole output when it was spilled to a file we can read, else what is inline."""
    if path:
        try:
            with open(path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            pass
    return inline or ""
