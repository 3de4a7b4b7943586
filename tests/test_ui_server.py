"""The web explorer's server (diffcost/cli/_ui/server.py): the page and its assets come from the
installed package, the API answers JSON, and a bad request answers 400 with the command line's
message (no traceback, no HTML error page).  Started without compiling (``warm=False``): the
requests here that evaluate the model compile what they need."""

import json
import threading
import urllib.error
import urllib.request

import pytest

from diffcost.testing import ui_server


@pytest.fixture(scope="module")
def base_url():
    server = ui_server.make_server("127.0.0.1", 0, warm=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}"
    server.shutdown()
    server.explorer.jobs.close()
    server.server_close()


def _get(url):
    with urllib.request.urlopen(url, timeout=120) as r:
        return r.status, r.headers.get("Content-Type"), r.read()


def _post(url, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_page_and_its_assets_come_from_the_package(base_url):
    status, kind, body = _get(base_url + "/")
    assert status == 200 and kind.startswith("text/html")
    assert b"diffcost explorer" in body
    for asset, mime in (("/app.js", "text/javascript"), ("/app.css", "text/css")):
        status, kind, body = _get(base_url + asset)
        assert status == 200 and kind.startswith(mime) and len(body) > 1000
    # nothing on the page is fetched from elsewhere
    for name in ("index.html", "app.js", "app.css"):
        text = ui_server.static_text(name).decode()
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text


def test_meta_lists_the_controls(base_url):
    status, _, body = _get(base_url + "/api/meta")
    meta = json.loads(body)
    assert status == 200
    assert {"models", "systems", "chips", "knobs", "defaults"} <= set(meta)


def test_a_bad_control_answers_400_with_the_command_lines_message(base_url):
    status, obj = _post(base_url + "/api/train", {"model": "llama-3-8b", "plan": {"tp": 0}})
    assert status == 400
    assert obj["error"] == "invalid input"
    assert "control tp" in obj["message"] and "positive integer" in obj["message"]
    assert obj["problems"][0]["key"] == "control tp"


def test_malformed_requests_are_refused_plainly(base_url):
    status, obj = _post(base_url + "/api/train", None, raw=b"{not json")
    assert status == 400 and obj["error"] == "bad json"
    status, obj = _post(base_url + "/api/train", None, raw=b"[1, 2]")
    assert status == 400 and "JSON object" in obj["message"]
    status, obj = _post(base_url + "/api/nothing", {})
    assert status == 404
    status, obj = _post(base_url + "/api/search/train", {"chips": "many", "bogus": 1})
    assert status == 400
    assert {p["key"] for p in obj["problems"]} == {"chips", "bogus"}


def test_an_invalid_uploaded_config_names_the_file(base_url):
    status, obj = _post(base_url + "/api/upload", {"filename": "mine.json", "text": '{"a": 1}'})
    assert status == 400
    assert "mine.json" in obj["message"]
