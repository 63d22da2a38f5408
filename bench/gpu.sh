#!/usr/bin/env bash
# Everything worth running on a GPU, in one command, in under 8 minutes:
#   1. kernels:    the compiled Triton kernels checked against the torch reference on the GPU,
#                  then paged decode vs contiguous SDPA (bench/kernel_speed.py)
#   2. throughput: the engine end to end on the real model (bench/throughput.py, if present)
#   3. tracing:    tracing on vs off (bench/tracing.py, if present)
# Each step has its own time budget; a failed or timed-out step is reported, and the others still
# run. Logs and tables go to $OUT when set (else out/gpu). Exit status: 0 only if every step that
# ran passed.
#
# Usage, from the repo root:  bash bench/gpu.sh            # on a GPU machine
#                             bash bench/gpu.sh --dry-run  # anywhere: print the plan only
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
[[ "${1:-}" == "--dry-run" ]] && DRY_RUN=1
export OUT="${OUT:-out/gpu}"
mkdir -p "$OUT"

has_cuda() {
  "$1" -c 'import torch, triton, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null
}

# A python with CUDA torch and triton: the repo's venv, else the machine's own, else build the venv
# (torch==2.13.0 from PyPI is a CUDA build on Linux).
pick_python() {
  local cand
  if (( DRY_RUN )); then   # planning needs no torch
    if [[ -x .venv/bin/python ]]; then echo .venv/bin/python; else echo python3; fi
    return
  fi
  for cand in .venv/bin/python python3; do
    if command -v "$cand" >/dev/null 2>&1 && has_cuda "$cand"; then echo "$cand"; return; fi
  done
  if [[ ! -x .venv/bin/python ]]; then
    echo "no python with CUDA torch found: building .venv" >&2
    # the lock but its torch, which is the CPU build there: the same release's CUDA build here
    python3 -m venv .venv && .venv/bin/python -m pip install -q torch==2.13.0 \
      -r <(grep -v '^torch==' requirements.lock) >&2
  fi
  echo .venv/bin/python
}

PY="$(pick_python)"
if (( ! DRY_RUN )) && ! has_cuda "$PY"; then
  TORCH="$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo missing)"
  echo "error: no CUDA GPU visible to $PY (torch $TORCH)" >&2
  exit 2
fi
echo "python: $PY; results in $OUT"

declare -a SUMMARY=()
FAILED=0

# run_step NAME BUDGET_S CMD...: log to $OUT/NAME.log, record the outcome, never abort the script
run_step() {
  local name="$1" budget="$2"; shift 2
  local start=$SECONDS rc=0
  echo "=== $name (budget ${budget}s): $*"
  timeout "$budget" "$@" 2>&1 | tee "$OUT/$name.log" || rc=$?
  local took=$(( SECONDS - start ))
  case $rc in
    0) SUMMARY+=("$name: ok in ${took}s") ;;
    124) SUMMARY+=("$name: TIMED OUT after ${budget}s"); FAILED=1 ;;
    *) SUMMARY+=("$name: FAILED (exit $rc) after ${took}s"); FAILED=1 ;;
  esac
}

# optional_step NAME BUDGET_S SCRIPT: run SCRIPT (with --device cuda if it takes one) when it exists
optional_step() {
  local name="$1" budget="$2" script="$3"
  if [[ ! -f "$script" ]]; then SUMMARY+=("$name: skipped ($script not found)"); return; fi
  local args=()
  # read the source rather than run --help: importing the engine just to ask costs seconds
  if grep -q -- '"--device"' "$script"; then args=(--device cuda); fi
  if (( DRY_RUN )); then SUMMARY+=("$name: would run $PY $script ${args[*]}"); return; fi
  run_step "$name" "$budget" "$PY" "$script" ${args[@]+"${args[@]}"}   # empty-safe under set -u
}

if (( DRY_RUN )); then
  run_step kernels 60 "$PY" bench/kernel_speed.py --dry-run
else
  run_step kernels 210 "$PY" bench/kernel_speed.py --out "$OUT"
fi
optional_step throughput 180 bench/throughput.py
optional_step tracing 90 bench/tracing.py

echo
echo "=== summary"
printf '  %s\n' "${SUMMARY[@]}"
[[ -f "$OUT/kernels.md" ]] && { echo; cat "$OUT/kernels.md"; }
exit "$FAILED"
