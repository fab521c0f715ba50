#!/usr/bin/env bash
# Entrain's evaluation (docs/results/entrain.md), simulated on the thesis'
# setting: 64 A40s (the entrain-64 testbed, 16 nodes x 4; the thesis emulates
# them with four runs of a 16-GPU replica of entrain-testbed), DP 4 and TP 2 for every framework, microbatch 4, global
# batch 512, Qwen2.5-Vision + Llama3-1b / 3b on the four FineVision-shaped
# subsets.
#  1. Table 4.1 / C.1: E.PP / L.PP per framework, iteration time, Entrain's
#     throughput over DistTrain and DIP, peak memory beside DIP's; Entrain
#     without deferral, without its eager slot, with zero-bubble backwards;
#     1c: Entrain over DistTrain across draw seeds 0-7;
#  2. Table 4.2 / C.2-C.8: Algorithm 2's trials per batch size;
#  3. Table 4.3: standard deviation of per-microbatch forward time per module
#     (each microbatch's forward summed over its module's stages; Entrain's
#     encoder microbatch is its kept and deferred pieces together);
#  4. Fig. 4.15: every encoder:LLM split of SynthChartNet / 3b, the cost of a
#     bad configuration.
# The subsets are derived from FineVision's public description (data/finevision.cpp);
# FV_SUFFIX=-fitted runs the shapes tuned to the thesis' ratios instead.
#   [FV_SUFFIX=-fitted] scripts/entrain-results.sh [build-dir]
set -euo pipefail
L=${1:-build}/loom
CL=entrain-64  # 16 nodes x 4 A40
PIN="--dp 4 --tp 2"
FV=${FV_SUFFIX:-}
DATA="synthchartnet$FV chartqa$FV cocoqa$FV llava-150k$FV"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "## 1. Configurations and iteration time (s), 3 batches each"
printf '%-11s %-14s %-8s %-8s %-8s %9s %9s %9s %9s %8s %8s %9s %9s %10s\n' model dataset disttrain dip entrain \
  megatron disttrain dip entrain vs-dist vs-dip mem-ent mem-dip vs-dist-lo
for m in entrain-1b entrain-3b; do
  for d in $DATA; do
    "$L" plan --model $m --cluster $CL --workload $d $PIN --iterations 3 \
      --strategy megatron,disttrain,disttrain-loader-order,dip,entrain,entrain-nodefer,entrain-noeager,entrain-zb --json "$tmp/$m-$d.json" >/dev/null
    python3 - "$m" "$d" "$tmp/$m-$d.json" <<'PY'
import json, sys
m, d, path = sys.argv[1:4]
s = {x['name']: x for x in json.load(open(path))['strategies']}
def pp(name):
    u = s[name]['plan']['units']
    return '/'.join(str(x['pipelines'][0]['pp']) for x in u) + ('*' if name == 'dip' else '')
t = {k: v['iteration_time_s'] for k, v in s.items()}
mem = {k: v['peak_mem_bytes'] / 2**30 for k, v in s.items()}
print(f"{m:<11} {d:<14} {pp('disttrain'):<8} {pp('dip'):<8} {pp('entrain'):<8} {t['megatron']:9.3f} "
      f"{t['disttrain']:9.3f} {t['dip']:9.3f} {t['entrain']:9.3f} {t['disttrain']/t['entrain']:7.2f}x "
      f"{t['dip']/t['entrain']:7.2f}x {mem['entrain']:7.1f}Gi {mem['dip']:7.1f}Gi "
      f"{t['disttrain-loader-order']/t['entrain']:9.2f}x")
PY
  done
done

echo
echo "## 1b. Ablations: Entrain's plan without deferral, without the eager slot, with zero-bubble backwards (s)"
printf '%-11s %-14s %9s %9s %9s %9s\n' model dataset entrain nodefer noeager zb
for m in entrain-1b entrain-3b; do
  for d in $DATA; do
    python3 - "$m" "$d" "$tmp/$m-$d.json" <<'PY'
