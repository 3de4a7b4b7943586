"""Training-throughput errors of ``diffcost validate`` per source, every training point.

Run: python benchmarks/train_errors.py [--points] [--json]

Prints, for the training points of ``specs/measurements`` only (serving points are not
evaluated), the median and 90th percentile of ``|predicted / measured - 1|`` per source, over
all points and over the modelled ones (no named unmodelled effect), and with ``--points`` each
point's signed error.  The numbers are those of ``diffcost validate`` (the same rule and
calibration), without the serving half of its run.
"""

import argparse
import json

import numpy as np

from diffcost import load_measurements, validate


def _stats(errors: list[float]) -> dict[str, float]:
    a = np.abs(np.asarray(errors))
    return {"n": len(a), "median": float(np.median(a)), "p90": float(np.percentile(a, 90))}


def main() -> None:
    parser = argparse.ArgumentParser(description="Training errors of diffcost validate.")
    parser.add_argument("--points", action="store_true", help="print every point's error")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    train = [m for m in load_measurements() if m.kind == "train"]
    rows = validate(train).rows
    by_source: dict[str, list[float]] = {}
    for r in rows:
        by_source.setdefault(r["source"], []).append(r["error"])
    out = {
        "all": _stats([r["error"] for r in rows]),
        "modelled": _stats([r["error"] for r in rows if not r["unmodelled"]]),
        "by_source": {s: _stats(e) for s, e in sorted(by_source.items())},
        "points": {r["id"]: r["error"] for r in rows},
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    line = "{:<28} {:>3} {:>8} {:>8}"
    print(line.format("source", "n", "median", "p90"))
    for name, st in [("ALL", out["all"]), ("modelled", out["modelled"])] + list(
        out["by_source"].items()
    ):
        print(line.format(name, st["n"], f"{st['median']:.1%}", f"{st['p90']:.1%}"))
    if args.points:
        for pid, err in out["points"].items():
            print(f"  {pid:<48} {err:+.1%}")


if __name__ == "__main__":
    main()
