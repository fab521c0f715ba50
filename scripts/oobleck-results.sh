#!/usr/bin/env bash
# Oobleck's Table 2.2 grid (docs/results/oobleck.md §5): the thesis' five
# models with Table 2.1's global batches on oobleck-testbed (30 A40 nodes of
# one GPU), failures every 6 h, 1 h and 10 min on average (seed 0) until half
# the nodes remain, 12 hours replayed; mean samples/s of varuna, oobleck and
# bamboo, simulated. Takes a few minutes.
# The third part prices the thesis' own setup (TF32, per-model sequence
# lengths) against its Table 2.2 rows.
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

# The thesis' setup for Table 2.2: TF32 without mixed precision, each model's
# own sequence length (BERT 512, GPT-2 1024, GPT-3 2048); the no-failure
# throughput of Loom's plans beside the thesis' 6 h rows, and their ratio.
echo
printf '%-12s %6s %16s %16s %16s %16s\n' model seq "varuna(loom)" "varuna(thesis)" "oobleck(loom)" "oobleck(thesis)"
for spec in bert-large:8192:512:260.11:287.10 gpt2-medium:8192:1024:86.51:85.59 gpt3-medium:8192:2048:29.50:29.30 \
            gpt3-2.7b:1024:2048:7.27:7.29 gpt3-6.7b:1024:2048:4.14:4.33; do
  IFS=: read -r m b seq tv to <<<"$spec"
  tmp=$(mktemp)
  "$L" replay --model "$m" --cluster oobleck-testbed --workload text --global-batch "$b" --seq-len "$seq" \
    --precision tf32 --mtbf 21600 --hours 12 --systems varuna,oobleck --json "$tmp" >/dev/null 2>&1 || true
  python3 - "$m" "$seq" "$tv" "$to" "$tmp" <<'PY'
import json, sys
m, seq, tv, to, path = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
v = {s['system']: s for s in json.load(open(path))['systems']}
lv, lo = v['varuna']['healthy_samples_per_s'], v['oobleck']['healthy_samples_per_s']
print(f"{m:<12} {seq:>6} {lv:9.2f} ({lv/tv:3.1f}x) {tv:16.2f} {lo:9.2f} ({lo/to:3.1f}x) {to:16.2f}")
PY
  rm -f "$tmp"
done
