"""The one backend probe (vlrl.core.backends.probe) that jobs and training share: stricter answers
where the two earlier probes differed, and no credential in any message."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vlrl.core.backends import BackendError
from vlrl.core.backends.probe import probe_backend

KEY = "sk-probe" + "0123456789abcdefXYZ"


class _Echo(BaseHTTPRequestHandler):
    """Answers GET /models with a fixed status and a body that echoes the Authorization header."""

    status = 500
    seen: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        auth = self.headers.get("Authorization", "")
        type(self).seen.append(auth)
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(f'{{"error": "bad request, Authorization: {auth}"}}'.encode())

    def log_message(self, *a):
        pass


@pytest.fixture
def echo_server():
    _Echo.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def test_an_echoed_api_key_never_reaches_the_message(echo_server, monkeypatch):
    monkeypatch.setenv("PROBE_KEY", KEY)
    res = probe_backend(f"openai:{echo_server}@m?api_key_env=PROBE_KEY")
    assert not res.ok and "HTTP 500" in res.problem
    assert _Echo.seen == [f"Bearer {KEY}"]  # the key was sent, as the backend would send it...
    assert KEY not in res.problem  # ...and not repeated in what the user sees
    with pytest.raises(BackendError) as e:
        res.raise_for_problem()
    assert KEY not in str(e.value)


def test_a_server_without_a_model_listing_fails(echo_server, monkeypatch):
    monkeypatch.setattr(_Echo, "status", 404)
    assert "HTTP 404" in probe_backend(f"openai:{echo_server}@m").problem


def test_stricter_answers_where_the_old_probes_differed(tmp_path):
    # a hub id is refused: the hf backend never downloads
    assert "no such model folder" in probe_backend("hf:someorg/some-model").problem
    # an openai spec without @MODEL fails at the probe, not at the first request
    assert "expected 'openai:BASE_URL@MODEL'" in probe_backend("openai:http://127.0.0.1:1/v1").problem
    # a folder without config.json is named as such
    (tmp_path / "m").mkdir()
    assert "no config.json" in probe_backend(f"hf:{tmp_path}/m").problem


def test_what_is_not_a_model_spec_passes(tmp_path):
    assert probe_backend(None).ok and probe_backend("hf:tiny:qwen2_5_vl").ok and probe_backend("plain-name").ok
    assert "does not exist" in probe_backend(f"{tmp_path}/caps.jsonl").problem
    (tmp_path / "caps.jsonl").write_text("")
    assert probe_backend(f"t={tmp_path}/caps.jsonl").ok
