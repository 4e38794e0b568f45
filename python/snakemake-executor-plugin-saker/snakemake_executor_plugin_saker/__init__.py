"""Snakemake executor plugin: runs a workflow's jobs as tasks of a Saker pilot.

``snakemake --executor saker`` starts an embedded pilot on this machine (stopped when
Snakemake ends), or with ``--saker-pilot-dir D`` attaches to a running one (e.g. started
by ``sbatch-templates/snakemake.sbatch`` across an allocation). Each Snakemake job (a
rule instance or a group job) becomes one command task, ``python -m snakemake`` for
that job as every remote executor spawns it; its status comes from the pilot's result
stream (the client's futures), never from polling. See docs/snakemake.md.
"""


import asyncio
import concurrent.futures
import os
import shlex
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncGenerator, List, Optional, Tuple

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
    tag: str = field(
        default="snakemake",
        metadata={"help": "Tag of every task this run submits (saker status lists tags).", "required": False},
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
    def __post_init__(self) -> None:
        settings: ExecutorSettings = self.workflow.executor_settings or ExecutorSettings()
        self._settings = settings
        self._ignored = {name.strip() for name in (settings.ignore_resources or "").split(",") if name.strip()}
        # Global --resources are Snakemake's own limits: not Saker's business.
        self._ignored.update(name for name in getattr(self.workflow, "global_resources", {}) or {})
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._event: Optional[asyncio.Event] = None
        self._wake_lock = threading.Lock()
        self._log_dir = Path(".snakemake") / "saker_logs"
        self._formatting_cores: Optional[int] = None
        self._widest: Optional[Tuple[float, Optional[int]]] = None
        if self.workflow.remote_execution_settings.immediate_submit:
            raise WorkflowError("the Saker executor does not support --immediate-submit: it submits "
                                "each job when Snakemake finds it ready")
        _import_saker()
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
        if job.is_group() and "cores" in options:
            # Snakemake sums the threads of a group's jobs that could run at once;
            # the group gets at most a whole node, and its Snakemake shares it out.
            widest = self._widest_node()
            if widest:
                options["cores"] = min(options["cores"], widest)
        if options.get("memory_mib"):
            options["memory_mib"] += self._settings.memory_overhead
        # The spawned Snakemake uses exactly the cores the task holds.
        self._formatting_cores = options.get("cores", options.get("cores_per_rank", 1))
        try:
            command = self.format_job_exec(job)
        finally:
            self._formatting_cores = None
        if hpc:
            # Saker starts one process per rank; the Snakemake job must run once, on the
            # leader, and start its ranks itself with the rule's launcher (mpi resource).
            command = f'if [ "${{SAKER_RANK:-0}}" = 0 ]; then {command}; fi'
        env = {str(key): str(value) for key, value in self.envvars().items()}
        env.update(options.pop("env", {}))
        tags = [self._settings.tag] + options.pop("tags", [])
        cwd = os.getcwd() if self.workflow.storage_settings.assume_common_workdir else None
        try:
            future = self.pilot.submit(command, shell=True, cwd=cwd, env=env or None,
                                       tags=tags, inline_output=_INLINE_OUTPUT, **options)
        except (saker.SakerError, TypeError, ValueError) as exc:
            self._refuse(job_info, f"Saker cannot run {self._what(job)}: {exc}")
            return
        job_info.aux["saker"] = future
        future.add_done_callback(self._completed)
        self.logger.debug(f"Submitted {self._what(job)} to Saker: {' '.join(describe(options))}")
        self.report_job_submission(job_info)

    @property
    def cores(self) -> Any:
        # RealExecutor.get_job_args passes this as the spawned Snakemake's --cores.
        formatting = getattr(self, "_formatting_cores", None)
        return super().cores if formatting is None else formatting

    def _widest_node(self) -> Optional[int]:
        """Cores of the pilot's largest node (None: none yet), asked at most every 10 s."""
        now = time.monotonic()
        if self._widest is None or now - self._widest[0] > 10.0:
            try:
                nodes = self.pilot.status(timeout=30).get("nodes") or []
            except (saker.SakerError, concurrent.futures.TimeoutError):
                nodes = []
            self._widest = (now, max((int(node.get("cores") or 0) for node in nodes), default=0) or None)
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
            future = job_info.aux["saker"]
            if not future.done():
                yield job_info
                continue
            self._report(job_info, future)

    async def sleep(self) -> None:
        if self._event is None:
            await super().sleep()
            return
        interval = self.next_seconds_between_status_checks or 0
        try:
            await asyncio.wait_for(self._event.wait(), max(interval, _BACKSTOP_SECONDS))
        except asyncio.TimeoutError:
            pass

    def _report(self, job_info: SubmittedJobInfo, future: "concurrent.futures.Future[Any]") -> None:
        job = job_info.job
        try:
            result = future.result(0)
        except saker.TaskFailed as exc:
            self._report_failure(job_info, exc.result)
            return
        except concurrent.futures.CancelledError:
            self._log_error(job_info, f"{self._what(job)} was cancelled on the Saker pilot")
            return
        except saker.SakerError as exc:  # refused by the pilot, or the pilot is gone
            self._log_error(job_info, f"Saker did not run {self._what(job)}: {exc}")
            return
        job_info.external_jobid = f"{result.job}"
        self.report_job_success(job_info)

    def _report_failure(self, job_info: SubmittedJobInfo, result: Any) -> None:
        job = job_info.job
        job_info.external_jobid = f"{result.job}"
        if result.reason:
            why = result.reason
        elif result.signal is not None:
            why = f"killed by signal {result.signal}"
        else:
            why = f"exit code {result.exit_code}"
        where = f" on {result.node}" if result.node else ""
        message = f"{self._what(job)} failed{where} (Saker job {result.job}, task {result.task}): {why}"
        stderr = _full(result.stderr, result.stderr_path)
        tail = "\n".join(stderr.rstrip().splitlines()[-_TAIL_LINES:])
        if tail:
            message += f"\n--- stderr (last {_TAIL_LINES} lines) ---\n{tail}"
        log = self._write_log(job, result, stderr)
        self._log_error(job_info, message, aux_logs=[log] if log else None)

    def _write_log(self, job: JobExecutorInterface, result: Any, stderr: str) -> Optional[str]:
        """The failed job's whole output in .snakemake/saker_logs/, for aux_logs."""
        name = f"group-{job.groupid}" if job.is_group() else job.name
        path = self._log_dir / name / f"{job.jobid}.attempt{job.attempt}.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            stdout = _full(result.stdout, result.stdout_path)
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

    def shutdown(self) -> None:
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


def _full(inline: str, path: Optional[str]) -> str:
    """The whole output when it was spilled to a file we can read, else what is inline."""
    if path:
        try:
            with open(path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            pass
    return inline or ""
