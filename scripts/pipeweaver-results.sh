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
    --strategy megatron,megatron-2024,nnscaler,optimus,optimus-shared-tp,pipeweaver --json "$out/$1.json" || echo "($1: no strategy fits)"
}
run vlm-s vlm-s h800:2x8 obelics 4 4
run vlm-m vlm-m h800:4x8 obelics 8 4
run vlm-l vlm-l h800:8x8 obelics 8 8
run t2v-s t2v-s h800:2x8 video 4 4
run t2v-l t2v-l h800:8x8 video 8 8
echo "== ablation (Table 5): vlm-s"
$loom plan --model vlm-s --cluster h800:2x8 --workload obelics --global-batch 32 --tp 4 --pp 4 --iterations 5 --profile roofline \
  --strategy megatron,megatron-2024,pipeweaver-partition,pipeweaver-interleave,pipeweaver-rank,pipeweaver,pipeweaver-interleave-rc,pipeweaver-tune-rc --json "$out/ablation.json"
echo "== dynamic workload (§8.1): vlm-s, 40 iterations"
$loom plan --model vlm-s --cluster h800:2x8 --workload dynamic-images --global-batch 32 --tp 4 --pp 4 --iterations 40 --profile roofline \
  --strategy megatron,megatron-2024,nnscaler,optimus,optimus-shared-tp,pipeweaver --json "$out/dynamic.json" --report "$out/dynamic.html"
echo "== headline under the shipped profile (H100-fitted efficiencies and launch floor): vlm-s, vlm-m"
$loom plan --model vlm-s --cluster h800:2x8 --workload obelics --global-batch 32 --tp 4 --pp 4 --iterations 3 \
  --strategy megatron-2024,nnscaler,optimus,optimus-shared-tp,pipeweaver-partition,pipeweaver --json "$out/vlm-s-profile.json"
$loom plan --model vlm-m --cluster h800:4x8 --workload obelics --global-batch 32 --tp 8 --pp 4 --iterations 3 \
  --strategy megatron-2024,nnscaler,optimus,optimus-shared-tp,pipeweaver-partition,pipeweaver --json "$out/vlm-m-profile.json"
echo "== sub-microbatch sweep (paper Fig. 10: B of 4-32; its runs use 12): vlm-s, pipeweaver with B pinned"
for profile in roofline profile; do
  for b in 1 2 4 8 12 16 32; do
    flag=""; [ "$profile" = roofline ] && flag="--profile roofline"
    printf '%-8s B=%-3s ' "$profile" "$b"
    $loom plan --model vlm-s --cluster h800:2x8 --workload obelics --global-batch 32 --tp 4 --pp 4 --iterations 3 $flag \
      --sub-microbatch "$b" --strategy pipeweaver --json "$out/b$b-$profile.json" >/dev/null
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['strategies'][0]; print(f\"{r['iteration_time_s']:.2f} s\")" "$out/b$b-$profile.json"
  done
done
