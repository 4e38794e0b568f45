#!/usr/bin/env python3
"""saker-perf rows of Snakemake on the local Slurm cluster: a whole workflow as one
Slurm job (sbatch-templates/snakemake.sbatch: a Saker pilot across the nodes and
Snakemake inside it), beside snakemake-executor-plugin-slurm submitting one Slurm job
per rule instance to the same nodes, measured in the same run.

Run by `saker-perf --only snakemake-slurm` (perf/src/bench/python.rs) with the cluster
up (`source .slurm-cluster/env.sh`). By hand:

    PYTHONPATH=python .venv/bin/python perf/python/snakemake_slurm_rows.py [--quick] [--table]

The workflow is the plugin's bench.py: N short rule instances (`echo … > out/{i}.txt`),
200 (quick: 40), in a fresh copy for every run. Runs alternate Saker, plugin, Saker,
plugin, …, 2 of each (quick: 1); rows give the medians. Each makespan is what the user
waits for:
- Saker: from `sbatch snakemake.sbatch` (all nodes, --exclusive) to the batch job's
  end, its queue wait, pilot start, DAG building and shutdown included (the job's state
  is read every 0.25 s).
- The Slurm plugin: `snakemake --executor slurm` from start to exit, with every job
  asking for 1 CPU and 100 MB, so 4 of its jobs fit on each node as Saker's 4 slots
  do. It checks job status with `squeue` (the cluster has no accounting for `sacct`)
  every second (`--slurm-init-seconds-before-status-checks 1`; its default is 40 s):
  the plugin at its fastest. `--plugin-status-seconds` sets another interval.

The plugin runs from its own venv (.venv-snakemake-slurm, made here from
requirements-snakemake-slurm.txt on first use), so that its imports (pandas) do not
slow the Saker side's Snakemake. Its job-step plugin drops SLURM_CONF from the `srun`
it runs inside each job; on a real cluster the configuration is at Slurm's default
path and nothing is lost, but this cluster keeps it elsewhere, so an `srun` on PATH
puts SLURM_CONF back and calls the real one.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

from rows import makespan_rows

REPO = pathlib.Path(__file__).resolve().parents[2]
PLUGIN = REPO / "python" / "snakemake-executor-plugin-saker"
sys.path.insert(0, str(PLUGIN))

import bench  # noqa: E402  (the plugin's benchmark: its workflow and run())

BASELINE_VENV = REPO / ".venv-snakemake-slurm"
BASELINE_REQUIREMENTS = pathlib.Path(__file__).resolve().parent / "requirements-snakemake-slurm.txt"
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
RUN_TIMEOUT = 1800.0


def slurm(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def baseline_python() -> pathlib.Path:
    """The baseline venv's Python, made (from the package registry) on first use."""
    python = BASELINE_VENV / "bin" / "python"
    if not python.exists():
        print(f"snakemake_slurm_rows: making {BASELINE_VENV}", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(BASELINE_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-r",
                        str(BASELINE_REQUIREMENTS)], check=True)
    return python


def wait_for_idle_cluster(timeout: float = 300.0) -> None:
    """Waits until no job is pending or running, so that neither side queues behind
    the other's leftovers."""
    deadline = time.monotonic() + timeout
    while slurm("squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING", "-o", "%i").strip():
        if time.monotonic() > deadline:
            raise SystemExit("the Slurm cluster is still busy: " + slurm("squeue"))
        time.sleep(1)


def job_state(job: str) -> str:
    fields = dict(field.split("=", 1) for field in slurm("scontrol", "show", "job", "-o", job).split()
                  if "=" in field)
    return fields.get("JobState", "UNKNOWN")


