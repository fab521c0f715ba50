#!/usr/bin/env bash
# Runs every strategy's plan of a ViT-heavy VLM on this machine beside its
# prediction (docs/results/runtime.md, "Every strategy's plan, run"):
# profiles the model with `loom profile` (two processes side by side, as the
# runs have), then `loom plan --run` ROUNDS times, and prints a markdown table
# of medians over the rounds (the VM's load moves single runs by up to 1.4x).
#   scripts/strategy-results.sh [build-dir] [rounds]  > table.md
set -euo pipefail
B=${1:-build}
ROUNDS=${2:-3}
E=examples/runtime
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$B/loom" profile --model $E/vit-heavy-vlm.yaml --tokens 64,256,1024 --repeats 7 --concurrent 2 \
  --out "$T/profile.yaml" >&2
for r in $(seq 1 "$ROUNDS"); do
  "$B/loom" plan --model $E/vit-heavy-vlm.yaml --cluster $E/two-small-gpus.yaml --workload $E/image-heavy.yaml \
    --profile "$T/profile.yaml" --run --run-steps 5 --json "$T/round$r.json" >&2
done
python3 - "$T" "$ROUNDS" <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
runs = [json.load(open(f"{d}/round{r}.json")) for r in range(1, rounds + 1)]
names = [s["name"] for s in runs[0]["strategies"] if "measured" in s]
def med(name, key):
    vals = [s["measured"][key] for j in runs for s in j["strategies"] if s["name"] == name and "measured" in s]
    return statistics.median(vals), min(vals), max(vals)
first = {s["name"]: s for s in runs[0]["strategies"]}
sim_m, meas_m = med("megatron", "simulated_iteration_time_s")[0], med("megatron", "iteration_time_s")[0]
print("| strategy | plan | simulated s | measured s (median, min-max) | measured / simulated | predicted vs megatron | measured vs megatron |")
print("|---|---|---|---|---|---|---|")
for n in names:
    sim = med(n, "simulated_iteration_time_s")[0]
    m, lo, hi = med(n, "iteration_time_s")
    print(f"| {n} | `{first[n]['config']}` | {sim:.3f} | {m:.3f} ({lo:.3f}-{hi:.3f}) | {m / sim:.2f}x | "
          f"{sim_m / sim:.2f}x | {meas_m / m:.2f}x |")
for s in runs[0]["strategies"]:
    if "measured" not in s and "plan" in s:
        print(f"\n{s['name']}: planned but not run")
PY
