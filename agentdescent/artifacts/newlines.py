"""Line endings, and a file's edges: a changed text keeps those of the file it changes.

A model reads a file with CRLF line endings and answers with LF ones, or a line is appended to it
with LF: written back as it came, the user's file would change on every line, or mix both, and
two changes of it could no longer merge line by line. So a text a change writes takes the line
endings of the text it replaces, where that one uses a single kind throughout (`matching`), and
its byte-order mark, which a model leaves out (`edged`). A last line break a model adds to a file
that had none stays: without it, every line appended later would change the last one, and two
such changes could not stack.

    line_ending("a\\r\\nb\\r\\n") == "\\r\\n";  line_ending("a\\nb") == "\\n";  line_ending("a") is None
    matching("a\\nb\\n", like="x\\r\\n") == "a\\r\\nb\\r\\n"
    edged("a\\nb\\n", like="\\ufeffx") == "\\ufeffa\\nb\\n"

Left out: a lone CR (no platform writes one now), and the encoding (the folder's readers decode UTF-8).
"""

from __future__ import annotations

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
    """`text`, replacing `like`, with its line endings and its byte-order mark if it had one."""
    text = matching(text, like)
    return BOM + text if like.startswith(BOM) and not text.startswith(BOM) else text
