"""The web explorer in a real browser (issue 45): ``diffcost ui`` started as a user starts it,
driven by headless Chromium (Debian's package, through Playwright): each tab loads, controls
change, the numbers read back from the page equal the library's for the same inputs, a config
is uploaded, searches run and are cancelled, bad inputs show the command line's messages.
Screenshots go to ``DIFFCOST_UI_ARTIFACTS`` (default: pytest's temporary folder).

Needs Chromium (``apt-get install chromium``) and Playwright (``pip install playwright``, the
``test`` extra): skipped without them, except where ``DIFFCOST_REQUIRE_BROWSER=1`` (CI), which
makes a missing browser a failure."""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

import diffcost as dc
from diffcost.testing import train_cmd, ui_answers

pytestmark = pytest.mark.slow

HF = Path(__file__).resolve().parent / "fixtures" / "hf"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: Flags of a headless Chromium on a machine without network (no background connections).
CHROMIUM_ARGS = [
    *("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"),
    *("--disable-background-networking", "--disable-component-update", "--disable-sync"),
]
START_TIMEOUT_S = 900  # a cold start compiles every program (1-3 min on 2 cores)


def _need_browser():
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the Python package playwright")
    if not Path(CHROMIUM).exists():
        missing.append("Chromium (/usr/bin/chromium)")
    if missing:
        why = "browser tests need " + " and ".join(missing)
        if os.environ.get("DIFFCOST_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    folder = os.environ.get("DIFFCOST_UI_ARTIFACTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("ui")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def url():
    """``diffcost ui --port 0`` in a child process; its address as it prints it."""
    _need_browser()
    proc = subprocess.Popen(
        [sys.executable, "-m", "diffcost", "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    start, address = time.monotonic(), None
    while time.monotonic() - start < START_TIMEOUT_S:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("diffcost ui: "):
            address = line.split(": ", 1)[1].strip()
            break
    if address is None:
        proc.kill()
        proc.wait(timeout=30)
        pytest.fail(f"diffcost ui printed no address: {proc.stdout.read()[-2000:]}")
    print(f"diffcost ui started in {time.monotonic() - start:.1f} s at {address}")
    yield address
    proc.terminate()
    proc.wait(timeout=30)
    proc.stdout.close()


@pytest.fixture(scope="module")
def page(url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1300, "height": 1500})
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(url)
        pg.wait_for_selector("body[data-ready='1']", timeout=120_000)
        pg.errors = errors  # type: ignore[attr-defined]
        yield pg
        browser.close()
    assert not errors, errors


def _value(page, testid: str) -> float:
    return float(page.get_attribute(f"[data-testid={testid}]", "data-value"))


def _change(page, kind: str, testid: str, value: str) -> None:
    """Type ``value`` into a control and wait for the answer to that change."""
    before = page.evaluate(f"document.body.dataset.{kind}Ready")
    page.fill(f"[data-testid={testid}]", value)
    page.wait_for_function(
        f"document.body.dataset.{kind}Ready !== {json.dumps(before)}", timeout=60_000
    )
    page.wait_for_timeout(50)


def _request(page, kind: str) -> dict:
    """The request the page sends for a tab (the same function it calls)."""
    return page.evaluate(f"readRequest('{kind}')")


def test_training_tab_shows_the_library_answer(page, artifacts):
    page.click("#tabs button[data-tab=train]")
    for tp in ("8", "2"):
        _change(page, "train", "train-tp", tp)
        job = ui_answers.job_of("train", _request(page, "train"))
        assert isinstance(job.plan, dc.TrainPlan)
        expected = float(dc.TrainCost(job.system, job.model)(job.plan).step_time_s)
        assert _value(page, "train-step_time_s") == pytest.approx(expected, rel=1e-6)
        assert job.values["tp"] == int(tp)
    # the tornado and the memory stack are drawn
    assert page.locator("#train-tornado svg rect").count() > 5
    assert "capacity" in (page.text_content("[data-testid=train-capacity]") or "")
    page.screenshot(path=str(artifacts / "train.png"), full_page=True)


def test_serving_tab_shows_the_library_answer_and_the_load(page, artifacts):
    page.click("#tabs button[data-tab=serve]")
    _change(page, "serve", "serve-batch", "64")
    job = ui_answers.job_of("serve", _request(page, "serve"))
    assert isinstance(job.plan, dc.ServePlan)
    expected = float(dc.ServeCost(job.system, job.model)(job.plan).tpot_s)
    assert _value(page, "serve-tpot_s") == pytest.approx(expected, rel=1e-6)
    _change(page, "serve", "serve-qps", "0.5")
    load, limits = ui_answers._serve_load({"qps": 0.5})
    answer = ui_answers.serve_answer(job, load, limits).json["load"]
    assert answer["stable"] and answer["ttft_p99_s"] is not None
    shown = float(page.get_attribute("[data-testid='load-TTFT']", "data-value"))
    assert shown == pytest.approx(answer["ttft_p99_s"], rel=1e-6)
    assert page.locator("[data-testid=roofline-decode]").count() == 1
    assert page.locator("[data-testid=roofline-prefill]").count() == 1
    page.screenshot(path=str(artifacts / "serve.png"), full_page=True)


def test_a_bad_control_shows_the_command_lines_message(page, artifacts):
    page.click("#tabs button[data-tab=train]")
    _change(page, "train", "train-tp", "0")
    text = page.inner_text("[data-testid=train-errors]")
    cli = subprocess.run(
        [sys.executable, "-m", "diffcost", "train", "--tp", "0"], capture_output=True, text=True
    )
    reason = cli.stderr.strip().splitlines()[-1].split("--tp: ")[-1]
    assert "control tp" in text and reason in text
    page.screenshot(path=str(artifacts / "bad-input.png"))
    _change(page, "train", "train-tp", "4")
    assert page.inner_text("[data-testid=train-errors]") == ""


def test_an_uploaded_config_is_predicted_as_the_library_reads_it(page, tmp_path):
    page.click("#tabs button[data-tab=train]")
    page.set_input_files("[data-testid=train-upload]", str(HF / "llama-3.1-8b" / "config.json"))
    # the page marks which model its drawn answer is for
    page.wait_for_function(
        "(document.body.dataset.trainModel || '').endsWith('config.json')", timeout=60_000
    )
    request = _request(page, "train")
    assert request["model"].endswith("config.json")
    job = ui_answers.job_of("train", request)
    assert train_cmd.train_answer(job).json["step_time_s"] == pytest.approx(
        _value(page, "train-step_time_s"), rel=1e-6
    )
    bad = tmp_path / "broken-config.json"
    bad.write_text('{"model_type": "llama"}')
    page.set_input_files("[data-testid=train-upload]", str(bad))
    page.wait_for_function("document.body.dataset.trainReady === 'upload-error'")
    assert "broken-config.json" in page.inner_text("[data-testid=train-errors]")


def test_searches_run_show_launch_lines_and_cancel(page, artifacts):
    page.click("#tabs button[data-tab=search]")
    page.select_option("[data-testid=search-kind]", "train")
    page.select_option("[data-testid=search-model]", "llama-3-8b")
    page.fill("[data-testid=search-chips]", "8")
    page.click("[data-testid=search-run]")
    page.wait_for_function("document.body.dataset.searchState === 'done'", timeout=600_000)
    assert page.locator("[data-testid=search-best]").count() == 1
    launch = page.inner_text("[data-testid=launch-Megatron-LM]")
    assert "torchrun" in launch and "--tensor-model-parallel-size" in launch
    page.screenshot(path=str(artifacts / "search-train.png"), full_page=True)

    page.select_option("[data-testid=search-kind]", "serve")
    page.evaluate("document.body.dataset.paretoReady = ''")
    page.click("[data-testid=search-run]")
    page.wait_for_function("document.body.dataset.paretoReady > 0", timeout=600_000)
    assert "vllm serve" in page.inner_text("[data-testid=launch-vLLM]")
    page.click("[data-testid=copy-vLLM]")
    page.screenshot(path=str(artifacts / "search-serve.png"), full_page=True)

    page.select_option("[data-testid=search-kind]", "train")
    page.select_option("[data-testid=search-model]", "llama-3-405b")
    page.fill("[data-testid=search-chips]", "4096")
    page.click("[data-testid=search-run]")
    page.wait_for_timeout(500)
    page.click("[data-testid=search-cancel]")
    page.wait_for_function("document.body.dataset.searchState === 'cancelled'", timeout=30_000)


def test_compare_and_why_views(page, artifacts):
    page.click("#tabs button[data-tab=compare]")
    page.select_option("[data-testid=compare-kind]", "train")
    page.click("[data-testid=compare-run]")
    page.wait_for_function("document.body.dataset.compareReady === '1'", timeout=60_000)
    request = _request(page, "train")
    side = {**request, "plan": {k: v for k, v in request["plan"].items() if k != "dp"}}
    job = ui_answers.job_of("train", {**side, "system": "dgx-h100"})
    cell = page.locator("[data-testid=compare-step_time_s] td").nth(1)
    assert float(cell.get_attribute("data-value")) == pytest.approx(
        train_cmd.train_answer(job).json["step_time_s"], rel=1e-6
    )
    page.click("[data-testid=why-run]")
    page.wait_for_function("document.body.dataset.whyReady === '1'", timeout=60_000)
    assert page.locator("[data-testid=why-chart] svg rect").count() >= 15
    page.screenshot(path=str(artifacts / "compare.png"), full_page=True)


def test_codesign_designs_a_chip_for_each_job(page, artifacts):
    page.click("#tabs button[data-tab=compare]")
    page.fill("[name='cd.steps']", "5")
    page.click("[data-testid=codesign-run]")
    page.wait_for_function("document.body.dataset.codesignState === 'done'", timeout=900_000)
    text = page.inner_text("[data-testid=codesign-result]")
    assert "designed for training" in text and "nearest existing chip" in text
    page.screenshot(path=str(artifacts / "codesign.png"), full_page=True)


def test_response_time_per_control_change_is_recorded(page, artifacts):
    """The time from a control change to the drawn answer, as the page measures it (the
    figures for the closing note and README; the benchmark is benchmarks/bench_ui.py)."""
    page.click("#tabs button[data-tab=train]")
    page.evaluate("window.diffcostTimings.length = 0")
    for tp in ("1", "2", "4", "8") * 5:
        _change(page, "train", "train-tp", tp)
    page.click("#tabs button[data-tab=serve]")
    for batch in ("8", "16", "32", "64") * 5:
        _change(page, "serve", "serve-batch", batch)
    timings = page.evaluate("window.diffcostTimings")
    summary = {}
    for kind in ("train", "serve"):
        ms = sorted(t["ms"] for t in timings if t["kind"] == kind)
        summary[kind] = {
            "changes": len(ms),
            "median_ms": statistics.median(ms),
            "p95_ms": ms[int(0.95 * (len(ms) - 1))],
        }
    (artifacts / "response_times.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))
    assert all(s["changes"] >= 20 for s in summary.values())
