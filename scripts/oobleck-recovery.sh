#!/usr/bin/env bash
# The runtime's recovery from failed workers (docs/results/oobleck.md §7):
# `loom run --fault-tolerance` of Oobleck's plan of the tiny VLM
# (tests/data/runtime) on one-GPU "nodes" of this machine, with workers killed
# mid-step (SIGKILL), after their optimizer step, hung (SIGSTOP, found by
# heartbeats), more than f of them (stop, checkpoint, resume) and a node that
# comes back. Prints, per event, what the launcher measured: time to notice,
# time until the next generation is ready (groups rebuilt, layers copied),
# bytes copied, work lost; and whether the final parameters equal a
# failure-free run's. About a minute on 2 cores.
#   scripts/oobleck-recovery.sh [build-dir] [repeats]
set -euo pipefail
L=${1:-build}/loom
R=${2:-5}
D=$(dirname "$0")/../tests/data/runtime
M="--model $D/tiny-vlm.yaml --workload $D/tiny-laion.yaml"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in 3 4; do
  "$L" plan $M --cluster h100:${n}x1 --precision fp32 --strategy oobleck --fault-tolerance 1 --iterations 1 \
    --json "$tmp/plan$n.json" >/dev/null
  "$L" run $M --cluster h100:${n}x1 --plan "$tmp/plan$n.json" --fault-tolerance 1 --steps 4 --json \
    >"$tmp/clean$n.json"
done
run() {  # name nodes flags...
  local name=$1 n=$2; shift 2
  for i in $(seq 1 "$R"); do
    "$L" run $M --cluster h100:${n}x1 --plan "$tmp/plan$n.json" --fault-tolerance 1 --steps 4 --json "$@" \
      >"$tmp/$name.$i.json" 2>"$tmp/$name.$i.err" || true
  done
  python3 - "$name" "$tmp" "$n" "$R" <<'PY'
import json, sys, statistics as st
name, tmp, n, R = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
clean = json.load(open(f"{tmp}/clean{n}.json"))
rows, equal = {}, 0
def sumsq(j):  # each parameter tensor's sum of squares (distinct per tensor)
    return sorted(v for p in j['params'] for v in p[1::3])
def close(a, b):
    return all(abs(x - y) <= 1e-5 * max(1, abs(y)) for x, y in zip(sumsq(a), sumsq(b))) and \
        all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a['losses'], b['losses']))
for i in range(1, R + 1):
    try:
        j = json.load(open(f"{tmp}/{name}.{i}.json"))
    except Exception:
        print(f"{name:<24} run {i} failed: {open(f'{tmp}/{name}.{i}.err').read().strip()[:200]}"); continue
    same = close(j, clean)
    equal += same
    for k, e in enumerate(j['events']):
        rows.setdefault(k, []).append(e)
for k, es in rows.items():
    med = lambda f: st.median(e[f] for e in es)
    e = es[0]
    print(f"{name:<24} {e['kind']:<8} step {e['step']}  nodes {','.join(map(str, e['nodes'])):<4} "
          f"-> {e['processes']} procs  notice {med('detect_s')*1e3:7.1f} ms  ready {med('recover_s')*1e3:7.1f} ms  "
          f"copied {med('copied_bytes')/2**20:5.2f} MiB  lost {med('lost_s')*1e3:7.1f} ms")
