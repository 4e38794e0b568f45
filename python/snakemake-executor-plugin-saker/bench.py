"""Jobs/s and makespan of N short rule instances: the Saker executor beside Snakemake's
local executor on the same cores, in one run (same machine, same moment).

    python bench.py --instances 1000 --cores 2 [--paths worker,command] [--group 50]
                    [--repeat 3] [--pilot-dir D]

Each row is one `snakemake` command from start to exit (DAG building included), in a
fresh copy of the workflow. `--paths` lists the plugin's job paths to time
(--saker-job-path: worker, command); `--group K` also times the Saker executor with
the instances packed K to a group job. `--repeat R` runs every configuration R times,
alternated (A, B, A, B, …), and prints the medians after the runs. `--pilot-dir`
attaches to a running pilot (e.g. a Slurm one) instead of an embedded pilot of
`--cores` slots. perf/python/snakemake_rows.py (saker-perf's `snakemake` row) uses
`run` from here.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

SNAKEFILE = '''
N = int(config["instances"])
rule all:
    input: expand("out/{i}.txt", i=range(N))
rule short:
    output: "out/{i}.txt"
    shell: "echo {wildcards.i} $(hostname) > {output}"
'''


def workflow(root: Path) -> Path:
    """A fresh directory under ``root`` holding the workflow's Snakefile."""
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    (workdir / "Snakefile").write_text(SNAKEFILE)
    return workdir


def check_outputs(label: str, workdir: Path, instances: int, hosts: Optional[int] = None) -> int:
    """The number of hosts that made the outputs in ``workdir``, which must be
    ``instances`` files (made on ``hosts`` hosts when given)."""
    outputs = list((workdir / "out").glob("*.txt"))
    if len(outputs) != instances:
        raise SystemExit(f"{label}: {len(outputs)} outputs, expected {instances} (in {workdir})")
    made_on = {path.read_text().split()[1] for path in outputs}
    if hosts is not None and len(made_on) != hosts:
        raise SystemExit(f"{label}: outputs made on {sorted(made_on)}, expected {hosts} hosts")
    return len(made_on)


def run(label: str, args: Sequence[str], instances: int, root: Path,
        env: Optional[Dict[str, str]] = None, quiet: bool = False,
        python: str = sys.executable, hosts: Optional[int] = None) -> float:
    """Runs the workflow once in a fresh directory under ``root`` with ``python``'s
    Snakemake; its makespan (s). ``hosts``: the outputs must come from that many hosts."""
    workdir = workflow(root)
    argv = [python, "-m", "snakemake", "--nocolor", "--quiet", "all", *args,
            "--config", f"instances={instances}"]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, env=env)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{label} failed (exit status {done.returncode}):\n{done.stdout[-2000:]}\n"
                         f"{done.stderr[-3000:]}\n(workflow directory {workdir})")
    made_on = check_outputs(label, workdir, instances, hosts)
    shutil.rmtree(workdir, ignore_errors=True)
    if not quiet:
        print(f"| {label} | {instances} | {took:.1f} s | {instances / took:.2f} | {made_on} |", flush=True)
    return took


def print_makespans(took: Dict[str, List[float]], instances: int) -> None:
    """A table of each executor's median makespan, its jobs/s and every run."""
    print(f"{'executor':10} {'makespan':>10} {'jobs/s':>8}  runs")
    for name, values in took.items():
        median = statistics.median(values)
        print(f"{name:10} {median:>8.1f} s {instances / median:>8.2f}  "
              + ", ".join(f"{value:.1f}" for value in values))


def configurations(cores: int, instances: int, paths: Sequence[str], group: int,
                   pilot_dir: Optional[str], skip_local: bool) -> List[Tuple[str, List[str]]]:
    """(label, snakemake arguments) of each configuration, in the order they run."""
    saker = ["--executor", "saker", "--jobs", str(max(instances, 1))]
    saker += ["--saker-pilot-dir", pilot_dir] if pilot_dir else ["--saker-slots", str(cores)]
    found: List[Tuple[str, List[str]]] = []
    if not skip_local:
        found.append((f"local --cores {cores}", ["--cores", str(cores)]))
    for path in paths:
        found.append((f"saker, {path} path", saker + ["--saker-job-path", path]))
    if group:
        found.append((f"saker, {paths[0] if paths else 'worker'} path, groups of {group}",
                      saker + ["--saker-job-path", paths[0] if paths else "worker",
                               "--groups", "short=short", "--group-components", f"short={group}"]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--paths", default="worker",
                        help="comma-separated job paths of the plugin to time (worker, command)")
    parser.add_argument("--group", type=int, default=0, help="also run packed K to a group job")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each configuration, alternated")
    parser.add_argument("--pilot-dir", help="attach to this pilot instead of an embedded one")
    parser.add_argument("--skip-local", action="store_true")
    options = parser.parse_args()
    if options.instances < 1 or options.cores < 1 or options.repeat < 1:
        parser.error("--instances, --cores and --repeat must be at least 1")
    paths = [path.strip() for path in options.paths.split(",") if path.strip()]
    configs = configurations(options.cores, options.instances, paths, options.group,
                             options.pilot_dir, options.skip_local)
    root = Path(tempfile.mkdtemp(prefix="saker-snakemake-bench-", dir=Path.cwd()))
    took: Dict[str, List[float]] = {label: [] for label, _ in configs}
    try:
        print("| executor | rule instances | makespan | jobs/s | hosts |")
        print("| --- | --- | --- | --- | --- |")
        for _ in range(options.repeat):
            for label, args in configs:
                took[label].append(run(label, args, options.instances, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if options.repeat > 1:
        print(f"\nMedians of {options.repeat} runs each, alternated "
              f"(load average now {os.getloadavg()[0]:.1f}):\n")
        print("| executor | rule instances | makespan (median) | jobs/s | range |")
        print("| --- | --- | --- | --- | --- |")
        for label, values in took.items():
            median = statistics.median(values)
            print(f"| {label} | {options.instances} | {median:.1f} s | {options.instances / median:.2f} "
                  f"| {min(values):.1f}–{max(values):.1f} s |")


if __name__ == "__main__":
    main()
