"""The lines of a diff that hold characters a reader does not see, or letters a reader takes for
others, each written out with them as escapes: what a host shows a person beside the patch, which
stays as it is so that `git apply` takes it. A bidi override makes a line read in another order than
it holds, a zero-width space splits a word a later check looks for, a Cyrillic а in "аpi" sends data
to another host than the one drawn; the person approving the line must see them.

    unseen("@@ -1 +1 @@\\n-ab\\n+a\\u200bb\\n")[0]  ==  Unseen(line=3, text="+a\\\\u200bb", chars=["\\\\u200b ZERO WIDTH SPACE"])

The characters are those `quoting.shown` escapes: `quoting.UNSHOWN`'s, every invisible character
(`invisible.INVISIBLE`) but tab, and lone surrogates; and the letters `lookalike.mistaken` finds:
those not Latin of a word that mixes scripts, one letter of which passes for a letter of the other
("\\u0430 CYRILLIC SMALL LETTER A"). Only the lines a change adds or removes count, and its headers
(the file names): a context line is the target as it was. A carriage return that ends a line is its
line ending. A line is redacted before it is escaped (a key split by zero-width spaces is still a
key), its visible stretches cut to `AROUND` characters beside each such character and the whole to
`LINE_CHARS`, so that a long paragraph shows where its one zero-width space is. `starting` picks
the entries of a part of the diff, for a page (`shown_page`).
Left out: the terminal, which escapes the whole diff as it prints it (`cli.terminal`).
"""

from __future__ import annotations

import unicodedata

from pydantic import BaseModel

from agentdescent.agents.redact import redact
from agentdescent.quoting import escaped, hidden_at

AROUND = 40  # visible characters kept either side of an unseen one
LINE_CHARS = 400  # of an entry's text
CHARS_NAMED = 8  # the distinct characters an entry names


class Unseen(BaseModel):
    """A line of a diff that holds characters a reader does not see, or letters a reader takes for others."""

    line: int  # its number in the whole diff, from 1
    text: str  # the line with each such character as its escape (\u202e), long visible stretches cut to "…"
    chars: list[str]  # what each is, once: "\u202e RIGHT-TO-LEFT OVERRIDE", "\u0430 CYRILLIC SMALL LETTER A"


def unseen(diff: str) -> list[Unseen]:
    """Every added, removed or header line of `diff` that holds a character `quoting.shown` escapes."""
    found = []
    for number, line in enumerate(diff.split("\n"), start=1):
        body = line[:-1] if line.endswith("\r") else line
        if body.startswith(" ") or not hidden_at(body):
            continue
        body = redact(body)
        at = hidden_at(body)
        if not at:  # the characters were a key's, masked with it
            continue
        text = "".join(_pieces(body, at))
        chars = list(dict.fromkeys(body[i] for i in at))
        found.append(Unseen(line=number, text=text if len(text) <= LINE_CHARS else text[:LINE_CHARS] + "…",
                            chars=[f"{escaped(c)} {_name(c)}" for c in chars[:CHARS_NAMED]]))
    return found


def _pieces(body: str, at: list[int]) -> list[str]:
    """`body` as its visible stretches, each cut to `AROUND` characters beside the characters at `at`,
    with those as escapes: _pieces("+ab\\x1bc", [3]) == ["+ab", "\\\\x1b", "c"]"""
    pieces: list[str] = []
    last = 0
    for i in at:
        stretch = body[last:i]
        pieces += [_cut(stretch, AROUND if last else 1, AROUND), escaped(body[i])]  # a line's first character is its mark
        last = i + 1
    return [*pieces, _cut(body[last:], AROUND, 0)]


def starting(diff: str, found: list[Unseen], start: int, end: int) -> list[Unseen]:
    """The entries of `found` whose line starts in diff[start:end]: a page's part of the diff."""
    first, stop = _line_at(diff, start), _line_at(diff, end)
    return [u for u in found if first <= u.line < stop]


def _line_at(diff: str, offset: int) -> int:
    """The number of the first line that starts at or after `offset`: _line_at("a\\nb\\n", 1) == 2"""
    return diff.count("\n", 0, offset) + (1 if offset == 0 or diff[offset - 1] == "\n" else 2)


def _cut(stretch: str, head: int, tail: int) -> str:
    """A visible stretch with its first `head` and last `tail` characters, the rest cut to "…": _cut("+abcdef", 1, 2) == "+…ef" """
    return stretch if len(stretch) <= head + tail + 1 else stretch[:head] + "…" + stretch[len(stretch) - tail:]


def _name(char: str) -> str:
    kinds = {"Cc": "control character", "Cs": "lone surrogate", "Cn": "unassigned, default-ignorable"}
    return unicodedata.name(char, "") or kinds.get(unicodedata.category(char), "format character")
