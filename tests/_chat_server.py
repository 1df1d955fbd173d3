"""The tests' one fake OpenAI-compatible chat-completions server: a real HTTP server on 127.0.0.1 (a thread of this
process) that answers every ``POST /v1/chat/completions`` with what a scripted ``reply`` returns.

    with serve_chat_completions(lambda body, headers: {...}) as base_url:   # "http://127.0.0.1:PORT/v1"
        OpenAIPolicy("model", base_url, "sk-test")
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Reply", "chat_completion", "serve_chat_completions"]

Reply = Callable[[dict[str, Any], Mapping[str, str]], dict[str, Any]]
"""``(request body, request headers) -> response body`` of one chat-completions request."""


def chat_completion(body: Mapping[str, Any], message: Mapping[str, Any], n: int = 1,
                    **extra: Any) -> dict[str, Any]:
    """A chat-completions response body carrying ``message`` (the ``n``-th of the server's answers)."""
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": dict(message), "finish_reason": "stop"}], **extra}


@contextmanager
def serve_chat_completions(reply: Reply, *, delay: float = 0.0) -> Iterator[str]:
    """Serve ``reply`` on 127.0.0.1 (after ``delay`` s per request; other paths get 404); yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            time.sleep(delay)
            data = json.dumps(reply(body, self.headers)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
