"""Jobs/s and makespan of N short rule instances: the Saker executor beside Snakemake's
local executor on the same cores, in one run (same machine, same moment).

    python bench.py --instances 1000 --cores 2 [--group 50] [--pilot-dir D]

Each row is one `snakemake` command from start to exit (DAG building included), in a
fresh copy of the workflow. `--group K` also times the Saker executor with the
instances packed K to a group job. `--pilot-dir` attaches to a running pilot (e.g. a
Slurm one) instead of an embedded pilot of `--cores` slots.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SNAKEFILE = '''
N = int(config["instances"])
rule all:
    input: expand("out/{i}.txt", i=range(N))
rule short:
    output: "out/{i}.txt"
    group: "short"
    shell: "echo {wildcards.i} $(hostname) > {output}"
'''


def run(label: str, args, instances: int, root: Path) -> float:
    workdir = root / label
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE)
    argv = [sys.executable, "-m", "snakemake", "--nocolor", "--quiet", "all", *args,
            "--config", f"instances={instances}"]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{label} failed:\n{done.stderr[-3000:]}")
    made = len(list((workdir / "out").glob("*.txt")))
    if made != instances:
        raise SystemExit(f"{label}: {made} outputs, expected {instances}")
    hosts = {path.read_text().split()[1] for path in (workdir / "out").glob("*.txt")}
    print(f"| {label} | {instances} | {took:.1f} s | {instances / took:.2f} | {len(hosts)} |", flush=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--group", type=int, default=0, help="also run packed K to a group job")
    parser.add_argument("--pilot-dir", help="attach to this pilot instead of an embedded one")
    parser.add_argument("--skip-local", action="store_true")
    options = parser.parse_args()
    if options.instances < 1 or options.cores < 1:
        parser.error("--instances and --cores must be at least 1")
    saker = ["--executor", "saker", "--jobs", str(max(options.instances, 1))]
    saker += ["--saker-pilot-dir", options.pilot_dir] if options.pilot_dir else ["--saker-slots", str(options.cores)]
    root = Path(tempfile.mkdtemp(prefix="saker-snakemake-bench-", dir=Path.cwd()))
    try:
        print("| executor | rule instances | makespan | jobs/s | hosts |")
        print("| --- | --- | --- | --- | --- |")
        if not options.skip_local:
            run(f"local --cores {options.cores}", ["--cores", str(options.cores)], options.instances, root)
        run("saker", saker, options.instances, root)
        if options.group:
            run(f"saker, groups of {options.group}", saker + ["--group-components", f"short={options.group}"],
                options.instances, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
