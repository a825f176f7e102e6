"""The Claude Code marketplace of the user's own, named agentdescent, that `install --force` replaced
with ours: a record of its source as Claude Code knows it, and the arguments of `claude plugin
marketplace add` that add it back.

The record lies beside our marketplace folder (`claude-code-replaced.json`), not only in this
AGENTDESCENT_HOME: uninstall under another home finds our folder from Claude Code's own record of
it, and the user's marketplace from there. Left out: running `claude` (`claude_code` does).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentdescent import atomic

# what `claude plugin marketplace add` can say of a source: {kind: (its argument's field, the other fields)}
_ADDABLE = {"github": ("repo", {"ref", "sparsePaths", "skipLfs"}), "git": ("url", {"ref", "sparsePaths", "skipLfs"}),
            "url": ("url", set()), "directory": ("path", set()), "file": ("path", set())}


def record(folder: Path) -> Path:
    return folder.parent / "claude-code-replaced.json"


def keep(folder: Path, source: dict[str, Any], plugins: list[str]) -> None:
    """Record `source` as the user's marketplace that ours in `folder` replaced, and the `plugins`
    installed from it: replacing it uninstalls them, and uninstall takes out ours, which may share a name with one."""
    atomic.write_text(record(folder), json.dumps({"source": source, "plugins": plugins}))


def plugins(folder: Path) -> list[str]:
    """The plugins that were installed from the user's marketplace when ours replaced it."""
    found = _recorded(folder).get("plugins")
    return [p for p in found if isinstance(p, str)] if isinstance(found, list) else []


def replaced(folder: Path) -> dict[str, Any] | None:
    """The source of the user's marketplace that ours in `folder` replaced, if one did."""
    found = _recorded(folder).get("source")
    return found if isinstance(found, dict) else None


def _recorded(folder: Path) -> dict[str, Any]:
    """The record beside `folder`; empty when there is none, or it cannot be read."""
    try:
        found = json.loads(record(folder).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def move(old: Path, folder: Path) -> None:
    """Carry the record from our folder under another home (`old`) to `folder`."""
    theirs = replaced(old)
    if theirs is not None:
        keep(folder, theirs, plugins(old))
    record(old).unlink(missing_ok=True)


def add_args(source: dict[str, Any]) -> list[str] | None:
    """The arguments of `claude plugin marketplace add` that add `source` again, None when they
    cannot say all of it: {"source": "github", "repo": "o/r", "ref": "v1"} -> ["o/r#v1"]."""
    kind = source.get("source")  # the user's file: a list or an object there is no kind we add
    field, others = _ADDABLE.get(kind, ("", set())) if isinstance(kind, str) else ("", set())
    where, ref, sparse = source.get(field), source.get("ref"), source.get("sparsePaths") or []
    if not field or not isinstance(where, str) or not where or set(source) - {"source", field, *others}:
        return None
    if not isinstance(ref, str | None) or not isinstance(sparse, list) or not all(isinstance(p, str) for p in sparse):
        return None
    return [f"{where}#{ref}" if ref else where, *(["--sparse", *sparse] if sparse else [])]


def shown(source: dict[str, Any]) -> str:
    """`source` as the user would add it, or as Claude Code records it when no command says it."""
    args = add_args(source)
    return " ".join(args) if args else json.dumps(source)
