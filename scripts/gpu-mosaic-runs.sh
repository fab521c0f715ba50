#!/usr/bin/env bash
# Mosaic's engine on one GPU (issue 16; docs/results/mosaic.md §2-§3): builds
# the CUDA runtime (scripts/build-cuda.sh, with third_party/gpu-deps carried
# from a Debian 12 machine), then measures
#   1. green contexts (`loom probe-sm`): creation, launch cost, co-located MLP
#      stacks on disjoint partitions against one after the other;
#   2. Mosaic's plans run by `loom run --device cuda`: a two-module
#      co-location (CLIP: image and text towers) and a four-module one
#      (examples/runtime/mosaic-encoders.yaml), each with its SM quotas on
#      green contexts, the same plan on one stream (--sm-quotas off), and
#      Megatron-LM's plan, and Mosaic's plan when it is planned with the
#      runtime's own profile; each measured beside the simulator's prediction
#      with the shipped H100 profile and with that own profile (`loom profile
#      --device cuda`, measured here). On CUDA a run's trace and timeline
#      hold each compute action's GPU time (events on its stream).
# Every step goes on after another fails (its output says so).
#   [PROBE=0] scripts/gpu-mosaic-runs.sh OUT_DIR [STEPS]
set -uo pipefail
OUT=${1:?usage: scripts/gpu-mosaic-runs.sh OUT_DIR [STEPS]}
STEPS=${2:-6}
mkdir -p "$OUT"
step() {  # name command...: run, log to OUT/name.txt, say how it ended
  local name=$1
  shift
  local t0=$SECONDS
  "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - t0)) s"
  tail -n 12 "$OUT/$name.txt"
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
if [ ! -x build-cuda/loom ]; then
  step build bash scripts/build-cuda.sh build-cuda
  if [ ! -x build-cuda/loom ]; then  # every error at once, then stop
    ninja -C build-cuda -k 0 loom 2>&1 | grep -B2 -A6 "error:" | head -150
    exit 1
  fi
fi
L=build-cuda/loom
CL=examples/runtime/one-h100.yaml
if [ "${PROBE:-1}" = 1 ]; then step probe-sm $L probe-sm --repeats 20; fi

# The runtime's own layers, measured here (fp32, as it trains): the profile
# its runs are predicted with, beside the shipped H100 profile (fitted to
# Python-eager bf16 measurements, ../shared/measurements/h100).
step profile-enc $L profile --model examples/runtime/mosaic-encoders.yaml --device cuda --gpu h100 \
  --tokens 256,1024,4096 --repeats 5 --out "$OUT/profile-enc.yaml"
step profile-clip $L profile --model clip-vit-l --device cuda --gpu h100 --tokens 256,1024,4096 --repeats 5 \
  --out "$OUT/profile-clip.yaml"

# Plans: megatron and mosaic for each model on one H100, planned with each profile.
for prof in default own; do
  pc=default pe=default
  if [ $prof = own ]; then pc=$OUT/profile-clip.yaml pe=$OUT/profile-enc.yaml; fi
  step plan-clip-$prof $L plan --model clip-vit-l --cluster $CL --workload examples/runtime/captions.yaml \
    --global-batch 16 --strategy megatron,mosaic --iterations 1 --profile $pc --json "$OUT/plans-clip-$prof.json"
  step plan-enc-$prof $L plan --model examples/runtime/mosaic-encoders.yaml --cluster $CL --workload mosaic-fixed \
    --global-batch 8 --strategy megatron,mosaic --iterations 1 --profile $pe --json "$OUT/plans-enc-$prof.json"
done

run() {  # tag model workload batch plans strategy quotas profile
  local tag=$1 model=$2 workload=$3 batch=$4 plans=$5 strategy=$6 quotas=$7 profile=$8
  step "run-$tag" $L run --model "$model" --cluster $CL --workload "$workload" --global-batch "$batch" \
    --plan "$plans" --strategy "$strategy" --device cuda --sm-quotas "$quotas" --steps "$STEPS" \
    --compare --profile "$profile" --timeline "$OUT/timeline-$tag.svg" --trace "$OUT/trace-$tag.json"
}
# Each run is predicted with both profiles: the shipped one, then the runtime's own.
for prof in default own; do
  pc=default pe=default
  if [ $prof = own ]; then pc=$OUT/profile-clip.yaml pe=$OUT/profile-enc.yaml; fi
  C="clip-vit-l examples/runtime/captions.yaml 16"
  E="examples/runtime/mosaic-encoders.yaml mosaic-fixed 8"
  run clip-megatron-$prof $C "$OUT/plans-clip-default.json" megatron on $pc
  run clip-mosaic-$prof $C "$OUT/plans-clip-default.json" mosaic on $pc
  run clip-mosaic-one-stream-$prof $C "$OUT/plans-clip-default.json" mosaic off $pc
  run clip-mosaic-ownplan-$prof $C "$OUT/plans-clip-own.json" mosaic on $pc
  run enc-megatron-$prof $E "$OUT/plans-enc-default.json" megatron on $pe
  run enc-mosaic-$prof $E "$OUT/plans-enc-default.json" mosaic on $pe
  run enc-mosaic-one-stream-$prof $E "$OUT/plans-enc-default.json" mosaic off $pe
  run enc-mosaic-ownplan-$prof $E "$OUT/plans-enc-own.json" mosaic on $pe
done
