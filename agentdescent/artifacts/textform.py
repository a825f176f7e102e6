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
change the last one, and two such changes could not stack.

    line_ending("a\\r\\nb\\r\\n") == "\\r\\n";  line_ending("a\\nb") == "\\n";  line_ending("a") is None
    matching("a\\nb\\n", like="x\\r\\n") == "a\\r\\nb\\r\\n"
    edged("a\\nb\\n", like="\\ufeffx") == "\\ufeffa\\nb\\n"

Left out: a lone CR (no platform writes one now), and the encoding (the folder's readers decode UTF-8).
"""

from __future__ import annotations

import difflib

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


def edged(text: str, like: str) -> str:
    """`text`, replacing `like`, with its line endings, its byte-order mark if it had one, and the
    lines it kept from `like` (the same but for the blanks they end with) as `like` holds them."""
    text = matching(text, like)
    text = BOM + text if like.startswith(BOM) and not text.startswith(BOM) else text
    old, new = like.splitlines(keepends=True), text.splitlines(keepends=True)
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
