#!/bin/bash
# wheel-test.sh [WHEEL] - the saker-pilot wheel as a user without Rust gets it.
#
# Installs WHEEL (default: the one scripts/wheel.sh wrote to target/wheels/) alone into
# an empty venv, then runs, from a scratch directory and with an environment that has
# no cargo, no target/ and no SAKER_BIN on it (PATH = the venv's bin, /usr/bin, /bin):
#   1. python/README.md's quick start (extracted, so that the test follows the
#      document: its blocks marked `<!-- quickstart: NAME -->`, else its first python
#      block), run as a script file by the venv's python *without* the venv's bin on
#      PATH: Pilot.start() must find the binary the wheel installed;
#   2. README's first command, `saker run --array 1-100 -- examples/pi.sh {index}`,
#      with the wheel's `saker` found on PATH: 100 results;
#   3. with SLURM_CONF set (a cluster, e.g. scripts/slurm-cluster/up.sh): the same run
#      inside a 2-node allocation (sbatch), where the binary without libslurm starts its
#      agents with srun and reads the allocation's end time with squeue, plus a Python
#      call through Pilot.start() in the same allocation.
# SAKER_REQUIRE_SLURM=1 makes a missing cluster a failure instead of a skip;
# SAKER_WHEEL_TEST_KEEP=1 keeps the scratch directory (venv, logs, pilot directories);
# PYTHON (default python3) makes the venv, e.g. a Python 3.9 for the oldest supported.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
wheel=${1:-}
if [ -z "$wheel" ]; then
  wheel=$(ls "$REPO"/target/wheels/saker_pilot-*.whl 2>/dev/null | head -n 1)
  [ -n "$wheel" ] || { echo "wheel-test: no wheel in target/wheels (run scripts/wheel.sh)" >&2; exit 1; }
fi
log() { echo "[wheel-test $(date +%T)] $*"; }
fail() { echo "[wheel-test] FAILED: $*" >&2; exit 1; }

# estimates RESULTS.jsonl: "<succeeded tasks that printed an estimate of pi> <nodes they ran on>"
estimates() {
  "$venv/bin/python" - "$1" <<'PY'
import json, re, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
good = [r for r in rows if r["state"] == "succeeded" and re.match(r"\d+ \d+ 3\.\d+$", r["stdout"].strip())]
print(len(good), len({r["node_id"] for r in good}))
PY
}

scratch=$(mktemp -d /tmp/saker-wheel-test.XXXXXX)
if [ "${SAKER_WHEEL_TEST_KEEP:-0}" = 1 ]; then
  trap 'echo "[wheel-test] kept $scratch"' EXIT
else
  trap 'rm -rf "$scratch"' EXIT
fi
venv=$scratch/venv
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index "$wheel"
log "installed $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) into an empty venv"

# A user's environment: nothing of this checkout or its toolchain. TMPDIR in the
# scratch directory: pilots' temporary directories go when it goes.
mkdir -p "$scratch/tmp"
clean_env=(env -i HOME="$HOME" LANG=C.UTF-8 TMPDIR="$scratch/tmp" USER="${USER:-root}")
bare_path=/usr/bin:/bin
user_path=$venv/bin:$bare_path
for tool in cargo rustc; do
  if PATH=$user_path command -v "$tool" >/dev/null; then fail "$tool is on the test's PATH"; fi
done
case ":$user_path:" in *"$REPO"*) fail "the test's PATH reaches the checkout" ;; esac
work=$scratch/work
mkdir -p "$work"
cd "$work"

# ------------------------------------------------------------- 1. Python quick start
"$venv/bin/python" - "$REPO/python/README.md" "$work/quickstart.py" <<'EOF'
# The quick start: the python blocks marked `<!-- quickstart: NAME -->` with the first
# such NAME, joined (scripts/quickstarts.py's rule), else the first python block.
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"(?:<!--\s*quickstart:\s*([\w-]+)\s*-->\s*\n)?```python\n(.*?)```", text, re.S)
if not blocks:
    sys.exit("no python block in " + sys.argv[1])
names = [name for name, _ in blocks if name]
chosen = [body for name, body in blocks if name == names[0]] if names else [blocks[0][1]]
open(sys.argv[2], "w").write("".join(chosen))
EOF
out=$("${clean_env[@]}" PATH="$bare_path" "$venv/bin/python" quickstart.py 2>&1) \
  || { echo "$out"; fail "python/README.md's quick start"; }
