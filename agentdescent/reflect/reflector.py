"""Reflection with a model: failed rollouts in, one proposed rule out, read from what it replies.

    reflector(model)                  propose(rendered, task, output, reward) -> one rule, or None
    reflector(model, batch=True)      also reflects on all of a worker's failures at once

Models wrap answers in prose, code fences, quotes and markdown; the parsers here look for the
asked-for tags first and fall back to a line that names its rule ("Rule: ..."), and, where the
prompt asked for no tags, to what the whole reply plainly says: where it asked for them, a reply
without them (a refusal, say) holds no rule. Inside the tags, a label ("**Rule:**") and markdown
headings are dropped; a list of rules is refused (one rule a reply), and so are a refusal and a
rule of no words (a placeholder: "..."). NONE, alone or followed by punctuation or a dash and
why, is no proposal. A tag opened and never closed is a reply cut off. An empty reply is no
proposal; one that cannot be read is an invalid proposal with the reason, as is one that fails the
door (a size cap, valid Unicode, no NUL), checked before it is read; all are counted. Every reader
here runs in time linear in the reply: plain `find` scans, and regexes with no nested or adjacent
repeats that could backtrack over one another. What it leaves out: calling the model robustly
(the clients in `agentdescent.agents` retry and time out) and deciding whether a proposal helps
(the aggregator).
"""

from __future__ import annotations

import functools
import re
import threading
from collections import Counter
from collections.abc import Sequence

from agentdescent.agents.base import Model
from agentdescent.artifacts.strategies import InvalidProposal
from agentdescent.governance.text import NUL_ONLY, text_refusal
from agentdescent.quoting import quoted
from agentdescent.reflect.templates import fill, template
from agentdescent.returned import as_text, plain_callable
from agentdescent.types import Rollout, Task, Tried

# NONE alone, or followed by punctuation, a dash or a line break and why: "NONE - it was right.",
# "No rule needed; ...".
NONE_REPLY = re.compile(r"^\W*(?:none|no (?:rule|change)s?(?:\s+(?:is\s+|are\s+)?(?:needed|necessary|required))?|n/?a|nothing)"
                        r"(?:\W*$|[ \t*_`'\"”’]*[-–—:;,.!?()\n])", re.IGNORECASE)
# How a model that declines begins (curly apostrophes made straight): never a rule, which tells
# the assistant what to do.
_REFUSAL = re.compile(r"^\W*(?:(?:i'?m|i am) (?:sorry|afraid|unable|not able)|sorry\b|i apologi[sz]e|unfortunately,? i\b|"
                      r"i (?:can ?not|can't|won'?t|will not|must decline)\b|as an ai\b)", re.IGNORECASE)
