#!/usr/bin/env bash
# GPU check for one CUDA GPU with no internet and no hub (PyTorch, transformers, peft, accelerate;
# no vLLM, no weights carried): random-weight Qwen2-style model, LoRA SFT vs full fwd+bwd,
# batch generation vs forward, adapter save/reload, Qwen3.5 adapter keys, the adapter-effect probe.
# 36 s on an H200 (2026-12-04); stops itself within 290 s.
#
#   bash scripts/gpu_check.sh OUTDIR [extra gpu_check.py flags, e.g. --preset qwen2-0.5b]
#
# OUTDIR defaults to $OUT, else ./gpu_check_out; results: OUTDIR/gpu_check.{json,md},
# OUTDIR/nvidia-smi.txt and OUTDIR/gpu_check.log. PYTHON picks the interpreter (default python3).
# CPU code-path test (no GPU needed): python scripts/gpu_check.py --tiny --out /tmp/gpu_check_tiny
set -euo pipefail

cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-gpu_check_out}}"
[[ $# -gt 0 ]] && shift
PYTHON="${PYTHON:-python3}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT_DIR"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >"$OUT_DIR/nvidia-smi.txt" 2>&1; then
  echo "gpu_check: no working nvidia-smi: this needs a CUDA GPU (CPU test: $PYTHON scripts/gpu_check.py --tiny)" >&2
  exit 2
fi
# A hard stop a little above the script's own budget (--budget-s 240 skips parts not yet started).
timeout 290 "$PYTHON" scripts/gpu_check.py --out "$OUT_DIR" "$@" 2>&1 | tee "$OUT_DIR/gpu_check.log"
exit "${PIPESTATUS[0]}"
