#!/usr/bin/env python3
"""Rewrites the `mosaic` plan of a `loom plan --json` file so that the named
units run together in phase 0 on the SM quotas given, every other unit after
them in its old phase order (scripts/gpu-mosaic-runs.sh: co-locations the
solver did not choose, measured against the model's prediction).

  scripts/colocate-plan.py IN.json OUT.json UNIT:SMS[,UNIT:SMS...] [GPU_SMS]
"""
import json
import sys


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    src, dst, spec = sys.argv[1:4]
    gpu_sms = int(sys.argv[4]) if len(sys.argv) == 5 else 132
    quotas = {}
    for item in spec.split(","):
        name, _, sms = item.partition(":")
        if not sms.isdigit() or int(sms) <= 0:
            sys.exit(f"colocate-plan: {item!r}: want UNIT:SMS with SMS a positive integer")
        quotas[name] = int(sms)
    doc = json.load(open(src))
    plans = [s["plan"] for s in doc.get("strategies", []) if s.get("name") == "mosaic"]
    if not plans:
        sys.exit(f"colocate-plan: {src} has no mosaic plan")
    plan = plans[0]
    names = {u["name"] for u in plan["units"]}
    missing = sorted(set(quotas) - names)
    if missing:
        sys.exit(f"colocate-plan: no unit {', '.join(missing)} in the plan (units: {', '.join(sorted(names))})")
    later = sorted({u["phase"] for u in plan["units"] if u["name"] not in quotas})
    for u in plan["units"]:
        if u["name"] in quotas:
            u["phase"] = 0
            u["sm_fraction"] = quotas[u["name"]] / gpu_sms
        else:
            u["phase"] = 1 + later.index(u["phase"])
    plan["searched"] = f"hand-made co-location {spec} (scripts/colocate-plan.py)"
    doc["strategies"] = [s for s in doc["strategies"] if s.get("name") == "mosaic"]
    doc["best"] = "mosaic"
    json.dump(doc, open(dst, "w"), indent=2)


if __name__ == "__main__":
    main()