def saker_run(instances: int, nodes: int, root: pathlib.Path, env: Dict[str, str]) -> float:
    """One workflow as one batch job of snakemake.sbatch; seconds from sbatch to its end."""
    workdir = bench.workflow(root)
    venv_bin = pathlib.Path(sys.executable).parent
    job_env = dict(env, SNAKEMAKE=str(venv_bin / "snakemake"), JOBS=str(instances),
                   PILOT=str(workdir / "pilot"),
                   ARGS=f"--nocolor --quiet all --config instances={instances}")
    log = workdir / "job.log"
    started = time.monotonic()
    job = subprocess.run(
        ["sbatch", "--parsable", f"--nodes={nodes}", "--time=30", f"--chdir={workdir}",
         f"--output={log}", str(REPO / "sbatch-templates" / "snakemake.sbatch")],
        check=True, capture_output=True, text=True, env=job_env).stdout.strip().split(";")[0]
    state = "PENDING"
    try:
        while state not in FINAL_STATES:
            if time.monotonic() - started > RUN_TIMEOUT:
                raise SystemExit(f"saker: job {job} still {state} after {RUN_TIMEOUT:.0f} s")
            time.sleep(0.25)
            state = job_state(job)
    finally:
        if state not in FINAL_STATES:
            subprocess.run(["scancel", job], check=False)
    took = time.monotonic() - started
    if state != "COMPLETED":
        tail = log.read_text()[-3000:] if log.exists() else "(no log)"
        raise SystemExit(f"saker: job {job} ended {state}:\n{tail}")
    bench.check_outputs("saker", workdir, instances, hosts=nodes)
    shutil.rmtree(workdir, ignore_errors=True)
    return took


def srun_shim(directory: pathlib.Path) -> pathlib.Path:
    """A directory with an `srun` that restores SLURM_CONF (see the module's doc)."""
    directory.mkdir(parents=True, exist_ok=True)
    real = shutil.which("srun")
    if real is None:
        raise SystemExit("srun is not on PATH")
    shim = directory / "srun"
    shim.write_text(f"#!/bin/sh\nexport SLURM_CONF='{os.environ['SLURM_CONF']}'\nexec '{real}' \"$@\"\n")
    shim.chmod(0o755)
    return directory


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 instances, one run of each")
    parser.add_argument("--instances", type=int, help="rule instances (200; quick 40)")
    parser.add_argument("--runs", type=int, help="runs of each side (2; quick 1)")
    parser.add_argument("--nodes", type=int, help="nodes for both sides (default: every node)")
    parser.add_argument("--plugin-status-seconds", type=int, default=1,
                        help="the Slurm plugin's seconds between status checks")
    parser.add_argument("--table", action="store_true", help="a table for people, not JSON rows")
    args = parser.parse_args()
    if "SLURM_CONF" not in os.environ:
        raise SystemExit("no Slurm cluster: source .slurm-cluster/env.sh first")
    instances = args.instances or (40 if args.quick else 200)
    runs = args.runs or (1 if args.quick else 2)
    nodes = args.nodes or len(slurm("sinfo", "-h", "-N", "-o", "%N").split())
    partition = next(p.rstrip("*") for p in slurm("sinfo", "-h", "-o", "%P").split() if p.endswith("*"))

    env = dict(os.environ)
    paths = [str(PLUGIN), str(REPO / "python")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["SAKER"] = str(pathlib.Path(env.get("SAKER_BIN", REPO / "target" / "release" / "saker")).resolve())

    python = str(baseline_python())
    root = pathlib.Path(tempfile.mkdtemp(prefix="snakemake-slurm-rows-", dir=REPO / "target"))
    plugin_env = dict(os.environ)
    plugin_env.pop("PYTHONPATH", None)
    plugin_env["PATH"] = f"{srun_shim(root / 'shim')}{os.pathsep}{plugin_env['PATH']}"
    plugin_args = ["--executor", "slurm", "--jobs", str(instances), "--slurm-no-account",
                   "--slurm-status-command", "squeue",
                   "--slurm-init-seconds-before-status-checks", str(args.plugin_status_seconds),
                   "--default-resources", f"slurm_partition={partition}", "mem_mb=100", "runtime=30"]
    took: Dict[str, List[float]] = {"saker": [], "plugin": []}
    try:
        for _ in range(runs):
            wait_for_idle_cluster()
            took["saker"].append(saker_run(instances, nodes, root, env))
            print(f"snakemake_slurm_rows: saker {took['saker'][-1]:.1f} s", file=sys.stderr, flush=True)
            wait_for_idle_cluster()
            took["plugin"].append(bench.run("plugin", plugin_args, instances, root, env=plugin_env,
                                            quiet=True, python=python, hosts=nodes))
            print(f"snakemake_slurm_rows: plugin {took['plugin'][-1]:.1f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    if args.table:
        bench.print_makespans(took, instances)
        return 0
    makespan_rows(f"snakemake on slurm: {instances} short rules on {nodes} nodes", instances,
                  took["saker"], took["plugin"],
                  f"snakemake-executor-plugin-slurm, one job per rule, status every "
                  f"{args.plugin_status_seconds} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
