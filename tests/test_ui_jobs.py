"""Plan searches of the web explorer (diffcost/cli/_ui/jobs.py): the request becomes the
``diffcost plan`` command line, checked before any process starts; a running search can be
cancelled at once."""

import time

import pytest

import diffcost as dc
from diffcost.testing import ui_jobs


def test_a_request_becomes_the_plan_command_line():
    argv = ui_jobs.search_argv("serve", {"model": "llama-3-8b", "chips": 8, "ttft_slo_ms": 200})
    assert argv == [
        *("plan", "serve", "--model", "llama-3-8b", "--chips", "8"),
        *("--ttft-slo-ms", "200", "--json"),
    ]


def test_codesign_is_a_long_request_too():
    argv = ui_jobs.search_argv("codesign", {"workload": "serve", "steps": 5, "power_w": 700})
    assert argv == ["codesign", "--workload", "serve", "--steps", "5", "--power-w", "700", "--json"]


def test_unknown_or_mistyped_options_are_refused_all_at_once():
    with pytest.raises(dc.SpecError) as err:
        ui_jobs.search_argv("train", {"chips": "8", "ttft_slo_ms": 1.0, "seq_len": True})
    keys = {p.key for p in err.value.problems}
    assert keys == {"chips", "ttft_slo_ms", "seq_len"}
    with pytest.raises(dc.SpecError):
        ui_jobs.search_argv("sweep", {})


def test_a_running_search_is_cancelled_at_once():
    jobs = ui_jobs.SearchJobs()
    job = jobs.start("train", {"model": "llama-3-70b", "chips": 1024})
    assert job.status()["state"] == "running"
    jobs.cancel(job.id)
    deadline = time.monotonic() + 10
    while job.ended_s is None and time.monotonic() < deadline:
        time.sleep(0.05)
    status = job.status()
    assert status["state"] == "cancelled"
    assert job.ended_s is not None and status["elapsed_s"] < 10
    assert status["command"].startswith("diffcost plan train")