import json, sys
m, d, path = sys.argv[1:4]
t = {x['name']: x['iteration_time_s'] for x in json.load(open(path))['strategies']}
print(f"{m:<11} {d:<14} {t['entrain']:9.3f} {t['entrain-nodefer']:9.3f} {t['entrain-noeager']:9.3f} "
      f"{t['entrain-zb']:9.3f}")
PY
  done
done

echo
echo "## 1c. Entrain over DistTrain across draw seeds 0-7 (DistTrain profiles one sample, so its allocation moves)"
printf '%-11s %-14s %7s %7s %7s   %s\n' model dataset min median max "per seed 0..7"
for m in entrain-1b entrain-3b; do
  for d in $DATA; do
    for seed in 0 1 2 3 4 5 6 7; do
      "$L" plan --model $m --cluster $CL --workload $d $PIN --iterations 3 --seed $seed \
        --strategy disttrain,entrain --json "$tmp/$m-$d-seed$seed.json" >/dev/null
    done
    python3 - "$m" "$d" "$tmp" <<'PY'
import json, statistics, sys
m, d, tmp = sys.argv[1:4]
r = []
for seed in range(8):
    t = {x['name']: x['iteration_time_s'] for x in json.load(open(f"{tmp}/{m}-{d}-seed{seed}.json"))['strategies']}
    r.append(t['disttrain'] / t['entrain'])
print(f"{m:<11} {d:<14} {min(r):6.2f}x {statistics.median(r):6.2f}x {max(r):6.2f}x   " + ' '.join(f"{x:.2f}" for x in r))
PY
  done
done

echo
echo "## 2. Algorithm 2: allocations (encoder:LLM GPUs of a 16-GPU replica) over 60 draws per batch size"
for m in entrain-1b entrain-3b; do
  for d in $DATA; do
    python3 - "$m" "$d" "$tmp/$m-$d.json" <<'PY'
import json, re, sys
m, d, path = sys.argv[1:4]
s = next(x for x in json.load(open(path))['strategies'] if x['name'] == 'entrain')['plan']['searched']
b = re.search(r'b_min (\d+)', s).group(1)
trials = re.search(r'allocations over the trials: (.*?); proportional', s).group(1)
print(f"{m:<11} {d:<14} b_min {b:>4}: {trials}")
PY
  done
done

echo
echo "## 3. Std of per-microbatch forward time (ms), batch 0, pooled over the 4 replicas"
cat > "$tmp/fwd_std.py" <<'PY'
import collections, json, statistics, sys
trace, plan_json, strategy = sys.argv[1:4]
ev = json.load(open(trace))
ev = ev['traceEvents'] if isinstance(ev, dict) else ev
names = {e['pid']: e['args']['name'] for e in ev if e.get('ph') == 'M' and e.get('name') == 'process_name'}
fwd = collections.defaultdict(float)  # (unit, replica, microbatch) -> ms
for e in ev:
    if e.get('ph') == 'X' and e.get('cat') == 'forward':
        unit, _, rep, _ = names[e['pid']].split()
        fwd[(unit, int(rep[1:]), e['args']['microbatch'])] += e['dur'] / 1e3
if strategy == 'entrain':
    # Merge each deferred piece into the encoder microbatch it was cut from:
    # an LLM microbatch made of two pieces starts with the previous slot's deferred one.
    sch = next(x for x in json.load(open(plan_json))['strategies'] if x['name'] == 'entrain')['batches'][0]['schedule']
    placed = sch['replica_microbatch_samples']
    merged = collections.defaultdict(float)
    for r, (pieces, llm) in enumerate(zip(placed['encoder'], placed['llm'])):
        group, g, i = {}, -1, 0
        for lm in llm:
            mine = []
            while i < len(pieces) and set(pieces[i]) <= set(lm):
                mine.append(i)
                i += 1
            if len(mine) == 2:
                group[mine[0]] = g
                mine = mine[1:]
            g += 1
            group[mine[0]] = g
        for p in range(len(pieces)):
            merged[('encoder', r, group[p])] += fwd[('encoder', r, p)]
    for k, v in fwd.items():
        if k[0] != 'encoder':
            merged[k] = v
    fwd = merged
