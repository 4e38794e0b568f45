#!/bin/bash
# down.sh - stop the cluster started by up.sh: cancel jobs, then kill exactly the PIDs
# recorded in $SLURM_ROOT/run (slurmd-*, slurmctld, munged).
# Keeps config, logs and packages. Idempotent.
set -uo pipefail
ROOT=${SLURM_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.slurm-cluster}
export SLURM_CONF=$ROOT/etc/slurm.conf
log() { echo "[down.sh $(date +%T)] $*"; }

running() {   # true while PID exists and is not a zombie (PID 1 here reaps orphans lazily)
  local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}
stop_pid() {   # stop_pid PIDFILE EXPECTED-EXE-BASENAME-PREFIX
  local f=$1 want=$2 pid exe
  [ -s "$f" ] || { rm -f "$f"; return; }
  pid=$(cat "$f")
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  if [ -n "$exe" ] && [[ $(basename "$exe") == $want* ]]; then
    log "kill $pid ($(basename "$exe"), $(basename "$f"))"
    kill -TERM "$pid"
    for _ in $(seq 150); do running "$pid" || break; sleep 0.1; done
    running "$pid" && { log "SIGKILL $pid"; kill -KILL "$pid"; }
  fi
  rm -f "$f"
}

# 1. cancel jobs of this cluster and let their slurmstepds exit
if [ -s "$ROOT/run/slurmctld.pid" ] && kill -0 "$(cat "$ROOT/run/slurmctld.pid")" 2>/dev/null; then
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  [ -n "${jobs// }" ] && { log "scancel $jobs"; scancel $jobs; }
  for _ in $(seq 100); do [ -z "$(squeue -h -t R,CG,PD 2>/dev/null)" ] && break; sleep 0.2; done
fi
# 2. daemons, by recorded PID
for f in "$ROOT"/run/slurmd-*.pid; do [ -e "$f" ] && stop_pid "$f" slurmd; done
stop_pid "$ROOT/run/slurmctld.pid" slurmctld
# 3. stray slurmstepd of THIS cluster (they hold sockets under $ROOT/state); by PID
for p in /proc/[0-9]*; do
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  [[ $(basename "$exe") == slurmstepd* ]] || continue
  if tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" \
     || ls -l "$p/fd" 2>/dev/null | grep -q "$ROOT/"; then
    log "kill stray slurmstepd ${p#/proc/}"; kill -KILL "${p#/proc/}" 2>/dev/null
  fi
done
stop_pid "$ROOT/run/munged.pid" munged
log "stopped"