_LABELLED = r"(?:(?:new|proposed|suggested|general|updated|revised|improved|final|one|the|my)\s+)?rules?(?:\s*#?\d+)?"
# A label before the rule ("Rule:", "Rule**:", "New rule 2 -"), read once unwrap took the bold
# marks before it; and a line that only says a rule follows ("**Rule**", "Rules:").
_LABEL = re.compile("^" + _LABELLED + r"[*_]*(?::|[ \t]+[-–—](?=\s|$))[*_ \t]*", re.IGNORECASE)
_LABEL_ONLY = re.compile(_LABELLED + r"[*_:]*", re.IGNORECASE)
_HEADING = re.compile(r"#{1,6}(?:[ \t]|$)")
# "rule", blanks and an optional number, a colon. No two repeats can match the same blanks, so a
# long run of them is crossed once (`\s*\d*\s*` would try every split of it: quadratic).
_RULE_LINE = re.compile(r"\brule\s*(?:\d+\s*)?:\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_FENCE_OPEN = re.compile(r"```[\w-]*\n")
_BULLET = re.compile(r"(?:[-*•]|\d+[.)])\s+")
MAX_RULE_CHARS = 1000
MAX_REPLY_CHARS = 200_000  # a rule is at most 1,000 characters; the prose around it is not worth more
APART = "(given beside this prompt, as its context: the same for every prompt on this candidate)"


@functools.lru_cache(maxsize=16)
def _tag_patterns(tag: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The opening and closing tag as fixed, case-blind patterns: a search for one is linear."""
    return re.compile(f"<{re.escape(tag)}>", re.IGNORECASE), re.compile(f"</{re.escape(tag)}>", re.IGNORECASE)


def tagged(reply: str, tag: str) -> str | None:
    """The text inside the last <tag>...</tag> of a reply, blank space around it stripped; tags
    match in any case, and a block ends at the first closing tag. tagged("x <r>a</r>", "r") == "a"

    Linear: each search starts where the last one ended, and an opening tag with no closing tag
    after it ends the scan (no later one can close either)."""
    opening, closing = _tag_patterns(tag)
    found, at = None, 0
    while (start := opening.search(reply, at)) and (end := closing.search(reply, start.end())):
        found, at = reply[start.end():end.start()].strip(), end.end()
    return found


def fenced(text: str) -> str | None:
    """The body of a code fence that is all of `text` (blank space after it aside), or None; the
    newline before the closing fence is not part of it. fenced("```py\\nx = 1\\n```") == "x = 1" """
    opened = _FENCE_OPEN.match(text)
    if not opened:
        return None
    close = len(text.rstrip()) - 3
    if close < opened.end() or not text.startswith("```", close):
        return None
    if close > opened.end() and text[close - 1] == "\n":
        close -= 1
    return text[opened.end():close]


def unwrap(text: str) -> str:
    """Strip a code fence, quotes, bold marks and a list bullet around a short answer.
    unwrap('**"Be brief."**') == "Be brief." """
    text = text.strip()
    body = fenced(text)
    if body is not None:
        text = body.strip()
    bullet = _BULLET.match(text)
    if bullet:
        text = text[bullet.end():]
    for _ in range(3):
        stripped = text.strip().strip("*_`").strip().strip("\"'“”‘’").strip()
        if stripped == text:
            break
        text = stripped
    return text


def parse_rule(reply: str, *, tags_asked: bool = False) -> str | None:
    """One rule from a model's reply, or None for "no rule" ("NONE", "NONE - it was right.") and
    for a reply that holds none; ValueError for a reply that is prose, too long, a refusal, a rule
    of no words ("..."), holds a rule over `MAX_RULE_CHARS` or a list of rules, or opens a <rule> that nothing closes after it
    (cut off: what it holds may be half a rule). With `tags_asked` (the prompt asked for <rule>
    tags) a reply without them is read only where a line names its rule or it says there is none.

    parse_rule("<rule>Cite the source.</rule>") == "Cite the source."
    parse_rule("Sure! Rule: cite the source.") == "cite the source."
    """
    if len(reply) > MAX_REPLY_CHARS:
        raise ValueError(f"the reply is {len(reply):,} characters; at most {MAX_REPLY_CHARS:,} are read")
    if opened_after_last_block(reply, "rule"):
        raise ValueError("the reply opens a <rule> tag that it never closes: it was cut off")
    body, where = tagged(reply, "rule"), "the text of the <rule> tag"
    if body is not None:
        rule = _inside_tags(body)
    else:
        lines = _RULE_LINE.findall(reply)
        body, where = (lines[-1], "the 'Rule:' line") if lines else (reply, "the reply")
        rule = unwrap(body)
    if not rule or NONE_REPLY.match(rule):
        return None
    if tags_asked and body is reply:
        raise ValueError("the reply has no <rule> tag, which the prompt asked for, nor a 'Rule:' line")
    if "\n" in rule.strip() and body is reply:  # prose, not a rule
        raise ValueError("the reply has no <rule> tag and is not a single rule")
    if _REFUSAL.match(rule.replace("’", "'")):
        raise ValueError(f"{where} is a refusal, not a rule")
    if not any(ch.isalnum() for ch in rule):  # "<rule>...</rule>": the prompt's form echoed with nothing in it
        raise ValueError(f"{where} holds no words ({quoted(rule, 40)}): a placeholder, not a rule")
    if len(rule) > MAX_RULE_CHARS:
        raise ValueError(f"the rule is longer than {MAX_RULE_CHARS} characters")
    return " ".join(rule.split())


def _inside_tags(body: str) -> str:
    """The rule a <rule> tag holds, unwrapped, with markdown headings and a label before it dropped;
    ValueError for a list of rules, since a reply holds one. _inside_tags("## Rule\\nBe brief.") == "Be brief." """
    fence = fenced(body)
    lines = [line.strip() for line in (body if fence is None else fence).splitlines() if line.strip()]
    said = [line for line in lines if not (_HEADING.match(line) or _LABEL_ONLY.fullmatch(line.strip("*_ ")))]
    lines = said or [_HEADING.sub("", line, count=1) for line in lines]  # a heading alone is the rule
    listed = sum(map(_listed, lines))
    if listed > 1 and _listed(lines[0]):
        raise ValueError(f"the <rule> tag holds a list of {listed} rules; the prompt asks for one rule per reply")
    text = unwrap("\n".join(lines))
    return unwrap(_LABEL.sub("", text, count=1))


def _listed(line: str) -> bool:
    """Whether a line is an item of a list: "1. ...", "- ...", "Rule 2: ..." """
    return bool(_BULLET.match(line) or _LABEL.match(line.lstrip("*_")))


def opened_after_last_block(reply: str, tag: str) -> bool:
    """Whether an opening <tag> follows the last closing one (or stands where none is): the block
    it opens was cut off. opened_after_last_block("<r>a</r> <r>b", "r") is True"""
    opening, closing = _tag_patterns(tag)
    end = 0
    for closed in closing.finditer(reply):
        end = closed.end()
    return opening.search(reply, end) is not None


def describe_cases(rollouts: Sequence[tuple[Task, str, float]]) -> str:
    return "\n".join(
        fill(template("reflect_case"), prompt=task.prompt, output=output or "(empty)",
             gold=task.gold if task.gold is not None else "(not known)", reward=f"{reward:.2f}")
        for task, output, reward in rollouts
    )


def describe_tried(tried: Sequence[Tried], *, chars: int = MAX_RULE_CHARS) -> str:
    """The run's refusals as a prompt section ("" for none), each proposal cut to `chars`: a
    change refused once is not worth proposing again."""
    if not tried:
        return ""
    lines = "\n".join(f"- {' '.join(t.proposal.split())[:chars]} (refused: {t.why})" for t in tried)
    return ("\nAlready proposed for these instructions and refused; do not propose these again:\n"
            f"{lines}\n")


class Reflector:
    """A `propose` callable backed by a model; `stats` counts rules, NONEs and unreadable replies
    (those it made in this process: a copy in a worker process counts its own)."""

    made_by = "reflector()"  # what the model was given to, in a message about its reply

    def __init__(self, model: Model, *, batch: bool = False, instructions: str | None = None,
                 apart: bool = False) -> None:
        self.model = model
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._template = instructions or template("reflect")
        self._tags_asked = "<rule>" in self._template.lower()  # then a reply without them is no rule
        self.apart = apart
        if batch:
            self.batch = self._batch

    def __call__(self, rendered: object, task: Task, output: str, reward: float, *,
                 tried: Sequence[Tried] = ()) -> str | None:
        return self._ask(rendered, [(task, output, reward)], tried)

    def _batch(self, rendered: object, rollouts: Sequence[Rollout], *, tried: Sequence[Tried] = ()) -> str | None:
        return self._ask(rendered, [(r.task, r.output, r.reward) for r in rollouts], tried)

    def _ask(self, rendered: object, cases: Sequence[tuple[Task, str, float]], tried: Sequence[Tried]) -> str | None:
        reply = self._asked("artifact", str(rendered or "(empty)"), cases=describe_cases(cases), tried=describe_tried(tried))
        refused = text_refusal(reply, cap=MAX_REPLY_CHARS, controls=NUL_ONLY, what="reply")
        if refused:  # never parsed; the reason goes with the invalid outcome
            self._count("unreadable")
            raise InvalidProposal(refused)
        if not reply.strip():
            self._count("empty")
            return None
        try:
            rule = parse_rule(reply, tags_asked=self._tags_asked)
        except ValueError as exc:  # an invalid outcome with the reason, not a silent None: a run told why
            self._count("unreadable")
            raise InvalidProposal(f"the reply cannot be read as a rule: {exc} (it begins {quoted(reply, 120)})") from None
        self._count("rules" if rule else "none")
        return rule

    def _asked(self, field: str, artifact: str, **fields: str) -> str:
        """The model's reply to the template filled in; with `apart`, the artifact (`field`) goes
        beside the prompt as the call's `context`, the same for every prompt on one candidate. A
        reply that is not text (a coroutine, None, a client's reply object) is a `UserError`."""
        if not self.apart:
            reply = self.model(fill(self._template, **{field: artifact}, **fields))
        else:
            reply = self.model(fill(self._template, **{field: APART}, **fields), context=artifact)  # type: ignore[call-arg]
        return as_text(reply, f"the model given to {self.made_by}", what="the reply", strict=True)

    def _count(self, what: str) -> None:
        with self._lock:
            self.stats[what] += 1

    def __getstate__(self) -> dict[str, object]:
        """For a copy in a worker process or a Ray actor (the process and Ray executors), which
        counts its own `stats`."""
        with self._lock:
            return {key: value for key, value in self.__dict__.items() if key != "_lock"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())


def reflector(model: Model, *, batch: bool = False, instructions: str | None = None, apart: bool = False) -> Reflector:
    """A `propose` that asks `model` for one general rule per failure (or, with `batch=True`, one
    rule from all of a worker's chosen failures). `instructions` replaces the prompt template;
    it receives `{artifact}` and `{cases}`, and where it asks for <rule> tags, as the default
    does, a reply without them is unreadable (see `parse_rule`). A reply it cannot read raises
    `InvalidProposal` (an `invalid` outcome, with the reason). With `apart=True` the artifact goes
    to the model as `context=`, beside the prompt (a host reads each candidate's once, however
    many prompts)."""
    plain_callable(model, "reflector's model")
    return Reflector(model, batch=batch, instructions=instructions, apart=apart)
