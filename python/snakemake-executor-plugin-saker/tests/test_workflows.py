"""Real Snakemake runs (the `snakemake` command line) on real pilots.

The fan-out/fan-in workflow's outputs must equal those of Snakemake's local executor;
the cost is kept for CI by packing the 1,000 `work` instances into group jobs of
--group-components (bench.py times them one task each).
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict

HERE = Path(__file__).resolve().parent
INSTANCES = int(os.environ.get("SAKER_SNAKEMAKE_N", "1000"))


def snakemake(workdir: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "snakemake", "--nocolor", *args]
    return subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=timeout)


def copy_workflow(name: str, tmp_path: Path, label: str) -> Path:
    workdir = tmp_path / label
    shutil.copytree(HERE / name, workdir)
    return workdir


def outputs(workdir: Path) -> Dict[str, bytes]:
    found = {}
    for top in ("data", "work", "result"):
        for path in (workdir / top).rglob("*"):
            if path.is_file():
                found[str(path.relative_to(workdir))] = path.read_bytes()
    return found


def test_fan_out_fan_in_matches_the_local_executor(tmp_path):
    config = ["--retries", "1", "--config", f"instances={INSTANCES}"]  # --config takes what follows
    local = copy_workflow("workflow", tmp_path, "local")
    done = snakemake(local, "--cores", "2", *config)
    assert done.returncode == 0, done.stderr[-3000:]

    ours = copy_workflow("workflow", tmp_path, "saker")
    started = time.monotonic()
    done = snakemake(ours, "--executor", "saker", "--jobs", "50", "--saker-slots", "2",
                     "--group-components", "fan=50", "--printshellcmds", *config)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"saker executor: {INSTANCES} work instances in {took:.1f}s")

    expected = outputs(local)
    assert len(expected) == INSTANCES + 4
    assert outputs(ours) == expected
    assert (ours / "result/summary.txt").read_text().split() == [
        str(INSTANCES), str(sum(i * i for i in range(INSTANCES)))]
    assert (ours / "result/threaded.txt").read_text() == "threads=2\n"
    # Its job held two cores, and its shell saw them (pinned when one CPU per slot).
    cpus = "2" if os.cpu_count() == 2 else (ours / "logs/threaded.log").read_text().split("cpus=")[1].strip()
    assert (ours / "logs/threaded.log").read_text() == f"cores=2 omp=2 cpus={cpus}\n"

    # flaky failed once on the pilot (its Snakemake job exits 1; the rule's exit 3 is
    # in the stderr tail) and Snakemake retried it.
    log = done.stderr
    assert "Error in rule flaky" in log
    assert "failed on " in log and ": exit code 1" in log
    assert "--- stderr (last 40 lines) ---" in log
    assert "returned non-zero exit status 3" in log
    assert "Trying to restart job" in log
    failed_log = next((ours / ".snakemake/saker_logs/flaky").glob("*.attempt1.log"))
    assert "flaky: failing on purpose" in failed_log.read_text()
    # The `work` instances went as group jobs of 50 (one Saker task each).
    assert log.count("Group job fan") == -(-INSTANCES // 50)


def test_resources_map_to_hpc_jobs_and_bad_requests_are_refused(tmp_path):
    workdir = copy_workflow("features", tmp_path, "features")
    done = snakemake(workdir, "--executor", "saker", "--jobs", "4", "--keep-going",
                     "--saker-agents", "2", "--saker-slots", "2", timeout=120)
    log = done.stderr
    assert done.returncode != 0, log[-3000:]
    # An HPC job over both agents; the Snakemake job ran once, on the leader.
    lines = (workdir / "mpi.txt").read_text().splitlines()
    assert len(lines) == 3 and lines[-1] == "ranks=2", lines
    assert all(line.endswith("slots=1") for line in lines[:2]), lines
    # Refused before anything was queued, with the reason.
    assert not (workdir / "unknown.txt").exists()
    assert "licence_seats have no Saker meaning" in log
    # More threads than a node has: run with a node's cores, as the local executor
    # does with --cores, and said once.
    assert (workdir / "wide.txt").read_text() == "threads=1\n"
    assert log.count("rule wide asks for 8 threads; the pilot's widest node has 1 cores") == 1

    # Unless strictness is asked for: refused, with the reason.
    (workdir / "wide.txt").unlink()
    done = snakemake(workdir, "--executor", "saker", "--jobs", "1", "--saker-strict-threads",
                     "--saker-agents", "2", "--saker-slots", "2", "wide.txt", timeout=120)
    assert done.returncode != 0, done.stderr[-3000:]
    assert not (workdir / "wide.txt").exists()
    assert "8 cores per task; the widest node has 1" in done.stderr

    # Snakemake's own --set-threads and --max-threads apply first: the rule fits the
    # node, so it runs even when strict, and nothing is said.
    for flag in (["--set-threads", "wide=1"], ["--max-threads", "1"]):
        done = snakemake(workdir, "--executor", "saker", "--jobs", "1", "--saker-strict-threads",
                         "--saker-agents", "2", "--saker-slots", "2", "wide.txt", *flag, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        assert (workdir / "wide.txt").read_text() == "threads=1\n"
        assert "asks for 8 threads" not in done.stderr
        (workdir / "wide.txt").unlink()


def test_ctrl_c_cancels_the_jobs_on_an_attached_pilot(tmp_path):
    import saker

    workdir = tmp_path / "cancel"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(
        'rule all:\n    input: expand("s{i}.txt", i=range(2))\n\n'
        'rule slow:\n    output: "s{i}.txt"\n    shell: "sleep 300; touch {output}"\n'
    )
    with saker.Pilot.start(tmp_path / "pilot", slots=2) as pilot:
        argv = [sys.executable, "-m", "snakemake", "--nocolor", "--executor", "saker", "--jobs", "2",
                "--saker-pilot-dir", str(pilot.dir)]
        process = subprocess.Popen(argv, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert _until(lambda: pilot.status()["running"] == 2, 60), "the jobs never started"
            process.send_signal(signal.SIGINT)
            output, _ = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode != 0, output[-2000:]
        assert _until(lambda: pilot.status()["cancelled"] == 2, 30), pilot.status()
        assert pilot.status()["running"] == 0
        # Attached: Snakemake left the pilot running.
        assert pilot.submit("true").result(30).ok


def _until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()
