"""A run's change as a patch that `git apply` takes: one section a changed file, every line ended.

A text target's file is named by its file name, a folder's files by their paths inside it, so the
patch applies in the folder those names are relative to (the text target's folder, or the target
folder itself). A file that does not end with a newline gets git's `\\ No newline at end of file`
marker; a file made or removed whole gets git's `new file` / `deleted file` line.

Left out: colouring it (`agentdescent.cli.terminal.coloured`) and applying it.
"""

from __future__ import annotations

import difflib

NO_NEWLINE = "\\ No newline at end of file\n"


def patch(before: str | dict[str, str], after: str | dict[str, str], *, name: str = "text") -> str:
    """The unified diff from `before` to `after` (a text, whose file is `name`, or a folder's
    {relative path: text}); "" when they are equal. patch("a\\n", "b\\n", name="p.md") ==
    "diff --git a/p.md b/p.md\\n--- a/p.md\\n+++ b/p.md\\n@@ -1 +1 @@\\n-a\\n+b\\n" """
    old = {name: before} if isinstance(before, str) else before
    new = {name: after} if isinstance(after, str) else after
    return "".join(_file(path, old.get(path), new.get(path)) for path in sorted(old.keys() | new.keys())
                   if old.get(path) != new.get(path))


def _file(path: str, a: str | None, b: str | None) -> str:
    head = f"diff --git a/{path} b/{path}\n"
    if a is None:
        head += "new file mode 100644\n"
    elif b is None:
        head += "deleted file mode 100644\n"
    lines = list(difflib.unified_diff(_lines(a), _lines(b), fromfile=f"a/{path}" if a is not None else "/dev/null",
                                      tofile=f"b/{path}" if b is not None else "/dev/null"))
    if " " in path:  # as git writes a name with a space: a tab ends it, so that `patch` reads it whole
        lines[:2] = [line[:-1] + "\t\n" if line[4:6] in ("a/", "b/") else line for line in lines[:2]]
    return head + "".join(_ended(line) for line in lines)


def _lines(text: str | None) -> list[str]:
    """The lines of `text`, each with its "\\n" (the last may have none); only "\\n" ends a line, as in git."""
    parts = (text or "").split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _ended(line: str) -> str:
    """A diff line as a patch holds it: a line that had no newline of its own gets one, then git's marker."""
    return line if line.endswith("\n") else line + "\n" + NO_NEWLINE
