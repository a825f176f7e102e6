"""The characters a reader does not see, decided by their Unicode category: what a terminal or a
page draws as nothing, or acts on instead of drawing.

    re.findall(f"[{INVISIBLE}]", "say magicword.\\U000e0041\\u00ad")  ==  ["\\U000e0041", "\\u00ad"]

`INVISIBLE` is the source of a regular expression's character class (to stand between brackets),
of every character that is

- Cc, a control code: C0, DEL and C1 (ESC, and U+009B, which a terminal reads as ESC [);
- Cf, a format character: zero-width spaces and joiners, bidi marks, overrides and isolates, the
  soft hyphen, invisible operators, the byte-order mark, and the tag characters U+E0000-E007F,
  which spell ASCII that no one sees;
- Zl or Zp, the line and paragraph separators;
- default-ignorable in another category: the combining grapheme joiner, the variation selectors
  (U+FE00-FE0F, U+E0100-E01EF, the Mongolian ones), the Hangul fillers, the Khmer inherent vowels,
  and the code points Unicode keeps unassigned as default-ignorable (U+2065, U+FFF0-FFF8, the rest
  of U+E0000-E0FFF).

It is written out as ranges, as of Unicode 16, because finding them by category means asking for
every code point, which would slow every command's start; tests/test_quoting.py asks, and checks
the ranges against `unicodedata` in full. `agentdescent_mcp.hook` keeps a copy (it imports no part
of this package) that a test holds equal to this one.

Left out: what is done with them. `quoting` shows each as its escape, or flattens them in a quote;
`agents.redact` finds a key with any of them between its characters; `governance.text` refuses the
control codes and the tag characters in new text. Lone surrogates (Cs) are not characters a text
may hold at all (`reading.writable`).
"""

from __future__ import annotations

__all__ = ["INVISIBLE"]

INVISIBLE = (
    r"\x00-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5"
    r"\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"
    r"\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
