"""Layers: which keys a diff may touch, and how strictly a change to them is tested.

    L0 frozen  scorer, evaluator, hooks, permission settings: no diff may touch them
    L1 gated   harness code, agent definitions, scripts: accepted only past the stricter bar
    L2 free    skills, prompts, playbooks: the normal acceptance test

A key is L0 when it matches a frozen pattern, else the layer of the first blast-radius pattern
it matches, else L2; a key outside the editable patterns is read-only context, which no diff may
change either. Patterns are fnmatch patterns (`*` crosses `/`), matched against the key and
against its folded spelling (`paths.fold`), so a case, Unicode or look-alike variant of a frozen
path is frozen too.

Left out: whether a key is a safe path at all (`paths`), and the test a gated change must pass
(the acceptance policy and the oracle gate of the optimizer step).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, get_args

from agentdescent.errors import UserError
from agentdescent.governance import capabilities, syntax
from agentdescent.governance.launched import launched
from agentdescent.governance.paths import fold, unsafe_key_reason
from agentdescent.governance.text import MAX_FILE_BYTES, kind, refused
from agentdescent.types import Edit


class Governed(Protocol):
    """What the rules read of an artifact's strategy (`artifacts.strategies.Strategy` has it)."""

    # Read-only: a strategy may hold them as fields, attributes or properties.
    @property
    def frozen(self) -> Collection[str]: ...

    @property
    def max_keys_per_diff(self) -> int | None: ...

Layer = Literal["L0", "L1", "L2"]

# The terms a folder is shared under (LICENSE.txt, LICENSE-MIT, COPYING, NOTICE) are its owner's to
# change, never a run's: whatever a rollout scores, a diff there only rewrites the grant.
LEGAL: dict[str, Layer] = {f"{under}{name}{rest}": "L0" for under in ("", "*/") for name in ("LICENSE", "LICENCE", "COPYING", "NOTICE")
                           for rest in ("", "[.-]*")}

SKILL_BLAST_RADIUS: dict[str, Layer] = {
    **LEGAL,
    "hooks/*": "L0",
    "*/hooks/*": "L0",
    "*settings*.json": "L0",
    ".mcp.json": "L0",
    "*.mcp.json": "L0",
    "scripts/*": "L1",
    "*.py": "L1",
    "*.sh": "L1",
    "*": "L2",
}

PLUGIN_BLAST_RADIUS: dict[str, Layer] = {  # a host plugin: what runs or connects is never changed by a diff
    **LEGAL,
    "hooks/*": "L0",
    ".claude-plugin/*": "L0",  # the manifest: it may declare hooks and servers of its own
    "*settings*.json": "L0",
    ".mcp.json": "L0",
    "*.mcp.json": "L0",
    "*.lock": "L0",
    "*lock.json": "L0",
    "*lock.yaml": "L0",
    "*": "L1",  # every other change passes the strict bar, and the user's approval when there is an approver
}

HARNESS_BLAST_RADIUS: dict[str, Layer] = {  # an agent's harness, or a folder of subagent definitions
    **LEGAL,
    "hooks/*": "L0",
    "*/hooks/*": "L0",
    "*settings*.json": "L0",
    ".mcp.json": "L0",
    "*.mcp.json": "L0",
    "eval*": "L0",
    "tests/*": "L0",
    "*agents/*": "L1",  # agents/, .claude/agents/: a definition's frontmatter says its tools and permissions
    "*.md": "L1",  # a folder of definitions holds them at its root (the claude_agents layout)
    "scripts/*": "L1",
    "*.py": "L1",
    "*.sh": "L1",
    "*": "L2",
}

BLAST_RADII: dict[str, dict[str, Layer]] = {  # a spec's blast_radius by name
    "skill": SKILL_BLAST_RADIUS, "harness": HARNESS_BLAST_RADIUS, "plugin": PLUGIN_BLAST_RADIUS}


