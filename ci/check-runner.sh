#!/usr/bin/env bash
# Checks that this machine can serve kernel-bot jobs as an SM90 self-hosted runner and
# prints one PASS / FAIL / SKIP line per check. Exit status: 1 if any check FAILs.
# Read-only: it changes no setting (clocks, persistence mode, docker config).
set -uo pipefail

usage() {
  cat <<'EOF'
Usage: ci/check-runner.sh [--image NAME] [--python PY] [--gpu N] [--timeout S] [--help]

Checks that this machine can run kernel-bot jobs on an SM90 (H100/H200) GPU:
GPU visible, driver and CUDA versions, compute capability 9.0, torch sees CUDA,
docker engine reachable, GPUs inside the worker image, current clocks.
Prints a PASS/FAIL/SKIP table and exits 1 if any check FAILs, else 0.

Options:
  --image NAME   worker image for the docker GPU check
                 (default: $KERNEL_BOT_IMAGE, else kernel-bot-worker:latest);
                 the check is SKIPped when the image is not built yet
  --python PY    interpreter whose torch must see CUDA (default: python3)
  --gpu N        check only GPU N (default: $CUDA_VISIBLE_DEVICES when it is a
                 single index, else every GPU)
  --timeout S    limit for each probe command in seconds (default: 60)
  -h, --help     show this help and exit

Example (one runner per GPU, GPU 3):
  ci/check-runner.sh --gpu 3 --image kernel-bot-worker:latest
EOF
}

IMAGE="${KERNEL_BOT_IMAGE:-kernel-bot-worker:latest}"
PYTHON="python3"
GPU=""
TIMEOUT=60
MIN_DRIVER_MAJOR=535 # first branch with full H100/H200 support in CUDA 12.x
MIN_CUDA="12.0"

if [[ "${CUDA_VISIBLE_DEVICES:-}" =~ ^[0-9]+$ ]]; then GPU="$CUDA_VISIBLE_DEVICES"; fi

while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --image) IMAGE="${2:?--image needs a value}"; shift 2 ;;
    --python) PYTHON="${2:?--python needs a value}"; shift 2 ;;
    --gpu) GPU="${2:?--gpu needs a value}"; shift 2 ;;
    --timeout) TIMEOUT="${2:?--timeout needs a value}"; shift 2 ;;
    *) echo "check-runner: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -n "$GPU" && ! "$GPU" =~ ^[0-9]+$ ]]; then
  echo "check-runner: --gpu must be a GPU index, got: $GPU" >&2
  exit 2
fi

FAILED=0
ROWS=()

# record NAME STATUS DETAIL
record() {
  ROWS+=("$(printf '%-24s %-6s %s' "$1" "$2" "$3")")
  if [[ "$2" == FAIL ]]; then FAILED=1; fi
}

# probe CMD...: run with a time limit; output (stdout+stderr) in $OUT, status in $RC.
probe() {
  OUT="$(timeout "$TIMEOUT" "$@" 2>&1)"
  RC=$?
}

# version_ge A B: true when dotted version A >= B.
version_ge() {
  [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]
}

one_line() { tr '\n' ' ' <<<"$1" | sed 's/  */ /g; s/ $//' | cut -c1-160; }

smi_select=()
if [[ -n "$GPU" ]]; then smi_select=(-i "$GPU"); fi

# --- GPU visible ----------------------------------------------------------------------
have_smi=0
if ! command -v nvidia-smi >/dev/null 2>&1; then
  record "gpu visible" FAIL "nvidia-smi not found (NVIDIA driver not installed?)"
else
  probe nvidia-smi -L # (-L does not combine with -i: select the GPU from its lines)
  gpu_lines="$(grep "^GPU ${GPU:-[0-9]*}:" <<<"$OUT")"
  if ((RC != 0)); then
    record "gpu visible" FAIL "nvidia-smi -L failed (rc=$RC): $(one_line "$OUT")"
  elif [[ -z "$gpu_lines" ]]; then
    record "gpu visible" FAIL "no GPU${GPU:+ $GPU} listed: $(one_line "$OUT")"
  else
    have_smi=1
    count="$(grep -c '^GPU ' <<<"$gpu_lines")"
    first="$(head -n1 <<<"$gpu_lines" | sed 's/ (UUID.*//')"
    record "gpu visible" PASS "$count GPU(s); $first"
  fi
fi

# --- driver, CUDA, compute capability, clocks (one query) -----------------------------
QUERY="index,name,driver_version,compute_cap,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem"
if ((have_smi)); then
  probe nvidia-smi "--query-gpu=$QUERY" --format=csv,noheader,nounits "${smi_select[@]}"
  query_rc=$RC
  query_out="$OUT"
else
  query_rc=1
  query_out=""
fi

if ((query_rc != 0)) || [[ -z "$query_out" ]]; then
  reason="no GPU visible"
  if ((have_smi)); then reason="nvidia-smi --query-gpu failed (rc=$query_rc): $(one_line "$query_out")"; fi
  record "driver version" FAIL "$reason"
  record "cuda version" FAIL "$reason"
  record "compute capability 9.0" FAIL "$reason"
  record "clocks (now/max)" FAIL "$reason"
