"""A client for any server that speaks OpenAI's chat-completions API (OpenAI, DeepSeek, vLLM, ...).

    model = openai_compatible("gpt-4o-mini", system="Answer briefly.")
    model("What is 2 + 2?")          # POST {base}/chat/completions, returns the reply text

    deepseek()                       # the same against api.deepseek.com with DEEPSEEK_API_KEY

The base URL and the key are read when a call is made, so exporting them after building the
model works. Retries, the deadline, the reply cap, concurrency and usage come from `agentdescent.agents.http`.
A reply is used only when its `finish_reason` says the answer is finished (`stop`, its
end-of-sequence variants `eos` and `eos_token`, `tool_calls`, `function_call`, or none named).
A reasoning model served without a reasoning parser (vLLM, llama.cpp, Ollama) writes its reasoning
into the reply as a `<think>...</think>` block first; the client answers with what follows it.
Left out: streaming, tools, images, and more than one message of history.
"""

from __future__ import annotations

from typing import Any

from agentdescent.agents.endpoint import base_url_from, join_url
from agentdescent.agents.http import DEFAULT_MAX_REPLY_CHARS, DEFAULT_TIMEOUT, BadReply, HTTPModel, Reply
from agentdescent.agents.limits import check_sampling
from agentdescent.agents.replies import glimpse
from agentdescent.quoting import quoted

__all__ = ["OpenAICompatible", "deepseek", "openai_compatible"]

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEEPSEEK_BASE_URL = "https://api.deepseek.com"
# The finish reasons that end a finished answer: OpenAI's own, None for a server that names none,
# and the end-of-sequence names some servers send for "stop" (Together's "eos", older TGI's
# "eos_token"). Any other is no answer to use: "length" cuts it, "content_filter" filters it,
# vLLM's "abort" and others' "error" end it unfinished, and a reason added after this list was
# written is not taken for a finished answer unseen.
FINISHED = (None, "stop", "eos", "eos_token", "tool_calls", "function_call")
NOT_FINISHED = {
    "abort": "finish_reason 'abort': the server dropped the request before its answer was finished (vLLM does when "
             "it aborts one; the server's log says why)",
    "error": "finish_reason 'error': the server failed while writing the answer (the server's log or status page says why)",
}


