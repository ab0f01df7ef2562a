#!/usr/bin/env bash
# Regenerate benchmarks/results/crm/families/ (docs/crm.md "CRM's signal by feature family").
# Heavy (about an hour of CPU per dataset on the shared 2-core machine); every step resumes.
#   bash benchmarks/crm_families.sh [RUNS_DIR] [PER_CLASS_MEMBERSHIP]   (default: runs/, all 150)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-runs}"
PER_CLASS="${2:-}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

log "shift-controlled pair on the base model (no injection)"
python benchmarks/crm_families.py --dataset shift --name shift-base --threads 1

log "membership sibling: positive (LoRA on the 150 member documents)"
mnemoscope bench inject --preset positive --suite membership --out "$RUNS/membership-positive"
python benchmarks/crm_families.py --dataset membership --adapter "$RUNS/membership-positive" \
  --name membership-positive --threads 1 ${PER_CLASS:+--per-class "$PER_CLASS"}

python benchmarks/crm_families.py --summary membership-positive shift-base   # the tables of docs/crm.md
log "done"
