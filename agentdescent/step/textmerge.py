"""Three-way text merge done by git itself (`git merge-file -p`), for rebasing diffs onto head.

    merge_text("x\\ny\\nz", "X\\ny\\nz", "x\\ny\\nZ")  ->  "X\\ny\\nZ"    (a conflict gives None)

Left out: conflict markers, labels and merge strategies; a conflict is reported as None and the
caller's conflict policy decides what to do.
"""

from __future__ import annotations

import pathlib
import tempfile

import git

from agentdescent.errors import LedgerError

__all__ = ["merge_text"]

_MAX_CONFLICTS = 127  # git merge-file exits with the conflict count, capped at 127; errors are negative


def merge_text(base: str, ours: str, theirs: str) -> str | None:
    """Merge the edits base->ours and base->theirs; the merged text, or None on conflict."""
    with tempfile.TemporaryDirectory(prefix="agentdescent-merge-") as tmp:
        paths = []
        for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
            path = pathlib.Path(tmp, name)
            path.write_bytes(text.encode("utf-8"))
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
