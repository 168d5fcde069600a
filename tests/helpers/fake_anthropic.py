"""A local stand-in for the Anthropic Messages API, for running the real
Claude Code CLI (bundled with ``claude_agent_sdk``) without the network.

``FakeAnthropic()`` serves ``POST /v1/messages`` on 127.0.0.1 (streamed or
not): every reply is ``answer to: <the newest user text>``, so a test reads
from the reply which prompt was answered, and ``requests`` keeps every
request body, so a test sees exactly what the model was sent. Other paths
answer ``{}``. ``env()`` is what the CLI needs to talk to it (and nothing
else: no other traffic, a throwaway config dir).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _user_texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content or () if isinstance(b, dict)
            and b.get("type") == "text" and "<system-reminder>" not in b.get("text", "")]


class FakeAnthropic:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(b"{}", "application/json")

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                req = json.loads(self.rfile.read(n) or b"{}")
                if "count_tokens" in self.path:
                    self._send(b'{"input_tokens": 10}', "application/json")
                    return
                outer.requests.append(req)
                self._send(*outer.reply(req))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def env(self, config_dir: str) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": self.url, "ANTHROPIC_API_KEY": "sk-fake",
                "CLAUDE_CONFIG_DIR": config_dir, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1"}

    def prompts(self, req: dict[str, Any]) -> list[str]:
        """The user texts a request held, oldest first."""
        return [t for m in req.get("messages", []) if m.get("role") == "user"
                for t in _user_texts(m) if t.strip()]

    def reply(self, req: dict[str, Any]) -> tuple[bytes, str]:
        asked = self.prompts(req)
        text = f"answer to: {asked[-1] if asked else ''}"
        msg: dict[str, Any] = {
            "id": f"msg_{len(self.requests)}", "type": "message", "role": "assistant",
            "model": req.get("model", "m"), "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 0}}
        if not req.get("stream"):
            msg.update(content=[{"type": "text", "text": text}], stop_reason="end_turn")
            return json.dumps(msg).encode(), "application/json"
        events = [
            ("message_start", {"type": "message_start", "message": msg}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": text}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {
                "stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 3}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        body = "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events)
        return body.encode(), "text/event-stream"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
