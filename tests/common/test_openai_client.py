"""The OpenAI-compatible client against a tiny HTTP server on 127.0.0.1 started by the test:
retries with backoff on transient errors, no retry on client errors, timeouts, the API key from
the named env var, JSON replies."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from components.common.openai_client import EndpointError, OpenAIClient, parse_json_reply


class FakeEndpoint:
    """Answers POST /v1/chat/completions with the scripted (status, content, delay) in order, or,
    given ``respond``, with ``respond(body)``'s choice dict (a reply chosen by what was asked,
    for callers whose requests arrive in no fixed order)."""

    def __init__(self, script, respond=None):
        self.script, self.requests, self.respond = list(script), [], respond
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append({"path": self.path, "body": body,
                                          "auth": self.headers.get("Authorization")})
                if endpoint.respond is not None:
                    status, choice, delay = 200, endpoint.respond(body), 0
                    content = choice["message"]["content"]
                else:
                    status, content, delay = endpoint.script.pop(0) if endpoint.script else (200, "done", 0)
                    choice = {"message": {"role": "assistant", "content": content}}
                time.sleep(delay)
                usage = {"prompt_tokens": len(json.dumps(body["messages"])), "completion_tokens": len(content)}
                reply = {"choices": [choice], "usage": usage} if status == 200 else {"error": {"message": content}}
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass                                   # the client gave up (timeout test)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint(request):
    servers = []

    def make(*script):
        servers.append(FakeEndpoint(script))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


def _client(url, **kw):
    sleeps = []
    return OpenAIClient(url, "judge-model", api_key_env="TEST_JUDGE_KEY", sleep=sleeps.append, **kw), sleeps


def test_retries_transient_errors_with_backoff_and_sends_the_key(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_JUDGE_KEY", "sk-test")
    server = endpoint((503, "busy", 0), (429, "slow down", 0), (200, "hello", 0))
    client, sleeps = _client(server.url, backoff=0.5)
    assert client.chat([{"role": "user", "content": "hi"}], max_tokens=5) == "hello"
    assert len(server.requests) == 3 and sleeps == [0.5, 1.0]
    first = server.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test"
    assert first["body"]["model"] == "judge-model" and first["body"]["max_tokens"] == 5


def test_client_errors_are_not_retried_and_no_key_sends_no_header(endpoint, monkeypatch):
    monkeypatch.delenv("TEST_JUDGE_KEY", raising=False)
    server = endpoint((400, "bad request", 0))
    client, sleeps = _client(server.url)
    with pytest.raises(EndpointError, match="HTTP 400"):
        client.chat([{"role": "user", "content": "hi"}])
    assert len(server.requests) == 1 and sleeps == [] and server.requests[0]["auth"] is None


def test_timeouts_are_retried_then_reported(endpoint):
    server = endpoint((200, "late", 1.0), (200, "late", 1.0))
    client, sleeps = _client(server.url, timeout=0.2, max_retries=1)
    with pytest.raises(EndpointError, match="failed after 2 attempts.*(timed out|Timeout)"):
        client.chat([{"role": "user", "content": "hi"}])
    assert len(sleeps) == 1


def test_chat_with_usage_returns_the_servers_token_counts_and_sends_the_body_as_given(endpoint):
    server = endpoint((200, "four", 0))
    client, _ = _client(server.url)
    messages = [{"role": "user", "content": "2+2?"}]
    text, usage = client.chat_with_usage(messages, reasoning_effort="low")
    assert text == "four"
    assert usage == {"prompt_tokens": len(json.dumps(messages)), "completion_tokens": 4}
    assert server.requests[0]["body"] == {"model": client.model, "messages": messages, "reasoning_effort": "low"}


def test_json_replies(endpoint):
    server = endpoint((200, 'Sure! ```json\n{"criteria_met": true, "explanation": "x"}\n``` hope it helps', 0))
    client, _ = _client(server.url)
    assert client.chat_json([{"role": "user", "content": "grade"}])["criteria_met"] is True
    assert parse_json_reply('[1, 2]') == [1, 2]
    assert parse_json_reply('the answer: {"a": 1} end') == {"a": 1}
    with pytest.raises(ValueError, match="no JSON value"):
        parse_json_reply("no json here")


def test_orbit_endpoint_goes_through_the_shared_client(endpoint):
    from components.orbit.endpoint import chat

    server = endpoint((500, "oops", 0), (200, "ok", 0))          # one retry: a real 1 s backoff
    assert chat(server.url, "m", [{"role": "user", "content": "hi"}]) == "ok"
    assert len(server.requests) == 2


def logprob_choice(top: dict[str, float]) -> dict:
    """A chat choice whose one token is the likeliest of ``top`` ({token: logprob}), with the
    ``logprobs`` block OpenAI's API sends when asked for ``top_logprobs``."""
    first = max(top, key=top.get)
    return {"message": {"role": "assistant", "content": first},
            "logprobs": {"content": [{"token": first, "logprob": top[first],
                                      "top_logprobs": [{"token": t, "logprob": v} for t, v in top.items()]}]}}


def test_first_token_logprobs_asks_for_one_greedy_token_and_reads_the_top_candidates(endpoint):
    top = {"7": -0.1, "70": -2.5, "CODE": -4.0}
    server = FakeEndpoint([], respond=lambda body: logprob_choice(top))
    try:
        client, _ = _client(server.url)
        assert client.first_token_logprobs([{"role": "user", "content": "score"}], top_logprobs=3) == top
    finally:
        server.close()
    body = server.requests[0]["body"]
    assert body["max_tokens"] == 1 and body["temperature"] == 0.0
    assert body["logprobs"] is True and body["top_logprobs"] == 3


def test_first_token_logprobs_names_a_server_without_logprobs(endpoint):
    server = endpoint((200, "42", 0))
    client, _ = _client(server.url)
    with pytest.raises(EndpointError, match="does the server support logprobs"):
        client.first_token_logprobs([{"role": "user", "content": "score"}])