def not_layers(blast_radius: object) -> str:
    """What is wrong with a `blast_radius`, or "" when it maps patterns to layers (or is None)."""
    if blast_radius is None:
        return ""
    if not isinstance(blast_radius, Mapping):
        return f"is a {type(blast_radius).__name__}, not a mapping"
    bad = next(((k, v) for k, v in blast_radius.items() if not isinstance(k, str) or v not in get_args(Layer)), None)
    return "" if bad is None else f"maps {str(bad[0])[:40]!r} to {str(bad[1])[:20]!r}, which is not L0, L1 or L2"


def matching(key: str, patterns: Iterable[str]) -> str | None:
    """The first of `patterns` that `key`, or its folded spelling, matches; None when none does.
    matching("Hooks/pre.sh", ["hooks/*"]) == "hooks/*" """
    folded = fold(key)
    return next((p for p in patterns if fnmatch.fnmatchcase(key, p) or fnmatch.fnmatchcase(folded, fold(p))), None)


def is_frozen(key: str, patterns: Iterable[str]) -> bool:
    """Whether `key` matches one of the frozen `patterns`. is_frozen("hooks/pre.sh", ["hooks/*"]) is True"""
    return matching(key, patterns) is not None


@dataclass(frozen=True, kw_only=True)
class Governance:
    """The rules `admit` applies to every diff before anything else looks at it."""

    blast_radius: Mapping[str, Layer] = field(default_factory=dict)
    frozen: tuple[str, ...] = ()
    editable: tuple[str, ...] = ("*",)
    max_keys_per_diff: int | None = None
    max_bytes_per_key: int = MAX_FILE_BYTES
    names: Mapping[str, str] = field(default_factory=dict)  # a key by the file it is (SingleSlot's "prompt": prompt.md)
    started: tuple[str, ...] = ()  # the files the folder's hooks and servers start (`launched`): L0
    left_out: Callable[[str], bool] | None = None  # a key the run did not read (`FileTree.is_left_out`): L0
    files: bool = True  # keys are files, whose syntax a change keeps (`syntax`); a playbook's (`folder` False) are not

    @classmethod
    def of(cls, strategy: Governed, blast_radius: Mapping[str, Layer] | None = None) -> Governance:
        """The rules for diffs of `strategy`'s artifact: its frozen and editable keys, its key cap,
        and `blast_radius` (a mistyped layer is an error: taken as L2, it would free what it meant to
        guard); with a blast radius, the files its hooks and servers start are frozen too."""
        wrong = not_layers(blast_radius)
        if wrong:
            raise UserError(f"blast_radius {wrong}: give a mapping of key patterns to layers, such as "
                            '{"hooks/*": "L0", "*.py": "L1", "*": "L2"} (L0 frozen, L1 gated, L2 free), or '
                            "agentdescent.governance.SKILL_BLAST_RADIUS")
        state = strategy.initial_state() if blast_radius and hasattr(strategy, "initial_state") else {}
        return cls(blast_radius=dict(blast_radius or {}), frozen=tuple(strategy.frozen),
                   editable=tuple(getattr(strategy, "editable", ("*",))),
                   max_keys_per_diff=strategy.max_keys_per_diff, started=tuple(launched(state)),
                   left_out=getattr(strategy, "is_left_out", None), names=dict(getattr(strategy, "names", {})),
                   files=bool(getattr(strategy, "folder", True)))

    def rule(self, key: str) -> tuple[Layer, str]:
        """The layer of `key` and the rule that puts it there, in words."""
        frozen = matching(key, self.frozen)
        if frozen is not None:
            return "L0", f"frozen {frozen!r}"
        if self.left_out is not None and self.left_out(key):
            return "L0", ("left out of the run (excluded, not text, or where load_tree never reads: build/, dist/, "
                          "caches, `*~` and other litter), so not its to write; a new file needs a name load_tree reads")
        started = matching(key, self.started)
        if started is not None:
            return "L0", f"started by the folder's hooks or servers ({started!r}), frozen as they are"
        for pattern, layer in self.blast_radius.items():
            if matching(key, [pattern]) is not None:
                return layer, f"blast radius {pattern!r} -> {layer}"
        return "L2", "the default layer"

    def layer(self, key: str) -> Layer:
        return self.rule(key)[0]

    def gated(self, keys: Iterable[str]) -> bool:
        return any(self.layer(k) == "L1" for k in keys)

    def refusal(self, keys: Collection[str]) -> str | None:
        """Why governance refuses a diff that changes `keys`, naming the key and the rule, or None."""
        frozen = [f"{k} ({rule})" for k in sorted(keys) for layer, rule in [self.rule(k)] if layer == "L0"]
        if frozen:
            return f"touches frozen (L0) key(s) {', '.join(frozen)}; frozen files are never changed by a diff"
        read_only = sorted(k for k in keys if matching(k, self.editable) is None)
        if read_only:
            return (f"changes read-only context {', '.join(read_only)}: not matched by the editable patterns "
                    f"{list(self.editable)}")
        if self.max_keys_per_diff is not None and len(keys) > self.max_keys_per_diff:
            return f"changes {len(keys)} keys; at most {self.max_keys_per_diff} per diff are allowed"
        return None

    def capability_refusal(self, edits: Sequence[Edit]) -> str | None:
        """Why no diff may make `edits` under layered governance (a blast radius): one changes what a
        skill, agent or command may run or connect to (`capabilities`); None otherwise."""
        return capabilities.refusal(edits) if self.blast_radius else None

    def changeable(self, keys: Iterable[str]) -> list[str]:
        """Those of `keys` a diff may change alone (not frozen, editable), in their order."""
        return [k for k in keys if self.refusal([k]) is None]

    def named(self, key: str) -> str:
        """`key` as messages name it: the file it is, where the strategy says (`names`), quoted.
        Governance(names={"prompt": "prompt.md"}).named("prompt") == "'prompt.md'" """
        return repr(self.names.get(key, key))

    def too_big(self, state: Mapping[str, str]) -> list[tuple[str, int]]:
        """The keys of `state` a diff may change that already hold more than `max_bytes_per_key`
        (no change to them could be admitted), each with its size in bytes, in key order."""
        sizes = {key: len(text.encode("utf-8", "surrogatepass")) for key, text in state.items()}
        return [(key, sizes[key]) for key in self.changeable(sorted(state)) if sizes[key] > self.max_bytes_per_key]

    def invalidity(self, edits: Sequence[Edit]) -> str | None:
        """Why a diff of `edits` is malformed (no edit, unsafe key, repeated key, text that is not
        valid Unicode or is oversize, a file it leaves unreadable: `unreadable`), or None."""
        if not edits:
            return "the diff has no edits"
        keys = [e.key for e in edits]
        if len(set(keys)) != len(keys):
            return "the diff edits the same key twice"
        for edit in edits:
            reason = unsafe_key_reason(edit.key)
            if reason:
                return reason
            if edit.after is None:
                continue
            try:
                size = len(edit.after.encode("utf-8"))
            except UnicodeEncodeError:
                return f"the new text of {self.named(edit.key)} is not valid Unicode (it holds a lone surrogate)"
            had = {found[0] for found in refused(edit.before or "")}  # a file that holds one already (a page break,
            bad = next((found for found in refused(edit.after) if found[0] not in had), None)  # colours) may keep it
            if bad:
                return (f"the new text of {self.named(edit.key)} holds the {kind(bad[0])} U+{ord(bad[0]):04X} at character "
                        f"{bad.start()}; text may hold tabs and line breaks, not terminal or binary control codes, nor "
                        "tag characters, which spell text no one sees")
            if size > self.max_bytes_per_key:
                return (f"{self.named(edit.key)} would hold {size:,} bytes, over the {self.max_bytes_per_key:,} "
                        "one file may hold")
        return self.unreadable(edits)

    def broken(self, key: str, before: str | None, after: str | None) -> str | None:
        """How `after` leaves the file `key` unreadable (`syntax.breakage`), naming it; None when it
        does not, or when keys are no files (a playbook's)."""
        found = syntax.breakage(key, before, after) if self.files else None
        return f"{self.named(key)} {found}" if found else None

    def unreadable(self, edits: Sequence[Edit]) -> str | None:
        """Why `edits` leave a file unreadable that was readable before them (`syntax`: a `.py` file
        that no longer compiles, a subagent's frontmatter that no longer parses), or None."""
        return syntax.unreadable(edits, self.named) if self.files else None
