#!/usr/bin/env bash
# WHALE (fixed and adaptive) against weight-only, harness-only, Fast-Slow Training and stagewise on
# the three domains, two seeds each, on the embedded 0.5B model on CPU: the issue-9 comparison.
#
#   bash bench/compare_domains.sh [OUT] [DOMAIN ...]      (default OUT runs/compare, all three domains)
#
# One `whale compare` per domain, each with its own server; a comparison that is stopped resumes
# where it stopped when the same command runs again (every run directory is resumable), so the
# domains can be run one per sitting. Budgets are what two CPU cores allow in about an hour per
# domain and seed; BUDGET, TEST_LIMIT and SEEDS override them. Figures go to OUT/DOMAIN/report.md
# and curve.png; record them in bench/RESULTS.md with this command.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${1:-runs/compare}"
[[ $# -gt 0 ]] && shift
DOMAINS=("$@")
[[ ${#DOMAINS[@]} -gt 0 ]] || DOMAINS=("squad:score=f1" math chess)
WHALE="${WHALE:-.venv/bin/whale}"

# fixed:0.25,2 = one RFT step (4 tasks x k=4) then one round of 3 candidates; the adaptive schedule
# leaves a phase after one step or iteration without improvement, at most 3 harness iterations.
for domain in "${DOMAINS[@]}"; do
  "$WHALE" compare --domain "$domain" --model qwen2.5-coder-0.5b \
    --seeds "${SEEDS:-0,1}" --budget "${BUDGET:-64}" --eval-every "${BUDGET:-64}" --eval-k 8 \
    --train-limit 16 --search-limit 4 --test-limit "${TEST_LIMIT:-20}" \
    --schedule fixed:0.25,2 \
    --schedule patience:weight_burn_in=1,weight_window=1,weight_patience=1,harness_min=2,harness_patience=1,harness_max=3 \
    --out "$OUT/${domain%%:*}"
done
