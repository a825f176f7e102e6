"""Strategies: how an artifact is held as a flat `{key: text}` state, rendered, and changed.

A strategy decides what a key is, so it decides which concurrent proposals can fuse and which
must conflict. It knows nothing of the ledger or the aggregator; frozen files are declared here
and enforced by governance, whose pattern match (`is_frozen`) it shares.

    SingleSlot   one key; every proposal appends to it, so concurrent proposals conflict
    AppendRules  a playbook; one key per rule, named by its content hash: different rules fuse,
                 identical ones deduplicate
    KeyedRules   one key per category; proposals "category: text"; conflict within a category
    FileTree     files as keys (a skill folder); proposals are <file path="..."> blocks

Proposals are model output, so they are checked at the door before anything parses them
(`governance.text.text_refusal`: a size cap, valid Unicode, no control character the artifact
cannot hold), and
every reader here runs in time linear in the proposal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from agentdescent.artifacts.playbook import Page, rule_key
from agentdescent.artifacts.state import State
from agentdescent.artifacts.textform import appended, edged, lines_of, matching
from agentdescent.artifacts.tree import left_out as tree_left_out
from agentdescent.artifacts.workspace import LAYOUTS
from agentdescent.errors import InvalidProposal, UserError
from agentdescent.governance import clashes, is_frozen, unsafe_key_reason
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
    """

    kind: str
    folder: bool
    named_keys: bool
    frozen: tuple[str, ...]
    editable: tuple[str, ...]
    max_keys_per_diff: int | None

    def initial_state(self) -> State: ...

    def render(self, state: Mapping[str, str]) -> Any: ...

    def edits_for(self, state: Mapping[str, str], proposal: str) -> list[Edit]: ...


# Where the workspace layouts put a folder: a path under one names the folder's own file.
_LAYOUT_PREFIX = re.compile("|".join(re.escape(folder).replace(re.escape("{name}"), r"(?!\.\.(?:/|$))[^/]+")
                                     for folder in LAYOUTS.values() if folder))  # a name, never ".."
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
        inserts: lines appended at once stack (`step.textmerge.stack_insertions`)."""
        line = _clean(proposal)
        before = state.get(self.key, "")
        if line in (existing.strip() for existing in lines_of(before)):
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


_OPEN_FILE, _CLOSE_FILE, _OPEN_DELETE = '<file path="', "</file>", '<delete path="'
_CLOSE_DELETE = re.compile(r"\s*/>")  # linear: greedy blanks, then a fixed "/>"


def parse_file_blocks(proposal: str) -> dict[str, str | None]:
    """Read `<file path="p">text</file>` and `<delete path="p"/>` blocks: {path: text or None}.

    A path is the non-empty text up to the next quote; one newline after the opening tag is not
    content; a block ends at the first `</file>`; a later block of a path wins, and a delete tag
    (read anywhere, inside a block too) beats a block. Linear time: each scan moves forward.
    parse_file_blocks('<file path="a.md">\\nhi\\n</file><delete path="b.md"/>') == {"a.md": "hi\\n", "b.md": None}
    """
    files: dict[str, str | None] = dict(_file_blocks(proposal))
    files.update((path, None) for path in _delete_tags(proposal))
    return files


def unclosed_file(proposal: str) -> str | None:
    """The path of a `<file path="...">` block that no `</file>` closes (a reply cut off before
    its end: `parse_file_blocks` reads nothing of it), or None.
    unclosed_file('<file path="a.md">\nhi\n</file><file path="b.md">\nhal') == "b.md" """
    last = proposal.rfind(_CLOSE_FILE)
    tail = proposal if last == -1 else proposal[last + len(_CLOSE_FILE):]
    return next((path for path, _ in _file_blocks(tail + _CLOSE_FILE)), None)


def files_of(proposal: str, known: Iterable[str]) -> dict[str, str | None]:
    """`parse_file_blocks`, each path as the folder's key: models write "./SKILL.md", or the path
    a host reads the folder at (".claude/skills/my-skill/SKILL.md"); where the rest names a file
    the folder has, that file is meant, and a new file there is the folder's new file (unless the
    folder holds a ".claude/skills/my-skill/" of its own). Any other path is kept for governance
    to judge, by name."""
    known = set(known)
    return {_as_key(path, known): text for path, text in parse_file_blocks(proposal).items()}


def _as_key(path: str, known: set[str]) -> str:
    """`path` without "." and empty segments, or the known key it names under a layout's folder,
    or, under a host's hidden layout folder (".claude/skills/<name>/") that the folder itself
    does not have, the new file it names there; an absolute path as it is (governance refuses it)."""
    if path.startswith("/"):
        return path
    parts = [part for part in path.split("/") if part not in ("", ".")]
    key = "/".join(parts)
    if key in known:
        return key
    under = [n for n in range(1, len(parts)) if _LAYOUT_PREFIX.fullmatch("/".join(parts[:n]))]
    for n in under:
        if "/".join(parts[n:]) in known:
            return "/".join(parts[n:])
    for n in under:  # a new file where a host reads the folder, which has no such folder of its own
        prefix = "/".join(parts[:n])
        if prefix.startswith(".") and not any(k.startswith(prefix + "/") for k in known):
            return "/".join(parts[n:])
    return key


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The text from `start` to the next quote and that quote's index; index -1 if none follows."""
    end = text.find('"', start)
    return (text[start:end], end) if end != -1 else ("", -1)


