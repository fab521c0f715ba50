#!/usr/bin/env bash
# Measures how well the simulator, given `loom profile`'s profile of this
# machine, predicts `loom run` per plan shape (docs/results/runtime.md).
# One intra-op thread per rank; run on an otherwise idle machine.
#   scripts/runtime-results.sh [build-dir]  > table.md
set -euo pipefail
B=${1:-build}
D=tests/data/runtime
T=$(mktemp -d)
# Each rank count gets a profile measured with that many processes side by
# side (--concurrent): the ranks share the machine's cores.
for n in 1 2; do
  "$B/loom" profile --model $D/tiny-llm.yaml --tokens 64,256,1024 --repeats 7 --concurrent $n --out "$T/llm$n.yaml" 2>/dev/null
  "$B/loom" profile --model $D/tiny-vlm.yaml --tokens 16,64,256,1024 --repeats 7 --concurrent $n --out "$T/vlm$n.yaml" 2>/dev/null
done
LLM="--model $D/tiny-llm.yaml --workload text --global-batch 16 --seq-len 256 --profile $T/llm"
VLM="--model $D/tiny-vlm.yaml --workload $D/tiny-laion.yaml --global-batch 16 --profile $T/vlm"
echo "| model | ranks | layout | simulated s | measured s | measured / simulated |"
echo "|---|---|---|---|---|---|"
row() {  # model-args gpus layout-flags
  local out
  out=$("$B/loom" run $1$2.yaml --cluster "h100:1x$2" $3 --microbatches 4 --steps 4 --threads 1 --compare --json)
  python3 -c '
import json, sys
j = json.loads(sys.argv[1]); s = j["simulated_iteration_time_s"]; m = j["measured_iteration_time_s"]
print(f"| {sys.argv[2]} | {sys.argv[3]} | `{sys.argv[4]}` | {s:.3f} | {m:.3f} | {m / s:.2f}x |")' "$out" "$4" "$2" "$3"
}
row "$LLM" 1 "--pp 1" tiny-llm
row "$LLM" 2 "--pp 2 --schedule gpipe" tiny-llm
row "$LLM" 2 "--pp 2 --schedule 1f1b" tiny-llm
row "$LLM" 2 "--pp 2 --vpp 2 --schedule interleaved" tiny-llm
row "$LLM" 2 "--pp 2 --schedule zb-h1" tiny-llm
row "$LLM" 2 "--pp 2 --recompute full" tiny-llm
row "$LLM" 2 "--dp 2" tiny-llm
row "$LLM" 2 "--tp 2" tiny-llm
row "$VLM" 1 "--pp 1" tiny-vlm
row "$VLM" 2 "--pp 2 --schedule 1f1b" tiny-vlm
row "$VLM" 2 "--pp 2 --schedule zb-h1" tiny-vlm
row "$VLM" 2 "--dp 2" tiny-vlm
rm -rf "$T"
