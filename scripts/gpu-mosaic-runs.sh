#!/usr/bin/env bash
# Mosaic's engine on one GPU (issue 16; docs/results/mosaic.md §2-§3): builds
# the CUDA runtime (scripts/build-cuda.sh, with third_party/gpu-deps carried
# from a Debian 12 machine), then measures
#   1. green contexts (`loom probe-sm`): creation, launch cost, co-located MLP
#      stacks on disjoint partitions against one after the other;
#   2. plans run by `loom run --device cuda` for CLIP (two towers) and
#      examples/runtime/mosaic-encoders.yaml (three encoders and a model
#      reading them): Megatron-LM's, Mosaic's planned with the shipped H100
#      profile and with the runtime's own (`loom profile --device cuda`,
#      measured here, its SM scaling fitted on green contexts), and a
#      co-location the solver did not choose (scripts/colocate-plan.py), on
#      green contexts and on one stream (--sm-quotas off); each beside the
#      simulator's prediction. A CUDA run's trace and timeline hold each
#      compute action's GPU time (events on its stream).
# Every step goes on after another fails (its output says so).
#   [PROBE=0] [MODELS=clip|enc] scripts/gpu-mosaic-runs.sh OUT_DIR [STEPS]
set -uo pipefail
OUT=${1:?usage: scripts/gpu-mosaic-runs.sh OUT_DIR [STEPS]}
STEPS=${2:-6}
MODELS=${MODELS:-clip enc}  # which of the two models to measure
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

# The runtime's own layers, measured here (fp32, as it trains), with the
# engine's SM scaling on green contexts fitted into its sm_sharing law: the
# profile its runs are predicted with, beside the shipped H100 profile (its law
# fitted to Python-eager bf16 measurements, ../shared/measurements/h100).
C="clip-vit-l examples/runtime/captions.yaml 16"
E="examples/runtime/mosaic-encoders.yaml mosaic-fixed 8"
# Co-locations the solver did not choose: CLIP's towers together (88 + 32 SMs),
# the three encoders together (56 + 16 + 48 SMs), then the rest.
declare -A COLOC=([clip]=vision:88,text:32 [enc]=vision:56,vision_small:16,text:48)
for m in $MODELS; do
  if [ $m = clip ]; then M=($C); else M=($E); fi
  step profile-$m $L profile --model "${M[0]}" --device cuda --gpu h100 --tokens 256,1024,4096 --repeats 5 \
    --out "$OUT/profile-$m.yaml"
  grep -h "sm_sharing" "$OUT/profile-$m.yaml"
  # Plans: megatron and mosaic on one H100, with the shipped profile (bf16, as
  # a user plans) and with the runtime's own (fp32, what the runtime runs).
  for prof in default own; do
    p=default prec=bf16
    if [ $prof = own ]; then p=$OUT/profile-$m.yaml prec=fp32; fi
    step "plan-$m-$prof" $L plan --model "${M[0]}" --cluster $CL --workload "${M[1]}" --global-batch "${M[2]}" \
      --strategy megatron,mosaic --iterations 1 --profile "$p" --precision $prec --json "$OUT/plans-$m-$prof.json"
  done
  python3 scripts/colocate-plan.py "$OUT/plans-$m-default.json" "$OUT/plans-$m-coloc.json" "${COLOC[$m]}"
done

run() {  # tag model workload batch plans strategy quotas profile
  local tag=$1 model=$2 workload=$3 batch=$4 plans=$5 strategy=$6 quotas=$7 profile=$8
  step "run-$tag" $L run --model "$model" --cluster $CL --workload "$workload" --global-batch "$batch" \
    --plan "$plans" --strategy "$strategy" --device cuda --sm-quotas "$quotas" --steps "$STEPS" \
    --compare --profile "$profile" --timeline "$OUT/timeline-$tag.svg" --trace "$OUT/trace-$tag.json"
}
# Every run predicted with the runtime's own profile; Megatron-LM's and the
# shipped profile's Mosaic plan also with the shipped profile.
for m in $MODELS; do
  if [ $m = clip ]; then M=$C; else M=$E; fi
  own=$OUT/profile-$m.yaml
  run $m-megatron $M "$OUT/plans-$m-default.json" megatron on "$own"
  run $m-megatron-shipped $M "$OUT/plans-$m-default.json" megatron on default
  run $m-mosaic-shipped-plan $M "$OUT/plans-$m-default.json" mosaic on "$own"
  run $m-mosaic-shipped-plan-shipped $M "$OUT/plans-$m-default.json" mosaic on default
  run $m-mosaic-own-plan $M "$OUT/plans-$m-own.json" mosaic on "$own"
  run $m-coloc $M "$OUT/plans-$m-coloc.json" mosaic on "$own"
  run $m-coloc-one-stream $M "$OUT/plans-$m-coloc.json" mosaic off "$own"
done
