"""NVIDIA NIM for LLMs 1.8.0 concurrency sweeps as serving measurements under load: writes
``specs/measurements/load/nim-llm-concurrency.toml``.

The published tables (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance, and its .md:
per model, NIM version, GPUs and precision, one table per input / output length with the
columns Concurrency | TTFT (ms) | ITL (ms) | Throughput (Tokens/s)) are held below verbatim,
as the strings the page prints; everything else is derived here:

* AIPerf's concurrency mode is a closed loop (``aiperf/timing/request_rate_strategy.py``: a
  semaphore of ``c`` credits, a new request as soon as one returns).  Its completion rate,
  which is also its arrival rate, is ``X = throughput / output_len`` requests/s; the response
  time law of a closed system without think time (Lazowska et al., *Quantitative System
  Performance*, 1984, ch. 3) ties it to the latencies, ``c = X R`` with
  ``R = TTFT + (output_len - 1) ITL`` (AIPerf's ITL is ``(latency - TTFT) / (osl - 1)``,
  ``aiperf/metrics/types/inter_token_latency_metric.py``).  :func:`closed_loop_deviation` is
  ``X R / c - 1`` for every row (a check of the transcription); the file records each point
  as a closed loop, ``concurrency = c`` with the plan's ``batch = c``, which ``diffcost
  validate --load`` predicts with the continuous mode (a closed loop of ``batch`` clients).
* A point is flagged when the server no longer runs all ``c`` requests at once
  (:func:`saturated`: at a knee, TTFT more than 5x the previous concurrency's with the next
  concurrency's throughput within 5 % (or no next row), and every later row of its table): the
  other clients then queue for a slot of the KV cache, which the continuous mode models (the
  running batch capped at the sequences of ``input + output`` tokens that fit, the rest
  waiting by the response time law).  No point is excluded.

    python benchmarks/nim_concurrency_points.py [--check]

writes the file (``--check``: only compares it with what would be written) and prints the
closed-loop check of every row and the rows past a capacity knee.
"""

import argparse
import sys
from pathlib import Path
from typing import NamedTuple

OUT = Path(__file__).resolve().parents[1] / "specs/measurements/load/nim-llm-concurrency.toml"

PAGE = "docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance"
COPY = (
    "github.com/zivbeker42/llm-guesstimator @ 841a40796c7c15438646ce20a9f12f2fb0b3a576, "
    "tested_benchmarks/"
)

#: Saturation rule: the next concurrency's throughput within this share of a point's ...
PLATEAU = 0.05
#: ... and the point's TTFT more than this multiple of the previous concurrency's.
TTFT_JUMP = 5.0

#: Flag of a row at or past its table's capacity knee (:func:`saturated`).  Such rows were
#: excluded until the continuous mode capped the running batch at the sequences the KV cache
#: holds and added the clients' wait for a slot (:func:`diffcost._serve.modes.continuous_mode`).
FLAG_SATURATED = (
    "past the server's capacity knee: throughput has plateaued and TTFT jumped, so the server "
    "runs fewer than c requests at once and the other clients queue for a KV-cache slot"
)


class Deployment(NamedTuple):
    key: str  # id prefix
    model: str  # built-in model
    label: str  # the page's words
    chips: int
    tp: int
    copy_file: str
    flags: tuple[str, ...]


LLAMA_70B = Deployment(
    "nim18_h100x2_llama3.3-70b_fp8_tp2",
    "llama-3.1-70b",
    "Llama-3.3-70b-instruct, Version 1.8.0, 2 x H100 80G, fp8 TP2",
    2,
    2,
    "nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv",
    (),
)
LLAMA_8B = Deployment(
    "nim18_h100x1_llama3.1-8b_fp8_tp1",
    "llama-3.1-8b",
    "Llama-3.1-8b-instruct, Version 1.8.0, 1 x H100 80G, fp8 TP1",
    1,
    1,
    "nim_llama3.1_8b_v1.8.0_1xH100_80GB.csv",
    ("'1 x H100 80G, fp8 TP1' and the table titles read from the third-party copy",),
)

