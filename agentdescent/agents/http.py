"""The machinery every HTTP completion client shares: one JSON POST, retried, metered, bounded.

`HTTPModel` sends a prompt as a JSON POST through one `httpx.Client` per model object and turns
the answer into text. Around that one request it does what every provider needs:

- **keys** are read from the environment at each call, never stored, logged or put in a message:
  every reply and error text goes through `redact` (a server may echo a key, or the base URL's
  password and query), httpx's DEBUG lines stay off (`guard_logging`), and a missing variable
  is a `UserError` saying how to set it;
- **a deadline**: `timeout` seconds bound the whole call, retries included, from when it gets
  one of `max_concurrency` slots: a call waiting for one is not yet made, so it is neither
  billed nor logged as started. A `cutoff` its caller set (a rollout's `rollout_timeout`) ends it
  sooner, and one that gets no slot before the cutoff is never made; the stop of the run it is
  part of (`halts`) brings its deadline to that moment. Every socket wait is cut to the time left
  (`deadline`), so a server trickling its headers or body fails at the deadline too;
- **a reply cap**: the body is read as a stream (asked for uncompressed; one compressed layer is
  inflated a block at a time) and cut off past `reply_byte_cap(max_reply_chars)` bytes, and a
  longer completion than `max_reply_chars` characters fails, neither retried;
- **whole answers**: a completion stopped at its output limit (`max_tokens`), with an answer or
  none yet (a reasoning model's thinking took it all), fails, not retried, as does one a provider
  says is no finished answer (a refusal, a content filter, a provider's own stop reason);
- **retries** on 429, 500, 502, 503, 504 and 529, transport errors and connect timeouts, after the
  server's wait or jittered backoff (`waits`), while the deadline leaves time: `max_retries` of
  them, a 429 or 529 (rate limited, overloaded) past those; a body that is not JSON or holds no
  completion is retried once (a proxy's hiccup, more often a misconfiguration); other 4xx are not
  retried, and 401 and 403 name the key variable to check;
- **usage**: one call on success (tokens from the server, else estimated from all the request
  sends and all the reply holds, system prompt and reasoning included, and counted as estimated
  in `usage.estimated_tokens`), one call and one failure
  when it fails for good with an `AgentError` naming the model, the URL without its query, what
  went wrong and the attempts. A call's tokens are those of every reply the server counted for
  it: one cut at its output limit, or retried, is billed though its text is not used.

Providers fill in five hooks: `_url`, `_headers`, `_payload`, `_parse` and `_usage`. A model pickles
as its settings (the process and Ray executors send it). Left out: streaming, tool calls, async.
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentdescent import halts
from agentdescent.agents.base import ModelUsage, cutoff, metered_call
from agentdescent.agents.deadline import Deadline, bound_every_socket, timeouts
from agentdescent.agents.endpoint import public, read_key, status_hint, url_secrets
from agentdescent.agents.limits import (
    DEFAULT_MAX_REPLY_CHARS,
    DEFAULT_TIMEOUT,
    RETRY_STATUSES,
    check_backoff,
    check_counts,
    check_max_reply_chars,
    check_timeout,
    raise_hint,
)
from agentdescent.agents.redact import guard_logging, redact, register
from agentdescent.agents.replies import body_snippet, counted, inflated, inflater_for, reply_byte_cap, sent_text, snippet
from agentdescent.agents.waits import WAITED_OUT, backoff_wait, refusal, server_wait, waited_out_hint
from agentdescent.errors import AgentError, BadReply, UserError
from agentdescent.governance.text import with_lone_surrogates_replaced

if TYPE_CHECKING:  # imported where a request is made: a run of local agents never pays for it
    import httpx

__all__ = ["DEFAULT_MAX_REPLY_CHARS", "DEFAULT_TIMEOUT", "BadReply", "HTTPModel", "Reply"]

DEFAULT_OUTPUT_LIMIT = 4096  # the limit a cut reply's hint doubles when the server's own was used
log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What a provider reads out of a 2xx body; tokens are None when the server reports none."""

    text: str
    cut: str | None = None  # where the server stopped it at its output limit: its stop reason and the limit
    stopped: str | None = None  # why it is no answer otherwise (a refusal, a content filter), in words
    reasoning: str = ""  # what the model thought before its answer, billed as output though it is not the answer


