#!/usr/bin/env bash
# Reproduces docs/results/pipeweaver.md: PipeWeaver against Megatron-LM,
# nnScaler* and Optimus on the five models of paper Table 4 (TP/PP pinned to
# the table, H800 testbeds), the Table 5 ablation on vlm-s, and the §8.1
# dynamic workload (40 iterations) with its HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
loom=build/loom
out=${1:-results-pipeweaver}
mkdir -p "$out"
run() {  # name model cluster workload tp pp
  echo "== $1: $2 on $3 ($4, tp$5 pp$6)"
  $loom plan --model "$2" --cluster "$3" --workload "$4" --global-batch 32 --tp "$5" --pp "$6" --iterations 3 --profile roofline \
    --strategy megatron,megatron-2024,nnscaler,optimus,pipeweaver --json "$out/$1.json" || echo "($1: no strategy fits)"
}
run vlm-s vlm-s h800:2x8 obelics 4 4
run vlm-m vlm-m h800:4x8 obelics 8 4
run vlm-l vlm-l h800:8x8 obelics 8 8
run t2v-s t2v-s h800:2x8 video 4 4
run t2v-l t2v-l h800:8x8 video 8 8
echo "== ablation (Table 5): vlm-s"
$loom plan --model vlm-s --cluster h800:2x8 --workload obelics --global-batch 32 --tp 4 --pp 4 --iterations 5 --profile roofline \
  --strategy megatron,megatron-2024,pipeweaver-partition,pipeweaver-interleave,pipeweaver-rank,pipeweaver --json "$out/ablation.json"
echo "== dynamic workload (§8.1): vlm-s, 40 iterations"
$loom plan --model vlm-s --cluster h800:2x8 --workload dynamic-images --global-batch 32 --tp 4 --pp 4 --iterations 40 --profile roofline \
  --strategy megatron,megatron-2024,nnscaler,optimus,pipeweaver --json "$out/dynamic.json" --report "$out/dynamic.html"
