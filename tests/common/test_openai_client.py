"""The OpenAI-compatible client against a tiny HTTP server on 127.0.0.1 started by the test:
retries with backoff on transient errors, no retry on client errors, timeouts, the API key from
the named env var, JSON replies."""
import json

import pytest

from components.common.openai_client import EndpointError, OpenAIClient, parse_json_reply
from tests.paper.fake_endpoint import FakeEndpoint, logprob_choice


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
    first, meta = server.requests[0], server.meta[0]
    assert meta["path"] == "/v1/chat/completions" and meta["auth"] == "Bearer sk-test"
    assert first["model"] == "judge-model" and first["max_tokens"] == 5


def test_client_errors_are_not_retried_and_no_key_sends_no_header(endpoint, monkeypatch):
    monkeypatch.delenv("TEST_JUDGE_KEY", raising=False)
    server = endpoint((400, "bad request", 0))
    client, sleeps = _client(server.url)
    with pytest.raises(EndpointError, match="HTTP 400"):
        client.chat([{"role": "user", "content": "hi"}])
    assert len(server.requests) == 1 and sleeps == [] and server.meta[0]["auth"] is None


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
    assert server.requests[0] == {"model": client.model, "messages": messages, "reasoning_effort": "low"}


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


def test_first_token_logprobs_asks_for_one_greedy_token_and_reads_the_top_candidates(endpoint):
    top = {"7": -0.1, "70": -2.5, "CODE": -4.0}
    server = FakeEndpoint([], respond=lambda body: logprob_choice(top))
    try:
        client, _ = _client(server.url)
        assert client.first_token_logprobs([{"role": "user", "content": "score"}], top_logprobs=3) == top
    finally:
        server.close()
    body = server.requests[0]
    assert body["max_tokens"] == 1 and body["temperature"] == 0.0
    assert body["logprobs"] is True and body["top_logprobs"] == 3


def test_first_token_logprobs_names_a_server_without_logprobs(endpoint):
    server = endpoint((200, "42", 0))
    client, _ = _client(server.url)
    with pytest.raises(EndpointError, match="does the server support logprobs"):
        client.first_token_logprobs([{"role": "user", "content": "score"}])
