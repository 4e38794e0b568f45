#!/bin/bash
# test.sh - the project's one test command (CI runs it through .ci/run).
#
# Steps, each logged with a timestamp and its duration:
#   1. packages  Debian packages the tests need; apt only runs when one is missing
#                (build-essential, pkg-config, python3-venv, OpenMPI, MPICH, libpmi2, tmux,
#                chromium, nftables, and through scripts/slurm-cluster/up.sh the Slurm
#                cluster's packages)
#   2. venv      Python venv at <repo>/.venv; installs python/requirements-test.txt if present
#   3. slurm     local multi-node Slurm cluster (up.sh + smoke.sh); exports SLURM_CONF.
#                Stopped at exit (down.sh) unless SAKER_KEEP_CLUSTER=1.
#   4. fmt, clippy, build (release), test (nextest, or cargo test without it), doctests
#      perf-quick  saker-perf --quick of the scale rows (1,000,000 queued tasks)
#   5. python    the Python package's pytest suite against the release binary; Parsl's
#                own test suite against SakerExecutor beside HighThroughputExecutor
#                (scripts/parsl-suite.sh); the docs' quick starts as written
#                (scripts/quickstarts.py); the saker-pilot wheel with its binary
#                (scripts/wheel.sh --zig), installed into an empty venv and run without
#                Rust, locally and in a Slurm allocation (scripts/wheel-test.sh)
#   6. fuzz      bounded cargo-fuzz runs of the frame decoder and the journal reader
#                (cargo-fuzz is installed from crates.io when missing)
#
# Environment:
#   SAKER_SKIP_CARGO=1     skip steps 4 and 5 (check the set-up steps alone)
#   SAKER_KEEP_CLUSTER=1   leave the Slurm cluster running at exit
#   SAKER_FUZZ_SECONDS=N   fuzzing time budget (default 30; 0 skips fuzzing)
#   CI=true                nextest runs with `--profile ci` (.config/nextest.toml)
# The set-up steps stop the run at the first failure; the check steps (4, 5) all run,
# and the script exits non-zero if any of them failed.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
CLUSTER=$REPO/scripts/slurm-cluster
export SLURM_ROOT=${SLURM_ROOT:-$REPO/.slurm-cluster}
VENV=$REPO/.venv
# OpenMPI and MPICH: HPC jobs' tests build and launch real MPI programs through the
# pilot's agents (docs/hpc-jobs.md); Slurm's libpmi2 is the PMI-2 client their PMI
# tests run (pilot/tests/mpi/pmi2.c).
# chromium opens `saker report`'s page in pilot/tests/report.rs.
# nftables drops packets between namespaces in pilot/tests/partition.rs (the kernels
# CI runs on have no sch_netem for `tc netem`).
TEST_PKGS="build-essential pkg-config python3-venv openmpi-bin libopenmpi-dev mpich libmpich-dev libpmi2-0-dev tmux chromium fonts-dejavu-core nftables"

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
log() { echo "[test.sh $(date +%T)] $*"; }
T0=$(now_ms)
SUMMARY=()
FAILED=()

# step FATAL NAME COMMAND...: run COMMAND, log its duration, record the result.
# FATAL=1 ends the run on failure (set-up steps); FATAL=0 records it and goes on.
# COMMAND runs in a subshell with `set -e` in force (bash ignores -e in a function
# called as `f || ...`), so it cannot set variables of this script.
step() {
  local fatal=$1 name=$2; shift 2
  local start rc secs
  start=$(now_ms)
  log "==> $name"
  set +e
  (set -e; "$@")
  rc=$?
  set -e
  secs=$(awk -v ms=$(( $(now_ms) - start )) 'BEGIN { printf "%.1f", ms / 1000 }')
  if [ "$rc" = 0 ]; then
    log "<== $name: ok (${secs}s)"
    SUMMARY+=("$name ok ${secs}s")
  else
    log "<== $name: FAILED with exit code $rc (${secs}s)"
    SUMMARY+=("$name FAILED ${secs}s")
    FAILED+=("$name")
    [ "$fatal" = 1 ] && exit "$rc"
  fi
  return 0
}
skip() { log "--- $1: skipped ($2)"; SUMMARY+=("$1 skipped"); }