class _Retry(Exception):
    """One attempt failed in a way that may pass on another try (its detail is redacted where the call's failure is told)."""

    def __init__(self, detail: str, *, retry_after: float | None = None, once: bool = False, waited_out: bool = False) -> None:
        super().__init__(detail)
        self.detail, self.retry_after, self.once, self.waited_out = detail, retry_after, once, waited_out


@dataclass(kw_only=True)
class _Call:
    """One call's request, deadline, attempts and the tokens its rejected replies cost; the key (in
    the headers) and the URL's secrets live only while it runs."""

    url: str
    headers: dict[str, str] = field(repr=False)
    payload: dict[str, Any]
    prompt: str = field(repr=False)  # all the text the request sends: what an input estimate counts
    attempts: int = 0
    bad_replies: int = 0
    waited_out: int = 0  # attempts refused with a 429 or 529: waited out, they count toward no max_retries
    deadline: float = math.inf  # time.monotonic() by which the call ends, set when it gets its first slot
    holding: bool = False  # the slot taken before the call was billed, which its first attempt uses
    out_of_time: bool = False  # a retry was refused: its wait would outlast the deadline
    cut_off: str = ""  # the caller's limit, when the deadline is its cutoff rather than `timeout`
    last: str = ""  # the answer of the last attempt that failed and was retried: what the deadline cut short
    rejected: Counter[str] = field(default_factory=Counter)  # the tokens of replies the server billed and we did not use
    halt: halts.Halt | None = field(default_factory=halts.current, repr=False)  # its run's: once it stops, no time is left

    def remaining(self) -> float:
        return 0.0 if halts.came(self.halt) else self.deadline - time.monotonic()

    def redacted(self, text: str) -> str:
        """`text` without the keys, nor the base URL's password and query values (a server may
        echo the request line)."""
        return redact(text, env=url_secrets(self.url))


