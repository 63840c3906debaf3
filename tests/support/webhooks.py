"""An HTTP endpoint a test runs to receive what gpudeck sends the operator's webhooks (real HTTP, on 127.0.0.1)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """An HTTP endpoint on 127.0.0.1:`port` that keeps what it is sent (started and stopped at will)."""

    def __init__(self, port: int):
        self.port, self.got = port, []
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):  # (quiet)
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def events(self, job_id: int) -> list[str]:
        return [
            json.loads(r["body"])["event"] for r in self.got if json.loads(r["body"]).get("job", {}).get("id") == job_id
        ]
