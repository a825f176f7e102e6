"""The machinery every HTTP completion client shares: one JSON POST, retried, metered, bounded.

`HTTPModel` sends a prompt as a JSON POST through one `httpx.Client` per model object and turns
the answer into text. Around that one request it does what every provider needs:

- **keys** are read from the environment at call time, never stored on the object and never
  put in an error message, the repr, a log line or the usage; a missing variable is a
  `UserError` that says how to set it, and `api_key_env=None` means the server takes no key;
  every reply and every error text goes through `agentdescent.agents.redact.redact`, which
  replaces any configured key in any encoding (the server may echo it), and each call runs
  `guard_logging()` so that httpx's and httpcore's DEBUG lines (headers) stay off;
- **retries** (with `tenacity`) on 429, 500, 502, 503, 504 and 529, on transport errors
  (connection refused or reset) and on timeouts: exponential backoff with jitter, or the
  server's `Retry-After` (seconds or an HTTP date, capped at 60 s) when it sends one;
- **a body that is not JSON, lacks the expected fields or holds an empty completion** is
  retried once (it is sometimes a proxy's or an overloaded server's hiccup, and more often a
  misconfiguration, so one retry, counted within `max_retries`);
- **other 4xx** (400, 401, 403, 404, ...) are not retried: the request itself is wrong; 401 and
  403 name the key variable to check;
- **concurrency**: at most `max_concurrency` requests in flight per model object;
- **usage**: one call recorded on success (tokens from the server, else estimated) and one call
  and one failure when it fails for good, which raises `AgentError` naming the model, the URL
  (query string left out), what went wrong and the number of attempts.

Providers subclass it and fill in four hooks: `_url`, `_headers`, `_payload` and `_parse`.
Left out: streaming, tool calls, async clients, and pickling a model into another process.
"""

from __future__ import annotations

import email.utils
import logging
import math
import os
import random
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import tenacity

from agentdescent.agents.base import ModelUsage, estimate_tokens, metered_call
from agentdescent.agents.redact import guard_logging, redact, register
from agentdescent.errors import AgentError, UserError
from agentdescent.quoting import quoted

if TYPE_CHECKING:
    import httpx  # imported where a request is made: a run of local agents never pays for it

__all__ = ["RETRY_STATUSES", "BadReply", "HTTPModel", "Reply", "base_url_from", "join_url", "retry_after_seconds"]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
RETRY_AFTER_CAP = 60.0
SNIPPET_CHARS = 300
log = logging.getLogger(__name__)