else
  driver="$(head -n1 <<<"$query_out" | cut -d, -f3 | tr -d ' ')"
  if [[ "${driver%%.*}" =~ ^[0-9]+$ ]] && ((${driver%%.*} >= MIN_DRIVER_MAJOR)); then
    record "driver version" PASS "$driver"
  else
    record "driver version" FAIL "$driver (need >= $MIN_DRIVER_MAJOR for SM90 with CUDA 12)"
  fi

  probe nvidia-smi
  cuda="$(sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' <<<"$OUT" | head -n1)"
  if [[ -z "$cuda" ]]; then
    record "cuda version" FAIL "driver reports no CUDA version"
  elif version_ge "$cuda" "$MIN_CUDA"; then
    record "cuda version" PASS "$cuda (highest the driver supports)"
  else
    record "cuda version" FAIL "$cuda (need >= $MIN_CUDA)"
  fi

  not_sm90="$(awk -F', *' '$4 != "9.0" {printf "GPU %s %s is %s; ", $1, $2, $4}' <<<"$query_out")"
  if [[ -z "$not_sm90" ]]; then
    record "compute capability 9.0" PASS "all checked GPUs are sm_90"
  else
    record "compute capability 9.0" FAIL "${not_sm90%; }"
  fi

  clocks="$(awk -F', *' '{printf "GPU %s SM %s/%s MHz, mem %s/%s MHz; ", $1, $5, $7, $6, $8}' <<<"$query_out")"
  record "clocks (now/max)" PASS "${clocks%; }"
fi

# --- torch sees CUDA ------------------------------------------------------------------
TORCH_PROBE='
import sys
try:
    import torch
except Exception as exc:
    print(f"cannot import torch: {exc}")
    sys.exit(1)
if not torch.cuda.is_available():
    print(f"torch {torch.__version__} (CUDA build {torch.version.cuda}) cannot use a GPU")
    sys.exit(1)
major, minor = torch.cuda.get_device_capability(0)
x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
assert float(x.sum()) == float((1 << 20) * ((1 << 20) - 1) // 2)
try:
    import triton
    extra = f", triton {triton.__version__}"
except Exception:
    extra = ", no triton"
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}){extra}; "
      f"{torch.cuda.get_device_name(0)} sm_{major}{minor}")
sys.exit(0 if (major, minor) == (9, 0) else 3)
'
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  record "python+torch cuda" FAIL "interpreter not found: $PYTHON"
else
  if [[ -n "$GPU" ]]; then
    probe env CUDA_VISIBLE_DEVICES="$GPU" "$PYTHON" -c "$TORCH_PROBE"
  else
    probe "$PYTHON" -c "$TORCH_PROBE"
  fi
  case "$RC" in
    0) record "python+torch cuda" PASS "$(one_line "$OUT")" ;;
    3) record "python+torch cuda" FAIL "not SM90: $(one_line "$OUT")" ;;
    124) record "python+torch cuda" FAIL "timed out after ${TIMEOUT}s" ;;
    *) record "python+torch cuda" FAIL "$(one_line "$(tail -n 3 <<<"$OUT")")" ;;
  esac
fi

# --- docker ---------------------------------------------------------------------------
docker_ok=0
if ! command -v docker >/dev/null 2>&1; then
  record "docker engine" FAIL "docker CLI not found"
else
  probe docker version --format '{{.Server.Version}}'
  if ((RC == 0)) && [[ -n "$OUT" ]]; then
    docker_ok=1
    record "docker engine" PASS "server $(one_line "$OUT")"
  else
    record "docker engine" FAIL "engine not reachable (rc=$RC): $(one_line "$OUT")"
  fi
fi

if ((!docker_ok)); then
  record "docker gpu" FAIL "needs a reachable docker engine"
else
  probe docker image inspect --format '{{.Id}}' "$IMAGE"
  if ((RC != 0)); then
    record "docker gpu" SKIP "image $IMAGE not built (docker build -t $IMAGE -f ci/Dockerfile ci)"
  else
    gpus="all"
    if [[ -n "$GPU" ]]; then gpus="device=$GPU"; fi
    probe docker run --rm --network none --gpus "$gpus" "$IMAGE" nvidia-smi -L
    if ((RC == 0)) && grep -q '^GPU ' <<<"$OUT"; then
      record "docker gpu" PASS "$IMAGE sees $(grep -c '^GPU ' <<<"$OUT") GPU(s) with --gpus $gpus"
    else
      record "docker gpu" FAIL "docker run --gpus $gpus failed (rc=$RC; NVIDIA container toolkit?): $(one_line "$OUT")"
    fi
  fi
fi

# --- report ---------------------------------------------------------------------------
printf '%-24s %-6s %s\n' "CHECK" "RESULT" "DETAIL"
printf '%s\n' "${ROWS[@]}"
if ((FAILED)); then
  echo "runner check: FAILED"
  exit 1
fi
echo "runner check: ok"
exit 0