#: (deployment, input tokens, output tokens) -> rows (concurrency, TTFT ms, ITL ms,
#: throughput tokens/s) exactly as printed, in the page's order.
TABLES: dict[tuple[Deployment, int, int], tuple[tuple[str, str, str, str], ...]] = {
    (LLAMA_70B, 5000, 500): (
        ("1", "406.77", "18.58", "51.67"),
        ("5", "546.7", "21.83", "218.48"),
        ("25", "688.69", "38.75", "623.4"),
        ("50", "834.51", "59.73", "814.37"),
        ("100", "7996.25", "92.91", "917.26"),
        ("150", "34794.22", "92.86", "920.9"),
        ("200", "61680.22", "93.06", "920.54"),
        ("250", "88605.32", "93.2", "920.12"),
    ),
    (LLAMA_70B, 500, 2000): (
        ("1", "47.77", "18.91", "52.85"),
        ("5", "126.53", "19.04", "261.83"),
        ("25", "147.63", "21.69", "1149.05"),
        ("50", "181.64", "23.97", "2078.43"),
        ("100", "229.77", "29.98", "3322.87"),
        ("150", "296.74", "37.85", "3948.26"),
        ("200", "4867.89", "40.72", "4624.14"),
    ),
    (LLAMA_70B, 200, 200): (
        ("1", "31.22", "18.8", "53"),
        ("5", "88.7", "18.83", "260.67"),
        ("25", "138.98", "20.61", "1178.68"),
        ("50", "156.28", "23.33", "2081.24"),
        ("100", "176.8", "29.87", "3263.31"),
        ("150", "195.51", "37.75", "3883.1"),
        ("200", "253.36", "42.95", "4534.54"),
        ("250", "264.22", "48.16", "5067.05"),
    ),
    (LLAMA_70B, 1000, 1000): (
        ("1", "82.46", "18.67", "53.37"),
        ("5", "145.62", "19.07", "260.48"),
        ("25", "250.49", "22.45", "1102.23"),
        ("50", "278.62", "25.87", "1912.93"),
        ("100", "334.23", "34.21", "2895.49"),
        ("150", "428.54", "44.44", "3342.67"),
        ("200", "558.23", "50.66", "3901.74"),
        ("250", "3499.83", "56.3", "4167.39"),
    ),
    (LLAMA_70B, 20000, 2000): (
        ("1", "1833.01", "19.58", "48.8"),
        ("5", "2910.33", "25.24", "186.8"),
        ("25", "18781.26", "48.26", "415.33"),
        ("50", "123969.71", "49.22", "418.65"),
        ("100", "333564.85", "49.81", "425.1"),
        ("150", "543226.4", "50.01", "423.95"),
        ("200", "753417.03", "50.06", "425.74"),
        ("250", "963222.96", "50.13", "427.06"),
    ),
    (LLAMA_8B, 200, 200): (
        ("1", "10.26", "4.63", "214.56"),
        ("5", "16.81", "4.58", "1076.88"),
        ("25", "36.34", "5.19", "4678.88"),
        ("50", "67.41", "5.91", "8018.23"),
        ("100", "119.97", "7.57", "12214.97"),
        ("150", "346.53", "9.81", "12988.89"),
        ("200", "465.18", "12.65", "13348.4"),
        ("250", "605.6", "16.14", "12964.72"),
    ),
    (LLAMA_8B, 500, 2000): (
        ("1", "13.84", "4.56", "218.86"),
        ("5", "30.88", "4.81", "1035.85"),
        ("25", "97.07", "5.82", "4263.49"),
        ("50", "135.26", "7.06", "7009.01"),
        ("100", "239.92", "9.51", "10379.22"),
        ("150", "376.95", "13.34", "11053.75"),
        ("200", "1664.34", "14.96", "12549.74"),
        ("250", "6550.46", "16.97", "12268.82"),
    ),
    (LLAMA_8B, 1000, 1000): (
        ("1", "19.03", "4.53", "220.1"),
        ("5", "55.87", "4.8", "1031.3"),
        ("25", "268.42", "5.84", "4098.01"),
        ("50", "414.87", "7.26", "6514.66"),
        ("100", "615.16", "10.04", "9392.43"),
        ("150", "885.53", "14.14", "9982.74"),
        ("200", "1258.79", "16.02", "11553.34"),
        ("250", "1885.04", "19.68", "11527.61"),
    ),
    (LLAMA_8B, 5000, 500): (
        ("1", "77.45", "4.62", "209.96"),
        ("5", "279.92", "5.42", "838.03"),
        ("25", "724.14", "9.67", "2251.44"),
        ("50", "817.73", "16.47", "2765.71"),
        ("100", "915.15", "29.67", "3180.16"),
        ("150", "1080", "43.35", "3301.68"),
        ("200", "4361.35", "50.41", "3378.48"),
        ("250", "11717.42", "50.53", "3372"),
    ),
    (LLAMA_8B, 20000, 2000): (
        ("1", "403.2", "5.06", "189.96"),
        ("5", "1141.22", "7.39", "627.76"),
        ("25", "2371.46", "19.35", "1217.04"),
        ("50", "11071.41", "30.73", "1330.57"),
        ("100", "78187.07", "31.08", "1336.09"),
        ("150", "145290.54", "31.31", "1337"),
        ("200", "211735.71", "31.46", "1338.24"),
        ("250", "278580.85", "31.62", "1337.66"),
    ),
}