print(f"{name:<24} parameters equal to the failure-free run in {equal}/{R} runs")
PY
}
resumed() {  # file label: a resumed run's parameters against the failure-free run's
  python3 - "$tmp" "$1" "$2" <<'PY'
import json, sys
tmp, name, label = sys.argv[1:4]
a, b = json.load(open(f"{tmp}/{name}")), json.load(open(f"{tmp}/clean3.json"))
sq = lambda j: sorted(v for p in j['params'] for v in p[1::3])
same = all(abs(x - y) <= 1e-5 * max(1, abs(y)) for x, y in zip(sq(a), sq(b)))
print(f"resumed from {label} after step {a['first_step']}: parameters equal to the failure-free run: {same}")
PY
}
printf 'median of %s runs each\n' "$R"
run kill-mid-step 3 --kill 1:1:3
run kill-after-optimizer 3 --kill 2:1:9999
run two-kills 4 --kill 1:1:3 --kill 3:2:5
run hang-heartbeat-1s 3 --hang 2:1:2 --heartbeat-timeout 1
run kill-then-rejoin 3 --kill 2:0:2 --rejoin 2:2
# More failures than f = 1 tolerates: the run stops with a checkpoint; --resume finishes it.
"$L" run $M --cluster h100:3x1 --plan "$tmp/plan3.json" --fault-tolerance 1 --steps 4 --kill 1:1:3 --kill 0:2:4 \
  --checkpoint-dir "$tmp/ckpt" 2>&1 | sed -n '1,2p' | cut -c1-160 || true
"$L" run $M --cluster h100:3x1 --plan "$tmp/plan3.json" --fault-tolerance 1 --steps 4 --resume "$tmp/ckpt" --json \
  >"$tmp/resumed.json"
resumed resumed.json "the stop checkpoint"
# Every copy of some layers lost at once (nodes 1 and 2 as step 2 starts): the
# last periodic checkpoint (--checkpoint-every 1) is the one to resume from.
"$L" run $M --cluster h100:3x1 --plan "$tmp/plan3.json" --fault-tolerance 1 --steps 4 --kill 1:2:0 --kill 2:2:0 \
  --checkpoint-every 1 --checkpoint-dir "$tmp/periodic" 2>&1 | tail -1 | cut -c1-200 || true
"$L" run $M --cluster h100:3x1 --plan "$tmp/plan3.json" --fault-tolerance 1 --steps 4 --resume "$tmp/periodic" \
  --json >"$tmp/resumed2.json"
resumed resumed2.json "the periodic checkpoint"
# Any strategy's plan: Megatron-LM's TP 2 x DP 2 (ZeRO-1) on two 2-GPU nodes holds
# slices and shards no survivor can hand over whole, so a failure is re-planned by
# Megatron's search on the node left and every worker restores the last checkpoint
# (--checkpoint-every 1), running no committed step again.
"$L" plan $M --cluster h100:2x2 --precision fp32 --strategy megatron --iterations 1 --json "$tmp/megatron.json" \
  >/dev/null
"$L" run $M --cluster h100:2x2 --plan "$tmp/megatron.json" --steps 4 --json >"$tmp/clean-megatron.json"
for i in $(seq 1 "$R"); do
  rm -rf "$tmp/mckpt"
  "$L" run $M --cluster h100:2x2 --plan "$tmp/megatron.json" --fault-tolerance 1 --steps 4 --kill 2:2:3 \
    --checkpoint-every 1 --checkpoint-dir "$tmp/mckpt" --json >"$tmp/megatron.$i.json" 2>"$tmp/megatron.$i.err" || true
done
python3 - "$tmp" "$R" <<'PY'
import json, sys, statistics as st
tmp, R = sys.argv[1], int(sys.argv[2])
clean = json.load(open(f"{tmp}/clean-megatron.json"))
sq = lambda j: sorted(v for p in j['params'] for v in p[1::3])
runs = [json.load(open(f"{tmp}/megatron.{i}.json")) for i in range(1, R + 1)]
equal = sum(all(abs(x - y) <= 1e-5 * max(1, abs(y)) for x, y in zip(sq(j), sq(clean))) for j in runs)
es = [j['events'][0] for j in runs]
med = lambda f: st.median(e[f] for e in es)
e = es[0]
print(f"megatron-tp2-restore     failure  step {e['step']}  nodes {','.join(map(str, e['nodes']))}    -> "
      f"{e['processes']} procs  notice {med('detect_s')*1e3:7.1f} ms  ready {med('recover_s')*1e3:7.1f} ms  "
      f"restored {e['restored_from'].replace(tmp, '$tmp')} ({e['replayed_steps']} step(s) again)  "
      f"lost {med('lost_s')*1e3:7.1f} ms")
print(f"megatron-tp2-restore     parameters equal to the failure-free run in {equal}/{R} runs")
PY
