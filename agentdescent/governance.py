"""Governance: which keys a diff may touch, and how strictly a change to them is tested.

    L0 frozen  scorer, evaluator, hooks, permission settings: no diff may touch them
    L1 gated   harness code and agent definitions: accepted only past the stricter bar
    L2 free    skills, prompts, playbooks: the normal acceptance test

A blast radius maps key patterns (fnmatch, first match wins) to a layer. Path safety is checked
here too, since a key becomes a file path in the ledger and on write-back.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from agentdescent.types import Edit

if TYPE_CHECKING:  # strategies import this module for is_frozen
    from agentdescent.artifacts.strategies import Strategy

Layer = Literal["L0", "L1", "L2"]

SKILL_BLAST_RADIUS: dict[str, Layer] = {
    "hooks/*": "L0",
    "*settings*.json": "L0",
    "*.mcp.json": "L0",
    "scripts/*": "L1",
    "*.py": "L1",
    "*.sh": "L1",
    "*": "L2",
}

HARNESS_BLAST_RADIUS: dict[str, Layer] = {
    "hooks/*": "L0",
    "*settings*.json": "L0",
    "eval*": "L0",
    "tests/*": "L0",
    "agents/*": "L1",
    "*.py": "L1",
    "*": "L2",
}


def is_frozen(key: str, patterns: Iterable[str]) -> bool:
    """Whether `key` matches one of the fnmatch `patterns`. is_frozen("hooks/pre.sh", ["hooks/*"]) is True"""
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def unsafe_key_reason(key: str) -> str | None:
    """Why `key` cannot be a relative file path, or None. unsafe_key_reason("../x") -> "... '..' ..." """
    if not key:
        return "a key must not be empty"
    if key.startswith("/") or "\\" in key or "\0" in key or (len(key) > 1 and key[1] == ":"):
        return f"key {key!r} must be a relative path with '/' separators"
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return f"key {key!r} has an empty, '.' or '..' segment"
    if any(p.lower() == ".git" for p in parts):
        return f"key {key!r} reaches into a .git folder"
    return None


@dataclass(frozen=True, kw_only=True)
class Governance:
    """The rules `admit` applies to every diff before anything else looks at it."""

    blast_radius: Mapping[str, Layer] = field(default_factory=dict)
    frozen: tuple[str, ...] = ()
    max_keys_per_diff: int | None = None
    max_bytes_per_key: int = 200_000

    def layer(self, key: str) -> Layer:
        if is_frozen(key, self.frozen):
            return "L0"
        for pattern, layer in self.blast_radius.items():
            if fnmatch.fnmatchcase(key, pattern):
                return layer
        return "L2"

    def gated(self, keys: Iterable[str]) -> bool:
        return any(self.layer(k) == "L1" for k in keys)

    @classmethod
    def of(cls, strategy: Strategy, blast_radius: Mapping[str, Layer] | None = None) -> Governance:
        """The rules for diffs of `strategy`'s artifact: its frozen keys and key cap, and `blast_radius`."""
        return cls(blast_radius=dict(blast_radius or {}), frozen=tuple(strategy.frozen),
                   max_keys_per_diff=strategy.max_keys_per_diff)

    def refusal(self, keys: Collection[str]) -> str | None:
        """Why governance refuses a diff that changes `keys`, naming the key and the rule, or None."""
        frozen = sorted(k for k in keys if self.layer(k) == "L0")
        if frozen:
            return f"touches frozen (L0) key(s) {', '.join(frozen)}; frozen files are never changed by a diff"
        if self.max_keys_per_diff is not None and len(keys) > self.max_keys_per_diff:
            return f"changes {len(keys)} keys; at most {self.max_keys_per_diff} per diff are allowed"
        return None

    def invalidity(self, edits: Sequence[Edit]) -> str | None:
        """Why a diff of `edits` is malformed (no edit, unsafe key, repeated key, oversize text), or None."""
        if not edits:
            return "the diff has no edits"
        keys = [e.key for e in edits]
        if len(set(keys)) != len(keys):
            return "the diff edits the same key twice"
        for edit in edits:
            reason = unsafe_key_reason(edit.key)
            if reason:
                return reason
            if edit.after is not None and len(edit.after.encode("utf-8")) > self.max_bytes_per_key:
                return f"key {edit.key!r} would hold more than {self.max_bytes_per_key} bytes"
        return None
