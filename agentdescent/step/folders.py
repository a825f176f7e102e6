"""Folders: whether the files a change adds can sit beside a state's, found without scanning the state."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agentdescent.governance import clashes, fold


class Folders:
    """The keys of a state grouped by their folded top-level name. Only keys under the same folded
    top-level name as a new key can clash with it (`a` beside `a/b`, `Refs/x` beside `refs/y`), so
    a check looks at those few, not at the thousands of keys of a large state once per diff."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._by_top: dict[str, set[str]] = {}
        for key in keys:
            self._by_top.setdefault(_top(key), set()).add(key)

    def clash(self, after: Mapping[str, str | None]) -> str | None:
        """Why the keys `after` adds cannot sit beside the others in one folder, or None."""
        added = {k for k, text in after.items() if text is not None and k not in self._by_top.get(_top(k), ())}
        if not added:
            return None
        removed = {k for k, text in after.items() if text is None}
        near = added | {k for top in {_top(k) for k in added} for k in self._by_top.get(top, ()) if k not in removed}
        pair = next((p for p in clashes(near) if added & set(p)), None)
        if pair is None:
            return None
        return (f"{pair[0]!r} and {pair[1]!r} cannot both be in one folder "
                "(a file and a folder of one name, or one name spelt two ways)")

    def write(self, after: Mapping[str, str | None]) -> None:
        """Take `after` as written over the state: its new keys join, its deleted ones leave."""
        for key, text in after.items():
            if text is None:
                self._by_top.get(_top(key), set()).discard(key)
            else:
                self._by_top.setdefault(_top(key), set()).add(key)


def _top(key: str) -> str:
    # Folded first, then split: a name may fold to a slash (`a／b` is read as `a/b`).
    return fold(key).split("/", 1)[0]
