"""Three-way text merge done by git itself (`git merge-file -p`), for rebasing diffs onto head.

    merge_text("x\\ny\\nz", "X\\ny\\nz", "x\\ny\\nZ")  ->  "X\\ny\\nZ"    (a conflict gives None)

Left out: conflict markers, labels and merge strategies; a conflict is reported as None and the
caller's conflict policy decides what to do. Text git cannot merge as text is a conflict too: a
NUL (git calls a file with one in its first 8,000 bytes binary and refuses it; refusing any NUL
keeps the answer from depending on where it stands) or a lone surrogate (no UTF-8 spells it).
"""

from __future__ import annotations

import pathlib
import tempfile

import git

from agentdescent.errors import LedgerError

__all__ = ["merge_text"]

_MAX_CONFLICTS = 127  # git merge-file exits with the conflict count, capped at 127; errors are negative


def merge_text(base: str, ours: str, theirs: str) -> str | None:
    """Merge the edits base->ours and base->theirs; the merged text, or None on conflict (and for
    text that is not mergeable text: a NUL or a lone surrogate in any of the three)."""
    encoded = [_as_text(text) for text in (ours, base, theirs)]
    if None in encoded:
        return None
    with tempfile.TemporaryDirectory(prefix="agentdescent-merge-") as tmp:
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
