#!/usr/bin/env bash
# WHALE against weights alone and harness search alone on SQuAD F1 (where the weights gain) and GSM8K
# (where the harness gains), five seeds each, the embedded Qwen2.5-Coder-0.5B on CPU under the paired
# rule and the cpu preset (8 feedback and 32 selection tasks): issue 59, and issue 56's five WHALE
# seeds on issue 46's SQuAD settings.
#
#   bash bench/two_domains.sh [OUT] [squad|gsm8k ...]     (default OUT runs/two-domains, both domains)
#
# Per domain: `whale compare` (runs), then `whale eval` of the start and of every finished run's final
# program on held-out test tasks (reads), then `whale paired` (the verdicts, 97.5% so that "WHALE −
# weight-only" and "WHALE − harness-only" hold together) and `whale report` (curves). Everything
# resumes: run the same command again after a stop or a session's end; a read already made is kept.
# Run it from a worktree pinned at one commit (the records name it).
#
# SQuAD: issue 46's settings, 326 rollouts a run. `fixed:0.25,1` is issue 46's `fixed:0.25,2`: a
# schedule's I counts decisions since issue 56 (before, the incoming harness's re-scoring was the
# first of I iterations). WHALE and harness-only run again (their harness phase changed with issue
# 56); weight-only's five recorded seeds stand (bench/records/seeds-squad.tar.gz, finals read in
# bench/reads/seeds-squad-200): its code path has changed since 2199178 only in records, resumes and
# error handling, and a serving dtype does not move a read (RESULTS).
# GSM8K: 400 rollouts a run, so weight-only takes 25 weight steps (4 tasks x k = 4 each) and
# harness-only at least 3 raced decisions (h0 scored once, 2 smoke + 8 feedback tasks; then each
# decision at most 3 proposals x 10 + 2 racers and the incumbent x 32 selection tasks = 126); 512
# completion tokens, as the GSM8K search's chain of thought needs; h0 is the math domain's seed
# harness, as in that search. A verdict is drawn over the seeds that have finished reads so far.
set -euo pipefail
shopt -s nullglob

cd "$(dirname "$0")/.."
OUT="${1:-runs/two-domains}"
[[ $# -gt 0 ]] && shift
DOMAINS=("$@")
[[ ${#DOMAINS[@]} -gt 0 ]] || DOMAINS=(squad gsm8k)
WHALE="${WHALE:-.venv/bin/whale}"
MODEL=qwen2.5-coder-0.5b
SEEDS="${SEEDS:-1,2,3,4,5}"

squad() {
  local out=$OUT/squad reads=$OUT/squad/reads
  "$WHALE" compare --domain squad:score=f1 --model $MODEL --preset cpu \
    --methods whale,harness-only --seeds "$SEEDS" \
    --budget 326 --budget-unit rollouts --eval-every 163 --eval-k 2 \
    --train-limit 64 --search-limit 40 --test-limit 40 --schedule fixed:0.25,1 --out "$out"
  read_finals "$out" "$reads" --limit 200
  local recorded=bench/reads/seeds-squad-200
  verdicts "$reads" $recorded/start "weight-only=$(seeds $recorded weight-only)" \
    "harness-only=$(seeds "$reads" harness-only)" "whale=$(seeds "$reads" whale)"
  "$WHALE" report "$out" --out "$out/report"
}

gsm8k() {
  local out=$OUT/gsm8k reads=$OUT/gsm8k/reads
  "$WHALE" compare --domain math --model $MODEL --preset cpu --max-tokens 512 \
    --methods whale,weight-only,harness-only --seeds "$SEEDS" \
    --budget 400 --budget-unit rollouts --eval-every 200 --eval-k 2 \
    --train-limit 64 --search-limit 40 --test-limit 40 --schedule fixed:0.25,1 --out "$out"
  [[ -f "$reads/start/report.json" ]] || "$WHALE" eval --domain math --model $MODEL --preset cpu --max-tokens 512 \
    --split test --limit 300 --k 1 --threads 16 --out "$reads/start"
  read_finals "$out" "$reads" --limit 300
  verdicts "$reads" "$reads/start" "weight-only=$(seeds "$reads" weight-only)" \
    "harness-only=$(seeds "$reads" harness-only)" "whale=$(seeds "$reads" whale)"
  "$WHALE" report "$out" --out "$out/report"
}

read_finals() {  # OUT READS --limit N: every finished run's final program, on its own sampling
  local out=$1 reads=$2
  shift 2
  for run in "$out"/*/seed-*; do
    local method seed
    method=$(basename "$(dirname "$run")") seed=${run##*seed-}
    [[ -f "$reads/$method-s$seed/report.json" ]] && continue
    "$WHALE" eval --run "$run" --split test "$@" --k 1 --threads 16 --out "$reads/$method-s$seed"
  done
}

seeds() {  # READS METHOD: its seeds' read folders, colon-separated (whale paired pools them)
  local folders=("$1/$2"-s*)
  (IFS=:; echo "${folders[*]}")
}

verdicts() {  # READS START METHOD=SEEDS...: whale paired at 97.5% once every method has a read
  local reads=$1 start=$2 labels=start pooled=()
  shift 2
  for method in "$@"; do
    if [[ -z "${method#*=}" ]]; then
      echo "two_domains: no finished read of ${method%%=*} yet in $reads: no verdict drawn" >&2
      return 0
    fi
    labels+=",${method%%=*}" pooled+=("${method#*=}")
  done
  "$WHALE" paired "$start" "${pooled[@]}" --labels "$labels" --level 0.975 --out "$reads/paired.md"
}

for domain in "${DOMAINS[@]}"; do
  "$domain"
done
