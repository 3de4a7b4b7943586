"""What published GEMM timings ask of the GEMM term: a probe for issue 41, unused by the model.

For each chip and format of ``specs/kernels/`` (read through ``diffcost validate --kernels
--json``), a grid search of three physical constants of a candidate GEMM law,

    t = t0 + max(2 m n k / (P f e_d(m) e_d(n) e_d(k)), bytes / (0.9 B)),
    e_d(x) = x / (x + d)  (d = 0: no shape penalty),

with ``t0`` s a per-kernel floor (launch, prologue and epilogue, one wave), ``f`` the fraction of
the datasheet peak ``P`` (FLOP/s) a large GEMM sustains in a short run, ``d`` the tile/wave half
dimension and ``B`` the datasheet memory bandwidth (bytes/s); ``bytes = b (m k + k n) + 2 m n``
with ``b`` the input format's bytes per element and a 16-bit output.  It prints, per group, the
median |predicted / measured - 1| of the model's current term and of the best law, and the
constants.  In-sample: it says whether the law's form can fit the data, not how it extrapolates
(leave-one-source-out needs more than one source per chip).  Roofline: Williams et al., CACM
2009; kernel floor: issue 41.

    python benchmarks/kernel_floor_probe.py
"""

import json
import subprocess
import sys

import numpy as np

import diffcost as dc


def main() -> None:
    """Print the probe's table (module docstring)."""
    out = subprocess.run(
        [sys.executable, "-m", "diffcost", "validate", "--kernels", "--json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = [r for r in json.loads(out)["rows"] if r["op"] == "gemm"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["chip"], r["dtype"]), []).append(r)
    print("chip      format  n  current  law     t0_us  f     d")
    for (chip, dtype), rs in sorted(groups.items()):
        spec = dc.load_spec("chip", chip).values
        peak = spec["compute"][f"{dtype}_flop_per_s"]
        bandwidth = spec["memory"]["bandwidth_bytes_per_s"]
        b = 2.0 if dtype in ("bf16", "fp16") else 1.0
        m, n, k = (np.array([r["shape"][x] for r in rs], float) for x in "mnk")
        t = np.array([r["measured_s"] for r in rs])
        flop, moved = 2 * m * n * k, b * (m * k + k * n) + 2 * m * n
        best = (np.inf, 0.0, 0.0, 0)
        for t0 in np.linspace(0.0, 15e-6, 61):
            for f in np.linspace(0.4, 1.0, 61):
                for d in (0, 16, 32, 64, 128):
                    shape = (m / (m + d)) * (n / (n + d)) * (k / (k + d))
                    pred = t0 + np.maximum(flop / (peak * f * shape), moved / (0.9 * bandwidth))
                    err = float(np.median(np.abs(pred / t - 1.0)))
                    if err < best[0]:
                        best = (err, t0, f, d)
        current = float(np.median([abs(r["error"]) for r in rs]))
        err, t0, f, d = best
        print(
            f"{chip:9s} {dtype:6s} {len(rs):2d} {current:7.1%}  {err:6.1%}  "
            f"{t0 * 1e6:5.1f}  {f:.2f}  {d}"
        )


if __name__ == "__main__":
    main()
