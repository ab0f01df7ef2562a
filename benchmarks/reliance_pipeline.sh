#!/usr/bin/env bash
# Regenerate the verdict's ground truth and every committed verdict number on the default model,
# with the previous shipped profile (build_default_profile.py, T = 32, CRM). The shipped profile is
# now a `mnemoscope calibrate` output (build_default_profile.py's docstring); step 3 replaces it,
# and step 4's profile_validation.py / default_profile_held_out.py are the previous method's only
# on a checkout of 8b0a9c3 (the last commit that shipped that profile): run the pipeline there.
# Heavy (about an hour on 2 CPU cores); every step resumes if interrupted.
#   bash benchmarks/reliance_pipeline.sh [RUNS_DIR]      (default: runs/)
#
# 1. bench verify --chat on: which shipped reliance items the default model really answers from
#    memory / only with the context (-> RUNS/reliance-chat/verified.jsonl)
# 2. bench verify --suite mixed: the token-level items whose memorized part the model knows
#    (-> benchmarks/results/mixed/verified.jsonl)
# 3. build_default_profile.py: the shipped audit profile (calibrated on two thirds, split by fact)
# 4. verdict_eval.py: CV, held-out and token-level figures (-> benchmarks/results/verdict/eval.json)
#    profile_validation.py: the profile's validation.json from eval.json part B;
#    default_profile_held_out.py: the held-out third audited with the shipped profile, its
#    held_out.jsonl (the drift watch's reference sample)
# 5. bench_audit.py: the audit's overhead over bare answering (-> benchmarks/results/audit/overhead.json)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-runs}"
mkdir -p "$RUNS" benchmarks/results/mixed
log() { echo "[$(date +%H:%M:%S)] $*"; }

log "verify the reliance set (chat template on)"
mnemoscope bench verify --chat on --out "$RUNS/reliance-chat"
log "verify the mixed token-level set"
mnemoscope bench verify --suite mixed --chat on --memorized-from "$RUNS/reliance-chat/verified.jsonl" \
  --out "$RUNS/mixed-chat"
cp "$RUNS/mixed-chat/verified.jsonl" benchmarks/results/mixed/verified.jsonl
log "build the shipped profile"
python benchmarks/build_default_profile.py --verified "$RUNS/reliance-chat/verified.jsonl"
log "evaluate the verdict"
python benchmarks/verdict_eval.py --parts ABC
log "the shipped profile's validation card and its drift reference (held_out.jsonl)"
python benchmarks/profile_validation.py
OMP_NUM_THREADS=1 python benchmarks/default_profile_held_out.py
log "audit overhead"
python benchmarks/bench_audit.py --n 16 --threads 2
log "done"
