#!/usr/bin/env bash
# Issue 41's GPU check (docs/results/runtime.md, "On a GPU"): on one H100 or
# H200, builds `loom` with its CUDA runtime (scripts/build-cuda.sh, with
# third_party/gpu-deps carried from a Debian 12 machine), makes a real-size
# LLaVA (CLIP ViT-L/14-336 + Llama-3.2-1B, random bf16 weights, saved by
# transformers) and a batch of 4096-token samples with one image each
# (scripts/hf-vlm-step.py), then trains it for STEPS steps in bf16
#   0. `loom profile --precision bf16` of the model's layers on this GPU;
#   1. with `loom run` (one GPU, every sample its own microbatch, --compare:
#      the simulator's prediction beside the measured step, with that profile; --kernel-trace:
#      the last step under PyTorch's profiler, summarized by
#      scripts/kernel-summary.py into OUT/ktrace-NAME.txt, the trace as OUT/ktrace-NAME.json.gz), and
#   2. with transformers' training step on the same weights and batch.
# Each writes its JSON to OUT/NAME.txt; the last lines print both step times, tokens/s
# and MFU. Every step goes on after another fails (its output says so).
#   [SAMPLES=8] [SEQ=4096] [MICRO=1] [HF=1 (0: Loom only)] [HF_MICRO=$MICRO (those transformers runs too)]
#   [SMALL=0] [LOOM=build-cuda/loom]
#   [PROFILE_TOKENS=1024,4096] scripts/gpu-vlm-step.sh OUT_DIR [STEPS]
set -uo pipefail
OUT=${1:?usage: scripts/gpu-vlm-step.sh OUT_DIR [STEPS]}
STEPS=${2:-10}
SAMPLES=${SAMPLES:-8}
SEQ=${SEQ:-4096}
MICRO=${MICRO:-1}  # samples per microbatch; several (MICRO="1 4") run one after another
L=${LOOM:-build-cuda/loom}
M=${MODEL_DIR:-/tmp/loom-vlm}
mkdir -p "$OUT"
step() {  # name command...: run (at most LIMIT_S, 300 s), log to OUT/name.txt, say how it ended
  local name=$1
  shift
  local t0=$SECONDS
  timeout "${LIMIT_S:-300}" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - t0)) s"
  tail -n 8 "$OUT/$name.txt"
}
DEVICE=cpu GPU=h100
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
  DEVICE=cuda
  if grep -q H200 "$OUT/gpu.txt"; then GPU=h200; fi
  if [ ! -x "$L" ]; then
    step build bash scripts/build-cuda.sh build-cuda
    if [ ! -x "$L" ]; then  # every error at once, then stop
      ninja -C build-cuda -k 0 loom 2>&1 | grep -B2 -A6 "error:" | head -150
      exit 1
    fi
  fi
fi
export PYTHONUNBUFFERED=1
step make python3 scripts/hf-vlm-step.py make "$M" "$SAMPLES" "$SEQ" $([ "${SMALL:-0}" != 0 ] && echo small)
step flops python3 scripts/hf-vlm-step.py flops "$M"  # the model FLOPs of a step, for MFU
# This engine's layers measured here in bf16 (loom profile --precision bf16), so
# that --compare predicts with them rather than the shipped H100 profile's.
rm -f "$OUT/profile-bf16.yaml"  # a failed profile must not leave an earlier one to predict with
step profile "$L" profile --model "$M" --device "$DEVICE" --precision bf16 --gpu "$GPU" --tokens "${PROFILE_TOKENS:-1024,4096}" \
  $([ "$DEVICE" = cuda ] && echo --sm-scaling off) --out "$OUT/profile-bf16.yaml"
PROFILE=()
if [ -s "$OUT/profile-bf16.yaml" ]; then PROFILE=(--profile "$OUT/profile-bf16.yaml"); fi
for micro in $MICRO; do  # samples per microbatch
  sfx=-m$micro
  if [ "$micro" = 1 ]; then sfx=; fi
  step loom$sfx "$L" run --model "$M" --data "$M/data.jsonl" --global-batch "$SAMPLES" --microbatches $((SAMPLES / micro)) \
    --steps "$STEPS" --lr 1e-5 --precision bf16 --device "$DEVICE" --cluster "$GPU:1x1" --compare --json \
    ${PROFILE[@]+"${PROFILE[@]}"} --kernel-trace "$OUT/ktrace$sfx"
  if [ -f "$OUT/ktrace$sfx/process-0.json" ]; then
    python3 scripts/kernel-summary.py "$OUT/ktrace$sfx/process-0.json" --top 25 | tee "$OUT/ktrace-loom$sfx.txt"
    gzip -c "$OUT/ktrace$sfx/process-0.json" > "$OUT/ktrace-loom$sfx.json.gz" && rm -r "$OUT/ktrace$sfx"
  fi
  # transformers at 8 samples per microbatch needs ~160 GiB: HF_MICRO says which it runs.
  if [ "${HF:-1}" = 1 ] && [[ " ${HF_MICRO:-$MICRO} " == *" $micro "* ]]; then
    step hf$sfx python3 scripts/hf-vlm-step.py train "$M" "$STEPS" 1e-5 "$micro"
  fi
  python3 - "$OUT" "$GPU" "$sfx" << 'SUMMARY'
import json, sys
out, gpu, sfx = sys.argv[1], sys.argv[2], sys.argv[3]
peak = 989.4e12  # bf16 dense, H100 SXM and H200 alike (Loom's gpu table)
def tail(name):
    try:
        text = open(f"{out}/{name}.txt").read()
        return json.loads(text[text.rfind("\n{") + 1:] if "\n{" in text else text[text.find("{"):])
    except Exception as e:
        return {"error": str(e)}
def median_after_warmup(times):
    later = sorted(times[2:] or times)
    return later[len(later) // 2]
hf, loom, model = tail("hf" + sfx), tail("loom" + sfx), tail("flops")
for name, r in (("transformers", hf), ("loom", loom)):
    if "step_s" not in r:
        print(f"{name}: {r}")
        continue
    times = r["step_s"][0] if isinstance(r["step_s"][0], list) else r["step_s"]
    s = median_after_warmup(times)
    line = f"{name}: median step {s:.3f} s (of {len(times)}, the first two left out)"
    if "flops_per_step" in model:
        line += f", {model['tokens_per_step'] / s:.0f} tokens/s, MFU {model['flops_per_step'] / s / peak:.1%}"
    mem = r.get("peak_mem_bytes") or max(r.get("peak_tensor_bytes", [0]))
    line += f", peak memory {mem / 2**30:.2f} GiB, losses {r['losses'][0]:.4f} .. {r['losses'][-1]:.4f}"
    if name == "loom":
        line += (f"; predicted step {r['simulated_iteration_time_s']:.3f} s, predicted peak memory "
                 f"{max(r['simulated_group_peak_mem_bytes']) / 2**30:.2f} GiB")
    print(line)
if not sfx:
    json.dump({"gpu": gpu, "transformers": hf, "loom": loom}, open(f"{out}/summary.json", "w"))
SUMMARY
done
