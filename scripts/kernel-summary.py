#!/usr/bin/env python3
"""Where a traced step's time went: a summary of a `loom run --kernel-trace`
file (PyTorch's profiler, Chrome trace format; docs/runtime.md "Kernel traces").

On a GPU run: the step's span, the GPU's busy time (the union of its kernels
and copies over every stream) and idle time, the kernel time by kind (matrix
products, attention, the loss, norms, AdamW, copies and casts, other
elementwise work), and the longest kernels. On a CPU run (no kernels): the
operators with the most time of their own (their time less their children's).

  scripts/kernel-summary.py DIR/process-0.json [--top 15] [--json]
"""
import argparse
import collections
import json
import re
import sys

# Kernel kinds, first match wins (names as CUDA libraries give them).
# Attention before matrix products: flash and memory-efficient attention
# kernels carry "cutlass" in their names and template arguments.
KINDS = [
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|nvjet|xmma|cublas|matmul", re.I)),
    ("adamw", re.compile(r"adam", re.I)),
    ("loss", re.compile(r"softmax|nll|cross_entropy|log_softmax", re.I)),
    ("norm", re.compile(r"norm", re.I)),
    ("copy/cast", re.compile(r"copy|cast|convert|memcpy|memset|fill", re.I)),
]


def kind_of(name):
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other elementwise"


def union_us(intervals):
    """Total length of the union of [start, end) intervals."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def self_times(ops):
    """Each operator's time less its children's, per thread (ops nest in time)."""
    out = collections.defaultdict(float)
    by_thread = collections.defaultdict(list)
    for o in ops:
        by_thread[(o.get("pid"), o.get("tid"))].append(o)
    for events in by_thread.values():
        events.sort(key=lambda o: (o["ts"], -o.get("dur", 0)))
        stack = []  # (end, name, child time)
        for o in events:
            start, end = o["ts"], o["ts"] + o.get("dur", 0)
            while stack and stack[-1][0] <= start:
                done = stack.pop()
                out[done[1]] += done[3] - done[2]
            if stack:
                stack[-1][2] += end - start
            stack.append([end, o["name"], 0.0, end - start])
        for done in stack:
            out[done[1]] += done[3] - done[2]
    return out


def summarize(trace, top):
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    spans = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in ops + gpu]
    if not spans:
        raise SystemExit("no operators or kernels in this trace")
    span_us = max(e for _, e in spans) - min(s for s, _ in spans)
    out = {"span_s": span_us / 1e6}
    if gpu:
        busy_us = union_us([(e["ts"], e["ts"] + e.get("dur", 0)) for e in gpu])
        by_kind = collections.defaultdict(float)
        by_name = collections.defaultdict(lambda: [0.0, 0])
        for e in gpu:
            by_kind[kind_of(e["name"])] += e.get("dur", 0)
            by_name[e["name"]][0] += e.get("dur", 0)
            by_name[e["name"]][1] += 1
        out.update(gpu_busy_s=busy_us / 1e6, gpu_idle_s=(span_us - busy_us) / 1e6, kernels=len(gpu),
                   by_kind_s={k: v / 1e6 for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
                   top=[{"name": n, "s": t / 1e6, "calls": c}
                        for n, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]])
    else:
        own = self_times(ops)
        out["top"] = [{"name": n, "s": t / 1e6} for n, t in sorted(own.items(), key=lambda kv: -kv[1])[:top]]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.top < 1:
        parser.error("--top must be at least 1")
    try:
        with open(args.trace) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        print(f"kernel-summary: {args.trace}: {e}", file=sys.stderr)
        sys.exit(2)
    s = summarize(trace, args.top)
    if args.json:
        print(json.dumps(s, indent=1))
        return
    print(f"{args.trace}: span {s['span_s'] * 1e3:.1f} ms")
    if "gpu_busy_s" in s:
        print(f"GPU busy {s['gpu_busy_s'] * 1e3:.1f} ms ({s['gpu_busy_s'] / s['span_s']:.1%}), "
              f"idle {s['gpu_idle_s'] * 1e3:.1f} ms, {s['kernels']} kernels and copies")
        for k, t in s["by_kind_s"].items():
            print(f"  {k:18s} {t * 1e3:9.1f} ms")
        print("longest kernels:")
        for r in s["top"]:
            print(f"  {r['s'] * 1e3:9.2f} ms  {r['calls']:5d}x  {r['name'][:110]}")
    else:
        print("no GPU kernels (a CPU run); operators by their own time:")
        for r in s["top"]:
            print(f"  {r['s'] * 1e3:9.2f} ms  {r['name'][:110]}")


if __name__ == "__main__":
    main()
