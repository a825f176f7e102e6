"""What text may hold: the one door every model reply, proposal and new file text passes first.

Text may hold tab, newline and carriage return, and no other C0 control code nor DEL
(`CONTROL_CODES`); a container of texts (a model's reply, file blocks in prose) is held only to
no NUL (`NUL_ONLY`), since the texts read out of it meet `CONTROL_CODES` at admission. No text
may hold a lone surrogate: no UTF-8 spells it. One file, or one key of an artifact, holds at most
`MAX_FILE_BYTES` of UTF-8: what a run reads of a text target and of each file of a folder, and
what admission lets a change's new text hold, so that whatever a run starts from, a change to it
can be made. Left out: what the text means.
"""

from __future__ import annotations

import re

MAX_FILE_BYTES = 1_000_000  # one file or key, in bytes of UTF-8
CONTROL_CODES = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
NUL_ONLY = re.compile("\x00")
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, any code point here is an unpaired surrogate


def text_refusal(text: str, *, cap: int, controls: re.Pattern[str] = CONTROL_CODES, what: str = "proposal") -> str | None:
    """Why `text` is refused before any parsing (longer than `cap` characters, not valid Unicode,
    a control character `controls` matches), or None. Each check is one linear pass.

    text_refusal("a\\x00b", cap=10) == "the proposal holds control character U+0000 at character 1" """
    if len(text) > cap:
        return f"the {what} is {len(text):,} characters; at most {cap:,} are read"
    bad = _SURROGATE.search(text)
    if bad:
        return f"the {what} is not valid Unicode: it holds a lone surrogate (U+{ord(bad[0]):04X}) at character {bad.start()}"
    bad = controls.search(text)
    if bad:
        return f"the {what} holds control character U+{ord(bad[0]):04X} at character {bad.start()}"
    return None


def with_lone_surrogates_replaced(text: str) -> str:
    """`text` with each lone surrogate as U+FFFD, the character a UTF-8 reader shows for bytes it
    cannot read: what a model may be sent or be said to have answered.

    with_lone_surrogates_replaced("a\ud800b") == "a\ufffdb" """
    return _SURROGATE.sub("\ufffd", text)

