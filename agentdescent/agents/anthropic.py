"""A client for Anthropic's Messages API.

    model = claude("claude-sonnet-4-5", system="Answer briefly.")
    model("What is 2 + 2?")          # POST {base}/v1/messages, returns the text blocks joined

The base URL and the key are read when a call is made. Retries (including 529, "overloaded"),
the deadline, the reply cap, concurrency and usage come from `agentdescent.agents.http`.
Left out: streaming, tools, images, extended thinking, prompt caching and message history.
"""

from __future__ import annotations

from typing import Any

from agentdescent.agents.endpoint import base_url_from, join_url
from agentdescent.agents.http import DEFAULT_MAX_REPLY_CHARS, DEFAULT_TIMEOUT, BadReply, HTTPModel, Reply
from agentdescent.agents.replies import glimpse

__all__ = ["Claude", "claude"]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


class Claude(HTTPModel):
    """A Messages-API model; build one with `claude(...)`."""

    def __init__(self, model: str, *, base_url: str | None = None, base_url_env: str | None = "ANTHROPIC_BASE_URL",
                 api_key_env: str | None = "ANTHROPIC_API_KEY", system: str | None = None, max_tokens: int = 4096,
                 temperature: float | None = None, timeout: float = DEFAULT_TIMEOUT,
                 max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS, max_retries: int = 4, max_concurrency: int = 8,
                 backoff: tuple[float, float] = (0.5, 20.0)) -> None:
        super().__init__(model, api_key_env=api_key_env, timeout=timeout, max_reply_chars=max_reply_chars,
                         max_retries=max_retries, max_concurrency=max_concurrency, backoff=backoff)
        self.base_url, self.base_url_env = base_url, base_url_env
        self.system, self.max_tokens, self.temperature = system, max_tokens, temperature

    def _url(self) -> str:
        base = base_url_from(self.base_url, self.base_url_env, ANTHROPIC_BASE_URL).rstrip("/")
        return join_url(base, "messages" if base.endswith("/v1") else "v1/messages")

    def _headers(self, key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json"}
        return {**headers, "x-api-key": key} if key else headers

    def _payload(self, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.name, "max_tokens": self.max_tokens,
                                "messages": [{"role": "user", "content": prompt}]}
        if self.system:
            body["system"] = self.system
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def _parse(self, data: Any) -> Reply:
        blocks = data.get("content") if isinstance(data, dict) else None
        if not isinstance(blocks, list):
            raise BadReply(f"the reply has no content list: {glimpse(data)}")
        text = "".join(block["text"] for block in blocks if _is_text(block))
        stop = data.get("stop_reason")
        if stop == "refusal":
            return Reply(text=text, stopped="stop_reason 'refusal': the model declined")
        if not text.strip():
            raise BadReply(f"empty completion (stop_reason={stop!r}; if it is 'max_tokens', raise max_tokens)")
        cut = f"stop_reason 'max_tokens' (max_tokens={self.max_tokens})" if stop == "max_tokens" else None
        return Reply(text=text, cut=cut)

    def _usage(self, data: Any) -> tuple[Any, Any]:
        usage = data.get("usage") if isinstance(data, dict) and isinstance(data.get("usage"), dict) else {}
        return _input_tokens(usage), usage.get("output_tokens")

    def _output_limit(self) -> int:
        return self.max_tokens


def _is_text(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)


def _input_tokens(usage: dict[str, Any]) -> int | None:
    """Input tokens, counting the ones read from or written to the prompt cache."""
    counts = [usage.get(name) for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    if not isinstance(counts[0], int):
        return None
    return sum(count for count in counts if isinstance(count, int))


def claude(model: str, *, base_url: str | None = None, base_url_env: str | None = "ANTHROPIC_BASE_URL",
           api_key_env: str | None = "ANTHROPIC_API_KEY", system: str | None = None, max_tokens: int = 4096,
           temperature: float | None = None, timeout: float = DEFAULT_TIMEOUT,
           max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS, max_retries: int = 4, max_concurrency: int = 8,
           backoff: tuple[float, float] = (0.5, 20.0)) -> Claude:
    """A `prompt -> reply` model behind `POST {base}/v1/messages`.

    The base is `base_url`, else `$ANTHROPIC_BASE_URL` (read at each call), else
    https://api.anthropic.com; a base already ending in /v1 is not given a second one. The key is
    `$ANTHROPIC_API_KEY`, read at each call and sent as `x-api-key` with
    `anthropic-version: 2023-06-01`; `api_key_env=None` sends none. The reply is the `text` blocks
    of `content` joined; tokens come from the server's `usage`. `timeout` (seconds, default 300)
    bounds the whole call, retries included; `max_reply_chars` (default 1,000,000) caps the reply.
    Raises `UserError` when misconfigured and `AgentError` when the call fails for good, passes its
    deadline or its reply cap (529 "overloaded" is retried).
    """
    return Claude(model, base_url=base_url, base_url_env=base_url_env, api_key_env=api_key_env, system=system,
                  max_tokens=max_tokens, temperature=temperature, timeout=timeout, max_reply_chars=max_reply_chars,
                  max_retries=max_retries, max_concurrency=max_concurrency, backoff=backoff)
