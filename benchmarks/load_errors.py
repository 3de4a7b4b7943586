"""Errors of ``diffcost validate --load`` per source, and the NIM concurrency sweeps per
deployment and by whether a row is past its table's capacity knee.

Run: python benchmarks/load_errors.py

Every load point is out of sample (none is fitted), so these are leave-one-source-out errors.
Median |error| and median signed error of ``predicted / measured - 1`` per measured key.
"""

import numpy as np

from diffcost._analysis.validate_load import validate_load

KEYS = ("ttft_mean_s", "ttft_p50_s", "ttft_p99_s", "tpot_mean_s", "tpot_p50_s", "tpot_p99_s")


def line(label: str, errors: list[float]) -> str:
    e = np.asarray(errors)
    return (
        f"{label:44s} n={len(e):3d} median |err| {100 * np.median(np.abs(e)):5.1f}% "
        f"(median {100 * np.median(e):+6.1f}%)"
    )


def main() -> None:
    result = validate_load()
    rows = result["rows"]
    for key in (*KEYS, "goodput_qps"):
        sel = [r for r in rows if r["metric"] == key]
        if not sel:
            continue
        print(line(key, [r["error"] for r in sel]))
        for source in sorted({r["source"] for r in sel}):
            print(line(f"  {source}", [r["error"] for r in sel if r["source"] == source]))
    nim = [r for r in rows if r["source"] == "nim-llm-concurrency"]
    print("NIM 1.8 concurrency sweeps")
    for model in ("3.3-70b", "3.1-8b"):
        for key in ("ttft_mean_s", "tpot_mean_s"):
            sel = [r for r in nim if model in r["id"] and r["metric"] == key]
            knee = [r["error"] for r in sel if any("capacity knee" in f for f in r["flags"])]
            below = [r["error"] for r in sel if not any("capacity knee" in f for f in r["flags"])]
            print(line(f"  {model} {key} below the knee", below))
            if knee:
                print(line(f"  {model} {key} past the knee", knee))


if __name__ == "__main__":
    main()
