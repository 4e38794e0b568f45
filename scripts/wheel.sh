#!/bin/bash
# wheel.sh - builds the saker-pilot wheel into target/wheels/: the `saker` binary and the
# Python package `saker` in one (maturin's `bin` bindings; python/pyproject.toml).
# `pip install target/wheels/saker_pilot-*.whl` then needs no Rust.
#
#   scripts/wheel.sh          tagged for this machine's glibc (manylinux_2_34 on Debian 12)
#   scripts/wheel.sh --zig    manylinux2014 (glibc 2.17 and newer: RHEL/Rocky 7, 8, 9, …),
#                             linked with zig; what the package index gets and what CI
#                             tests (scripts/test.sh)
#
# The binary is Cargo's `dist` profile (stripped, no debug information; in target/dist,
# or target/x86_64-unknown-linux-gnu/dist with --zig) and is built without libslurm (SAKER_LIBSLURM=0): a wheel must start where libslurm is
# absent, and libslurm has no stable ABI to link once for every site. In an allocation
# it reads Slurm's environment and runs srun/squeue/sbatch/scancel (docs/slurm.md, "The
# wheel's binary").
#
# maturin (and ziglang for --zig), pinned below, live in a venv of their own,
# target/wheel-tools, made on first use. PYTHON=/path/to/python uses that Python's
# instead (it must have them).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MATURIN_VERSION=1.16.0
ZIGLANG_VERSION=0.15.2
OUT=$REPO/target/wheels
zig=0
case "${1-}" in
  "") ;;
  --zig) zig=1 ;;
  *) echo "usage: $0 [--zig]" >&2; exit 2 ;;
esac

if [ -n "${PYTHON:-}" ]; then
  python=$PYTHON
else
  tools=$REPO/target/wheel-tools
  python=$tools/bin/python
  [ -x "$python" ] || python3 -m venv "$tools"
  wanted=("maturin==$MATURIN_VERSION")
  [ "$zig" = 1 ] && wanted+=("ziglang==$ZIGLANG_VERSION")
  installed=$("$python" -m pip freeze --disable-pip-version-check 2>/dev/null)
  missing=()
  for package in "${wanted[@]}"; do
    grep -qix "$package" <<<"$installed" || missing+=("$package")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    "$python" -m pip install --quiet --disable-pip-version-check "${missing[@]}"
  fi
fi

args=(build --out "$OUT")
if [ "$zig" = 1 ]; then
  args+=(--zig --compatibility manylinux2014)
  # maturin runs zig as `python3 -m ziglang`, the python3 on PATH: this one's.
  PATH=$(dirname "$python"):$PATH
fi
mkdir -p "$OUT"
rm -f "$OUT"/saker_pilot-*.whl
cd "$REPO/python"
# SAKER_LIBSLURM=0 wins over SAKER_REQUIRE_SLURM (set by scripts/test.sh for the tests).
SAKER_LIBSLURM=0 "$python" -m maturin "${args[@]}"
wheel=$(ls "$OUT"/saker_pilot-*.whl)
echo "wheel.sh: $wheel ($(du -h "$wheel" | cut -f1))"
