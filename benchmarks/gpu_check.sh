#!/usr/bin/env bash
# GPU check of pipeplan's runtime and predictions, in under 10 minutes on a machine with CUDA GPUs.
#
#   benchmarks/gpu_check.sh              # run it (needs torch with CUDA and at least one GPU)
#   benchmarks/gpu_check.sh --dry-run    # print the plan and check every step can start (CPU is fine)
#
# Steps (each under its own time limit; the whole run is capped at 10 minutes):
#   0. the device calibration: pipeplan calibrate --out gpu_device.json (GEMMs, attention, memory-bound
#      kernels, launches, p2p between GPUs 0 and 1 when there are two), then a small GPT-like step planned on
#      that device file against the same step measured by pipeplan's runtime on NCCL:
#      benchmarks/device_step.py (predicted / measured per schedule; one rank when there is one GPU);
#   1. the NCCL gradient test: tests/test_runtime_gpu.py (two ranks on two GPUs; one rank with both
#      stages on a single GPU);
#   2. the cross-schedule fidelity table on one GPU process per stage: benchmarks/fidelity.py
#      --backend nccl --nproc 2 (and 4 with four GPUs), written to docs/fidelity_gpu.md;
#   3. the re-balance benchmark the same way: benchmarks/rebalance.py --backend nccl.
# NCCL cannot put two ranks on one GPU ("duplicate GPU") and gloo sends only CPU tensors, so with a
# single GPU steps 2 and 3 are skipped with a note; the gradient test still runs.
# Everything printed goes to stdout and to ${GPU_CHECK_LOG:-gpu_check.log}; paste it into docs/fidelity.md.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
export PYTHONPATH="${PWD}/src${PYTHONPATH:+:$PYTHONPATH}"
LOG=${GPU_CHECK_LOG:-gpu_check.log}
DRY_RUN=0
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  "") ;;
  *) echo "usage: benchmarks/gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac

started=$(date +%s)
budget=600  # seconds for the whole check

note() { echo "gpu_check: $*" | tee -a "$LOG"; }

step() {  # step LIMIT_SECONDS DRY_RUN_CHECK -- COMMAND...
  local limit=$1 check=$2; shift 3
  local left=$((budget - ($(date +%s) - started)))
  if [ "$limit" -gt "$left" ]; then limit=$left; fi
  note "+ (limit ${limit}s) $*"
  if [ "$DRY_RUN" = 1 ]; then
    # The dry run proves the step can start: its script parses its options, its tests collect.
    eval "$check" >/dev/null
    note "  dry run: ok ($check)"
    return 0
  fi
  if [ "$limit" -le 0 ]; then note "  skipped: the 10-minute budget is spent"; return 0; fi
  set +e
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  local status=${PIPESTATUS[0]}
  set -e
  note "  exit status $status"
}

: > "$LOG"
note "$(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname); dry run: $DRY_RUN"
# One interpreter asks torch all three (each import of torch costs seconds): version, GPU count, names.
torch_info=$("$PYTHON" -c "import torch
print(torch.__version__)
print(torch.cuda.device_count() if torch.cuda.is_available() else 0)
print(', '.join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) if torch.cuda.is_available() else 'none')")
{ read -r torch_version; read -r gpus; read -r names; } <<< "$torch_info"
note "torch $torch_version, GPUs: $gpus ($names)"
if [ "$gpus" -eq 0 ] && [ "$DRY_RUN" = 0 ]; then
  note "no CUDA GPU here: nothing to check (use --dry-run to test the script)"
  exit 2
fi

DEVICE_FILE=${GPU_DEVICE_FILE:-gpu_device.json}
step 90 "$PYTHON -m pipeplan calibrate --help" -- \
  "$PYTHON" -m pipeplan calibrate --out "$DEVICE_FILE"
if [ "$gpus" -ge 2 ]; then step_ranks=2; else step_ranks=1; fi
step 150 "$PYTHON benchmarks/device_step.py --help" -- \
  "$PYTHON" benchmarks/device_step.py --device "$DEVICE_FILE" --backend nccl --nproc "$step_ranks"

step 150 "$PYTHON -m pytest -q -p no:cacheprovider --collect-only tests/test_runtime_gpu.py" -- \
  "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py

if [ "$gpus" -ge 4 ]; then nprocs=2,4; elif [ "$gpus" -ge 2 ]; then nprocs=2; else nprocs=""; fi
if [ "$DRY_RUN" = 1 ] && [ -z "$nprocs" ]; then nprocs=2; note "dry run: planning as if there were 2 GPUs"; fi
if [ -z "$nprocs" ]; then
  note "one GPU: NCCL cannot put two ranks on one GPU and gloo sends only CPU tensors; fidelity and"
  note "re-balance need one GPU per process, so they are skipped here (their CPU numbers are in docs/fidelity.md)"
else
  step 200 "$PYTHON benchmarks/fidelity.py --help" -- \
    "$PYTHON" benchmarks/fidelity.py --backend nccl --nproc "$nprocs" --runs 2 --steps 5 --doc docs/fidelity_gpu.md --write
  step 120 "$PYTHON benchmarks/rebalance.py --help" -- \
    "$PYTHON" benchmarks/rebalance.py --backend nccl --nproc "$nprocs" --runs 2 --steps 5 --doc docs/fidelity_gpu.md --write
fi
note "done in $(($(date +%s) - started)) s"
