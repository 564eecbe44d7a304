#!/usr/bin/env bash
# WHALE (fixed and adaptive) against weight-only, harness-only, Fast-Slow Training and stagewise on
# the three domains, two seeds each, on the embedded 0.5B model on CPU: the issue-9 comparison.
#
#   bash bench/compare_domains.sh [OUT] [DOMAIN ...]      (default OUT runs/compare, all three domains)
#
# Per domain: one `whale serve`, one `whale compare` per seed running side by side against it (a
# CPU server's throughput keeps rising up to about 16 concurrent requests, and one run keeps 8 in
# flight), then `whale report`, which writes the joint table and plot of all seeds to
# OUT/DOMAIN/report.md and curve.png. Each domain gets a fresh server, so
# adapter names (method-seed) never meet an earlier domain's. A comparison that is stopped resumes
# where it stopped when the same command runs again (every run directory is resumable). Budgets are
# what two CPU cores allow in about an hour per domain; BUDGET, EVAL_EVERY, EVAL_K, TEST_LIMIT,
# TRAIN_LIMIT, SEARCH_LIMIT, FIXED (the fixed schedule), SEEDS and PORT override them.
# OWN_SERVER=1 runs the seeds one after another in one `whale compare` on a server of its own
# (on the CPU build: adapters merged into the weights, the trainer on every core) instead of side
# by side on a shared `whale serve` (runtime LoRA). Record the figures in bench/RESULTS.md with
# this command.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${1:-runs/compare}"
[[ $# -gt 0 ]] && shift
DOMAINS=("$@")
[[ ${#DOMAINS[@]} -gt 0 ]] || DOMAINS=("squad:score=f1" math chess)
WHALE="${WHALE:-.venv/bin/whale}"
MODEL=qwen2.5-coder-0.5b
PORT="${PORT:-8791}"
SEEDS="${SEEDS:-0,1}"

compare() {  # one domain's comparison for one seed, on the running server
  local domain=$1 seed=$2
  local server=(--server-url "http://127.0.0.1:$PORT")
  [[ "${OWN_SERVER:-0}" == 1 ]] && server=()
  # fixed:0.25,2 = one RFT step (4 tasks x k=4) then one round of 3 candidates, raced against the
  # incumbent on up to 32 selection tasks (8 feedback + 32 selection = the search limit; a raced
  # decision costs up to 158 rollouts, so the budget holds one per cycle); the adaptive schedule
  # leaves a phase after one step or iteration without an improvement, at most 3 iterations.
  "$WHALE" compare --domain "$domain" --model "$MODEL" "${server[@]}" \
    --seeds "$seed" --budget "${BUDGET:-256}" --eval-every "${EVAL_EVERY:-${BUDGET:-256}}" --eval-k "${EVAL_K:-8}" \
    --train-limit "${TRAIN_LIMIT:-16}" --search-limit "${SEARCH_LIMIT:-40}" --test-limit "${TEST_LIMIT:-20}" \
    --schedule "${FIXED:-fixed:0.25,2}" \
    --schedule patience:weight_burn_in=1,weight_window=1,weight_patience=1,harness_min=2,harness_patience=1,harness_max=3 \
    --out "$OUT/${domain%%:*}"
}

for domain in "${DOMAINS[@]}"; do
  folder="$OUT/${domain%%:*}"
  mkdir -p "$folder"
  if [[ "${OWN_SERVER:-0}" == 1 ]]; then
    compare "$domain" "$SEEDS" >>"$folder/seeds.log" 2>&1
    "$WHALE" report "$folder"
    continue
  fi
  "$WHALE" serve --model "$MODEL" --port "$PORT" --log "$folder/server.log" &
  server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
    kill -0 $server 2>/dev/null || { echo "the server stopped; see $folder/server.log" >&2; exit 1; }
    sleep 5
  done
  pids=()
  for seed in ${SEEDS//,/ }; do
    compare "$domain" "$seed" >"$folder/seed-$seed.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  kill $server
  wait $server || true
  "$WHALE" report "$folder"
done
