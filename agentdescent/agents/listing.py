"""Whether a model's server takes its key and serves its model, asked before a run pays: one
`GET` of the server's list of models, which spends no tokens and is counted on no bill.

    listed(openai_compatible("gpt-4o-mini"))   # Listing(outcome="listed", message="listed by https://...")

The client's own pieces make the request: its list's URL (`models_url`: `{base_url}/models`,
Anthropic's `/v1/models`), its key read from its variable as a call reads it, and its headers
(`Authorization: Bearer` for an OpenAI-compatible server, `x-api-key` and `anthropic-version` for
Anthropic's); every text said is redacted as a call's is. What the answer means:

- "listed": a list that holds the model (Ollama's `name:latest` for `name` too);
- "refused" (an error): 401 or 403, the key variable named;
- "absent" (an error): a list without the model, its close names named; a list that may leave it
  out (Anthropic's holds dated ids, not the aliases it serves; a list with more pages) says so
  as "unlisted" instead;
- "not_found": 404, the path asked named (some servers list no models);
- "unlisted": any other answer, a body with no `data` list, or no answer at all;
- "bad_url" (an error): a base URL no request can be made to; "no_key": the key variable is not
  set here, so nothing was asked.

Left out: the chat call itself (a model listed may still refuse a prompt), and the pages after the first.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from agentdescent.agents.endpoint import public, url_secrets
from agentdescent.agents.redact import guard_logging, redact
from agentdescent.agents.replies import snippet
from agentdescent.errors import UserError

if TYPE_CHECKING:
    from agentdescent.agents.http import HTTPModel

__all__ = ["LISTING_TIMEOUT", "Listing", "listed"]

LISTING_TIMEOUT = 10.0  # seconds for the whole exchange: a list is small, and a hung server must not hold plan up
BODY_CAP = 16 * 2**20  # bytes of a list read at most
SHOWN_CLOSE = 10
Outcome = Literal["listed", "refused", "absent", "not_found", "unlisted", "bad_url", "no_key"]


@dataclass(frozen=True)
class Listing:
    """What the server's list says of one model, in words fit for a plan (redacted)."""

    outcome: Outcome
    message: str

    @property
    def error(self) -> bool:
        """Whether the run would fail: the key refused, the model not served, a URL no call can use."""
        return self.outcome in ("refused", "absent", "bad_url")


def listed(client: HTTPModel, *, timeout: float = LISTING_TIMEOUT) -> Listing:
    """Ask `client`'s server for its list of models (one GET, no retry) and say what it holds of `client.name`."""
    import httpx

    guard_logging()
    try:
        key = client._key()
    except UserError as exc:
        return Listing("no_key", f"not asked: {exc}")
    try:
        url = client.models_url()  # type: ignore[attr-defined]
    except UserError as exc:
        return Listing("bad_url", str(exc))
    shown, secrets = public(url), url_secrets(url)
    headers = {**client._headers(key), "accept-encoding": "identity"}
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as http, \
                http.stream("GET", url, headers=headers) as response:
            body = _capped(response)
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        return Listing("bad_url", redact(f"bad URL {shown!r} ({exc}); a base URL looks like https://host/v1", env=secrets))
    except (httpx.HTTPError, ValueError, ImportError) as exc:  # ValueError, ImportError: the environment's proxy
        return Listing("unlisted", redact(f"GET {shown} got no answer ({type(exc).__name__}: {snippet(str(exc))}); "
                                          "the model is not checked", env=secrets))
    found = _listing(client, response.status_code, body, shown)
    return Listing(found.outcome, redact(found.message, env=secrets))


def _capped(response: object) -> bytes | None:
    """The body, or None past `BODY_CAP` bytes."""
    chunks, size = [], 0
    for chunk in response.iter_bytes():  # type: ignore[attr-defined]
        size += len(chunk)
        if size > BODY_CAP:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _listing(client: HTTPModel, status: int, body: bytes | None, shown: str) -> Listing:
    name = client.name
    if status in (401, 403):
        fix = f"check {client.api_key_env}" if client.api_key_env else "the server wants a key: set the agent's api_key_env"
        return Listing("refused", f"GET {shown}: HTTP {status}, the key was refused; {fix}")
    if status == 404:
        return Listing("not_found", f"GET {shown}: HTTP 404, no list of models at {urlsplit(shown).path or '/'}, so "
                                    f"{name!r} is not checked (some servers list none); if calls fail too, check the base "
                                    "URL: it holds the API's root (most often ending in /v1), which the client adds "
                                    "/models or /chat/completions to")
    ids, more = _ids(body) if 200 <= status < 300 else (None, False)
    if ids is None:
        why = f"HTTP {status}" if not 200 <= status < 300 else "a body with no list of models in `data`"
        return Listing("unlisted", f"GET {shown}: {why}: the server does not list its models, so {name!r} is not checked")
    if name in ids or f"{name}:latest" in ids:
        return Listing("listed", f"{name!r} is listed by {shown}")
    close = difflib.get_close_matches(name, sorted(ids), n=SHOWN_CLOSE, cutoff=0.4)
    names = f"close names: {', '.join(close)}" if close else f"none is close to it (it lists {', '.join(sorted(ids)[:SHOWN_CLOSE])}...)"
    if more or not getattr(client, "lists_aliases", True):
        left_out = "more pages than the first" if more else "the aliases it serves"
        return Listing("unlisted", f"{name!r} is not among the {len(ids)} models {shown} lists, which leaves out "
                                   f"{left_out}: check the name ({names})")
    return Listing("absent", f"{name!r} is not among the {len(ids)} models {shown} lists; {names}; fix the model's name")


def _ids(body: bytes | None) -> tuple[set[str] | None, bool]:
    """The model ids of an OpenAI-style list (`{"data": [{"id": ...}, ...]}`), None for a body that
    is none; and whether the body says more pages follow (Anthropic's `has_more`)."""
    try:
        parsed = json.loads(body) if body is not None else None
    except (ValueError, RecursionError):
        return None, False
    data = parsed.get("data") if isinstance(parsed, dict) else None
    if not isinstance(data, list):
        return None, False
    ids = {item["id"] for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)}
    return ids or None, isinstance(parsed, dict) and parsed.get("has_more") is True
