"""Where a model client sends, and with which key: the base URL (passed, from a variable, or the
provider's default) joined to the provider's path and shown without what may be secret, and the
key read from its variable at each call and checked before anything is sent.

    join_url("https://h/v1/", "/chat/completions") == "https://h/v1/chat/completions"
    public("https://proxy-user:pw@h/v1?api-key=x") == "https://h/v1"

A server's text that quotes what `public` leaves out is redacted too (`url_secrets`).

What an HTTP error says to check of them is here too (`status_hint`).

Left out: sending (`http`), and keys in anything but the environment.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from agentdescent.agents.redact import redact
from agentdescent.agents.replies import snippet
from agentdescent.errors import UserError


def base_url_from(explicit: str | None, env_var: str | None, default: str) -> str:
    """The base URL to use now: the one passed, else the variable `env_var` if set, else `default`."""
    return explicit or (os.environ.get(env_var, "").strip() if env_var else "") or default


def join_url(base: str, path: str) -> str:
    """`base` with `path` appended to its path, its query kept. A user name or password in it
    (user:pw@host) is refused: httpx would send them in place of the key."""
    import httpx

    try:
        url = httpx.URL(base.strip())
    except httpx.InvalidURL as exc:
        raise UserError(redact(f"bad base URL {_shown(base)!r} ({exc}); a base URL looks like https://host/v1")) from None
    if not url.scheme or not url.host:
        raise UserError(redact(f"bad base URL {public(str(url))!r}: it needs a scheme and a host, like https://host/v1"))
    if url.userinfo:
        raise UserError(f"the base URL {public(str(url))!r} carries a user name or password (user:pw@host), which "
                        "would be sent in place of the key: take them out (a proxy's go in HTTPS_PROXY)")
    return str(url.copy_with(path=url.path.rstrip("/") + "/" + path.lstrip("/")))


def public(url: str) -> str:
    """`url` without its user name and password, query and fragment: each may carry a secret
    (a URL that does not parse, a server's `Location` say, loses them all the same)."""
    import httpx

    try:
        return str(httpx.URL(url).copy_with(userinfo=b"", query=None, fragment=None))
    except (httpx.InvalidURL, TypeError, ValueError):
        return _shown(url)


def secret_param(name: str) -> bool:
    """Whether a URL's query parameter `name` looks like it carries a credential: a word of it is
    one (key, token, secret, auth, sig, code, ...) or ends as one does (apikey).
    secret_param("api-key") is True;  secret_param("api-version") is False"""
    words = re.split(r"[^a-z0-9]+", name.lower())
    return any(word in _SECRET_WORDS or word.endswith(("key", "token", "secret")) for word in words if word)


_SECRET_WORDS = frozenset({"auth", "authorization", "code", "credential", "credentials", "pass", "passwd", "password",
                           "pwd", "sig", "signature", "secret", "token"})


def url_secrets(url: str) -> dict[str, str]:
    """What `public` leaves out of `url` that is secret, as variables `redact` hides (its `env=`):
    the password, and each query value whose parameter looks like a credential (`secret_param`;
    an `api-version` is no secret, and hiding it would rewrite every date a reply holds). A
    server that echoes the request line quotes them.

    url_secrets("https://u:pw-123456@h/v1?key=k-abcdefgh") == {"BASE_URL_SECRET": "pw-123456", "BASE_URL_SECRET_2": "k-abcdefgh"}
    """
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return {}
    values = [parsed.password or "", *(value for name, value in parsed.params.multi_items() if secret_param(name))]
    values = [value for value in values if value]
    return {"BASE_URL_SECRET" + (f"_{n}" if n > 1 else ""): value for n, value in enumerate(values, 1)}


def read_key(env_var: str, client: str) -> str:
    """The key in `env_var` now, without a "Bearer " a header's copy carries (the client writes its
    own); `UserError` when it is not set, or holds what no HTTP header can carry (a line break or
    another control character, a character outside ASCII): sent, it would fail every attempt, and
    a library's error could quote it."""
    held = os.environ.get(env_var, "").strip()
    key = re.sub(r"(?i)^bearer(?:\s+|$)", "", held)
    if not key:
        state = "holds only \"Bearer\"" if held else "is not set"
        raise UserError(f"{client}: the environment variable {env_var} {state}; "
                        f"export {env_var}=... (or pass api_key_env=None for a server without auth)")
    bad = next((char for char in key if not " " <= char <= "~"), None)
    if bad is not None:
        what = "a line break" if bad in "\r\n" else "a control character" if ord(bad) < 32 or bad == "\x7f" else \
            "a character outside ASCII"
        raise UserError(f"{client}: the key in {env_var} holds {what} at position {key.index(bad) + 1}, which no "
                        f"HTTP header can carry (copied with the line after it?); set {env_var} again, the key alone")
    return key


def status_hint(status: int, location: str | None, api_key_env: str | None, url: str = "") -> str:
    """What to check after an HTTP error `status` that is no retry's business: the key (401 and
    403), the base URL the request's `url` was made of (404), or the base URL a redirect's
    `location` points to (not followed: the key would go with it); "" for any other status."""
    if status in (401, 403):
        if api_key_env is None:
            return "; the server wants a key: pass api_key_env='NAME_OF_THE_KEY_VARIABLE'"
        return f"; check {api_key_env} (read from the environment at each call)"
    if status == 404:
        path = urlsplit(url).path
        return (f"; check the model's name, and the base URL: the request went to {path or '/'}, the base URL's path with "
                "the API's own after it (an OpenAI-compatible base URL most often ends in /v1, and holds no "
                "/chat/completions)")
    if not location or not 300 <= status < 400:
        return ""
    where = snippet(public(location))
    origin = re.match(r"(?i)(https?://[^/?#\s]+)", location)
    if origin is None:
        return f"; the server redirects to {where}, on its own host: check the base URL's path"
    return f"; the server redirects to {where}: point the base URL at {snippet(public(origin.group(1)))}, " \
           "with the path your server wants (https:// where http:// was given?)"


def _shown(base: str) -> str:
    """A base URL that may not parse, without its user name, password and query all the same."""
    return re.sub(r"//[^/?#]*@", "//", base.split("?", 1)[0].split("#", 1)[0])