#: Rows whose three values were read on the primary page (the project's search tool shows
#: the page's opening: the first 70B table whole, the second's first row and the TTFT of its
#: second, and the first 8B 1.8.0 table of the rendered page); the rest only in the copy.
ON_PAGE = {(LLAMA_70B, 5000, 500, c) for c in (1, 5, 25, 50, 100, 150, 200, 250)}
ON_PAGE |= {(LLAMA_70B, 500, 2000, 1)}
ON_PAGE |= {(LLAMA_8B, 200, 200, c) for c in (1, 5, 25, 50, 100, 150, 200, 250)}
TTFT_ON_PAGE = {(LLAMA_70B, 500, 2000, 5)}


class Row(NamedTuple):
    deployment: Deployment
    input_len: int
    output_len: int
    published: tuple[str, str, str, str]
    concurrency: int
    ttft_ms: float
    itl_ms: float
    tokens_per_s: float
    qps: float  # X = throughput / output_len
    deviation: float  # X R / c - 1
    knee_flag: str | None  # FLAG_SATURATED at or past the table's capacity knee


def closed_loop_deviation(c: int, ttft_ms: float, itl_ms: float, qps: float, out: int) -> float:
    """``X R / c - 1``: the response time law of ``c`` clients without think time."""
    return qps * (ttft_ms + (out - 1) * itl_ms) * 1e-3 / c - 1.0


def knee(table: list[tuple[float, float]], i: int) -> bool:
    """Row ``i`` of a table of (TTFT, throughput) is where a closed loop reaches the server's
    capacity: its TTFT more than :data:`TTFT_JUMP` times the previous concurrency's, and the
    next concurrency's throughput within :data:`PLATEAU` of its own (or no next row)."""
    if i == 0:
        return False
    (ttft_before, _), (ttft, tput) = table[i - 1], table[i]
    flat = i + 1 >= len(table) or abs(table[i + 1][1] / tput - 1.0) <= PLATEAU
    return flat and ttft > TTFT_JUMP * ttft_before


def saturated(table: list[tuple[float, float]], i: int) -> bool:
    """Row ``i`` is at or past a :func:`knee` of its table (more clients do not lift the
    server's capacity)."""
    return any(knee(table, j) for j in range(i + 1))


def rows() -> list[Row]:
    """Every published row with its derived rate, closed-loop check and knee flag."""
    out: list[Row] = []
    for (dep, n_in, n_out), table in TABLES.items():
        values = [(float(t), float(s)) for _, t, _, s in table]
        for i, published in enumerate(table):
            c, ttft, itl, tput = int(published[0]), *map(float, published[1:])
            qps = tput / n_out
            knee_flag = FLAG_SATURATED if saturated(values, i) else None
            dev = closed_loop_deviation(c, ttft, itl, qps, n_out)
            out.append(Row(dep, n_in, n_out, published, c, ttft, itl, tput, qps, dev, knee_flag))
    return out


