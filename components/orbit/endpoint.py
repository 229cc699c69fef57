"""orbit's OpenAI-compatible chat call (paper profile: judge and rubric generator).

The client itself (timeouts, retries with backoff, API key from a named env var) is shared:
``components.common.openai_client``. Nothing here runs in the embedded profiles.
"""
from __future__ import annotations

from components.common.openai_client import OpenAIClient


def chat(base_url: str, model: str, messages: list[dict], api_key_env: str = "OPENAI_API_KEY",
         temperature: float = 0.0, max_tokens: int = 2048, timeout: float = 120.0) -> str:
    client = OpenAIClient(base_url, model, api_key_env=api_key_env, timeout=timeout)
    return client.chat(messages, temperature=temperature, max_tokens=max_tokens)
