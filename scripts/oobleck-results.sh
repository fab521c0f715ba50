#!/usr/bin/env bash
# Oobleck's Table 2.2 grid (docs/results/oobleck.md §5): the thesis' five
# models with Table 2.1's global batches on oobleck-testbed (30 A40 nodes of
# one GPU), failures every 6 h, 1 h and 10 min on average (seed 0) until half
# the nodes remain, 12 hours replayed; mean samples/s of varuna, oobleck and
# bamboo, simulated. Takes a few minutes.
#   scripts/oobleck-results.sh [build-dir]
set -euo pipefail
L=${1:-build}/loom
printf '%-12s %-5s %10s %10s %10s\n' model mtbf varuna oobleck bamboo
for spec in bert-large:8192 gpt2-medium:8192 gpt3-medium:8192 gpt3-2.7b:1024 gpt3-6.7b:1024; do
  m=${spec%%:*}; b=${spec##*:}
  for mtbf in 21600:6h 3600:1h 600:10m; do
    s=${mtbf%%:*}; name=${mtbf##*:}
    tmp=$(mktemp)
    "$L" replay --model "$m" --cluster oobleck-testbed --workload text --global-batch "$b" --mtbf "$s" --hours 12 \
      --json "$tmp" >/dev/null 2>&1 || true
    python3 - "$m" "$name" "$tmp" <<'PY'
import json, sys
m, name, path = sys.argv[1:4]
try:
    j = json.load(open(path))
except Exception:
    print(f"{m:<12} {name:<5} (no replay)"); sys.exit()
v = {s['system']: s for s in j['systems']}
f = lambda k: f"{v[k]['mean_samples_per_s']:.2f}" if k in v and v[k]['mean_samples_per_s'] > 0 else "-"
print(f"{m:<12} {name:<5} {f('varuna'):>10} {f('oobleck'):>10} {f('bamboo'):>10}")
PY
    rm -f "$tmp"
  done
done

# Table 2.4: Varuna with checkpoints that cost nothing, every 2 iterations,
# against the default (every 10, priced) and Oobleck, on BERT-Large and
# GPT-3 6.7B.
echo
printf '%-12s %-5s %12s %22s %10s\n' model mtbf varuna "varuna(free ckpt/2)" oobleck
for spec in bert-large:8192 gpt3-6.7b:1024; do
  m=${spec%%:*}; b=${spec##*:}
  for mtbf in 21600:6h 3600:1h 600:10m; do
    s=${mtbf%%:*}; name=${mtbf##*:}
    a=$(mktemp); c=$(mktemp)
    "$L" replay --model "$m" --cluster oobleck-testbed --workload text --global-batch "$b" --mtbf "$s" --hours 12 \
      --systems varuna,oobleck --json "$a" >/dev/null 2>&1 || true
    "$L" replay --model "$m" --cluster oobleck-testbed --workload text --global-batch "$b" --mtbf "$s" --hours 12 \
      --systems varuna --free-checkpoints --checkpoint-every 2 --json "$c" >/dev/null 2>&1 || true
    python3 - "$m" "$name" "$a" "$c" <<'PY'
import json, sys
m, name, a, c = sys.argv[1:5]
v = {s['system']: s['mean_samples_per_s'] for s in json.load(open(a))['systems']}
w = {s['system']: s['mean_samples_per_s'] for s in json.load(open(c))['systems']}
print(f"{m:<12} {name:<5} {v['varuna']:12.2f} {w['varuna']:22.2f} {v['oobleck']:10.2f}")
PY
    rm -f "$a" "$c"
  done
done
