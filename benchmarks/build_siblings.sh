#!/usr/bin/env bash
# Build the ground-truth siblings of the embedded default model and the membership leaderboard.
# Heavy (CPU minutes, not a test). Every step resumes if interrupted; re-running skips finished work.
#   bash benchmarks/build_siblings.sh [RUNS_DIR]      (default: runs/)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-runs}"
mkdir -p "$RUNS" benchmarks/results
log() { echo "[$(date +%H:%M:%S)] $*"; }

for preset in weak strong positive; do
  log "membership sibling: $preset"
  mnemoscope bench inject --preset "$preset" --suite membership --out "$RUNS/membership-$preset"
done

for rate in 0 0.01 0.05 0.10; do
  log "contamination sibling: rate $rate"
  mnemoscope bench inject --preset strong --epochs 2 --suite contamination --rate "$rate" \
    --out "$RUNS/contamination-$rate"
done

log "membership leaderboard"
mnemoscope bench run --suite membership \
  --adapter "$RUNS/membership-weak" --adapter "$RUNS/membership-strong" --adapter "$RUNS/membership-positive" \
  --out benchmarks/results/membership
log "done"
