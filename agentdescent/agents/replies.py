"""What a model's reply holds, read within bounds: the bytes read before a cut-off, a compressed
body inflated a block at a time, a server's token counts believed only where a call could have
them, and the quotes of a reply that an error message shows (bounded, keys redacted).

Left out: the request, its retries and its deadline (`http`).
"""

from __future__ import annotations

import reprlib
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from agentdescent.agents.base import estimate_tokens
from agentdescent.agents.redact import redact
from agentdescent.quoting import quoted

if TYPE_CHECKING:
    import httpx

SNIPPET_CHARS = 300
INFLATE_BLOCK = 1 << 16  # bytes a compressed reply is inflated by at a time, checked against the cap between
MAX_TOKENS_A_CALL = 100_000_000  # more than any model's context: a server's count above it is not believed


def reply_byte_cap(max_reply_chars: int) -> int:
    """Reply bytes read before a cut-off: 8 a character (`\\uXXXX` JSON escapes are 6) plus 64 KiB
    of envelope. reply_byte_cap(1_000) == 73_536"""
    return 8 * max_reply_chars + 64 * 1024


def body_snippet(response: httpx.Response, body: bytes) -> str:
    """`snippet` of a body as the response's encoding reads it, else as UTF-8 (a charset that is no
    text encoding, such as `hex`, is the server's mistake)."""
    try:
        return snippet(body.decode(response.encoding or "utf-8", "replace"))
    except LookupError:  # httpx keeps any codec `codecs.lookup` finds, bytes-to-bytes ones too
        return snippet(body.decode("utf-8", "replace"))


def snippet(text: str) -> str:
    """The start of a server's answer for a message, as a quote (`quoting.quoted`: keys redacted
    before the cut, whitespace collapsed, at most `SNIPPET_CHARS` characters)."""
    return quoted(text, SNIPPET_CHARS) if text.strip() else "(empty body)"


def inflater_for(coding: str) -> Any | None:
    """A zlib inflater for a body sent in Content-Encoding `coding` (gzip or deflate, one layer),
    None for one not compressed; `ValueError` for any other (several layers, br, zstd: not read)."""
    coding = coding.strip().lower()
    if coding in ("", "identity"):
        return None
    if coding not in ("gzip", "x-gzip", "deflate"):
        raise ValueError(coding)
    return zlib.decompressobj(32 + zlib.MAX_WBITS)


def inflated(raw: Iterable[bytes], inflater: Any) -> Iterator[bytes]:
    """The body's bytes as they arrive, inflated a block at a time where `inflater` (zlib) is given."""
    for chunk in raw:
        while chunk:
            if inflater is None:
                yield chunk
                break
            yield inflater.decompress(chunk, INFLATE_BLOCK)
            chunk = inflater.unconsumed_tail


class _Glimpse(reprlib.Repr):
    """`reprlib.Repr` that redacts each string before cutting it: a key that straddles the cut
    would otherwise show its start or its end, which no pattern finds."""

    def repr_str(self, x: str, level: int) -> str:
        return super().repr_str(redact(x), level)


def glimpse(data: Any) -> str:
    """A look at a parsed reply for an error message, built bounded (a few levels and entries of
    each, the start and end of each string: a reply of millions of tiny lists is not formatted
    whole), its keys redacted."""
    look = _Glimpse()
    look.maxlevel, look.maxdict, look.maxlist, look.maxstring, look.maxother = 3, 8, 4, 120, 60
    return snippet(look.repr(data))


def plausible_tokens(tokens: Any) -> int | None:
    """A server's token count when it is one a call can have (a whole number, sent as a float too),
    else None (a count of 10**4000 would end the budget and make the run's status unreadable).
    plausible_tokens(77.0) == 77"""
    if isinstance(tokens, float) and tokens.is_integer():
        tokens = int(tokens)
    plausible = isinstance(tokens, int) and not isinstance(tokens, bool) and 0 <= tokens <= MAX_TOKENS_A_CALL
    return tokens if plausible else None


def sent_text(payload: dict[str, Any]) -> str:
    """All the text a request gives the model, which the server counts as input: the system prompt
    and every message's text (a string, or the text of its parts).
    sent_text({"system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]}) == "Be brief.\nHi"
    """
    messages = payload.get("messages")
    parts = [payload.get("system"), *(m.get("content") for m in messages if isinstance(m, dict))] \
        if isinstance(messages, list) else [payload.get("system")]
    return "\n".join(text for part in parts for text in _texts(part))


def _texts(part: Any) -> list[str]:
    if isinstance(part, str):
        return [part]
    if not isinstance(part, list):
        return []
    return [block["text"] for block in part if isinstance(block, dict) and isinstance(block.get("text"), str)]


def counted(tokens: tuple[Any, Any], sent: str, said: str | None) -> Counter[str]:
    """A reply's tokens as counts for the bill (`input_tokens`, `output_tokens`): the server's where
    plausible, else estimates from all the request sent and all the reply said (its reasoning too:
    billed as output), which `estimated_tokens` counts again; for a reply not read (`said` None), the
    server's counts only.
    counted((77.0, None), "x" * 40, "y" * 8) == Counter(input_tokens=77, output_tokens=2, estimated_tokens=2)"""
    counts: Counter[str] = Counter()
    for name, count, text in (("input_tokens", tokens[0], sent), ("output_tokens", tokens[1], said)):
        plausible = plausible_tokens(count)
        if plausible is None and text is not None:
            plausible = estimate_tokens(text)
            counts["estimated_tokens"] += plausible
        counts[name] += plausible or 0
    return counts
