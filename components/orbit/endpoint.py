"""A minimal OpenAI-compatible chat client (paper profile: judge and rubric generator).

Plain ``urllib`` so that no SDK is needed; the endpoint is whatever the user points it at
(vLLM, a hosted API). Nothing here runs in the embedded profiles.
"""
from __future__ import annotations

import json
import os
import urllib.request


def chat(base_url: str, model: str, messages: list[dict], api_key_env: str = "OPENAI_API_KEY",
         temperature: float = 0.0, max_tokens: int = 2048, timeout: float = 120.0) -> str:
    body = json.dumps({"model": model, "messages": messages, "temperature": temperature,
                       "max_tokens": max_tokens}).encode()
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(api_key_env, "")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(f"{base_url.rstrip('/')}/chat/completions", data=body, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())["choices"][0]["message"]["content"]
