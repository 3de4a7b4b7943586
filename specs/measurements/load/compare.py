"""Published server-mode points (server-mode-sources.md, sections 3.1 and 3.2) against
diffcost.under_load.

Run: python specs/measurements/load/compare.py.  Not yet a validated measurement file (issue
13 follow-up): the ShareGPT input-length spread is assumed (cv 1), the engine versions are
approximated by the nearest built-in engine.
"""

import diffcost as dc
from diffcost._serve.load import under_load, workload

rows = [
    # (label, chip, chips, model, plan kwargs, qps, input_cv, measured dict ms)
    (
        "surajssd A100-40GBx8 TP8 bf16 vLLM~0.8 ShareGPT 213/214 qps1",
        "a100-sxm-40gb",
        8,
        "llama-3-70b",
        dict(tp=8, batch=256, input_len=213, output_len=214, engine="vllm-0.6", prefill_chunk=8192),
        1.0,
        1.0,
        dict(ttft_p50=56.37, ttft_p99=143.8, tpot=24.56, tpot_p99=28.03),
    ),
    (
        "surajssd A100-40GBx8 TP8 bf16 vLLM~0.8 ShareGPT 213/214 qps4",
        "a100-sxm-40gb",
        8,
        "llama-3-70b",
        dict(tp=8, batch=256, input_len=213, output_len=214, engine="vllm-0.6", prefill_chunk=8192),
        4.0,
        1.0,
        dict(ttft_p50=49.50, ttft_p99=67.56, tpot=27.08, tpot_p99=27.91),
    ),
]
for q in (0.5, 1.0, 2.0, 3.0):
    meas = {
        0.5: (66.5, 180.7, 20.4, 23.1),
        1.0: (56.5, 72.9, 20.4, 20.8),
        2.0: (60.2, 75.0, 20.8, 22.0),
        3.0: (64.2, 85.9, 21.5, 27.7),
    }[q]
    rows.append(
        (
            f"H200 TP1 fp8 vLLM 0.14.1 ShareGPT 207/198 qps{q}",
            "h200",
            1,
            "llama-3-70b",
            dict(
                tp=1,
                batch=256,
                input_len=207,
                output_len=198,
                engine="vllm-0.10",
                weight_format="fp8",
                kv_format="fp8",
                prefill_chunk=8192,
            ),
            q,
            1.0,
            dict(zip(("ttft_p50", "ttft_p99", "tpot", "tpot_p99"), meas, strict=True)),
        )
    )
print(f"{'point':60s} | {'TTFT p50':>16s} {'TTFT p99':>16s} {'TPOT':>16s} {'TPOT p99':>16s}")
for label, chip, chips, m, kw, q, cv, meas in rows:
    system = dc.load_system(chip=chip, chips=chips)
    model = dc.load_model(m)
    out = under_load(system, model, dc.serve_plan(**kw), workload(q, 1.0, cv))
    pred = dict(
        ttft_p50=out.ttft_p50_s, ttft_p99=out.ttft_p99_s, tpot=out.tpot_s, tpot_p99=out.tpot_p99_s
    )
    cells = [
        f"{1e3 * float(pred[k]):6.1f}/{v:6.1f}{100 * (1e3 * float(pred[k]) / v - 1):+4.0f}%"
        for k, v in meas.items()
    ]
    print(f"{label:60s} | " + " ".join(cells))
