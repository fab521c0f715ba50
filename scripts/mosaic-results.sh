#!/usr/bin/env bash
# Mosaic's evaluation grid (docs/results/mosaic.md): its models with Table 2's
# inputs (workload mosaic-fixed) on 8, 16 and 32 H100s of mosaic-testbed
# shape, global batch 16 on one node and 32 beyond; iteration time of
# megatron (Loom's searched TP/PP/DP), megatron-dp (the paper's: DP only),
# distmm, spindle and mosaic, simulated.
#   scripts/mosaic-results.sh [build-dir]
set -euo pipefail
L=${1:-build}/loom
models="clip-vit-l qwen3-vl-8b unified-io-2 imagebind ofasys examples/mosaic/ofasys-10.yaml"
printf '%-14s %-14s %-9s %-11s %-9s %-9s %-9s %-7s %-7s %-7s %-7s\n' model gpus megatron megatron-dp distmm spindle mosaic vs-meg vs-mdp vs-dist vs-spin
for m in $models; do
  for c in h100:1x8 h100:2x8 mosaic-testbed; do
    b=32; [ "$c" = h100:1x8 ] && b=16
    tmp=$(mktemp)
    "$L" plan --model "$m" --cluster "$c" --workload mosaic-fixed --global-batch $b \
      --strategy megatron,megatron-dp,distmm,spindle,mosaic --json "$tmp" >/dev/null 2>&1 || true
    python3 - "$m" "$c" "$tmp" <<'PY'
import json, sys, os
m, c, path = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    j = json.load(open(path))
except Exception:
    print(f"{os.path.basename(m).replace('.yaml',''):<14} {c:<14} (no plan)"); sys.exit()
t = {e['name']: e.get('iteration_time_s') for e in j['strategies']}
f = lambda v: f"{v:.3f}s" if v else "-"
r = lambda a, b: f"{t[a] and t[b] and t[b]/t[a]:.2f}x" if t.get(a) and t.get(b) else "-"
print(f"{os.path.basename(m).replace('.yaml',''):<14} {c:<14} {f(t.get('megatron')):<9} {f(t.get('megatron-dp')):<11} "
      f"{f(t.get('distmm')):<9} {f(t.get('spindle')):<9} {f(t.get('mosaic')):<9} {r('mosaic','megatron'):<7} "
      f"{r('mosaic','megatron-dp'):<7} {r('mosaic','distmm'):<7} {r('mosaic','spindle'):<7}")
PY
    rm -f "$tmp"
  done
done

# Ablations (docs/results/mosaic.md §4): one node of 8 H100s, batch 16; the
# iteration time, planning time, stage evaluations and pairs GAHC pruned.
echo
variants=mosaic,mosaic-nointerference,mosaic-additive,mosaic-nocache,mosaic-noprune,mosaic-g30,mosaic-g20,mosaic-g5
for m in examples/mosaic/ofasys-10.yaml ofasys imagebind; do
  tmp=$(mktemp)
  "$L" plan --model "$m" --cluster h100:1x8 --workload mosaic-fixed --global-batch 16 --strategy "$variants" \
    --json "$tmp" >/dev/null 2>&1 || true
  python3 - "$m" "$tmp" <<'PY'
import json, os, re, sys
m, path = sys.argv[1], sys.argv[2]
for e in json.load(open(path))['strategies']:
    if 'plan' not in e:
        print(f"{os.path.basename(m)} {e['name']} (no plan)"); continue
    s = e['plan']['searched']
    ev = re.search(r'(\d+) stage evaluations', s).group(1)
    pr = re.search(r'(\d+) pruned', s).group(1)
    print(f"{os.path.basename(m)} {e['name']} {e['iteration_time_s']:.4f} plan {e['planning_time_s']:.3f}s evals {ev} pruned {pr}")
PY
  rm -f "$tmp"
done

# Zoo models too big for Mosaic's slots of one node (docs/results/mosaic.md
# §3, "slots"): default workloads and batches, 32 and 128 H100s; megatron
# against mosaic, and the configuration mosaic picks.
echo
printf '%-9s %-10s %-10s %-10s %-7s %s\n' model gpus megatron mosaic vs-meg "mosaic's plan"
for m in vlm-m vlm-l vlm-xl mllm-72b t2v-l t2v-xl gpt-175b; do
  for c in h100:4x8 h100:16x8; do
    tmp=$(mktemp)
    "$L" plan --model "$m" --cluster "$c" --strategy megatron,mosaic --json "$tmp" >/dev/null 2>&1 || true
    python3 - "$m" "$c" "$tmp" <<'PY'
import json, sys
m, c, path = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    j = json.load(open(path))
except Exception:
    print(f"{m:<9} {c:<10} no plan from either"); sys.exit()
e = {x['name']: x for x in j['strategies']}
t = {k: v.get('iteration_time_s') for k, v in e.items()}
f = lambda v: f"{v:.2f}s" if v else "-"
r = f"{t['megatron']/t['mosaic']:.2f}x" if t.get('megatron') and t.get('mosaic') else "-"
cfg = e['mosaic'].get('config', '-') if 'mosaic' in e else '-'
print(f"{m:<9} {c:<10} {f(t.get('megatron')):<10} {f(t.get('mosaic')):<10} {r:<7} {cfg}")
PY
    rm -f "$tmp"
  done
done

# Issue 44: what co-location could gain. Mosaic's only freedom beyond Spindle is
# sharing a GPU's SMs; the shipped H100 profile charges every layer phase a launch
# floor (one host thread per GPU launches co-located modules one after another)
# and a serial share. The same 32-GPU OFASys runs with the floor removed, then
# with the serial share as well (SM time exactly proportional to 1/SMs).
echo
printf '%-10s %-16s %9s %9s %9s %8s\n' model profile distmm spindle mosaic "vs-spin"
prof=$(mktemp -d)
base=src/loom/cost/profiles/h100.yaml
sed 's/launch_floor_s_per_layer: [0-9.e-]*/launch_floor_s_per_layer: 0/' "$base" >"$prof/nofloor.yaml"
sed 's/launch_floor_s_per_layer: [0-9.e-]*/launch_floor_s_per_layer: 0/; s/serial_fraction: [0-9.e-]*/serial_fraction: 0/' \
  "$base" >"$prof/linear.yaml"
for m in ofasys examples/mosaic/ofasys-10.yaml; do
  for p in "$base" "$prof/nofloor.yaml" "$prof/linear.yaml"; do
    tmp=$(mktemp)
    "$L" plan --model "$m" --cluster mosaic-testbed --workload mosaic-fixed --global-batch 32 --profile "$p" \
      --strategy distmm,spindle,mosaic --iterations 1 --json "$tmp" >/dev/null 2>&1 || true
    python3 - "$(basename "$m" .yaml)" "$(basename "$p" .yaml)" "$tmp" <<'PY'
import json, sys
m, p, path = sys.argv[1:4]
t = {x['name']: x.get('iteration_time_s') for x in json.load(open(path))['strategies']}
f = lambda k: f"{t[k]:.4f}" if t.get(k) else "-"
r = f"{t['spindle'] / t['mosaic']:.3f}x" if t.get('spindle') and t.get('mosaic') else "-"
print(f"{m:<10} {p:<16} {f('distmm'):>9} {f('spindle'):>9} {f('mosaic'):>9} {r:>8}")
PY
    rm -f "$tmp"
  done
done
rm -rf "$prof"