class OpenAICompatible(HTTPModel):
    """A chat-completions model; build one with `openai_compatible(...)` or `deepseek(...)`."""

    def __init__(self, model: str, *, base_url: str | None = None, base_url_env: str | None = "OPENAI_BASE_URL",
                 default_base_url: str = OPENAI_BASE_URL, api_key_env: str | None = "OPENAI_API_KEY",
                 system: str | None = None, temperature: float | None = None, max_tokens: int | None = None,
                 extra_body: dict[str, Any] | None = None, timeout: float = DEFAULT_TIMEOUT,
                 max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS, max_retries: int = 4, max_concurrency: int = 8,
                 backoff: tuple[float, float] = (0.5, 20.0)) -> None:
        super().__init__(model, api_key_env=api_key_env, timeout=timeout, max_reply_chars=max_reply_chars,
                         max_retries=max_retries, max_concurrency=max_concurrency, backoff=backoff)
        self.base_url, self.base_url_env, self.default_base_url = base_url, base_url_env, default_base_url
        check_sampling(temperature, max_tokens)
        self.system, self.temperature, self.max_tokens = system, temperature, max_tokens
        self.extra_body = dict(extra_body or {})

    def _url(self) -> str:
        return join_url(base_url_from(self.base_url, self.base_url_env, self.default_base_url), "chat/completions")

    def models_url(self) -> str:
        """Where the server lists the models it serves (`agents.listing` asks it: no tokens spent)."""
        return join_url(base_url_from(self.base_url, self.base_url_env, self.default_base_url), "models")

    def _headers(self, key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _payload(self, prompt: str) -> dict[str, Any]:
        messages = [{"role": "system", "content": self.system}] if self.system else []
        body: dict[str, Any] = {"model": self.name, "messages": [*messages, {"role": "user", "content": prompt}]}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return {**body, **self.extra_body}

    def _parse(self, data: Any) -> Reply:
        choices = data.get("choices") if isinstance(data, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not isinstance(message, dict):
            raise BadReply(f"the reply has no choices[0].message: {glimpse(data)}")
        content = _content_text(message.get("content"))
        text = without_reasoning(content)
        reasoning = _reasoning_text(message) + content[:len(content) - len(text)]  # a raw <think> block too
        finish, refusal = choice.get("finish_reason"), message.get("refusal")
        if isinstance(refusal, str) and refusal.strip() and not text.strip():
            return Reply(text="", stopped=f"the model refused: {quoted(refusal, 200)}")
        # A reason to stop is read before the text: a reply cut or filtered before any answer was
        # written is that, not an empty body to ask for again (it would be billed twice, and cut again).
        if finish == "length":
            return Reply(text=text, reasoning=reasoning, cut=self._cut(text, reasoning or _reasoning_tokens(data)))
        if finish == "content_filter":
            how = "ended it part-way" if text.strip() else "withheld the whole reply"
            return Reply(text=text, reasoning=reasoning, stopped=f"finish_reason 'content_filter': the provider's filter {how}")
        if finish not in FINISHED:
            said = NOT_FINISHED.get(finish) if isinstance(finish, str) else None
            return Reply(text=text, reasoning=reasoning, stopped=said or f"finish_reason {glimpse(finish)}: not one that "
                                                                         "ends a finished answer (stop, eos, tool_calls)")
        if not text.strip() and finish in ("tool_calls", "function_call"):  # asked again, it would ask again
            return Reply(text="", reasoning=reasoning,
                         stopped=f"finish_reason {finish!r}: the model asked for a tool, and none is offered")
        if not text.strip():
            held = "; its reasoning held text, its answer none" if reasoning.strip() else ""
            raise BadReply(f"empty completion (finish_reason={finish!r}){held}")
        return Reply(text=text, reasoning=reasoning)

    def _cut(self, text: str, reasoned: object) -> str:
        """Where a reply stopped at its output limit, and what the limit went on when no answer came."""
        asked = self._output_limit()
        limit = f"{asked} tokens" if asked else "the server's default limit"
        if text.strip():
            return f"finish_reason 'length' ({limit})"
        return f"finish_reason 'length' ({limit}), {'all spent on reasoning ' if reasoned else ''}before any answer"

    def _usage(self, data: Any) -> tuple[Any, Any]:
        usage = data["usage"] if isinstance(data, dict) and isinstance(data.get("usage"), dict) else {}
        return usage.get("prompt_tokens"), usage.get("completion_tokens")

    def _output_limit(self) -> int | None:
        asked = self.max_tokens or self.extra_body.get("max_completion_tokens")
        return asked if isinstance(asked, int) else None


def without_reasoning(text: str) -> str:
    """The answer without the reasoning a model served raw writes before it: everything through
    the first `</think>` where the reply opens with `<think>`, or holds a `</think>` and no
    `<think>` (a chat template that opens the block in the prompt, as DeepSeek-R1's does). Read
    as the answer, the reasoning fails an exact match, and its drafts of rules or file blocks
    would be taken for the proposal.
    without_reasoning("<think>It is 4.</think>\n\n4") == "4"
    """
    end = text.find("</think>")
    if end < 0 or not (text.lstrip().startswith("<think>") or "<think>" not in text):
        return text
    return text[end + len("</think>"):].lstrip()


def _reasoning_text(message: dict[str, Any]) -> str:
    """The reasoning a server with a reasoning parser sends beside the answer: `reasoning_content`
    (DeepSeek, vLLM) or `reasoning` (OpenRouter, Ollama, newer vLLM)."""
    said = message.get("reasoning_content") or message.get("reasoning")
    return said if isinstance(said, str) else ""


def _reasoning_tokens(data: dict[str, Any]) -> int:
    """The reasoning tokens `usage` reports (OpenAI's reasoning models send no reasoning text), or 0."""
    usage = data.get("usage")
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    count = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def _content_text(content: Any) -> str:
    """A message's text: the string itself, or the text parts of a list joined.

    _content_text([{"type": "text", "text": "a"}, {"type": "image_url"}, {"text": "b"}]) == "ab"
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [part for part in content if isinstance(part, dict) and part.get("type", "text") in ("text", "output_text")]
    return "".join(part["text"] for part in parts if isinstance(part.get("text"), str))


def openai_compatible(model: str, *, base_url: str | None = None, base_url_env: str | None = "OPENAI_BASE_URL",
                      api_key_env: str | None = "OPENAI_API_KEY", system: str | None = None,
                      temperature: float | None = None, max_tokens: int | None = None,
                      timeout: float = DEFAULT_TIMEOUT, max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS,
                      max_retries: int = 4, max_concurrency: int = 8, extra_body: dict[str, Any] | None = None,
                      backoff: tuple[float, float] = (0.5, 20.0)) -> OpenAICompatible:
    """A `prompt -> reply` model behind `POST {base}/chat/completions`.

    The base is `base_url`, else `$OPENAI_BASE_URL` (read at each call), else
    https://api.openai.com/v1; it is used as given (no /v1 added), trailing slash stripped. The key
    is `$OPENAI_API_KEY`, read at each call and sent as `Authorization: Bearer ...`;
    `api_key_env=None` sends none. `system`, `temperature` and `max_tokens` are sent only when set;
    `extra_body` is merged into the request last (so it can override, e.g.
    `{"max_completion_tokens": 512}` for models that want it). The reply is
    `choices[0].message.content`; tokens come from the server's `usage`, else are estimated.
    `timeout` (seconds, default 300) bounds the whole call, retries included; `max_reply_chars`
    (default 1,000,000) caps the reply, whose body is cut off past 8 bytes a character plus
    64 KiB. Raises `UserError` when misconfigured and `AgentError` when the call fails for good,
    passes its deadline or its reply cap.
    """
    return OpenAICompatible(model, base_url=base_url, base_url_env=base_url_env, api_key_env=api_key_env,
                            system=system, temperature=temperature, max_tokens=max_tokens, extra_body=extra_body,
                            timeout=timeout, max_reply_chars=max_reply_chars, max_retries=max_retries,
                            max_concurrency=max_concurrency, backoff=backoff)


def deepseek(model: str = "deepseek-chat", *, base_url: str | None = None,
             base_url_env: str | None = "DEEPSEEK_BASE_URL", api_key_env: str | None = "DEEPSEEK_API_KEY",
             **options: Any) -> OpenAICompatible:
    """`openai_compatible` against DeepSeek: base `$DEEPSEEK_BASE_URL` else https://api.deepseek.com,
    key `$DEEPSEEK_API_KEY`. Takes the same keyword options (`system`, `timeout`, `max_reply_chars`, ...)."""
    return OpenAICompatible(model, base_url=base_url, base_url_env=base_url_env, default_base_url=DEEPSEEK_BASE_URL,
                            api_key_env=api_key_env, **options)