by = collections.defaultdict(list)
for (unit, _, _), v in fwd.items():
    by['vision' if unit == 'encoder' else 'llm'].append(v)
print(f"{statistics.pstdev(by['vision']):8.2f} {statistics.pstdev(by['llm']):8.2f}", end='')
PY
printf '%-11s %-14s %17s %17s %17s\n' model dataset "disttrain vis/llm" "dip vis/llm" "entrain vis/llm"
for m in entrain-1b entrain-3b; do
  for d in $DATA; do
    line=$(printf '%-11s %-14s' $m $d)
    for s in disttrain dip entrain; do
      "$L" plan --model $m --cluster $CL --workload $d $PIN --iterations 1 --strategy $s \
        --trace "$tmp/$s.trace" --json "$tmp/$s.json" >/dev/null
      line+=" $(python3 "$tmp/fwd_std.py" "$tmp/$s.trace" "$tmp/$s.json" $s)"
    done
    echo "$line"
  done
done

echo
echo "## 4. Every encoder:LLM split of a 16-GPU replica, SynthChartNet on entrain-3b (3 batches, Entrain's schedule)"
m=entrain-3b; d=synthchartnet$FV
printf '%-6s %9s %9s\n' E.PP:L.PP iter-s vs-best
for e in 1 2 3 4 5 6 7; do
  python3 - "$tmp/$m-$d.json" "$tmp/split-$e.json" $e <<'PY'
import json, sys
src, dst, e = sys.argv[1], sys.argv[2], int(sys.argv[3])
f = json.load(open(src))
entry = next(x for x in f['strategies'] if x['name'] == 'entrain')
plan = entry['plan']
def layers(unit):
    out = []
    for st in unit['pipelines'][0]['stages']:
        for r in st['layers']:
            out += [(r['module'], l) for l in range(r['begin'], r['end'])]
    return out
def cut(unit, pp, first):
    ls = layers(unit)
    stages = []
    for s in range(pp):
        part = ls[s * len(ls) // pp:(s + 1) * len(ls) // pp]
        ranges = []
        for mod, l in part:
            if ranges and ranges[-1]['module'] == mod and ranges[-1]['end'] == l:
                ranges[-1]['end'] = l + 1
            else:
                ranges.append({'module': mod, 'begin': l, 'end': l + 1})
        stages.append({'rank': s, 'layers': ranges})
    unit['pipelines'][0]['pp'] = pp
    unit['pipelines'][0]['stages'] = stages
    unit['first_group'] = first
enc, llm = plan['units']
dp = enc['pipelines'][0]['replicas']
cut(enc, e, 0)
cut(llm, 8 - e, dp * e)
json.dump({'best': 'entrain', 'strategies': [{'name': 'entrain', 'plan': plan,
           'batches': [{'iteration': i, 'iteration_time_s': 0} for i in range(3)]}]}, open(dst, 'w'))
PY
  if "$L" simulate --model $m --cluster $CL --workload $d --plan "$tmp/split-$e.json" --json > "$tmp/split-$e.out" 2>&1; then
    python3 -c "import json; print(json.load(open('$tmp/split-$e.out'))['iteration_time_s'])" > "$tmp/split-$e.t"
  else
    echo "-1" > "$tmp/split-$e.t"
  fi
done
python3 - "$tmp" <<'PY'
import sys
t = {e: float(open(f"{sys.argv[1]}/split-{e}.t").read()) for e in range(1, 8)}
best = min(v for v in t.values() if v > 0)
for e, v in t.items():
    print(f"{e}:{8-e:<6} {v:9.3f} {best / v:8.2f}x" if v > 0 else f"{e}:{8-e:<6}  does not fit")
PY
