#!/usr/bin/env bash
# Runs every libFuzzer harness of a `make fuzz` build (fuzz/*_fuzzer.cpp) for
# SECONDS each, two at a time, on a seed corpus built from examples/, the zoo,
# the shipped profile and tests/data, plus plans the build's own `loom` makes
# for plan_json_fuzzer's fixed setting. Prints executions per harness and in
# all; exits 1 when any harness found a crash, a hang past TIMEOUT seconds, an
# allocation past 2 GiB or a sanitizer report (the input is kept in
# BUILD/artifacts/). Usage: run-fuzzers.sh BUILD SECONDS TIMEOUT
set -uo pipefail
build=${1:?build folder}
seconds=${2:-60}
timeout=${3:-10}
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
corpus=$build/corpus
mkdir -p "$build/artifacts" "$build/logs"

seed() {  # seed NAME FILES...: copies files into the harness's corpus
  local name=$1
  shift
  mkdir -p "$corpus/$name"
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$corpus/$name/seed-$(basename "$(dirname "$f")")-$(basename "$f")"; done
}
seed model_yaml_fuzzer "$src"/examples/hf/*/config.json "$src"/src/loom/spec/zoo/*.yaml "$src"/examples/my-vlm.yaml "$src"/examples/runtime/*vlm*.yaml \
  "$src"/examples/runtime/mosaic-encoders.yaml "$src"/examples/mosaic/*.yaml "$src"/tests/data/runtime/tiny-*.yaml
seed cluster_fuzzer "$src"/examples/lab-cluster.yaml "$src"/examples/runtime/*gpus.yaml "$src"/examples/runtime/one-h100.yaml
for shape in h100:2x8 a40:16x4 h800:1x1 mmscale-cluster entrain-64; do
  printf '%s\n' "$shape" > "$corpus/cluster_fuzzer/seed-shape-${shape//:/_}"
done
seed workload_yaml_fuzzer "$src"/examples/my-data.yaml "$src"/examples/runtime/image-heavy.yaml \
  "$src"/examples/runtime/captions.yaml "$src"/tests/data/runtime/tiny-*data.yaml "$src"/tests/data/runtime/tiny-laion.yaml \
  "$src"/tests/data/runtime/tiny-obelics.yaml
seed jsonl_fuzzer "$src"/examples/*.jsonl "$src"/examples/runtime/*.jsonl "$src"/tests/data/runtime/*.jsonl
# Tokenized training data (`loom run --data`): input_ids, labels, an attention mask.
printf '{"input_ids": [1, 2, 3, 4], "labels": [-100, 2, 3, 4]}\n{"input_ids": [5, 6], "attention_mask": [1, 1]}\n' \
  > "$corpus/jsonl_fuzzer/seed-tokens.jsonl"
seed profile_yaml_fuzzer "$src"/src/loom/cost/profiles/*.yaml
mkdir -p "$corpus/calibration_yaml_fuzzer"
printf 'gpu: h100\nmeasured_with: "bench"\npoints:\n  - {op: gemm, flops: 1.0e12, bytes: 1.0e8, time_s: 2.0e-3}\n  - {op: attention, flops: 4.0e11, bytes: 2.0e8, time_s: 1.5e-3, label: fa}\n' \
  > "$corpus/calibration_yaml_fuzzer/seed-gemm"
# safetensors files as transformers writes them: tensors of several dtypes and
# shapes, metadata, the header padded to 8 bytes (Python's standard library only).
mkdir -p "$corpus/safetensors_fuzzer"
python3 - "$corpus/safetensors_fuzzer" <<'PY'
import json, struct, sys
def write(path, tensors, metadata=None):
    header, data = {}, b""
    if metadata: header["__metadata__"] = metadata
    for name, (dtype, shape, size) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += bytes(range(size % 251)) + bytes(size - size % 251)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
write(sys.argv[1] + "/seed-llama", {"model.embed_tokens.weight": ("BF16", [8, 4], 64),
      "model.norm.weight": ("F32", [4], 16), "lm_head.weight": ("F16", [8, 4], 64)}, {"format": "pt"})
write(sys.argv[1] + "/seed-scalars", {"step": ("I64", [], 8), "empty": ("F32", [0, 3], 0), "mask": ("BOOL", [3], 3)})
PY
# Plans for plan_json_fuzzer's setting (tiny-vlm on h100:1x4, 8 samples), one file per strategy.
mkdir -p "$corpus/plan_json_fuzzer"
for s in megatron fsdp distmm optimus nnscaler disttrain dip spindle mmscale pipeweaver oobleck mosaic entrain entrain-zb cornstarch; do
  "$build/loom" plan --model "$src/tests/data/runtime/tiny-vlm.yaml" --cluster h100:1x4 --global-batch 8 \
    --iterations 2 --strategy "$s" --json "$corpus/plan_json_fuzzer/seed-$s.json" > /dev/null 2>&1 ||
    rm -f "$corpus/plan_json_fuzzer/seed-$s.json"
done
# Checkpoint manifests as a training run writes them (weights/run_checkpoint.h).
mkdir -p "$corpus/checkpoint_manifest_fuzzer"
printf '{\n  "format": "loom-checkpoint-2",\n  "global_batch": 8,\n  "model": "tiny-vlm",\n  "parts": [\n    "part-00000.safetensors",\n    "part-00001.safetensors"\n  ],\n  "plan": "tp 2",\n  "seed": 0,\n  "steps_done": 2\n}\n' \
  > "$corpus/checkpoint_manifest_fuzzer/seed-tp2"
printf '{"format": "loom-checkpoint-2", "global_batch": 1, "model": "m", "parts": [], "plan": "", "seed": 18446744073709551615, "steps_done": 0, "loss_scale": {"scale": 65536, "growth_tracker": 3, "hysteresis_tracker": 2}}' \
  > "$corpus/checkpoint_manifest_fuzzer/seed-fp16"
# PyTorch schedules the build's `loom` exports (compute_only and compute_comms).
mkdir -p "$corpus/pytorch_csv_fuzzer"
for s in gpipe 1f1b zb-h1; do
  "$build/loom" simulate --model llama3-8b --cluster h100:1x8 --workload text --global-batch 16 --tp 2 --pp 4 \
    --microbatches 8 --schedule "$s" --export-pytorch-csv "$corpus/pytorch_csv_fuzzer/seed-$s.csv" > /dev/null 2>&1
done
"$build/loom" simulate --model llama3-8b --cluster h100:1x8 --workload text --global-batch 16 --tp 4 --pp 2 --vpp 2 \
  --microbatches 4 --schedule interleaved --export-pytorch-csv "$corpus/pytorch_csv_fuzzer/seed-comms.csv" \
  --pytorch-csv-comms > /dev/null 2>&1
# The CLI: the first byte picks cli_fuzzer's prefix, then one argument a line.
mkdir -p "$corpus/cli_fuzzer"
printf '\0--tp\n2\n--pp\n2\n--json\n' > "$corpus/cli_fuzzer/seed-simulate"
printf '\1--global-batch\n16\n--seed\n3\n' > "$corpus/cli_fuzzer/seed-plan"
printf '\2--cluster\nh100:2x2\n--strategy\nall\n' > "$corpus/cli_fuzzer/seed-plan-all"
printf '\3--workload\nobelics\n' > "$corpus/cli_fuzzer/seed-inspect"
printf '\4--cluster\nh100:1x2\n--schedule\nzb-h1\n--recompute\nselective\n' > "$corpus/cli_fuzzer/seed-simulate-zb"
printf '\5models\n' > "$corpus/cli_fuzzer/seed-models"

run_one() {
  local name=$1
  (cd "$build/logs" && "$build/$name" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=4096 \
    -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" \
    "$corpus/$name" > "$build/logs/$name.log" 2>&1)
  echo "$name $?"
}
export -f run_one
export build seconds timeout corpus
fuzzers=$(cd "$build" && ls ./*_fuzzer | xargs -n1 basename)
results=$(printf '%s\n' $fuzzers | xargs -P "$(nproc)" -I{} bash -c 'run_one {}')

status=0
total=0
printf '%-26s %12s %s\n' harness executions result
for name in $fuzzers; do
  rc=$(printf '%s\n' "$results" | awk -v n="$name" '$1 == n {print $2}')
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/logs/$name.log" | tail -1)
  runs=${runs:-0}
  total=$((total + runs))
  if [ "$rc" = 0 ]; then verdict=clean; else verdict="FAILED (exit $rc; $build/logs/$name.log)"; status=1; fi
  printf '%-26s %12s %s\n' "$name" "$runs" "$verdict"
done
printf '%-26s %12s\n' total "$total"
exit $status
