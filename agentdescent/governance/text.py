"""What text may hold: the one door every model reply, proposal and new file text passes first.

Text may hold tab, newline and carriage return, and no other control code: C0, DEL, and C1
(U+0080-U+009F, where U+009B is a terminal's CSI and U+009D its OSC, as ESC [ and ESC ] are); nor
a tag character (U+E0000-U+E007F), which spells ASCII that no one sees, but in the three flags
spelled with them (England, Scotland, Wales). `CONTROL_CODES` finds both; its one-character
matches are what is refused (`refused`). Every other invisible character (an emoji's joiner and
variation selector among them) is text, shown as its escape where a person reads it
(`quoting.shown`). A container of texts (a model's reply, file blocks in prose) is held only to no
NUL (`NUL_ONLY`), since the texts read out of it meet `CONTROL_CODES` at admission. No text may
hold a lone surrogate: no UTF-8 spells it. One file, or one key of an artifact, holds at most
`MAX_FILE_BYTES` of UTF-8: what a run reads of a text target and of each file of a folder, and
what admission lets a change's new text hold, so that whatever a run starts from, a change to it
can be made. Left out: what the text means.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

MAX_FILE_BYTES = 1_000_000  # one file or key, in bytes of UTF-8
_TAGS = "\U000e0000-\U000e007f"
# A subdivision flag is a black flag, its region's code in tag characters, and a cancel tag; these three
# are the ones Unicode recommends for general use. A flag's match is longer than one character: kept.
_FLAGS = "\U0001f3f4(?:" + "|".join("".join(chr(0xE0000 + ord(c)) for c in code) for code in ("gbeng", "gbsct", "gbwls")) + ")\U000e007f"
CONTROL_CODES = re.compile(f"{_FLAGS}|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_TAGS}]")
NUL_ONLY = re.compile("\x00")
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, any code point here is an unpaired surrogate


def text_refusal(text: str, *, cap: int, controls: re.Pattern[str] = CONTROL_CODES, what: str = "proposal") -> str | None:
    """Why `text` is refused before any parsing (longer than `cap` characters, not valid Unicode,
    a character `controls` refuses), or None. Each check is one linear pass.

    text_refusal("a\\x00b", cap=10) == "the proposal holds control character U+0000 at character 1" """
    if len(text) > cap:
        return f"the {what} is {len(text):,} characters; at most {cap:,} are read"
    bad = _SURROGATE.search(text)
    if bad:
        return f"the {what} is not valid Unicode: it holds a lone surrogate (U+{ord(bad[0]):04X}) at character {bad.start()}"
    bad = next(refused(text, controls), None)
    if bad:
        return f"the {what} holds {kind(bad[0])} U+{ord(bad[0]):04X} at character {bad.start()}"
    return None


def refused(text: str, controls: re.Pattern[str] = CONTROL_CODES) -> Iterator[re.Match[str]]:
    """Each character of `text` that `controls` refuses, in order (a flag it matches is kept)."""
    return (found for found in controls.finditer(text) if len(found[0]) == 1)


def kind(char: str) -> str:
    """What a refused character is, for a message: kind("\\x1b") == "control character" """
    return "invisible tag character" if "\U000e0000" <= char <= "\U000e007f" else "control character"


def with_lone_surrogates_replaced(text: str) -> str:
    """`text` with each lone surrogate as U+FFFD, the character a UTF-8 reader shows for bytes it
    cannot read: what a model may be sent or be said to have answered.

    with_lone_surrogates_replaced("a\\ud800b") == "a\\ufffdb" """
    return _SURROGATE.sub("\ufffd", text)

