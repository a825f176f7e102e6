"""Reflection: turning failed rollouts into proposals with a model, and reading what it replies.

    reflector(model)                  propose(rendered, task, output, reward) -> one rule, or None
    reflector(model, batch=True)      also reflects on all of a worker's failures at once
    tree_reflector(model, strategy=)  proposes file edits for a FileTree, validated before use
    llm_fusion(model)                 a fusion policy that asks the model to merge overlapping edits

Models wrap answers in prose, code fences, quotes and markdown; the parsers here look for the
asked-for tags first and fall back to what a reply plainly says. An empty or unreadable reply
is no proposal, and is counted. What it leaves out: calling the model robustly (the clients in
`agentdescent.agents` retry and time out) and deciding whether a proposal helps (the aggregator).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from agentdescent.evaluation import Rollout
from agentdescent.governance import is_frozen, unsafe_key_reason
from agentdescent.policies import ThreeWayMerge
from agentdescent.strategies import FileTree, InvalidProposal, parse_file_blocks
from agentdescent.templates import fill, template
from agentdescent.types import Task

Model = Callable[[str], str]

_NONE = re.compile(r"^\W*(none|no rule|no change|n/?a|nothing)\W*$", re.IGNORECASE)
_FENCE = re.compile(r"^```[\w-]*\n(.*?)\n?```\s*$", re.DOTALL)
_RULE_LINE = re.compile(r"\brule\s*\d*\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)
MAX_RULE_CHARS = 1000


def tagged(reply: str, tag: str) -> str | None:
    """The text inside the last <tag>...</tag> of a reply. tagged("x <r>a</r>", "r") == "a" """
    found = re.findall(rf"<{tag}>\s*(.*?)\s*</{tag}>", reply, re.DOTALL | re.IGNORECASE)
    return found[-1] if found else None


def unwrap(text: str) -> str:
    """Strip a code fence, quotes, bold marks and a list bullet around a short answer.
    unwrap('**"Be brief."**') == "Be brief." """
    text = text.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    text = re.sub(r"^(?:[-*•]|\d+[.)])\s+", "", text)
    for _ in range(3):
        stripped = text.strip().strip("*_`").strip().strip("\"'“”‘’").strip()
        if stripped == text:
            break
        text = stripped
    return text


def parse_rule(reply: str) -> str | None:
    """One rule from a model's reply, or None for "no rule" and for a reply that holds none.

    parse_rule("<rule>Cite the source.</rule>") == "Cite the source."
    parse_rule("Sure! Rule: cite the source.") == "cite the source."
    """
    body = tagged(reply, "rule")
    if body is None:
        lines = _RULE_LINE.findall(reply)
        body = lines[-1] if lines else reply
    rule = unwrap(body)
    if not rule or _NONE.match(rule):
        return None
    if "\n" in rule.strip() and body is reply:  # prose, not a rule
        raise ValueError("the reply has no <rule> tag and is not a single rule")
    if len(rule) > MAX_RULE_CHARS:
        raise ValueError(f"the rule is longer than {MAX_RULE_CHARS} characters")
    return " ".join(rule.split())


def describe_cases(rollouts: Sequence[tuple[Task, str, float]]) -> str:
    return "\n".join(
        fill(template("reflect_case"), prompt=task.prompt, output=output or "(empty)",
             gold=task.gold if task.gold is not None else "(not known)", reward=f"{reward:.2f}")
        for task, output, reward in rollouts
    )


class Reflector:
    """A `propose` callable backed by a model; `stats` counts rules, NONEs and unreadable replies."""

    def __init__(self, model: Model, *, batch: bool = False, instructions: str | None = None) -> None:
        self.model = model
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._template = instructions or template("reflect")
        if batch:
            self.batch = self._batch

    def __call__(self, rendered: object, task: Task, output: str, reward: float) -> str | None:
        return self._ask(rendered, [(task, output, reward)])

    def _batch(self, rendered: object, rollouts: Sequence[Rollout]) -> str | None:
        return self._ask(rendered, [(r.task, r.output, r.reward) for r in rollouts])

    def _ask(self, rendered: object, cases: Sequence[tuple[Task, str, float]]) -> str | None:
        reply = self.model(fill(self._template, artifact=rendered or "(empty)", cases=describe_cases(cases)))
        if not reply.strip():
            self._count("empty")
            return None
        try:
            rule = parse_rule(reply)
        except ValueError:
            self._count("unreadable")
            return None
        self._count("rules" if rule else "none")
        return rule

    def _count(self, what: str) -> None:
        with self._lock:
            self.stats[what] += 1


def reflector(model: Model, *, batch: bool = False, instructions: str | None = None) -> Reflector:
    """A `propose` that asks `model` for one general rule per failure (or, with `batch=True`, one
    rule from all of a worker's chosen failures). `instructions` replaces the prompt template;
    it receives `{artifact}` and `{cases}`."""
    return Reflector(model, batch=batch, instructions=instructions)


class TreeReflector(Reflector):
    """A `propose` for a `FileTree`: file blocks in, validated against the strategy."""

    def __init__(self, model: Model, strategy: FileTree, *, batch: bool = False, instructions: str | None = None) -> None:
        super().__init__(model, batch=batch, instructions=instructions or template("tree_reflect"))
        self.strategy = strategy

    def _ask(self, rendered: object, cases: Sequence[tuple[Task, str, float]]) -> str | None:
        files = dict(rendered) if isinstance(rendered, Mapping) else {}
        editable = [p for p in sorted(files) if not is_frozen(p, self.strategy.frozen)]
        reply = self.model(fill(
            self._template, files=format_files(files), editable=", ".join(editable) or "(none)",
            frozen=", ".join(p for p in sorted(files) if p not in editable) or "(none)",
            max_files=self.strategy.max_keys_per_diff or "any number of", cases=describe_cases(cases),
        ))
        if _NONE.match(unwrap(reply)):
            self._count("none")
            return None
        try:
            proposal = self.validate(reply)
        except InvalidProposal:
            self._count("invalid")
            raise
        self._count("edits")
        return proposal

    def validate(self, reply: str) -> str:
        """The file blocks of `reply`, re-emitted cleanly, or InvalidProposal saying what is wrong."""
        files = {path: _unfence(text) if text is not None else None for path, text in parse_file_blocks(reply).items()}
        if not files:
            raise InvalidProposal('the reply holds no <file path="..."> or <delete path="..."/> block')
        for path in files:
            reason = unsafe_key_reason(path)
            if reason:
                raise InvalidProposal(reason)
            if is_frozen(path, self.strategy.frozen):
                raise InvalidProposal(f"{path} is frozen and cannot be changed")
        cap = self.strategy.max_keys_per_diff
        if cap is not None and len(files) > cap:
            raise InvalidProposal(f"the reply changes {len(files)} files; at most {cap} are allowed")
        return "\n".join(
            f'<delete path="{p}"/>' if t is None else f'<file path="{p}">\n{t}</file>' for p, t in files.items()
        )


def tree_reflector(model: Model, *, strategy: FileTree, batch: bool = False, instructions: str | None = None) -> TreeReflector:
    """A `propose` that asks `model` for whole-file edits of a `FileTree` artifact. A reply that
    edits a frozen file, more files than `max_files_per_diff`, or a path outside the folder raises
    `InvalidProposal` (an `invalid` outcome, with the reason)."""
    return TreeReflector(model, strategy, batch=batch, instructions=instructions)


def format_files(files: Mapping[str, str]) -> str:
    return "\n".join(f'<file path="{path}">\n{text}</file>' for path, text in sorted(files.items()))


def _unfence(text: str) -> str:
    """File content a model wrapped in a code fence, unwrapped; a newline at the end kept."""
    fenced = _FENCE.match(text.strip())
    body = fenced.group(1) if fenced else text
    return body if body.endswith("\n") or not body else body + "\n"


class LLMFusion:
    """A fusion policy: git's three-way merge first, the model only for edits that truly overlap."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.stats: Counter[str] = Counter()
        self._merge = ThreeWayMerge()

    def __call__(self, base: str | None, ours: str | None, theirs: str | None) -> str | None | bool:
        merged = self._merge(base, ours, theirs)
        if merged is not False or ours is None or theirs is None:
            return merged
        reply = self.model(fill(template("fusion"), base=base or "", ours=ours, theirs=theirs))
        text = tagged(reply, "merged")
        self.stats["merged" if text else "unreadable"] += 1
        if not text:
            return False
        return text + "\n" if ours.endswith("\n") and not text.endswith("\n") else text


def llm_fusion(model: Model) -> LLMFusion:
    """`Policies(fusion=llm_fusion(model))`: overlapping same-key edits are merged by `model`
    instead of going to the conflict policy; a reply without a <merged> block leaves them in conflict."""
    return LLMFusion(model)