def _file_blocks(text: str) -> Iterator[tuple[str, str]]:
    at = text.find(_OPEN_FILE)
    while at != -1:
        path, quote = _quoted(text, at + len(_OPEN_FILE))
        if quote == -1:
            return  # no quote left: no later tag can end its path either
        if not path or not text.startswith(">", quote + 1):
            at = text.find(_OPEN_FILE, at + 1)  # not a tag; one may start inside what was read
            continue
        body = quote + 2 + text.startswith("\n", quote + 2)
        end = text.find(_CLOSE_FILE, body)
        if end == -1:
            return  # no </file> left: no later block can close, so none is searched for again
        yield path, text[body:end]
        at = text.find(_OPEN_FILE, end + len(_CLOSE_FILE))


def _delete_tags(text: str) -> Iterator[str]:
    at = text.find(_OPEN_DELETE)
    while at != -1:
        path, quote = _quoted(text, at + len(_OPEN_DELETE))
        if quote == -1:
            return
        closed = _CLOSE_DELETE.match(text, quote + 1) if path else None
        if closed:
            yield path
        at = text.find(_OPEN_DELETE, closed.end() if closed else at + 1)


class FileTree:
    """A folder of text files (a skill, a set of agent definitions): one key per relative path.

    Each file is one of three kinds, by fnmatch patterns on its path (`*` and `**` both cross
    folders): frozen (matches `frozen`: never changed, and frozen beats editable), editable
    (matches `editable`), or read-only context (neither: the agent and the reflector see it, no
    diff may change it). A diff may create, replace or delete editable files, at most
    `max_files_per_diff` of them (None: no cap). `left_out`, for a tree `load_tree` read with those
    `exclude` globs (and the literal keys of the files it carried as not text), makes a key it
    leaves out frozen too: a run may not write what it never read (`tree.left_out`). The render is
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
        """Whether `key` is where the `load_tree` that read this tree does not read (never, without `left_out`)."""
        return self.left_out is not None and tree_left_out(key, self.left_out)

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
        files = files_of(_clean(proposal, cap=MAX_TREE_PROPOSAL_CHARS, controls=NUL_ONLY), state)
        if not files:
            raise InvalidProposal('no <file path="...">...</file> or <delete path="..."/> block found')
        return [Edit(key=p, before=state.get(p), after=self._written(t, state, state.get(p))) for p, t in files.items()]

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
