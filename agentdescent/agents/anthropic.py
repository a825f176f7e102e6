"""A client for Anthropic's Messages API.

    model = claude("claude-sonnet-4-5", system="Answer briefly.")
    model("What is 2 + 2?")          # POST {base}/v1/messages, returns the text blocks joined

The base URL and the key are read when a call is made. Retries (including 529, "overloaded"),
the deadline, the reply cap, concurrency and usage come from `agentdescent.agents.http`.
A reply is used only when its `stop_reason` says the answer is finished (`end_turn`,
`stop_sequence`, or none named); the thinking blocks of a model that thinks are not the answer.
Left out: streaming, tools, images, asking for extended thinking, prompt caching and message history.
"""

from __future__ import annotations

from typing import Any

from agentdescent.agents.endpoint import base_url_from, join_url
from agentdescent.agents.http import DEFAULT_MAX_REPLY_CHARS, DEFAULT_TIMEOUT, BadReply, HTTPModel, Reply
from agentdescent.agents.limits import check_sampling
from agentdescent.agents.replies import glimpse, plausible_tokens

__all__ = ["Claude", "claude"]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
# The stop reasons that end a finished answer; None for a compatible server that names none. Any
# other is no answer to use: max_tokens and model_context_window_exceeded cut it, pause_turn leaves
# it to be continued, refusal declines, tool_use asks for a tool (none is offered), and a reason
# added after this list was written is not taken for a finished answer unseen.
FINISHED = (None, "end_turn", "stop_sequence")
NOT_FINISHED = {
    "refusal": "stop_reason 'refusal': the model declined",
    "model_context_window_exceeded": "stop_reason 'model_context_window_exceeded': the prompt and the reply filled the "
                                     "model's context window, so the reply is cut; shorten the prompt (a smaller artifact, "
                                     "fewer or shorter cases) or use a model with a longer context",
    "pause_turn": "stop_reason 'pause_turn': the server paused the turn before its end (continuing one is left out)",
    "tool_use": "stop_reason 'tool_use': the model asked for a tool, and none is offered",
}


class Claude(HTTPModel):
    """A Messages-API model; build one with `claude(...)`."""

    lists_aliases = False  # its list holds dated ids: an alias it serves (claude-sonnet-4-0) is not in it

    def __init__(self, model: str, *, base_url: str | None = None, base_url_env: str | None = "ANTHROPIC_BASE_URL",
                 api_key_env: str | None = "ANTHROPIC_API_KEY", system: str | None = None, max_tokens: int = 4096,
                 temperature: float | None = None, timeout: float = DEFAULT_TIMEOUT,
                 max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS, max_retries: int = 4, max_concurrency: int = 8,
                 backoff: tuple[float, float] = (0.5, 20.0)) -> None:
        super().__init__(model, api_key_env=api_key_env, timeout=timeout, max_reply_chars=max_reply_chars,
                         max_retries=max_retries, max_concurrency=max_concurrency, backoff=backoff)
        self.base_url, self.base_url_env = base_url, base_url_env
        check_sampling(temperature, max_tokens, tokens_required=True)
        self.system, self.max_tokens, self.temperature = system, max_tokens, temperature

    def _url(self) -> str:
        base = base_url_from(self.base_url, self.base_url_env, ANTHROPIC_BASE_URL).rstrip("/")
        return join_url(base, "messages" if base.endswith("/v1") else "v1/messages")

    def models_url(self) -> str:
        """Where the server lists the models it serves (`agents.listing` asks it: no tokens spent),
        as many a page as it gives (its default page holds only 20)."""
        import httpx

        base = base_url_from(self.base_url, self.base_url_env, ANTHROPIC_BASE_URL).rstrip("/")
        return str(httpx.URL(join_url(base, "models" if base.endswith("/v1") else "v1/models")).copy_merge_params({"limit": "1000"}))

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
        thinking = "".join(block["thinking"] for block in blocks if _is_text(block, "thinking"))
        stop = data.get("stop_reason")
        # The stop reason is read before the text: a reply cut before any answer was written is that,
        # not an empty body to ask for again (it would be billed twice, and cut again).
        if stop == "max_tokens":
            thought = any(isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking") for b in blocks)
            spent = "" if text.strip() else f", {'all spent on thinking ' if thought else ''}before any answer"
            return Reply(text=text, reasoning=thinking, cut=f"stop_reason 'max_tokens' (max_tokens={self.max_tokens}){spent}")
        if stop not in FINISHED:
            said = NOT_FINISHED.get(stop) if isinstance(stop, str) else None
            return Reply(text=text, reasoning=thinking, stopped=said or f"stop_reason {glimpse(stop)}: not one that ends "
                                                                         "a finished answer (end_turn, stop_sequence)")
        if not text.strip():
            raise BadReply(f"empty completion (stop_reason={stop!r})")
        return Reply(text=text, reasoning=thinking)

    def _usage(self, data: Any) -> tuple[Any, Any]:
        usage = data["usage"] if isinstance(data, dict) and isinstance(data.get("usage"), dict) else {}
        return _input_tokens(usage), usage.get("output_tokens")

    def _output_limit(self) -> int:
        return self.max_tokens


def _is_text(block: Any, kind: str = "text") -> bool:
    """Whether `block` is a content block of this kind whose text (under the kind's name) is a str."""
    return isinstance(block, dict) and block.get("type") == kind and isinstance(block.get(kind), str)


def _input_tokens(usage: dict[str, Any]) -> int | None:
    """Input tokens, counting the ones read from or written to the prompt cache; None when none of
    the three is reported (then the client estimates them), whichever of them are.
    _input_tokens({"cache_read_input_tokens": 90}) == 90"""
    counts = [plausible_tokens(usage.get(name)) for name in ("input_tokens", "cache_creation_input_tokens",
                                                              "cache_read_input_tokens")]
    reported = [count for count in counts if count is not None]
    return sum(reported) if reported else None


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
