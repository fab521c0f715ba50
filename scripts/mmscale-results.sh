#!/bin/sh
# Reproduces docs/results/mmscale.md: MMScale against Megatron-LM, the ratio-based
# allocation and no reordering on MMScale's models, LAION data, A800 clusters.
# Usage: scripts/mmscale-results.sh [OUTDIR]   (default results/mmscale)
set -e
out=${1:-results/mmscale}
mkdir -p "$out"
loom=${LOOM:-build/loom}
strategies=megatron,megatron-2024,mmscale,mmscale-ratio,mmscale-noreorder
# Microbenchmark scale (paper §7.2): 96 A800s (12 nodes; the paper uses up to 98),
# global batch 128 / 64 / 40.
for mb in mllm-9b:128 mllm-15b:64 mllm-72b:40; do
  m=${mb%:*}; b=${mb#*:}
  $loom plan --model "$m" --cluster a800:12x8 --workload laion --global-batch "$b" \
    --strategy $strategies --iterations 5 --json "$out/$m-micro.json" > "$out/$m-micro.txt"
done
# Production scale (paper §7.1): 1296 A800s, global batch 1920.
for m in mllm-9b mllm-15b mllm-72b; do
  $loom plan --model "$m" --cluster mmscale-cluster --workload laion --global-batch 1920 \
    --strategy $strategies --iterations 3 --json "$out/$m-prod.json" > "$out/$m-prod.txt"
done
