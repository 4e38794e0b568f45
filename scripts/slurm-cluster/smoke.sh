#!/bin/bash
# smoke.sh - quick end-to-end check of the cluster started by up.sh (multi-node if >=3 nodes)
set -euo pipefail
ROOT=${SLURM_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.slurm-cluster}
source "$ROOT/env.sh"
mkdir -p "$ROOT/jobs"; cd "$ROOT/jobs"
N=$(sinfo -h -N -o %N | sort -u | wc -l); K=$(( N >= 3 ? 3 : N ))
run() { echo "+ $*"; "$@"; }
wait_gone() {   # bounded: a stuck job fails the smoke test instead of hanging CI
  local deadline=$(( $(date +%s) + 120 ))
  while [ -n "$(squeue -h -j "$1" -o %T)" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "smoke: job $1 still queued after 120 s" >&2; scancel "$1"; exit 1; }
    sleep 0.1
  done
}
run sinfo -N
run srun -n2 hostname
run srun -N$K -l hostname | sort
cat > pilot.sh <<EOS
#!/bin/bash
#SBATCH -N $K
#SBATCH -t 5
#SBATCH -o pilot-%j.out
echo "batch on \$(hostname): SLURM_JOB_NODELIST=\$SLURM_JOB_NODELIST"
srun -N $K -l hostname | sort
EOS
t0=$(date +%s%N); J=$(sbatch --parsable pilot.sh); echo "+ sbatch pilot.sh -> job $J (-N $K)"
while [ "$(squeue -h -j "$J" -o %T)" = PENDING ]; do
  [ $(( ($(date +%s%N)-t0)/1000000000 )) -lt 60 ] || { echo "smoke: job $J PENDING after 60 s" >&2; scancel "$J"; exit 1; }
  sleep 0.05
done
echo "  job $J left PENDING after $(( ($(date +%s%N)-t0)/1000000 )) ms"
wait_gone "$J"
completed() {
  scontrol show job "$1" | grep -o 'JobState=[A-Z]*' | grep -qx JobState=COMPLETED \
    || { echo "smoke: job $1 did not complete: $(scontrol show job "$1" | grep -o 'JobState=[A-Z]*')" >&2; exit 1; }
}
completed "$J"
cat "pilot-$J.out"
J2=$(sbatch --parsable -n 4 -o wrap-%j.out --wrap 'srun -n 4 hostname'); echo "+ sbatch -n 4 --wrap 'srun -n 4 hostname' -> job $J2"
wait_gone "$J2"; completed "$J2"; cat "wrap-$J2.out"
echo "smoke: OK"