CLUSTER_STARTED=0
finish() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$CLUSTER_STARTED" = 1 ]; then
    if [ "${SAKER_KEEP_CLUSTER:-0}" = 1 ]; then
      log "SAKER_KEEP_CLUSTER=1: Slurm cluster left running (SLURM_CONF=$SLURM_ROOT/etc/slurm.conf)"
    else
      bash "$CLUSTER/down.sh" || log "warning: down.sh failed"
    fi
  fi
  local total
  total=$(awk -v ms=$(( $(now_ms) - T0 )) 'BEGIN { printf "%.1f", ms / 1000 }')
  local joined="" entry
  for entry in "${SUMMARY[@]}"; do joined+="${joined:+; }$entry"; done
  log "steps: ${joined:-none}"
  if [ -d "$REPO/target/artifacts" ]; then
    log "artifacts (report screenshot): $(ls -d "$REPO"/target/artifacts/* 2>/dev/null | tr '\n' ' ')"
  fi
  if [ "$rc" = 0 ]; then
    log "SUMMARY: all passed in ${total}s"
  else
    log "SUMMARY: FAILED (${FAILED[*]:-interrupted}) after ${total}s, exit code $rc"
  fi
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ 1. packages
install_packages() {
  # up.sh --packages-only installs the Slurm packages; the test packages ride along
  # in SLURM_EXTRA_PKGS so that one `apt-get update` covers both (and none when
  # everything is installed).
  SLURM_EXTRA_PKGS="${SLURM_EXTRA_PKGS-libclang-dev} $TEST_PKGS" \
    bash "$CLUSTER/up.sh" --packages-only
}
step 1 packages install_packages

# ------------------------------------------------------------------ 2. python venv
python_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
  fi
  # The Python package's (with Parsl) and the Snakemake plugin's, resolved together.
  local requirements=("$REPO/python/requirements-test.txt"
    "$REPO/python/snakemake-executor-plugin-saker/requirements-test.txt")
  local stamp=$VENV/.requirements-test.sha256
  if [ -f "$stamp" ] && sha256sum --status -c "$stamp" 2>/dev/null; then
    log "test requirements unchanged since last install"
  else
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
      "${requirements[@]/#/--requirement=}"
    sha256sum "${requirements[@]}" > "$stamp"
  fi
}
step 1 venv python_venv
export VIRTUAL_ENV=$VENV
export PATH=$VENV/bin:$PATH

# ------------------------------------------------------------------ 3. slurm cluster
start_cluster() {
  bash "$CLUSTER/up.sh"
  timeout 180 bash "$CLUSTER/smoke.sh" > "$SLURM_ROOT/smoke.log" 2>&1 \
    || { cat "$SLURM_ROOT/smoke.log"; log "smoke test of the cluster failed; logs in $SLURM_ROOT/log"; return 1; }
  tail -n 1 "$SLURM_ROOT/smoke.log"
}
CLUSTER_STARTED=1   # set before up.sh so that a half-started cluster is stopped too
step 1 slurm start_cluster
# shellcheck source=/dev/null
source "$SLURM_ROOT/env.sh"
export SLURM_CONF
# The cluster is up: tests that need it must run, not skip.
export SAKER_REQUIRE_SLURM=1
# HPC tests build and launch real MPI programs (packages from step 1).
export SAKER_REQUIRE_MPI=1
# `saker top` is driven in tmux (pilot/tests/top.rs); without it that test fails here.
export SAKER_REQUIRE_TMUX=1
# `saker report`'s page is opened in headless chromium (pilot/tests/report.rs); its
# screenshot is the run's artifact, in target/artifacts.
export SAKER_REQUIRE_CHROMIUM=1
export SAKER_ARTIFACTS=$REPO/target/artifacts
log "SLURM_CONF=$SLURM_CONF"

# ------------------------------------------------------------------ 4. cargo checks
if [ "${SAKER_SKIP_CARGO:-0}" = 1 ]; then
  for name in fmt clippy build test fuzz; do skip "$name" "SAKER_SKIP_CARGO=1"; done