echo "$out" | sed 's/^/  | /'
"${clean_env[@]}" PATH="$bare_path" "$venv/bin/python" -c '
import os, sys, saker
from saker.pilot import _find_binary
where = os.path.dirname(os.path.realpath(saker.__file__))
assert where.startswith(sys.prefix) or where.startswith(os.path.realpath(sys.prefix)), where
binary = _find_binary(None)
assert binary == os.path.realpath(os.path.join(sys.prefix, "bin", "saker")), binary
print("  the client in", where, "starts", binary)
' || fail "the installed package or its binary"
log "python quick start ok"

# ------------------------------------------------------------- 2. saker run --array
cp "$REPO/examples/pi.sh" "$work/pi.sh"
[ "$("${clean_env[@]}" PATH="$user_path" sh -c 'command -v saker')" = "$venv/bin/saker" ] \
  || fail "saker on PATH is not the wheel's"
"${clean_env[@]}" PATH="$user_path" saker run --dir "$work/local" --array 1-100 -- ./pi.sh {index} \
  2> "$work/local.err" || { cat "$work/local.err"; fail "saker run --array 1-100"; }
"${clean_env[@]}" PATH="$user_path" saker results --dir "$work/local" --format jsonl > "$work/local.jsonl"
read -r count nodes < <(estimates "$work/local.jsonl")
[ "$count" = 100 ] || { head -c 2000 "$work/local.jsonl"; fail "saker run: $count estimates of pi, not 100"; }
log "saker run --array 1-100: 100 estimates of pi"

# ------------------------------------------------------------- 3. in a Slurm allocation
if [ -z "${SLURM_CONF:-}" ]; then
  [ "${SAKER_REQUIRE_SLURM:-0}" = 1 ] && fail "SAKER_REQUIRE_SLURM=1 but SLURM_CONF is unset"
  log "no Slurm cluster (SLURM_CONF unset): allocation test skipped"
  exit 0
fi
cat > "$work/alloc.py" <<'EOF'
import saker

def square(x):
    return x * x

if __name__ == "__main__":
    with saker.Pilot.start() as pilot:
        print("squares", sum(pilot.map(square, range(100))))
EOF
# The allocation's end time comes from squeue: a task whose time limit outlasts the
# allocation must never start (exit 3), where an unknown end would let it run.
cat > "$work/alloc.sbatch" <<EOF
#!/bin/sh
cd "$work"
saker run --dir "$work/alloc" --array 1-100 -- ./pi.sh {index} || exit 1
saker results --dir "$work/alloc" --format jsonl > "$work/alloc.jsonl" || exit 1
saker run --dir "$work/walltime" --time-limit 1h -- true
echo "walltime exit \$?"
python "$work/alloc.py" || exit 1
EOF
job=$("${clean_env[@]}" PATH="$user_path" SLURM_CONF="$SLURM_CONF" \
  sbatch --parsable --nodes=2 --time=5 --job-name=saker-wheel-test \
  --output="$work/alloc.log" "$work/alloc.sbatch")
job=${job%%;*}
log "allocation test: job $job, 2 nodes, 5 minutes"
waited=0
while squeue -h -j "$job" 2>/dev/null | grep -q .; do
  if [ "$waited" -ge 180 ]; then scancel "$job"; cat "$work/alloc.log"; fail "job $job still running after 180 s"; fi
  sleep 1; waited=$((waited + 1))
done
[ -s "$work/alloc.jsonl" ] || { cat "$work/alloc.log"; fail "saker run in the allocation"; }
read -r count nodes < <(estimates "$work/alloc.jsonl")
[ "$count" = 100 ] || { cat "$work/alloc.log"; fail "in the allocation: $count estimates of pi, not 100"; }
[ "$nodes" -ge 2 ] || { cat "$work/alloc.log"; fail "the array ran on $nodes node(s) of the 2"; }
grep -q '^walltime exit 3$' "$work/alloc.log" \
  || { cat "$work/alloc.log"; fail "a task longer than the allocation was not held back (end time unknown?)"; }
grep -q '^squares 328350$' "$work/alloc.log" || { cat "$work/alloc.log"; fail "Pilot.start() in the allocation"; }
log "in a 2-node allocation: 100 estimates of pi on $nodes nodes, walltime enforced, Pilot.start() ok"