class HTTPModel:
    """A text-in, text-out model behind an HTTP JSON API; see the module docstring.

    Subclasses implement `_url()`, `_headers(key)`, `_payload(prompt)` and `_parse(data) -> Reply`
    (raising `BadReply` for a body without the answer), and `_output_limit()` where they ask for
    one. `timeout` bounds a whole call, retries included; `max_reply_chars` caps its reply.
    `backoff=(base, cap)` sets the retry delays in seconds: about `base * 2**n`, jittered, at most `cap`.
    """

    spec_field: str | None = None  # the run spec's field whose options made it (runs.wiring), which a limit's hint names

    def __init__(self, name: str, *, api_key_env: str | None, timeout: float = DEFAULT_TIMEOUT,
                 max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS, max_retries: int = 4, max_concurrency: int = 8,
                 backoff: tuple[float, float] = (0.5, 20.0)) -> None:
        check_counts(max_retries, max_concurrency)
        if api_key_env is not None and (not isinstance(api_key_env, str) or not api_key_env):
            raise UserError(f"api_key_env must name an environment variable, such as 'OPENAI_API_KEY'; got {api_key_env!r}")
        self.name, self.usage, self.api_key_env = name, ModelUsage(), api_key_env
        register(api_key_env)
        self.timeout, self.max_reply_chars = check_timeout(timeout), check_max_reply_chars(max_reply_chars)
        self.max_retries, self.max_concurrency, self.backoff = max_retries, max_concurrency, check_backoff(backoff)
        self._start()

    def _start(self) -> None:
        self._slots, self._client_lock = threading.BoundedSemaphore(self.max_concurrency), threading.Lock()
        self._client: httpx.Client | None = None
        self._clock, self._jitter = Deadline(), random.Random()

    def __getstate__(self) -> dict[str, Any]:
        """Its settings and usage, for a copy in a worker process or a Ray actor, with slots and connections of its own."""
        own = ("_slots", "_client_lock", "_client", "_clock", "_jitter")  # made again where a copy is loaded
        return {key: value for key, value in self.__dict__.items() if key not in own}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        register(self.api_key_env)  # that process redacts this model's key too
        self._start()

    def __call__(self, prompt: str) -> str:
        """The model's reply to `prompt`. Raises `UserError` when misconfigured (a missing key
        variable, a URL without http://) and `AgentError` when the call fails for good, passes its
        deadline or its reply cap. The reply comes back with any configured key in it redacted."""
        guard_logging()
        key = self._key()
        # a lone surrogate (from a reply quoted back, a task's JSON escape) has no UTF-8 to be sent in
        sent = with_lone_surrogates_replaced(prompt)
        payload = self._payload(sent)
        call = _Call(url=self._url(), headers=self._headers(key), payload=payload, prompt=sent_text(payload))
        self._first_slot(call)  # before the bill: a call queued behind others (then cancelled) was never made
        try:
            with metered_call(self.usage) as counts:
                try:
                    reply, tokens = self._with_retries(call)
                finally:
                    counts.update(call.rejected)
                counts.update(call.rejected + counted(tokens, call.prompt, reply.reasoning + reply.text))
        finally:
            if call.holding:
                self._slots.release()
        return redact(with_lone_surrogates_replaced(reply.text))  # a server's JSON may escape one

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

    def _usage(self, data: Any) -> tuple[Any, Any]:  # (input, output) tokens as the reply reports them
        raise NotImplementedError

    def _output_limit(self) -> int | None:  # the most tokens a reply may hold, as asked (None: the server's own)
        return None

    # The machinery.

    def _key(self) -> str | None:
        return None if self.api_key_env is None else read_key(self.api_key_env, self.name)

    def _http(self) -> httpx.Client:
        import httpx

        with self._client_lock:
            if self._client is None:
                limits = httpx.Limits(max_connections=self.max_concurrency,
                                      max_keepalive_connections=self.max_concurrency)
                try:
                    self._client = httpx.Client(timeout=timeouts(self.timeout), limits=limits,
                                                headers={"accept-encoding": "identity"})  # see `_body`
                except (ImportError, ValueError) as exc:  # the environment's proxy: an unknown scheme, or SOCKS
                    raise UserError(redact(f"{self.name}: the proxy the environment sets (HTTPS_PROXY, HTTP_PROXY, "
                                           f"ALL_PROXY) cannot be used: {exc}; fix or unset it")) from None
                bound_every_socket(self._client, self._clock)
            return self._client

    def _first_slot(self, call: _Call) -> None:
        """Take the slot of the call's first attempt and set its deadline: `timeout` from now, or
        the `cutoff` its caller set when that comes sooner. A call that gets no slot before the
        cutoff, or its run's stop, is not made: an `AgentError`, neither billed nor sent later."""
        end = cutoff()
        left = math.inf if end is None else end.at - time.monotonic()
        if left <= 0 or not halts.acquire(self._slots, left, call.halt):
            why = f"{came} came" if (came := halts.came(call.halt)) or end is None else f"{end.why} ran out"
            raise AgentError(f"{self.name}: the call was not made: {why} before it got one of the model's "
                             f"max_concurrency={self.max_concurrency} slots")
        call.deadline, call.holding = time.monotonic() + self.timeout, True
        if end is not None and end.at < call.deadline:
            call.deadline, call.cut_off = end.at, end.why

    def _with_retries(self, call: _Call) -> tuple[Reply, tuple[Any, Any]]:
        while True:
            try:
                return self._attempt(call)
            except _Retry as exc:
                wait = self._delay(exc, call)
                if wait is None:
                    late = f"; no time left to try again within {self._deadline(call, exc.retry_after)}" \
                        f"{waited_out_hint(self.max_concurrency, self.spec_field) if exc.waited_out else ''}" \
                        if call.out_of_time else ""
                    raise AgentError(self._failure(call, exc.detail + late)) from None
                call.last = exc.detail
                log.info("%s: attempt %d failed (%s); retrying in %.2f s", self.name, call.attempts,
                         call.redacted(exc.detail), wait)
                if call.halt is None:
                    time.sleep(wait)
                elif call.halt.wait(wait):  # its run stopped meanwhile
                    raise self._past_deadline(call)

    def _delay(self, exc: _Retry, call: _Call) -> float | None:
        """Seconds before the next attempt (the server's wait, at least jittered backoff), or None for none:
        retries used up (a 429 or 529 uses none), a second bad body, or a wait that outlasts the deadline."""
        call.waited_out += exc.waited_out
        if call.attempts - call.waited_out > self.max_retries or (exc.once and call.bad_replies > 1):
            return None
        wait = max(exc.retry_after or 0.0, backoff_wait(call.attempts, self.backoff, self._jitter))
        call.out_of_time = wait >= call.remaining()
        return None if call.out_of_time else wait

    def _attempt(self, call: _Call) -> tuple[Reply, tuple[Any, Any]]:
        """One exchange in one of the `max_concurrency` slots (the first attempt's was taken with
        the call); the call's deadline bounds this thread's socket waits meanwhile."""
        call.attempts += 1
        if call.holding:
            call.holding = False
        elif not halts.acquire(self._slots, call.remaining(), call.halt):
            raise self._past_deadline(call)
        self._clock.at = call.deadline
        try:
            return self._exchange(call)
        finally:
            self._clock.at = None
            self._slots.release()

    def _exchange(self, call: _Call) -> tuple[Reply, tuple[Any, Any]]:
        """Send the request and read the whole reply within the deadline and the byte cap."""
        import httpx

        try:
            with self._http().stream("POST", call.url, headers=call.headers, json=call.payload,
                                     timeout=timeouts(max(call.remaining(), 0.001))) as response:
                body = self._body(response, call)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise UserError(redact(f"{self.name}: bad URL {public(call.url)!r} ({exc}); "
                                   "a base URL looks like https://host/v1")) from None
        except httpx.TimeoutException as exc:  # every wait but a connection attempt ends at the deadline
            if isinstance(exc, httpx.ConnectTimeout) and call.remaining() > 0:
                raise _Retry(f"the connection timed out ({type(exc).__name__})") from exc
            raise self._past_deadline(call) from None
        except httpx.TransportError as exc:  # its text may quote the server: kept only redacted
            raise _Retry(f"{type(exc).__name__}: {exc}") from None
        return self._read(response, body, call)

    def _body(self, response: httpx.Response, call: _Call) -> bytes:
        """The body's bytes, read as they come and, when the server compressed them though asked
        not to (one gzip or deflate layer at most), inflated a block at a time: an `AgentError` as
        soon as they pass the byte cap or the deadline, however small the compressed body."""
        limit, size, chunks = reply_byte_cap(self.max_reply_chars), 0, []
        coding = response.headers.get("content-encoding", "")
        try:
            inflater = inflater_for(coding)
        except ValueError:  # several layers, or br, zstd, ...
            raise AgentError(self._failure(call, f"the reply is {snippet(coding)}-encoded, which is not read (asked "
                                                 "for no encoding: a proxy in between?); not retried")) from None
        try:
            for chunk in inflated(response.iter_raw(), inflater):
                size += len(chunk)
                if size > limit:
                    raise AgentError(self._failure(call, (
                        f"the reply passed {limit:,} bytes, the cut-off for max_reply_chars={self.max_reply_chars:,} "
                        f"(8 bytes a character plus 64 KiB); not retried; "
                        f"{raise_hint('max_reply_chars', str(2 * self.max_reply_chars), self.spec_field)}")))
                if call.remaining() <= 0:
                    raise self._past_deadline(call)
                chunks.append(chunk)
        except zlib.error as exc:
            call.bad_replies += 1
            raise _Retry(f"the {coding} body does not inflate ({exc})", once=True) from None
        return b"".join(chunks)

    def _read(self, response: httpx.Response, body: bytes, call: _Call) -> tuple[Reply, tuple[Any, Any]]:
        """The reply and the tokens the server reports for it; the tokens of a reply not used are
        added to the call's `rejected` (the provider bills them all the same)."""
        status = response.status_code
        if status in RETRY_STATUSES:
            raise _Retry(f"{refusal(status)}: {body_snippet(response, body)}", retry_after=server_wait(response.headers),
                         waited_out=status in WAITED_OUT)
        if not 200 <= status < 300:
            detail = f"HTTP {status} (not retried): {body_snippet(response, body)}"
            detail += status_hint(status, response.headers.get("location"), self.api_key_env, public(call.url))
            raise AgentError(self._failure(call, detail))
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested past what the parser follows
            call.bad_replies += 1
            raise _Retry(f"the body is not JSON: {body_snippet(response, body)}", once=True) from None
        tokens = self._usage(data)
        try:
            reply = self._parse(data)
        except BadReply as exc:
            call.rejected.update(counted(tokens, call.prompt, None))
            call.bad_replies += 1
            raise _Retry(snippet(str(exc)), once=True) from None
        failed = self._unused(reply)
        if failed:
            call.rejected.update(counted(tokens, call.prompt, reply.reasoning + reply.text))
            raise AgentError(self._failure(call, failed))
        return reply, tokens

    def _unused(self, reply: Reply) -> str:
        """Why a reply the server gave in full is not the answer (cut short, too long), or ""."""
        if reply.cut is not None:
            hint = raise_hint("max_tokens", str(2 * (self._output_limit() or DEFAULT_OUTPUT_LIMIT)), self.spec_field)
            return f"the reply stopped at the output limit, {reply.cut}; {hint}: it is not the whole answer, so it " \
                   "is not used, and not retried"
        if reply.stopped is not None:
            return f"{reply.stopped}: it is not an answer to use, and not retried (the same prompt is answered so again)"
        if len(reply.text) > self.max_reply_chars:
            return f"the completion has {len(reply.text):,} characters, over max_reply_chars={self.max_reply_chars:,}; " \
                   f"not retried; {raise_hint('max_reply_chars', str(2 * len(reply.text)), self.spec_field)}"
        return ""

    def _past_deadline(self, call: _Call) -> AgentError:
        last = f"; the last answer before it: {call.last}" if call.last else ""
        return AgentError(self._failure(call, f"no complete reply within {self._deadline(call)}{last}"))

    def _deadline(self, call: _Call, wait: float | None = None) -> str:
        """The deadline, and a timeout to raise it to that would hold the call so far and the
        server's `Retry-After` wait besides."""
        if call.cut_off or halts.came(call.halt):
            return f"{halts.came(call.halt) or call.cut_off}, which ends it before its own timeout={self.timeout:g} s"
        needed = self.timeout - call.remaining() + (wait or 0.0)
        hint = raise_hint("timeout", f"{max(2 * self.timeout, math.ceil(2 * needed)):g}", self.spec_field)
        return f"the call's deadline of {self.timeout:g} s (timeout, retries included); {hint}"

    def _failure(self, call: _Call, detail: str) -> str:
        plural = "" if call.attempts == 1 else "s"
        return call.redacted(f"{self.name}: POST {public(call.url)} failed after {call.attempts} attempt{plural}: {detail}")
