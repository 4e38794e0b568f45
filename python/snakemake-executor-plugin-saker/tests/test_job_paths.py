"""The two job paths (--saker-job-path worker | command) on real pilots: failures with
their exit code and stderr tail, a time limit, --envvars, and the command path taking
over when the pilot's workers cannot import the plugin. (Retries and Ctrl-C on the
default worker path are in test_workflows.py.)"""

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from snakemake_executor_plugin_saker import _LAUNCHER, jobrunner

from conftest import PYTHON_DIR
from test_workflows import copy_workflow, snakemake


@pytest.mark.parametrize("path", ["worker", "command"])
def test_failures_time_limits_and_envvars_on_each_path(tmp_path: Path, path: str) -> None:
    workdir = copy_workflow("paths", tmp_path, path)
    env = dict(os.environ, SAKER_PATHS_VAR=f"seen on the {path} path")
    argv = [sys.executable, "-m", "snakemake", "--nocolor", "--executor", "saker", "--jobs", "3",
            "--saker-slots", "2", "--saker-job-path", path, "--keep-going",
            "--envvars", "SAKER_PATHS_VAR", "--verbose"]
    done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=120, env=env)
    log = done.stderr
    assert done.returncode != 0, log[-3000:]
    assert (workdir / "ok.txt").read_text() == f"seen on the {path} path\n"
    assert f"to Saker ({path} path)" in log
    # A file a run: block left open is flushed when the job's Snakemake exits.
    assert (workdir / "unclosed.txt").read_text() == "written, never closed\n"

    # The failed job: where, its exit code, its stderr's tail, and its whole output.
    assert "Error in rule fails" in log
    assert "failed on " in log and ": exit code 1" in log
    assert "fails: failing on purpose" in log
    assert "returned non-zero exit status 5" in log
    failed_log = next((workdir / ".snakemake/saker_logs/fails").glob("*.attempt1.log"))
    assert "fails: failing on purpose" in failed_log.read_text()

    # The job killed at its time limit, with what it wrote before.
    assert "Error in rule slow" in log
    assert "slow: started" in log
    assert not (workdir / "slow.txt").exists()
    # The worker path's live output files are gone once the jobs are reported.
    assert not [p for p in (workdir / ".snakemake/saker_logs").rglob("*") if p.suffix in (".stdout", ".stderr")]


@pytest.mark.parametrize("client", [True, False, None], ids=["without-snakemake", "without-saker", "no-python"])
def test_the_command_path_takes_over_from_workers_without_the_plugin(tmp_path: Path, client: Optional[bool]) -> None:
    import saker

    # The venv's base interpreter, with the saker client only: no Snakemake, no plugin.
    base = Path(sys.base_prefix) / "bin" / "python3"
    probe = subprocess.run([str(base), "-c", "import snakemake_executor_plugin_saker"],
                           env={"PYTHONPATH": str(PYTHON_DIR)}, capture_output=True)
    if sys.prefix == sys.base_prefix or probe.returncode == 0:
        pytest.skip("needs a base Python without the plugin (tests run from a venv)")
    workdir = tmp_path / "fallback"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(
        'rule all:\n    input: expand("f{i}.txt", i=range(3))\n\n'
        'rule f:\n    output: "f{i}.txt"\n    shell: "echo {wildcards.i} > {output}"\n'
    )
    # With the client, the worker starts and cannot import Snakemake; without it, the
    # worker itself cannot start (the result's failure says `worker_start`), nor can
    # one whose Python does not exist.
    worker = f"env PYTHONPATH={PYTHON_DIR if client else '/nonexistent'} {base} -m saker.worker"
    if client is None:
        worker = "/nonexistent/python3 -m saker.worker"
    with saker.Pilot.start(tmp_path / "pilot", slots=2, workers={"python": worker}) as pilot:
        done = snakemake(workdir, "--executor", "saker", "--jobs", "3", "--saker-pilot-dir", str(pilot.dir),
                         timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(workdir / f"f{i}.txt").read_text() for i in range(3)] == ["0\n", "1\n", "2\n"]
    assert done.stderr.count("takes the command path") == 1
    assert "Error in rule" not in done.stderr and "failed" not in done.stderr


def test_a_worker_of_another_snakemake_refuses_the_job() -> None:
    with pytest.raises(jobrunner.WorkerMismatch, match="the run uses 0.0"):
        jobrunner.run({"argv": [], "snakemake_version": "0.0"})


def test_the_command_path_launcher_exits_with_snakemake_status(tmp_path: Path) -> None:
    # `python -c LAUNCHER ARGS` stands for `python -m snakemake ARGS`.
    done = subprocess.run([sys.executable, "-c", _LAUNCHER, "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == jobrunner.SNAKEMAKE_VERSION
    done = subprocess.run([sys.executable, "-c", _LAUNCHER, "--no-such-option"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
