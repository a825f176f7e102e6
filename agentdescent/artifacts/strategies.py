"""Strategies: how an artifact is held as a flat `{key: text}` state, rendered, and changed.

A strategy decides what a key is, so it decides which concurrent proposals can fuse and which
must conflict. It knows nothing of the ledger or the aggregator; frozen files are declared here
and enforced by governance, whose pattern match (`is_frozen`) it shares.

    SingleSlot   one key; every proposal appends a line to it, so concurrent proposals conflict
                 (a line it holds but for case and punctuation is a duplicate)
    AppendRules  a playbook; one key per rule, named by its content hash: different rules fuse,
                 identical ones deduplicate
    KeyedRules   one key per category; proposals "category: text"; conflict within a category
    FileTree     files as keys (a skill folder); proposals are <file path="..."> blocks
                 (`fileblocks` reads them)

Proposals are model output, so they are checked at the door before anything parses them
(`governance.text.text_refusal`: a size cap, valid Unicode, no control character the artifact
cannot hold), and
every reader here runs in time linear in the proposal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from agentdescent.artifacts.fileblocks import files_of, misread
from agentdescent.artifacts.playbook import Page, holds_rule, rule_key
from agentdescent.artifacts.state import State
from agentdescent.artifacts.textform import appended, edged, matching
from agentdescent.artifacts.tree import left_out as tree_left_out
from agentdescent.errors import InvalidProposal, UserError
from agentdescent.governance import clashes, is_frozen, unsafe_key_reason
from agentdescent.governance.syntax import unreadable
from agentdescent.governance.text import CONTROL_CODES, MAX_FILE_BYTES, NUL_ONLY, text_refusal
from agentdescent.quoting import quoted
from agentdescent.types import Edit


@runtime_checkable
class Strategy(Protocol):
    """How an artifact is represented and changed.

    - `initial_state()` is the state before any change (a fresh dict each call).
    - `render(state)` is what `run` receives: a `str`, or for `FileTree` a `{path: text}` mapping.
      A custom one may return other data; `EvolveResult.to_json` keeps only what JSON gives back
      as it is (lists, numbers, dicts with text keys).
    - `edits_for(state, proposal)` turns one proposal (the text `propose` returned) into edits of
      `state`. It raises `InvalidProposal` with a reason when the proposal is unusable; it may
      return edits that change nothing (the aggregator records those as duplicates).
    - `frozen` lists key patterns (fnmatch) that no diff may touch.
    - `editable` lists the key patterns a diff may change (frozen wins); the others are read-only.
    - `max_keys_per_diff` caps how many keys one diff may change (None: no cap).
    - `key_space(state)`, optional: the keys a diff of `state` may change, for `parallel="tp"` to
      deal out to workers; None when they cannot be known in advance (AppendRules' rules).
    - `kind` is the strategy's stable name: checkpoints, reports and resumes know it by this, never
      by its class's name. `folder` says whether `render` gives a tree of files, and `named_keys`
      whether a key means something to a reader (shown beside a diff) or is only an id.

    The six attributes are only read, so they are read-only properties here: a class attribute
    (`editable = ("*",)`), an instance's attribute or a frozen dataclass's field fits each.
    """

    @property
    def kind(self) -> str: ...
    @property
    def folder(self) -> bool: ...
    @property
    def named_keys(self) -> bool: ...
    @property
    def frozen(self) -> tuple[str, ...]: ...
    @property
    def editable(self) -> tuple[str, ...]: ...
    @property
    def max_keys_per_diff(self) -> int | None: ...

    def initial_state(self) -> State: ...

    def render(self, state: Mapping[str, str]) -> Any: ...

    def edits_for(self, state: Mapping[str, str], proposal: str) -> list[Edit]: ...


MAX_PROPOSAL_CHARS = 20_000  # a rule, a line or a category's entry: 20x the longest rule a reflector keeps
MAX_TREE_PROPOSAL_CHARS = 2 * MAX_FILE_BYTES  # whole files: twice what one file may hold


def _clean(proposal: str, *, cap: int = MAX_PROPOSAL_CHARS, controls: re.Pattern[str] = CONTROL_CODES) -> str:
    """The proposal, stripped, once it passed the door; InvalidProposal with the reason if not."""
    reason = text_refusal(proposal, cap=cap, controls=controls)
    if reason:
        raise InvalidProposal(reason)
    text = proposal.strip()
    if not text:
        raise InvalidProposal("the proposal is empty")
    return text


class SingleSlot:
    """One block of text (a system prompt). A proposal is a line appended to it, above its trailing
    blank lines. `name`, when the text is a file's, is what messages call the key (prompt.md, not "prompt")."""

    kind = "SingleSlot"
    folder = False
    named_keys = True
    frozen: tuple[str, ...] = ()
    editable: tuple[str, ...] = ("*",)
    max_keys_per_diff: int | None = 1

    def __init__(self, initial_value: str = "", *, key: str = "prompt", name: str | None = None) -> None:
        self.initial_value = initial_value
        self.key = key
        self.names = {key: name} if name else {}

    def initial_state(self) -> State:
        return {self.key: self.initial_value}

    def render(self, state: Mapping[str, str]) -> str:
        return state.get(self.key, "")

    def key_space(self, state: Mapping[str, str]) -> list[str]:
        return [self.key]

    def edits_for(self, state: Mapping[str, str], proposal: str) -> list[Edit]:
        """The line goes after the text's last line of text (`textform.appended`), so that it only
        inserts: lines appended at once stack (`step.textmerge.stack_insertions`). A line the text
        holds but for case, punctuation and blanks changes nothing, as a rule of `AppendRules`
        proposed again does (`playbook.holds_rule`)."""
        line = _clean(proposal)
        before = state.get(self.key, "")
        if holds_rule(before, line):
            return [Edit(key=self.key, before=before, after=before)]
        return [Edit(key=self.key, before=before, after=appended(before, [line]))]


class AppendRules:
    """A playbook of independent rules, rendered as a bulleted list in an optional header's text
    (whose own bullets are rules too).

    A proposal is a rule to add, "remove: <rule>" to drop an existing one, or
    "replace: <rule> => <new rule>" to reword one (a rule too broad, narrowed)."""

    kind = "AppendRules"
    folder = False
    named_keys = False
    frozen: tuple[str, ...] = ()
    editable: tuple[str, ...] = ("*",)
    max_keys_per_diff: int | None = None

    def __init__(self, initial_rules: Iterable[str] = (), *, header: str = "", tail: str = "") -> None:
        """`header` then `tail` are the page the rules are kept in, given back byte for byte but
        where a rule changed; its own bullets are rules too, before `initial_rules` (`playbook.Page`)."""
        self.header, self.tail = header, tail
        self.page = Page(header + tail)
        self.initial_rules = [*self.page.rules, *(r.strip() for r in initial_rules if r.strip())]

    @classmethod
    def under(cls, text: str) -> AppendRules:
        """A playbook kept in `text` (a prompt file), whose bullets are its first rules, which a
        rendering changes only where a run added, removed or reworded a rule."""
        return cls(header=text)

    def initial_state(self) -> State:
        state: State = {}
        for rule in self.initial_rules:
            state.setdefault(rule_key(rule), rule)  # the page's own wording of a rule wins
        return state

    def render(self, state: Mapping[str, str]) -> str:
        return self.page.render(state)

    def key_space(self, state: Mapping[str, str]) -> None:
        """Unknown in advance: a rule's key is the hash of a rule not yet written."""
        return None

    def edits_for(self, state: Mapping[str, str], proposal: str) -> list[Edit]:
        """A proposal is a rule to add, "remove: <rule>" to drop one that misleads, or
        "replace: <rule> => <new rule>" to reword one."""
        rule = _clean(proposal).removeprefix("- ").strip()
        verb, _, target = rule.partition(":")
        verb = verb.strip().lower()
        if verb in ("remove", "replace"):
            old, arrow, new = target.partition("=>")
            key = rule_key(old)
            if key not in state:
                raise InvalidProposal(f"there is no rule {quoted(old.strip(), 80)} to {verb}")
            if verb == "remove":
                return [Edit(key=key, before=state[key], after=None)]
            new = new.strip()
            if not arrow or not new:
                raise InvalidProposal("a replacement reads \"replace: <rule> => <new rule>\"")
            if rule_key(new) == key:
                return [Edit(key=key, before=state[key], after=state[key])]
            return [Edit(key=key, before=state[key], after=None),
                    Edit(key=rule_key(new), before=state.get(rule_key(new)), after=state.get(rule_key(new), new))]
        key = rule_key(rule)
        return [Edit(key=key, before=state.get(key), after=state.get(key, rule))]


class KeyedRules:
    """One entry per category; a proposal "category: text" replaces that category's entry
    ("category:" with no text clears it)."""

    kind = "KeyedRules"
    folder = False
    named_keys = True
    frozen: tuple[str, ...] = ()
    editable: tuple[str, ...] = ("*",)
    max_keys_per_diff: int | None = None

    def __init__(self, categories: Sequence[str] | Mapping[str, str]) -> None:
        initial = dict(categories) if isinstance(categories, Mapping) else dict.fromkeys(categories, "")
        if not initial:
            raise UserError("KeyedRules needs at least one category, e.g. KeyedRules(['tone', 'format'])")
        bad = [c for c in initial if not re.fullmatch(r"[\w.-]+", c)]
        if bad:
            raise UserError(f"KeyedRules categories must be single words; got {bad!r}")
        self.categories = initial

    def initial_state(self) -> State:
        return dict(self.categories)

    def key_space(self, state: Mapping[str, str]) -> list[str]:
        return list(self.categories)

    def render(self, state: Mapping[str, str]) -> str:
        order = list(self.categories) + sorted(set(state) - set(self.categories))
        return "\n".join(f"{c}: {state[c]}" for c in order if state.get(c, "").strip())

    def edits_for(self, state: Mapping[str, str], proposal: str) -> list[Edit]:
        named, sep, text = _clean(proposal).partition(":")
        if not sep:
            raise InvalidProposal(f"expected 'category: text', got {quoted(proposal, 80)}")
        named = named.strip().strip("*_`#- ")
        category = next((c for c in self.categories if c.lower() == named.lower()), None)
        if category is None:
            known = ", ".join(self.categories)
            raise InvalidProposal(f"unknown category {quoted(named, 80)}; expected one of: {known}")
        text = text.strip().lstrip("*_`").strip()  # "**tone:** text" leaves markup after the colon
        return [Edit(key=category, before=state.get(category), after=text)]


class FileTree:
    """A folder of text files (a skill, a set of agent definitions): one key per relative path.

    Each file is one of three kinds, by fnmatch patterns on its path (`*` and `**` both cross
    folders): frozen (matches `frozen`: never changed, and frozen beats editable), editable
    (matches `editable`), or read-only context (neither: the agent and the reflector see it, no
    diff may change it). A diff may create, replace or delete editable files, at most
    `max_files_per_diff` of them (None: no cap); a proposal that leaves a file unreadable that
    parsed (`governance.syntax`: Python that no longer compiles, a frontmatter that no longer
    parses) is refused before anything measures it. A key where `load_tree` never reads (build/,
    dist/, `*~`: `tree.SKIPPED_FOLDERS`, `tree.SKIPPED_FILES`) is frozen: written back, it would not
    be read again. `left_out`, for a tree `load_tree` read with those `exclude` globs (and the literal
    keys of the files it carried as not text), makes a key it leaves out frozen too: a run may not
    write what it never read (`tree.left_out`), nor its `write_to(prune=True)` delete it. The render is
    the `{path: text}` mapping itself; `tree_runner` writes it into a workspace for a real agent.
    """

    kind = "FileTree"
    folder = True
    named_keys = True

    def __init__(
        self,
        tree: Mapping[str, str],
        *,
        max_files_per_diff: int | None = 2,
        editable: Iterable[str] = ("**",),
        frozen: Iterable[str] = (),
        left_out: Iterable[str] | None = None,
    ) -> None:
        if max_files_per_diff is not None and (not isinstance(max_files_per_diff, int) or max_files_per_diff < 1):
            raise UserError("max_files_per_diff must be a positive integer (or None for no cap)")
        problems = [reason for key in tree if (reason := unsafe_key_reason(key))]
        problems += [f"{a!r} and {b!r} cannot both be in one folder" for a, b in clashes(tree)]
        if problems:
            raise UserError(f"the tree cannot be a folder artifact: {problems[0]}; rename or leave out that file")
        self.tree = dict(tree)
        self.max_keys_per_diff = max_files_per_diff
        self.editable = tuple(editable)
        self.frozen = tuple(frozen)
        self.left_out = None if left_out is None else tuple(left_out)

    def is_left_out(self, key: str) -> bool:
        """Whether `key` is where the `load_tree` that read this tree does not read (without
        `left_out`: where no `load_tree` reads, so that what a run writes is read by the next)."""
        return tree_left_out(key, self.left_out or ())

    def initial_state(self) -> State:
        return dict(self.tree)

    def render(self, state: Mapping[str, str]) -> dict[str, str]:
        return dict(state)

    def key_space(self, state: Mapping[str, str]) -> list[str]:
        """The files there are (a new one belongs to a shard by its name: `engine.sharding`)."""
        return sorted(state)

    def frozen_files(self, tree: Mapping[str, str] | None = None) -> dict[str, str]:
        """The files of `tree` (default: the initial tree) that no diff may change."""
        tree = self.tree if tree is None else tree
        return {p: t for p, t in tree.items() if is_frozen(p, self.frozen)}

    def edits_for(self, state: Mapping[str, str], proposal: str) -> list[Edit]:
        proposal = _clean(proposal, cap=MAX_TREE_PROPOSAL_CHARS, controls=NUL_ONLY)
        files = files_of(proposal, state)
        if not files:
            raise InvalidProposal('no <file path="...">...</file> or <delete path="..."/> block found')
        misreading = misread(proposal)  # a file cut short at a </file> its text holds, or a reply cut off
        if misreading:
            raise InvalidProposal(misreading)
        edits = [Edit(key=p, before=state.get(p), after=self._written(t, state, state.get(p))) for p, t in files.items()]
        broken = unreadable(edits)
        if broken:  # refused here, before a worker's own rollouts measure it (admission says the same)
            raise InvalidProposal(broken)
        return edits

    @staticmethod
    def _written(text: str | None, state: Mapping[str, str], before: str | None) -> str | None:
        """The text a file is written with: as the file it replaces was (`textform.edged`), a new
        file with the line endings the folder's files share."""
        if text is None:
            return None
        return edged(text, before) if before else matching(text, "".join(state.values()))


STRATEGIES: dict[str, type] = {cls.kind: cls for cls in (SingleSlot, AppendRules, KeyedRules, FileTree)}
"""The shipped strategies by `kind`: what a report or a resumed run finds from a checkpoint's name."""


def kind_of(strategy: object) -> str:
    """`strategy.kind`; a strategy of yours written without one is known by its class's name."""
    return str(getattr(strategy, "kind", None) or type(strategy).__name__)
