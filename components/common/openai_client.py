"""A small OpenAI-compatible chat client for judges and generators (paper profiles).

Plain ``urllib`` (no SDK): the endpoint is whatever the user points it at (a local vLLM or
SGLang server, a hosted API). Requests time out; transient failures (connection errors,
timeouts, HTTP 408/409/429/5xx) are retried with exponential backoff; the API key is read
from a named environment variable, never from the config. ``chat_json`` parses a JSON reply,
tolerating the code fences and prose that models wrap around it.
"""
from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class EndpointError(RuntimeError):
    """The endpoint failed after all retries, or answered something that is not a chat reply."""


@dataclass(frozen=True)
class OpenAIClient:
    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 120.0
    max_retries: int = 4
    backoff: float = 1.0          # seconds before the first retry; doubles each time
    sleep: Callable[[float], None] = time.sleep

    def chat(self, messages: list[dict[str, str]], temperature: float = 0.0, max_tokens: int = 2048,
             **extra: Any) -> str:
        """The assistant message's text of one chat completion."""
        text, _ = self.chat_with_usage(messages, temperature=temperature, max_tokens=max_tokens, **extra)
        return text

    def chat_with_usage(self, messages: list[dict[str, str]], **body: Any) -> tuple[str, dict[str, Any]]:
        """(text, the reply's ``usage``: prompt/completion token counts, {} if the server sends
        none) of one chat completion; ``body`` goes to the server as given (temperature, ...)."""
        reply = self._post("/chat/completions", {"model": self.model, "messages": messages, **body})
        try:
            return reply["choices"][0]["message"]["content"], dict(reply.get("usage") or {})
        except (KeyError, IndexError, TypeError, AttributeError):
            raise EndpointError(f"{self.base_url}: reply has no choices[0].message.content: "
                                f"{json.dumps(reply)[:200]}") from None

    def first_token_logprobs(self, messages: list[dict[str, str]], top_logprobs: int = 20,
                             **body: Any) -> dict[str, float]:
        """{token: logprob} of the top candidates for the reply's first token (greedy, one token:
        OpenAI's ``logprobs``/``top_logprobs``). Judges that score by the probability mass on
        number tokens (Betley et al.'s 0-100 scores) read these instead of a sampled reply."""
        reply = self._post("/chat/completions", {"model": self.model, "messages": messages, "max_tokens": 1,
                                                 "temperature": 0.0, "logprobs": True,
                                                 "top_logprobs": top_logprobs, **body})
        try:
            top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            return {str(t["token"]): float(t["logprob"]) for t in top}
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            raise EndpointError(f"{self.base_url}: reply has no choices[0].logprobs.content[0].top_logprobs "
                                f"(does the server support logprobs?): {json.dumps(reply)[:200]}") from None

    def chat_json(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        """``chat`` whose reply must contain one JSON value (object or array)."""
        return parse_json_reply(self.chat(messages, **kwargs))

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _post(self, route: str, body: dict[str, Any]) -> Any:
        url = f"{self.base_url.rstrip('/')}{route}"
        data = json.dumps(body).encode()
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.sleep(self.backoff * 2 ** (attempt - 1))
            request = urllib.request.Request(url, data=data, headers=self._headers())
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as err:
                last = f"HTTP {err.code}: {err.read()[:200].decode(errors='replace')}"
                if err.code not in RETRY_STATUS:
                    raise EndpointError(f"{url}: {last}") from None
            except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError) as err:
                last = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
            except json.JSONDecodeError as err:
                raise EndpointError(f"{url}: reply is not JSON ({err.msg})") from None
        raise EndpointError(f"{url}: failed after {self.max_retries + 1} attempts ({last})")


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_json_reply(text: str) -> Any:
    """The JSON value in a model's reply: the whole text, a fenced block, or the first
    ``{...}`` / ``[...]`` span. Raises ``ValueError`` quoting the reply when there is none."""
    candidates = [text.strip()] + [m.strip() for m in _FENCE.findall(text)]
    for opener, closer in ("{}", "[]"):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start:end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    raise ValueError(f"no JSON value in the reply: {text[:200]!r}")