def _text(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


DISPLAY_NAME = (
    "NVIDIA NIM for LLMs 1.8.0 benchmarks, AIPerf concurrency sweeps 1..250: "
    "Llama-3.3-70B-Instruct fp8 on 2x H100 80GB (TP2) and Llama-3.1-8B-Instruct fp8 on "
    "1x H100 80GB (TP1)"
)

#: The file's [source] texts; ``{...}`` fields are filled by :func:`header`.
SOURCE = {
    "reference": (
        f"{PAGE} (and its .md), 'Llama-3.3-70b-instruct Results' / 'Llama-3.1-8b-instruct "
        "Results', 'Version: 1.8.0', tables 'N Input Tokens / M Output Tokens' with columns "
        "Concurrency | TTFT (ms) | ITL (ms) | Throughput(Tokens/s). Third-party copy of both "
        f"deployments' tables: {COPY}{LLAMA_70B.copy_file} and {LLAMA_8B.copy_file}. AIPerf "
        "(the client): github.com/ai-dynamo/aiperf @ db4f6397d11ee2d4cfbb41f70b2327315163dcf0, "
        "aiperf/timing/request_rate_strategy.py (concurrency mode) and "
        "aiperf/metrics/types/inter_token_latency_metric.py (ITL)."
    ),
    "conventions": (
        "AIPerf concurrency mode is a CLOSED loop: c clients each send a request, stream the "
        "response, then immediately send the next (a semaphore of c credits, released when a "
        "request returns; no think time). Its arrival rate equals its completion rate "
        "X = throughput / output_len requests/s (Throughput = output tokens/s: at concurrency "
        "1, L_out / (TTFT + (L_out - 1) ITL) reproduces it), and the response time law of a "
        "closed system (Lazowska et al., Quantitative System Performance, 1984, ch. 3) requires "
        "c = X (TTFT + (L_out - 1) ITL): it holds within {dev_fast:.1f}% on every row with TTFT "
        "under 10 s and within {dev_all:.1f}% on all (worst: {worst}, a saturated row whose "
        "requests take {longest:.0f} minutes, a large part of a finite run, so ramp and drain "
        "bias the means); each point's notes give its check. Recorded as a closed loop: "
        "[point.load] concurrency = c with the plan's batch = c (a closed loop never has more "
        "than c requests in the server); diffcost validate --load predicts it with the "
        "continuous mode, which is a closed loop of batch clients (its TTFT: the iteration that "
        "finishes a prompt carries the prompts of its cohort, the requests that came back "
        "together, up to the token budget; AIPerf starts all c clients at once). input_cv = 0: "
        "fixed synthetic prompt lengths. Plan: mode continuous, tp, input_len and output_len "
        "as published. Measured: ttft_mean_ms = TTFT, tpot_mean_ms = ITL (AIPerf's inter-token "
        "latency per request, (request latency - TTFT) / (output tokens - 1), averaged over "
        "requests: the mean gap between streamed tokens after the first). A point is flagged "
        "as saturated at a knee of its table (TTFT more than "
        f"{TTFT_JUMP:.0f}x the previous concurrency's and the next concurrency's throughput "
        f"within {100 * PLATEAU:.0f}% of its own, or no next row) and past it (the rule in "
        "benchmarks/nim_concurrency_points.py): the server then runs fewer than c requests at "
        "once and the other clients queue. No point is excluded: the running batch the "
        "response time law recovers from these rows plateaus at the sequences of input + "
        "output tokens the KV cache holds (86 for 70B 5000/500, 23.5 for 70B 20000/2000, 171 "
        "and 46 for 8B 5000/500 and 20000/2000), which the continuous mode caps the running "
        "batch at, the other clients waiting for a slot (diffcost/_serve/modes.py)."
    ),
    "hardware": (
        "'2 x H100 80G' -> dgx-h100, chips = 2 (TP2); '1 x H100 80G' -> dgx-h100, chips = 1 "
        "(TP1). H100 SXM assumed (the page says H100 80G)."
    ),
    "unreported": (
        "Backend (TensorRT-LLM or vLLM) not stated: engine nim-llm-1.8. fp8 = fp8 weights and "
        "GEMMs; KV cache format not stated: fp8 assumed for the fp8 profile (flagged). kv_block "
        "16 assumed (memory only). prefill_chunk not published: left out, so diffcost's default "
        "of 2048 prompt tokens per iteration applies (flagged). Llama-3.3-70B-Instruct has the "
        "Llama 3.1 70B shapes and its 128K context -> llama-3.1-70b (the shapes of llama-3-70b, "
        "which specs/measurements/nim-llm-1.8.toml uses for the same concurrency-1 runs, but "
        "whose 8192-token context the 20000/2000 table exceeds); Llama-3.1-8B-Instruct -> "
        "llama-3.1-8b. TTFT includes the HTTP and tokenization path of the server (not "
        "modelled). Requests per concurrency, warm-up and run length not stated."
    ),
    "data": (
        "Written by benchmarks/nim_concurrency_points.py, which holds the published values "
        "verbatim. Read on the primary page through the project's search tool (corpus docs), "
        "which shows the page's opening only: the whole 70B 5000/500 table, the 70B 500/2000 "
        "row at concurrency 1 and the TTFT of its concurrency 5 row, and the first 8B 1.8.0 "
        "table of the rendered page (the 200/200 table of the copy; its title and the "
        "'1 x H100 80G, fp8 TP1' header are not in that excerpt). Every value so read equals "
        "the copy's. The other rows were read from the third-party copy only (verified = "
        "false, flagged)."
    ),
}


def header(all_rows: list[Row]) -> str:
    """The file's top tables, with the closed-loop check of every row summarised."""
    fast = [abs(r.deviation) for r in all_rows if r.ttft_ms < 10e3]
    worst = max(all_rows, key=lambda r: abs(r.deviation))
    name = worst.deployment.key.split("_")[2]
    fields = {
        "dev_fast": 100 * max(fast),
        "dev_all": 100 * abs(worst.deviation),
        "worst": f"{name} {worst.input_len}/{worst.output_len} at c = {worst.concurrency}",
        "longest": max(r.ttft_ms + (r.output_len - 1) * r.itl_ms for r in all_rows) / 60e3,
    }
    lines = [
        "schema_version = 1",
        'kind = "load-measurements"',
        'name = "nim-llm-concurrency"',
        f"display_name = {_text(DISPLAY_NAME)}",
        "",
        "[source]",
    ]
    for key, text in SOURCE.items():
        lines += [f'{key} = """', text.format(**fields) if key == "conventions" else text, '"""']
    return "\n".join(lines) + "\n"


def _point(r: Row) -> str:
    dep, c = r.deployment, r.concurrency
    key = (dep, r.input_len, r.output_len, c)
    verified = key in ON_PAGE
    flags = [
        "backend not stated",
        "KV cache format not stated (fp8 assumed)",
        "H100 SXM assumed ('H100 80G')",
        "prefill_chunk not published (diffcost default 2048)",
        *dep.flags,
    ]
    if key in TTFT_ON_PAGE:
        flags.append("TTFT read on the primary page; ITL and throughput from the third-party copy")
    elif not verified:
        flags.append("values read from the third-party copy only")
    n, t, i, s = r.published
    table_name = f"{r.input_len} Input Tokens / {r.output_len} Output Tokens"
    as_published = (
        f"{table_name}, Concurrency {n}: TTFT {t} ms, ITL {i} ms, Throughput {s} tokens/s"
    )
    notes = (
        f"X = {s} / {r.output_len} = {r.qps:.6g} requests/s; closed-loop check: X (TTFT + "
        f"{r.output_len - 1} ITL) = {c * (1 + r.deviation):.2f} clients for c = {c} "
        f"({100 * r.deviation:+.2f}%)"
    )
    lines = [
        "[[point]]",
        f'id = "{dep.key}_{r.input_len}x{r.output_len}_c{c}"',
        f'model = "{dep.model}"',
        'system = "dgx-h100"',
        f"chips = {dep.chips}",
        f"verified = {str(verified).lower()}",
    ]
    if r.knee_flag:
        flags.append(r.knee_flag)
    lines += [
        f"notes = {_text(notes)}",
        "flags = [" + ", ".join(_text(f) for f in flags) + "]",
        "",
        "[point.plan]",
        'engine = "nim-llm-1.8"',
        f"tp = {dep.tp}",
        "pp = 1",
        f"batch = {c}",
        f"input_len = {r.input_len}",
        f"output_len = {r.output_len}",
        'weight_format = "fp8"',
        'kv_format = "fp8"',
        'mode = "continuous"',
        "kv_block = 16",
        "",
        "[point.load]",
        f"concurrency = {c}",
        "input_cv = 0.0",
        "",
        "[point.measured]",
        f"ttft_mean_ms = {t}",
        f"tpot_mean_ms = {i}",
        f"as_published = {_text(as_published)}",
    ]
    return "\n".join(lines) + "\n"


def render() -> str:
    """The file's text."""
    all_rows = rows()
    points = (_point(r) for r in all_rows)
    return header(all_rows) + "".join("\n" + p for p in points)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    all_rows = rows()
    for r in all_rows:
        mark = "  past the capacity knee" if r.knee_flag else ""
        print(
            f"{r.deployment.key} {r.input_len:>5}x{r.output_len:<5} c={r.concurrency:<4} "
            f"X={r.qps:9.4f}/s  X R / c - 1 = {100 * r.deviation:+6.2f}%{mark}"
        )
    worst = max(all_rows, key=lambda r: abs(r.deviation))
    print(
        f"worst closed-loop deviation {100 * worst.deviation:+.2f}% "
        f"({worst.deployment.key} {worst.input_len}x{worst.output_len} c={worst.concurrency})"
    )
    text = render()
    if args.check:
        same = OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'differs from the generator output'}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(all_rows)} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
