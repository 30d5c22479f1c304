"""A stand-in for an OpenAI-compatible ``/v1/chat/completions`` endpoint (stdlib ``http.server``)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REFERENCE = "REFERENCE ANSWER"


def answer_block(prompt: str, who: str) -> str:
    """The text of assistant ``who``'s answer in an MT-Bench pair prompt."""
    match = re.search(
        rf"\[The Start of Assistant {who}'s Answer\]\n(.*?)\n\[The End of Assistant {who}'s Answer\]", prompt, re.S
    )
    assert match, prompt
    return match.group(1)


def prefers_non_reference(prompt: str) -> str:
    """A consistent judge: whichever answer is not the reference wins; grades are 7."""
    if "Assistant A's Answer" in prompt:
        return "The other one is worse. [[B]]" if REFERENCE in answer_block(prompt, "A") else "A is better. [[A]]"
    return "Helpful enough. Rating: [[7]]"


class StubJudgeServer:
    """Serves ``answer(user message)`` as the chat completion; records every request body and header."""

    def __init__(self, answer: Callable[[str], str] = prefers_non_reference, status: int = 200) -> None:
        self.answer, self.status = answer, status
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, **body})
                stub.headers.append(dict(self.headers))
                if stub.status != 200:
                    payload = json.dumps({"error": {"message": "invalid api key"}}).encode()
                else:
                    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
                    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": stub.answer(user)}}]}
                    payload = json.dumps(reply).encode()
                self.send_response(stub.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StubJudgeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
