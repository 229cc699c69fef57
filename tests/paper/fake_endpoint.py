"""One local OpenAI-compatible chat endpoint for tests: POST /v1/chat/completions on a free
port of 127.0.0.1, replies scripted in order or computed from each request."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Choice = dict[str, Any]


def default_usage(body: dict, content: str) -> dict[str, int]:
    return {"prompt_tokens": len(json.dumps(body["messages"])), "completion_tokens": len(content)}


class FakeEndpoint:
    """Replies come from ``script`` — (status, content, delay) tuples, in order; "done" once it
    runs out — or, given ``respond``, from ``respond(body)``: the reply's text, or a whole choice
    dict (a message plus, e.g., ``logprobs``), for callers whose requests arrive in no fixed
    order. ``usage(body, content)`` is the reply's token count block. Every request body is
    kept in ``requests`` and its path and Authorization header in ``meta``, in arrival order."""

    def __init__(self, script=(), respond: Callable[[dict], str | Choice] | None = None,
                 usage: Callable[[dict, str], dict] = default_usage):
        self.script, self.respond, self.usage = list(script), respond, usage
        self.requests: list[dict] = []
        self.meta: list[dict] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(body)
                endpoint.meta.append({"path": self.path, "auth": self.headers.get("Authorization")})
                status, choice, delay = endpoint._reply(body)
                time.sleep(delay)
                content = choice["message"]["content"] if status == 200 else choice
                reply = ({"choices": [choice], "usage": endpoint.usage(body, content)} if status == 200
                         else {"error": {"message": content}})
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass                                   # the client gave up (timeout tests)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _reply(self, body: dict) -> tuple[int, Choice | str, float]:
        if self.respond is not None:
            reply = self.respond(body)
            return 200, reply if isinstance(reply, dict) else text_choice(reply), 0.0
        status, content, delay = self.script.pop(0) if self.script else (200, "done", 0)
        return status, text_choice(content) if status == 200 else content, delay

    def prompts(self, starts: str = "") -> list[str]:
        """The last message of every request so far that starts with ``starts``."""
        return [t for t in (r["messages"][-1]["content"] for r in self.requests) if t.startswith(starts)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def text_choice(content: str) -> Choice:
    return {"message": {"role": "assistant", "content": content}}


def logprob_choice(top: dict[str, float]) -> Choice:
    """A choice whose one token is the likeliest of ``top`` ({token: logprob}), with the
    ``logprobs`` block OpenAI's API sends when asked for ``top_logprobs``."""
    first = max(top, key=top.get)
    return {"message": {"role": "assistant", "content": first},
            "logprobs": {"content": [{"token": first, "logprob": top[first],
                                      "top_logprobs": [{"token": t, "logprob": v} for t, v in top.items()]}]}}