class BadReply(Exception):
    """Raised by a provider's `_parse` when a 2xx body is not the answer it expects."""


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What a provider reads out of a 2xx body; tokens are None when the server reports none."""

    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None


class _Retry(Exception):
    """One attempt failed in a way that may pass on another try."""

    def __init__(self, detail: str, *, retry_after: float | None = None, once: bool = False) -> None:
        detail = redact(detail)
        super().__init__(detail)
        self.detail, self.retry_after, self.once = detail, retry_after, once


@dataclass(kw_only=True)
class _Call:
    """One call's request and its attempt counts; the key, in the headers, lives here only while
    the call runs."""

    url: str
    headers: dict[str, str] = field(repr=False)
    payload: dict[str, Any]
    attempts: int = 0
    bad_replies: int = 0


class HTTPModel:
    """A text-in, text-out model behind an HTTP JSON API; see the module docstring.

    Subclasses implement `_url()`, `_headers(key)`, `_payload(prompt)` and `_parse(data) -> Reply`
    (raising `BadReply` for a body without the answer). `backoff=(base, cap)` sets the retry
    delays in seconds: about `base * 2**n`, jittered, never above `cap`.
    """

    def __init__(self, name: str, *, api_key_env: str | None, timeout: float = 120.0, max_retries: int = 4,
                 max_concurrency: int = 8, backoff: tuple[float, float] = (0.5, 20.0)) -> None:
        if max_retries < 0 or max_concurrency < 1 or timeout <= 0:
            raise UserError("need max_retries >= 0, max_concurrency >= 1 and timeout > 0 "
                            f"(got {max_retries}, {max_concurrency}, {timeout})")
        self.name = name
        self.usage = ModelUsage()
        self.api_key_env = api_key_env
        register(api_key_env)
        self.timeout, self.max_retries, self.max_concurrency = timeout, max_retries, max_concurrency
        self.backoff = backoff
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._client_lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._jitter = random.Random()

    def __call__(self, prompt: str) -> str:
        """The model's reply to `prompt`. Raises `UserError` when misconfigured (a missing key
        variable, a URL without http://) and `AgentError` when the call fails for good. The reply
        comes back with any configured key in it redacted."""
        guard_logging()
        key = self._key()
        call = _Call(url=self._url(), headers=self._headers(key), payload=self._payload(prompt))
        with metered_call(self.usage) as counts:
            reply = self._with_retries(call)
            counts.update(input_tokens=_or_estimate(reply.input_tokens, prompt),
                          output_tokens=_or_estimate(reply.output_tokens, reply.text))
        return redact(reply.text)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, api_key_env={self.api_key_env!r})"

    def close(self) -> None:
        """Close the pooled connections; the next call opens a new client."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # The provider hooks.

    def _url(self) -> str:
        raise NotImplementedError

    def _headers(self, key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def _payload(self, prompt: str) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, data: Any) -> Reply:
        raise NotImplementedError

    # The machinery.

    def _key(self) -> str | None:
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise UserError(f"{self.name}: the environment variable {self.api_key_env} is not set; "
                            f"export {self.api_key_env}=... (or pass api_key_env=None for a server without auth)")
        return key

    def _http(self) -> httpx.Client:
        import httpx

        with self._client_lock:
            if self._client is None:
                limits = httpx.Limits(max_connections=self.max_concurrency,
                                      max_keepalive_connections=self.max_concurrency)
                timeout = httpx.Timeout(self.timeout, connect=min(10.0, self.timeout))
                self._client = httpx.Client(timeout=timeout, limits=limits)
            return self._client

    def _with_retries(self, call: _Call) -> Reply:
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1), wait=self._wait,
            retry=lambda state: _worth_retrying(state, call), before_sleep=self._log_retry, reraise=True)
        try:
            return retrying(self._attempt, call)
        except _Retry as exc:
            raise AgentError(self._failure(call, exc.detail)) from exc

    def _attempt(self, call: _Call) -> Reply:
        call.attempts += 1
        with self._slots:
            response = self._send(call)
        return self._read(response, call)

    def _send(self, call: _Call) -> httpx.Response:
        import httpx

        try:
            return self._http().post(call.url, headers=call.headers, json=call.payload)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise UserError(redact(f"{self.name}: bad URL {_public(call.url)!r} ({exc}); "
                                   "a base URL looks like https://host/v1")) from None
        except httpx.TimeoutException as exc:
            raise _Retry(f"timed out ({type(exc).__name__}, timeout {self.timeout} s)") from exc
        except httpx.TransportError as exc:  # its text may quote the server: kept only redacted
            raise _Retry(f"{type(exc).__name__}: {exc}") from None

    def _read(self, response: httpx.Response, call: _Call) -> Reply:
        status, snippet = response.status_code, _snippet(response.text)
        if status in RETRY_STATUSES:
            wait = retry_after_seconds(response.headers.get("retry-after"))
            raise _Retry(f"HTTP {status}: {snippet}", retry_after=wait)
        if not 200 <= status < 300:
            raise AgentError(self._failure(call, f"HTTP {status} (not retried): {snippet}{self._hint(status)}"))
        try:
            return self._parse(response.json())
        except ValueError:
            detail = f"the body is not JSON: {snippet}"
        except BadReply as exc:
            detail = _snippet(str(exc))
        call.bad_replies += 1
        raise _Retry(detail, once=True)

    def _hint(self, status: int) -> str:
        if status not in (401, 403):
            return ""
        if self.api_key_env is None:
            return "; the server wants a key: pass api_key_env='NAME_OF_THE_KEY_VARIABLE'"
        return f"; check {self.api_key_env} (read from the environment at each call)"

    def _failure(self, call: _Call, detail: str) -> str:
        plural = "" if call.attempts == 1 else "s"
        return redact(f"{self.name}: POST {_public(call.url)} failed after {call.attempts} attempt{plural}: {detail}")

    def _wait(self, state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Retry) and exc.retry_after is not None:
            return exc.retry_after
        base, cap = self.backoff
        delay = min(cap, base * 2 ** (state.attempt_number - 1))
        return delay / 2 + self._jitter.uniform(0, delay / 2)

    def _log_retry(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.info("%s: attempt %d failed (%s); retrying in %.2f s", self.name, state.attempt_number, exc, wait)


def _worth_retrying(state: tenacity.RetryCallState, call: _Call) -> bool:
    exc = state.outcome.exception() if state.outcome else None
    if not isinstance(exc, _Retry):
        return False
    return not exc.once or call.bad_replies <= 1


def retry_after_seconds(value: str | None, *, cap: float = RETRY_AFTER_CAP,
                        now: datetime | None = None) -> float | None:
    """The wait a `Retry-After` header asks for, in [0, cap]; None when absent or unreadable.

    retry_after_seconds("2") == 2.0;  retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0 (past)
    """
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    if math.isnan(seconds):
        return None
    return max(0.0, min(cap, seconds))


def base_url_from(explicit: str | None, env_var: str | None, default: str) -> str:
    """The base URL to use now: the one passed, else the variable `env_var` if set, else `default`."""
    return explicit or (os.environ.get(env_var, "").strip() if env_var else "") or default


def join_url(base: str, path: str) -> str:
    """`base` with `path` appended to its path, its query kept.

    join_url("https://h/v1/", "/chat/completions") == "https://h/v1/chat/completions"
    """
    import httpx

    try:
        url = httpx.URL(base.strip())
    except httpx.InvalidURL as exc:
        raise UserError(redact(f"bad base URL {base!r} ({exc}); a base URL looks like https://host/v1")) from None
    if not url.scheme or not url.host:
        raise UserError(redact(f"bad base URL {str(url.copy_with(query=None))!r}: it needs a scheme and a host, "
                               "like https://host/v1"))
    return str(url.copy_with(path=url.path.rstrip("/") + "/" + path.lstrip("/")))


def _public(url: str) -> str:
    """The URL without its query string, which may carry a secret."""
    import httpx

    return str(httpx.URL(url).copy_with(query=None, fragment=None))


def _snippet(text: str) -> str:
    """The start of a server's answer for a message, as a quote (`quoting.quoted`: keys redacted
    before the cut, whitespace collapsed, at most `SNIPPET_CHARS` characters)."""
    return quoted(text, SNIPPET_CHARS) if text.strip() else "(empty body)"


def _or_estimate(tokens: int | None, text: str) -> int:
    return tokens if isinstance(tokens, int) and tokens >= 0 else estimate_tokens(text)
