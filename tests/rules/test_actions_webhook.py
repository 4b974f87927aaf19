"""Webhooks never hold training or shutdown: a server that never answers costs a bounded wait and one line."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
import time

import torch

import trainspect as ts
from trainspect.rules import ExplodingTensor, Status, Verdict, Webhook
from trainspect.rules.actions import finish_webhooks

torch.set_num_threads(1)


class _SilentServer:
    """Accepts connections on 127.0.0.1, reads each request, never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[tuple[socket.socket, bytes]] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            self.requests.append((conn, data))

    def wait_for(self, n: int) -> None:
        deadline = time.monotonic() + 30
        while len(self.requests) < n and time.monotonic() < deadline:
            time.sleep(0.02)

    def close(self) -> None:
        self.sock.close()
        for conn, _ in self.requests:
            conn.close()


def _still_open(conn: socket.socket) -> bool:
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True  # no data and no EOF: the client still waits for its answer


def test_hook_close_does_not_wait_for_webhooks_that_never_answer(tmp_path, caplog):
    server = _SilentServer()
    urls = [f"http://127.0.0.1:{server.port}/hook{i}" for i in range(3)]
    rule = ExplodingTensor(actions=[{"name": "webhook", "url": u, "timeout": 600} for u in urls])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    x = torch.randn(64, 8)
    y = x.sum(1, keepdim=True)
    opt = torch.optim.SGD(model.parameters(), lr=1e4)
    loss_fn = torch.nn.MSELoss()
    hook = ts.torch.Hook(str(tmp_path / "run"), rules=[rule])
    hook.register_module(model)
    hook.register_loss(loss_fn)
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(30):
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
            server.wait_for(3)  # the three POSTs left on their own threads during training
            hook.close()
            # close() returned although no POST got an answer: the requests are still waiting on the server
            assert len(server.requests) == 3
            assert all(_still_open(conn) for conn, _ in server.requests)
        lines = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
        assert len(lines) == 1, lines
        assert "3 webhook POST(s) not delivered" in lines[0]
        assert all(f"ExplodingTensor -> {u}" in lines[0] for u in urls)
        assert {data.split(b" ")[1].decode() for _, data in server.requests} == {"/hook0", "/hook1", "/hook2"}
        assert ts.rules.load_verdicts(tmp_path / "run")[0].status is Status.ISSUES_FOUND
    finally:
        server.close()


class _Answering(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_delivered_webhooks_leave_nothing_to_report(caplog):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answering)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    silent = _SilentServer()
    try:
        good = Webhook(f"http://127.0.0.1:{server.server_port}/ok", timeout=30)
        bad = Webhook(f"http://127.0.0.1:{silent.port}/never", timeout=600)
        good.fire(Verdict(rule="A", status=Status.ISSUES_FOUND))
        assert good.wait(30) and good.pending() == []
        bad.fire(Verdict(rule="B", status=Status.ISSUES_FOUND))
        silent.wait_for(1)
        with caplog.at_level(logging.WARNING):
            lost = finish_webhooks([good, bad, bad], budget=0.2)
            assert finish_webhooks([good, bad], budget=0.2) == []  # given up once, reported once
        assert lost == [f"B -> {bad.url}"]
        assert [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()] == [
            f"trainspect: 1 webhook POST(s) not delivered within 0.2 s at close: B -> {bad.url}"
        ]
    finally:
        server.shutdown()
        server.server_close()
        silent.close()
