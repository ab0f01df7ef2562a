#!/usr/bin/env bash
# Regenerate CRM's committed sibling results (docs/crm.md "How it was run"). Heavy: several CPU
# hours; every extraction resumes. Needs the siblings of benchmarks/build_siblings.sh in RUNS_DIR.
#   bash benchmarks/crm_siblings.sh [RUNS_DIR]      (default: runs/)
# Runs one torch thread per job (the figures in docs/crm.md were taken that way, 2-4 jobs at once).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-runs}"
export OMP_NUM_THREADS=1
log() { echo "[$(date +%H:%M:%S)] $*"; }
R=benchmarks/results/crm

for sib in weak strong; do
  for t in A D B C; do
    log "extract $sib template $t"
    python benchmarks/crm_extract_siblings.py --sibling "$sib" --template "$t" --threads 1 --runs "$RUNS"
  done
done
log "extract the untrained base model (control)"
python benchmarks/crm_extract_siblings.py --sibling base --template A --threads 1 --no-gradient-norm \
  --no-attention-flow --runs "$RUNS"

log "evaluate"
python benchmarks/crm_eval_siblings.py --sibling weak --causal-per-class 75 --threads 1 --runs "$RUNS"
python benchmarks/crm_eval_siblings.py --sibling strong --causal-per-class 75 --threads 1 --templates AD --runs "$RUNS"
python benchmarks/crm_eval_siblings.py --sibling strong --templates-only --runs "$RUNS"

log "controls"
python benchmarks/crm_signal_probe.py --adapter "$RUNS/membership-positive" --threads 1 --out "$R/signal-positive.json"
python benchmarks/crm_significance.py --folder "$R/cache/weak-A" --out "$R/significance-weak.json" \
  --permutations 200 --seeds 20
python benchmarks/crm_significance.py --folder "$R/cache/base-A" --out "$R/significance-base.json" \
  --permutations 50 --seeds 10

log "tables of docs/crm.md"
python benchmarks/crm_summary.py
log "done"