else
  export SAKER_BIN=$REPO/target/release/saker   # end-to-end tests run this binary
  # A fresh clone builds once: incremental caches would only take disk (several GB).
  [ "${CI:-}" = true ] && export CARGO_INCREMENTAL=0
  step 0 fmt cargo fmt --all -- --check
  step 0 clippy cargo clippy --workspace --all-targets -- -D warnings
  step 0 build cargo build --release --workspace
  if cargo nextest --version >/dev/null 2>&1; then
    profile=()
    [ "${CI:-}" = true ] && profile=(--profile ci)
    # nextest does not run doctests; the crate docs' examples must compile and pass.
    # First, so that nextest's summary is the run's last test-runner line.
    step 0 doctest cargo test --workspace --doc
    step 0 test cargo nextest run "${profile[@]}" --workspace --no-fail-fast
  else
    log "cargo-nextest not installed; falling back to cargo test"
    step 0 test cargo test --workspace --no-fail-fast
  fi

  # The Rust API's examples, run as a user runs them: each starts an embedded pilot
  # whose agents and workers are its own binary.
  # The parameter server also runs on three nodes of the Slurm cluster.
  rust_examples() {
    local out examples=$REPO/target/release/examples
    cargo build --release --quiet -p saker --examples || return 1
    out=$("$examples/pi") || return 1
    echo "$out"
    case "$out" in
      *"pi ~ 3.14"*) ;;
      *) log "the pi example printed no estimate of pi"; return 1 ;;
    esac
    out=$("$examples/param_server") || return 1
    echo "$out"
    case "$out" in *converged*) ;; *) log "param_server did not converge"; return 1 ;; esac
    out=$("$examples/pipeline") || return 1
    echo "$out"
    case "$out" in *"in order"*) ;; *) log "pipeline lost lines"; return 1 ;; esac
    local job_dir job
    job_dir=$(mktemp -d)
    job=$(APP="$examples/param_server" SAKER="$REPO/target/release/saker" \
      PILOT="$job_dir/pilot" sbatch --parsable --nodes=3 --output="$job_dir/log" \
      "$REPO/sbatch-templates/app.sbatch") || return 1
    job=${job%%;*}
    local waited=0
    while squeue -h -j "$job" 2>/dev/null | grep -q .; do
      if [ "$waited" -ge 300 ]; then
        scancel "$job"; log "param_server on Slurm: job $job still running after 300 s"
        cat "$job_dir/log"; return 1
      fi
      sleep 1; waited=$((waited + 1))
    done
    out=$(cat "$job_dir/log")
    echo "$out"
    case "$out" in
      *"3 workers on nodes {0, 1, 2}"*converged*) ;;
      *) log "param_server on 3 Slurm nodes did not converge"; return 1 ;;
    esac
    rm -rf "$job_dir"
  }
  step 0 rust-examples rust_examples

  # Scale in CI's quick perf (issue 15): a million queued tasks as an array and as a
  # task file's lines, and what finished history costs. The table goes to the log; a
  # row that cannot run fails the step, a missed target is reported, not failed
  # (the figures of record come from the full run on a quiet machine: docs/performance.md).
  step 0 perf-quick "$REPO/target/release/saker-perf" --quick \
    --only memory-array --only memory-singles --only history

  # ---------------------------------------------------------------- 5. python
  # Tests that need the release binary fail (not skip) without it under CI=true.
  pytest_package() {
    (cd "$REPO/python" && "$VENV/bin/python" -m pytest tests -q -p no:cacheprovider)
  }
  step 0 pytest pytest_package
  # The Snakemake executor plugin against Snakemake's own executor test base and our
  # fan-out/fan-in workflow (docs/snakemake.md); Snakemake finds it on PYTHONPATH.
  # Bounded: a hung Snakemake run fails the step with every thread's stack (after
  # 5 min in one test) instead of holding CI.
  pytest_snakemake() {
    (cd "$REPO/python/snakemake-executor-plugin-saker" &&
      timeout -k 10 1200 "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
        -o faulthandler_timeout=300)
  }
  step 0 pytest-snakemake pytest_snakemake
  step 0 parsl-suite bash "$REPO/scripts/parsl-suite.sh"
  # Every quick start of README.md, python/README.md, docs/parsl.md and
  # docs/rust-api.md, extracted from the file and run as written (Rust ones as examples
  # of the saker crate); an unmarked python or rust block there fails this step.
  step 0 quickstarts env VENV="$VENV" "$VENV/bin/python" "$REPO/scripts/quickstarts.py"
  # The wheel `pip install saker-pilot` takes, binary included: scripts/wheel.sh --zig
  # builds it as it would be published (manylinux2014; Cargo's `dist` profile without
  # libslurm, a build of its own in target/x86_64-unknown-linux-gnu/dist; maturin and
  # zig in target/wheel-tools),
  # then scripts/wheel-test.sh installs it alone into an empty venv and runs it as a user
  # without Rust would: python/README.md's quick start, `saker run --array 1-100`, and
  # both in a 2-node Slurm allocation.
  step 0 wheel-build bash "$REPO/scripts/wheel.sh" --zig
  step 0 wheel-test bash "$REPO/scripts/wheel-test.sh"

  # ---------------------------------------------------------------- 6. fuzz smoke
  fuzz_seconds=${SAKER_FUZZ_SECONDS:-30}
  if [ ! -d "$REPO/runtime/wire/fuzz" ]; then
    skip fuzz "runtime/wire/fuzz does not exist"
  elif [ "$fuzz_seconds" = 0 ]; then
    skip fuzz "SAKER_FUZZ_SECONDS=0"
  else
    # The fuzz run is part of CI (issue #4): install the tool when the machine lacks it.
    if ! cargo fuzz --version >/dev/null 2>&1; then
      step 0 fuzz-install cargo install cargo-fuzz --locked
    fi
    run_fuzz() {
      (cd "$REPO/runtime/wire" &&
        RUSTC_BOOTSTRAP=1 cargo fuzz run frame_decoder -- -max_total_time="$fuzz_seconds")
      (cd "$REPO/runtime/journal" &&
        RUSTC_BOOTSTRAP=1 cargo fuzz run journal_reader -- -max_total_time="$fuzz_seconds")
    }
    step 0 fuzz run_fuzz
  fi
fi

[ "${#FAILED[@]}" = 0 ] || exit 1
