"""An offline evaluation delivers its webhooks before the script exits, or says which were not (issue 30)."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

# A script that records a run whose loss turns NaN, evaluates ExplodingTensor with a webhook offline, and exits
# right after evaluate returns (the webhook's daemon thread would die with it).
SCRIPT = textwrap.dedent(
    """
    import sys, torch, trainspect as ts
    from trainspect.rules import ExplodingTensor, Webhook
    torch.set_num_threads(1)
    out, url = sys.argv[1], sys.argv[2]
    hook = ts.torch.Hook(out, include_collections=["losses"], save_config=ts.SaveConfig(save_interval=1))
    model = torch.nn.Linear(2, 1)
    hook.register_module(model)
    for step in range(3):
        loss = model(torch.ones(1, 2)).sum() * (float("nan") if step == 2 else 1.0)
        hook.record_loss("loss", loss)
        loss.backward()
    hook.close()
    verdicts = ts.rules.evaluate(out, [ExplodingTensor(actions=[Webhook(url, timeout=30)])], actions=True)
    print("status", verdicts[0].status.value, flush=True)
    """
)


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _run(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "evaluate.py"
    script.write_text(SCRIPT)
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run"), url], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def server():
    _Receiver.bodies = []
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_the_post_reaches_the_server_before_the_script_exits(tmp_path, server):
    proc = _run(tmp_path, f"http://127.0.0.1:{server.server_address[1]}/hook")
    assert proc.returncode == 0, proc.stderr
    assert "status IssuesFound" in proc.stdout, proc.stdout + proc.stderr
    assert len(_Receiver.bodies) == 1, proc.stderr
    assert b"ExplodingTensor" in _Receiver.bodies[0]
    assert "webhook" not in proc.stderr


def test_a_webhook_nobody_listens_to_is_one_warning_and_the_script_still_exits(tmp_path):
    with socket.socket() as sock:  # a free port, closed again: nothing listens there
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/hook"
    proc = _run(tmp_path, url)
    assert proc.returncode == 0, proc.stderr
    assert "status IssuesFound" in proc.stdout, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "webhook" in line]
    assert len(lines) == 1, proc.stderr
    assert url in lines[0]
