"""Benchmark the web explorer (``diffcost ui``): start-up and the time from a control change to
its answer.

Run: python benchmarks/bench_ui.py [--changes 40] [--browser]

- start: ``diffcost ui --port 0`` as a user starts it (the first start compiles every program;
  later ones read them from the cache, ``DIFFCOST_CACHE_DIR``), until it prints its address;
- HTTP: ``--changes`` control changes per tab, each one POST of the page's request (cycling tp
  and micro-batch for training, tp and batch for serving), timed round trip, median and p95;
- ``--browser``: the same changes typed into the page in headless Chromium (Debian's package,
  through Playwright), timed by the page from the change to the drawn answer
  (``window.diffcostTimings``).

The issue's target: a control change answers in at most 100 ms on 2 CPU cores (warm).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def start(port: int = 0) -> tuple[subprocess.Popen[str], str, float]:
    """``diffcost ui`` in a child process: the process, its address and seconds to start."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "diffcost", "ui", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("diffcost ui: "):
            return proc, line.split(": ", 1)[1].strip(), time.perf_counter() - t0
    raise RuntimeError("diffcost ui printed no address")


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "changes": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1),
        "max_ms": round(ms[-1], 1),
    }


def http_changes(address: str, changes: int) -> dict[str, dict[str, float]]:
    """Round trips of ``changes`` control changes per tab through the API."""
    with urllib.request.urlopen(address + "api/meta") as r:
        meta = json.loads(r.read())
    out = {}
    moves = {"train": ("tp", (1, 2, 4, 8), "micro_batch"), "serve": ("tp", (1, 2, 4), "batch")}
    for kind, (knob, values, other) in moves.items():
        d = meta["defaults"][kind]
        base = {"model": d["model"], "system": d["system"], "chips": d["chips"]}
        plan = {k: v for k, v in d["plan"].items() if k not in ("dp", "replicas")}
        ms = []
        for i in range(changes):
            p = {**plan, knob: values[i % len(values)], other: 2 ** (i % 4)}
            t0 = time.perf_counter()
            post(address + f"api/{kind}", {**base, "plan": p})
            ms.append(1e3 * (time.perf_counter() - t0))
        out[kind] = summary(ms)
    return out


def browser_changes(address: str, changes: int) -> dict[str, dict[str, float]]:
    """The same changes typed into the page; the page's own timings."""
    from playwright.sync_api import sync_playwright

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    args += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        page = browser.new_page()
        page.goto(address)
        page.wait_for_selector("body[data-ready='1']", timeout=120_000)
        page.evaluate("window.diffcostTimings.length = 0")
        for kind, knob, values in (("train", "tp", (1, 2, 4, 8)), ("serve", "batch", (8, 16, 32))):
            page.click(f"#tabs button[data-tab={kind}]")
            for i in range(changes):
                before = page.evaluate(f"document.body.dataset.{kind}Ready")
                page.fill(f"[data-testid={kind}-{knob}]", str(values[i % len(values)]))
                page.wait_for_function(f"document.body.dataset.{kind}Ready !== '{before}'")
        timings = page.evaluate("window.diffcostTimings")
        browser.close()
    return {
        kind: summary([t["ms"] for t in timings if t["kind"] == kind])
        for kind in ("train", "serve")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=40)
    parser.add_argument("--browser", action="store_true", help="also time the page in Chromium")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    args = parser.parse_args()
    proc, address, start_s = start()
    try:
        result = {"start_s": round(start_s, 1), "http": http_changes(address, args.changes)}
        if args.browser:
            result["browser"] = browser_changes(address, args.changes)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
