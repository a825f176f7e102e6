"""Three-way text merge done by git itself (`git merge-file -p`), for rebasing diffs onto head;
and the stacking of edits that only insert lines, which git calls a conflict when they insert at
one place (two rules added at the end of one list).

    merge_text("x\\ny\\nz", "X\\ny\\nz", "x\\ny\\nZ")  ->  "X\\ny\\nZ"    (a conflict gives None)
    stack_insertions("a\\n", ["a\\nb\\n", "a\\nc\\n"])  ->  "a\\nb\\nc\\n"

Left out: conflict markers, labels and merge strategies; a conflict is reported as None and the
caller's conflict policy decides what to do. Text git cannot merge as text is a conflict too: a
NUL (git calls a file with one in its first 8,000 bytes binary and refuses it; refusing any NUL
keeps the answer from depending on where it stands) or a lone surrogate (no UTF-8 spells it).
"""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Sequence

from agentdescent.artifacts.textform import lines_of
from agentdescent.errors import LedgerError

__all__ = ["merge_text", "stack_insertions", "stacked_onto"]

SCRATCH_PREFIX = "agentdescent-merge-"  # its scratch folders in the temp folder (runs --prune knows it)
_MAX_CONFLICTS = 127  # git merge-file exits with the conflict count, capped at 127; errors are negative


def merge_text(base: str, ours: str, theirs: str) -> str | None:
    """Merge the edits base->ours and base->theirs; the merged text, or None on conflict (and for
    text that is not mergeable text: a NUL or a lone surrogate in any of the three)."""
    found = [_as_text(text) for text in (ours, base, theirs)]
    encoded = [data for data in found if data is not None]
    if len(encoded) < len(found):
        return None
    import git  # here: a module that imports this one for `stack_insertions` needs no GitPython

    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as tmp:
        paths = []
        for name, data in zip(("ours", "base", "theirs"), encoded):
            path = pathlib.Path(tmp, name)
            path.write_bytes(data)
            paths.append(str(path))
        try:
            out = git.Git(tmp).merge_file(
                "-p", *paths, stdout_as_string=False, strip_newline_in_stdout=False
            )
        except git.GitCommandError as exc:
            if isinstance(exc.status, int) and 0 < exc.status <= _MAX_CONFLICTS:
                return None
            raise LedgerError(f"git merge-file failed (exit {exc.status}): {exc.stderr}") from None
    return out.decode("utf-8")


def _as_text(text: str) -> bytes | None:
    """`text` as UTF-8 for git to merge, or None when git could not merge it as text."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return None if b"\0" in data else data


def stack_insertions(base: str, sides: Sequence[str]) -> str | None:
    """`base` with the lines each side inserts, where each only inserts whole lines (git calls two
    insertions at one place a conflict: here the first side's lines come first, and a block of
    lines a side inserts where an earlier side inserted the same block is there once), or None
    when a side does more than insert. stack_insertions("a\\n", ["a\\nb\\n", "a\\nc\\n"]) == "a\\nb\\nc\\n"

    A line is what ends at a newline (`textform.lines_of`: a form feed or U+2028 is inside one).
    Appending after a last line with no newline ends that line (stack_insertions("a", ["a\\nb\\n"])
    is "a\\nb\\n"; with "\\r\\n" where a side ends it so), but a line with no newline never runs
    into the next one: one side's "b" and another's "c" inserted in one place are a conflict (None),
    not "bc".

    Linear in the text: a side only inserts when base's lines are a subsequence of its lines, and
    matching each base line at its earliest place finds that and where the inserted lines go."""
    lines = lines_of(base)
    blocks: dict[int, list[list[str]]] = {}
    ends: list[str] = []
    for side in sides:
        inserted = _inserted(lines, lines_of(side))
        if inserted is None:
            return None
        found, end = inserted
        ends.append(end)
        for at, block in found.items():
            if block not in blocks.setdefault(at, []):
                blocks[at].append(block)
    if lines and len(lines) in blocks and not lines[-1].endswith("\n"):
        lines[-1] += next(filter(None, ends), "\n")
    out: list[str] = []
    for at in range(len(lines) + 1):
        out += [line for block in blocks.get(at, []) for line in block]
        out += lines[at:at + 1]
    if any(not line.endswith("\n") for line in out[:-1]):
        return None
    return "".join(out)


def stacked_onto(base: str, earlier: str | None, text: str | None) -> str | None:
    """A key's text once `text` joins `earlier` there, both made from `base` by inserting lines:
    both insertions; `text` itself where there is no earlier text, or either deletes the key."""
    if earlier is None or text is None:
        return text
    return stack_insertions(base, [earlier, text])


def _inserted(base: list[str], side: list[str]) -> tuple[dict[int, list[str]], str] | None:
    """The lines `side` inserts into `base`, by the index of the base line they go before, and the
    line break it ends base's last line with where that had none ("" if it does not); None when
    `side` does not hold every line of `base` in order (it changes or removes one)."""
    found: dict[int, list[str]] = {}
    at, end = 0, ""
    for line in side:
        if at < len(base) and line == base[at]:
            at += 1
        elif at == len(base) - 1 and line.startswith(base[at]) and line[len(base[at]):] in ("\n", "\r\n"):
            end = line[len(base[at]):]  # it ends base's last line
            at += 1
            found[at] = []
        else:
            found.setdefault(at, []).append(line)
    return (found, end) if at == len(base) else None
