"""Keys never leave a client: each configured key is found in a text, however it was encoded, and
replaced by a marker that names its variable.

    redact("401: bad key sk\\u002dcanary-7f3a9c2e1b5d")  ==  "401: bad key [redacted OPENAI_API_KEY]"
    # when OPENAI_API_KEY=sk-canary-7f3a9c2e1b5d

**What is a key.** The value, read from `os.environ` at each call, of: every `api_key_env` an
HTTP client has been built with (`register`), the well-known `KEY_VARIABLES` (every provider's
in `providers`, and HF_TOKEN), and every variable whose name looks secret (`SECRET_NAME`: a
word of it is AUTH, or ends in KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL); a child process's
own variables can be added (`env=`). Values shorter than `MIN_SECRET_CHARS` are not keys, so that
`DEBUG_TOKEN=1` does not turn every "1" into a marker.

**Which forms.** A key is matched character by character, each character as itself or escaped:
JSON (`\\u002d`, `\\/`, `\\"`, `\\n`, also with the backslash doubled or more), `\\xNN`, `\\UNNNNNNNN`,
percent-encoding of its UTF-8 bytes (also double-encoded `%252d`; `+` for a space), and HTML
character references (`&#45;`, `&#x2d;`); hex digits in any case. Between two characters any run
of whitespace, invisible characters (`invisible.INVISIBLE`: control and format characters such as
zero-width spaces, bidi marks, the soft hyphen and tag characters; variation selectors; Hangul
fillers), escaped line breaks (`\\n`, `\\r`, `\\t`) and encoded ones (`%0A`, `%20`, `+`) is
accepted, so a key split by a newline, by spaces or by characters that show as nothing, at any
point, is found. The pattern for a set of keys is compiled once and cached; every repetition in it
is over a class of characters disjoint from what follows or bounded, so matching stays linear in
the text's length.

**Output.** `RedactingStream` redacts every write to a stream (the CLI prints through one).

**Logs.** `RedactingFilter` formats a record's message with its arguments, then redacts it, its
traceback and its stack (an HTTP library's record loses its URLs' user names, passwords and
queries too); `guard_logging()` puts it on this package's loggers and on httpx's and
httpcore's, and keeps httpx and httpcore at INFO or above (their DEBUG lines carry headers)
unless `AGENTDESCENT_DEBUG_HTTP=1` is set.

Left out: a key's prefix or suffix alone (a server's "sk-abc...xyz"), base64 and other
encodings, and values in files rather than the environment.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import TextIO

from agentdescent.agents.providers import KEY_VARIABLES
from agentdescent.invisible import INVISIBLE

__all__ = [
    "DEBUG_HTTP_ENV", "KEY_VARIABLES", "MARKER", "MIN_SECRET_CHARS", "SECRET_NAME", "RedactingFilter", "RedactingStream",
    "guard_logging",
    "located", "redact", "register", "secrets",
]

# a word of the name (between underscores, dots or dashes) that is AUTH or ends as a key does:
# OPENAI_API_KEY, GH_TOKEN, DB_PASSWORD, HTTP_AUTH; not GIT_AUTHOR_NAME or KEYBOARD_LAYOUT
SECRET_NAME = re.compile(r"(?:^|[_.-])(?:AUTH|AUTHORIZATION|\w*?(?:KEYS?|TOKENS?|SECRETS?|PASSWORD|PASSWD|CREDENTIALS?))(?:$|[_.-])",
                         re.IGNORECASE)
MIN_SECRET_CHARS = 8
DEBUG_HTTP_ENV = "AGENTDESCENT_DEBUG_HTTP"
MARKER = "[redacted {name}]"

_registered: set[str] = set()
_registry_lock = threading.Lock()
_BACKSLASHES = r"\\{1,7}"  # a key escaped once, or inside a string escaped again (and again)
# between two characters of a key: what a reader does not see (whitespace, and `INVISIBLE`: control
# and format characters, variation selectors, fillers), and line breaks escaped or percent-encoded
_GAP = rf"(?:[\s{INVISIBLE}]|\\{{1,7}}[nrt]|(?i:%(?:25)?(?:0[9ad]|20))|\+)*"


_SHORT_ESCAPES = {"\n": "n", "\r": "r", "\t": "t", "\b": "b", "\f": "f"}
_found: tuple[object, dict[str, str]] | None = None  # (what the keys were read from, the keys)


def register(name: str | None) -> None:
    """Count the variable `name` as holding a key from now on (an HTTP client's `api_key_env`)."""
    if name:
        with _registry_lock:
            _registered.add(name)


def secrets(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`{variable name: value}` of every key now set: the registered and well-known variables and
    those with a secret-looking name, from `os.environ` laid under `env` (a child's variables).

    Values are stripped; ones shorter than `MIN_SECRET_CHARS` are left out.
    """
    global _found
    with _registry_lock:
        named = frozenset(_registered.union(KEY_VARIABLES))
    # Reading os.environ decodes every entry (~90 us for 40 variables), and the run's journal
    # redacts every rollout from hundreds of threads: the keys read are kept while the
    # environment's raw entries (compared in C, ~2 us) and the names counted as keys are the same.
    raw = getattr(os.environ, "_data", None)
    source = (tuple(raw.items()), named) if isinstance(raw, dict) else None
    kept = _found
    if source is not None and kept is not None and kept[0] == source:
        found = dict(kept[1])
    else:
        found = _secret_values(os.environ, named)
        if source is not None:
            _found = (source, dict(found))
    if env:
        found.update(_secret_values(env, named))
    return found


def _secret_values(source: Mapping[str, str], named: frozenset[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in list(source.items()):
        value = value.strip() if isinstance(value, str) else ""
        if len(value) >= MIN_SECRET_CHARS and (name in named or SECRET_NAME.search(name)):
            found[name] = value
    return found


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` with every form of every key (see the module docstring) replaced by
    `[redacted NAME]`; `env` adds a child process's variables to `os.environ`'s. Text without a
    key comes back unchanged; so does anything that is not a string."""
    if not isinstance(text, str) or not text:
        return text
    keys = _keys(secrets(env))
    if not keys:
        return text
    pattern, names = _compiled(keys)
    return pattern.sub(lambda match: MARKER.format(name=_named(match, names)), text)


def located(text: str, env: Mapping[str, str] | None = None) -> list[tuple[str, int, int]]:
    """Where `redact` would replace a key in `text`: (variable name, start, end), in order.

    located("token: sk-canary-7f3a9c2e1b5d") == [("OPENAI_API_KEY", 7, 29)]  # with that key set
    """
    keys = _keys(secrets(env)) if isinstance(text, str) and text else ()
    if not keys:
        return []
    pattern, names = _compiled(keys)
    return [(_named(m, names), m.start(), m.end()) for m in pattern.finditer(text)]


def _keys(found: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """(value, name) pairs, one per distinct value (its first name in sorted order), longest value
    first so that a key holding another is matched whole."""
    first: dict[str, str] = {}
    for name in sorted(found):
        first.setdefault(found[name], name)
    return tuple(sorted(first.items(), key=lambda pair: (-len(pair[0]), pair[0])))


@functools.lru_cache(maxsize=32)
def _compiled(keys: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """One pattern with a named group `k<i>` for the i-th key, and the variable names by i."""
    groups = "|".join(f"(?P<k{i}>{key_pattern(value)})" for i, (value, _) in enumerate(keys))
    return re.compile(groups), tuple(name for _, name in keys)


def _named(match: re.Match[str], names: tuple[str, ...]) -> str:
    """The variable whose key `match` found: the `k<i>` group around it is the last to close."""
    group = match.lastgroup
    assert group is not None, "every alternative of the pattern is a named group"
    return names[int(group[1:])]


def key_pattern(key: str) -> str:
    """The regular expression source that finds `key` in any of the forms this module covers.

    re.fullmatch(key_pattern("sk-1"), "s k%2D\\\\u0031")  matches
    """
    return _GAP.join(_char_pattern(char) for char in key)


def _char_pattern(char: str) -> str:
    """One character: itself, or escaped as JSON, Python, a URL or HTML would escape it."""
    code = ord(char)
    forms = [re.escape(char)]
    if char in "\"\\/":
        forms.append(_BACKSLASHES + re.escape(char))
    if char in _SHORT_ESCAPES:  # a line break or tab in a key, as a repr or JSON writes it
        forms.append(_BACKSLASHES + _SHORT_ESCAPES[char])
    forms.append(_BACKSLASHES + f"(?i:{_code_escapes(code)})")
    forms.append("(?i:" + "".join(f"%(?:25)?{byte:02x}" for byte in char.encode("utf-8")) + ")")
    forms.append(f"&#(?:(?i:x)0*(?i:{code:x})|0*{code});")
    if char == " ":
        forms.append(r"\+")
    return "(?:" + "|".join(forms) + ")"


def _code_escapes(code: int) -> str:
    """What follows the backslash of an escape of the code point: u0041, U00000041, x41."""
    if code >= 0x10000:  # JSON writes a surrogate pair
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        escapes = [f"u{high:04x}{_BACKSLASHES}u{low:04x}", f"u{code:08x}"]
    else:
        escapes = [f"u{code:04x}", f"u{code:08x}"]  # u and U alike: the group ignores case
    if code < 0x100:
        escapes.append(f"x{code:02x}")
    return "|".join(escapes)


# --- logs -------------------------------------------------------------------------------------


class RedactingFilter(logging.Filter):
    """Redacts a record in place: its message formatted with its arguments, its traceback and its
    stack. Always lets the record through."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # arguments that do not fit the format: keep both, redacted
            message = f"{record.msg} {record.args!r}"
        if record.name.startswith(("httpx", "httpcore")):  # they log the URL whole, as sent
            message = _URL.sub(_url_shown, message)
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_URL = re.compile(r"\b(https?://)(?:[^\s/@\"'<>]*@)?([^\s?#\"'<>]*)([?#][^\s\"'<>]*)?")


def _url_shown(match: re.Match[str]) -> str:
    """A URL in an HTTP library's log line without its user name, password, query and fragment,
    any of which may carry a secret (`?key=...`), and saying the query was there."""
    return match.group(1) + match.group(2) + ("?[redacted query]" if match.group(3) else "")


class RedactingStream:
    """A text stream whose every write is redacted first: what a command prints (its `--json`
    records, its errors, its live progress) never shows a key. Everything else is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


_FILTER = RedactingFilter()
_HTTP_LOGGERS = ("httpx", "httpcore", "httpcore.connection", "httpcore.http11", "httpcore.http2",
                 "httpcore.proxy", "httpcore.socks")


def guard_logging() -> None:
    """Put the redacting filter on every logger of this package, httpx and httpcore that exists
    now, and unless `AGENTDESCENT_DEBUG_HTTP=1` raise httpx's and httpcore's loggers to INFO
    where they would let DEBUG through. Cheap; the clients call it on every call."""
    loggers = [logging.getLogger(name) for name in _HTTP_LOGGERS]
    loggers += _existing_loggers(("agentdescent", "httpx.", "httpcore."))
    for logger in loggers:
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    if os.environ.get(DEBUG_HTTP_ENV, "").strip() == "1":
        return
    for logger in loggers:
        if logger.name.startswith(("httpx", "httpcore")) and logger.getEffectiveLevel() < logging.INFO:
            logger.setLevel(logging.INFO)


def _existing_loggers(prefixes: Iterable[str]) -> list[logging.Logger]:
    """The loggers created so far whose names start with one of `prefixes`, parents first."""
    prefixes = tuple(prefixes)
    found = [logger for name, logger in list(logging.Logger.manager.loggerDict.items())
             if name.startswith(prefixes) and isinstance(logger, logging.Logger)]
    return sorted(found, key=lambda logger: logger.name.count("."))
