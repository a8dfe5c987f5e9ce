"""The part of a local stand-in for GitHub's REST API that every test of a GitHub-talking script
shares: a server on 127.0.0.1 with a queue of faults answered first (one per request) or one answered
to every request, and a handler that answers JSON quietly. Each test adds its own routes."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

Fault = tuple[int, dict, Any]  # (status, headers, JSON body)


class StandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.faults: list[Fault] = []  # answered first, one per request
        self.forever: Optional[Fault] = None  # answered to every request

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *_args) -> None:
        pass

    def answer(self, code: int, payload: Any, headers: Optional[dict] = None) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(code)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(raw)), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)
