"""A changed text keeps what the file it changes had: its line endings, its byte-order mark, and
the lines a model gave back unchanged as the file holds them.

A model reads a file with CRLF line endings and answers with LF ones, or a line is appended to it
with LF: written back as it came, the user's file would change on every line, or mix both, and
two changes of it could no longer merge line by line. So a text a change writes takes the line
endings of the text it replaces, where that one uses a single kind throughout (`matching`), its
byte-order mark, which a model leaves out, and each line the model gave back unchanged but for
the blanks it ended with, as the file held it (`edged`, by aligning the lines: in Markdown two
trailing spaces break a line, and a line that changes nothing must not show as changed). A last line
break a model adds to a file that had none stays: without it, every line appended later would
change the last one, and two such changes could not stack. A line is what ends at a newline
(`lines_of`): str.splitlines also breaks at a form feed, U+0085, U+2028 and others a line may hold.
Lines added to a text go after its last line of text, so that its trailing blank lines stay last
(`appended`, `inserted`).

    line_ending("a\\r\\nb\\r\\n") == "\\r\\n";  line_ending("a\\nb") == "\\n";  line_ending("a") is None
    matching("a\\nb\\n", like="x\\r\\n") == "a\\r\\nb\\r\\n"
    edged("a\\nb\\n", like="\\ufeffx") == "\\ufeffa\\nb\\n"
    lines_of("a\\r\\nb\\u2028c") == ["a\\r\\n", "b\\u2028c"]
    appended("a\\r\\n\\r\\n", ["b"]) == "a\\r\\nb\\r\\n\\r\\n"
    in_form_of("\\ufeffa\\nb\\n", like="x\\r\\n") == "a\\r\\nb\\r\\n"

A file whose line endings or mark the user changed after a run read it (or that Python's
`read_text` gave the run with LF for CRLF) takes the run's text in the file's form (`in_form_of`).

Left out: a lone CR (no platform writes one now), and the encoding (the folder's readers decode UTF-8).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

BOM = "\ufeff"


def line_ending(text: str | None) -> str | None:
    """"\\r\\n" or "\\n" where every line break of `text` is that one; None for none or a mix."""
    if not text or "\n" not in text:
        return None
    crlf = text.count("\r\n")
    if crlf == text.count("\n"):
        return "\r\n"
    return "\n" if crlf == 0 else None


def final_break(text: str) -> str:
    """The line break `text` ends with ("\\r\\n", "\\n"), or "" for none."""
    return "\r\n" if text.endswith("\r\n") else "\n" if text.endswith("\n") else ""


def matching(text: str, like: str | None) -> str:
    """`text` with the line endings of `like`, where `like` uses one kind throughout; else as it is."""
    ending = line_ending(like)
    if ending is None or line_ending(text) == ending:
        return text
    lf = text.replace("\r\n", "\n")
    return lf if ending == "\n" else lf.replace("\n", "\r\n")


def in_form_of(text: str, like: str) -> str:
    """`text` with the line endings of `like` (where it uses one kind) and with a byte-order mark
    exactly when `like` has one: what the disk's file `like` holds, `text` written in its form."""
    bare = matching(text, like).removeprefix(BOM)
    return BOM + bare if like.startswith(BOM) else bare


def edged(text: str, like: str) -> str:
    """`text`, replacing `like`, with its line endings, its byte-order mark if it had one, and the
    lines it kept from `like` (the same but for the blanks they end with) as `like` holds them."""
    text = matching(text, like)
    text = BOM + text if like.startswith(BOM) and not text.startswith(BOM) else text
    old, new = lines_of(like), lines_of(text)
    held, bare = set(old), {line.rstrip() for line in old}
    if not any(line not in held and line.rstrip() in bare for line in new):  # nothing to give back: no matching
        return text
    kept = difflib.SequenceMatcher(None, [line.rstrip() for line in old], [line.rstrip() for line in new],
                                   autojunk=False)
    return "".join("".join(map(_kept, old[i1:i2], new[j1:j2]) if tag == "equal" else new[j1:j2])
                   for tag, i1, i2, j1, j2 in kept.get_opcodes())


def _kept(old: str, new: str) -> str:
    """A line the file held, given back: as the file held it, with a line break where the new one
    has one and the file's, its last, had none."""
    return old if final_break(old) or not final_break(new) else old + final_break(new)


def lines_of(text: str) -> list[str]:
    """`text`'s lines, each with its line break, broken at newlines only."""
    found = [line + "\n" for line in text.split("\n")]
    found[-1] = found[-1][:-1]
    return found if found[-1] else found[:-1]


def text_end(lines: Sequence[str]) -> int:
    """The index after the last of `lines` that holds more than blanks; 0 when none does."""
    return next((at + 1 for at in range(len(lines) - 1, -1, -1) if lines[at].strip()), 0)


def inserted(lines: Sequence[str], at: int, new: Sequence[str]) -> list[str]:
    """`lines` with the lines `new` before `lines[at]`, each ended with the line break of the
    nearest line before them that has one (after them where none before has one; else "\\n"),
    which the line before them gets too where it had none: nothing else of `lines` changes."""
    if not new:
        return list(lines)
    near = [*reversed(lines[:at]), *lines[at:]]
    end = next((final_break(line) for line in near if final_break(line)), "\n")
    before = [*lines[:at]]
    if before and not final_break(before[-1]):
        before[-1] += end
    return before + [line.replace("\r\n", "\n").replace("\n", end) + end for line in new] + [*lines[at:]]


def appended(text: str, new: Sequence[str]) -> str:
    """`text` with the lines `new` after its last line of text (`inserted`): its blank lines stay last."""
    lines = lines_of(text)
    return "".join(inserted(lines, text_end(lines), new))
