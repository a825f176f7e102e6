"""Ready-made reward functions: `reward(task, output) -> float` in [0, 1].

    scorer("exact")        normalised equality with task.gold
    scorer("contains")     the normalised gold appears, as whole words, in the normalised output
    scorer("f1")           SQuAD token F1 between gold and output
    scorer("numeric")      the last number in the output equals the number in gold (within tolerance)
    scorer("regex", pattern=r"...")   the pattern (or, without one, task.gold) is found in the output
    scorer(command=["python", "grade.py"])   an external grader program, one process per call
    llm_judge(model, rubric)            a model grades the output against a rubric

Normalisation is SQuAD's: lower-case, drop punctuation, drop the articles a/an/the, collapse
whitespace. Numbers are read as written, with signs, thousands commas, decimals, exponents and
tight fractions ("-3", "1,234.5", "1.5e3", "3/4"); currency and percent signs are ignored, so
"$12" reads 12 and "50%" reads 50 (not 0.5). What it leaves out: spelled-out numbers, units,
LaTeX, partial credit for anything but "f1", and retries of external graders. A scorer raises
`UserError` for a mistake in its setup or data (missing gold, a bad pattern) and `AgentError`
when a grader program or a judge model fails.
"""

from __future__ import annotations

import json
import re
import shutil
import string
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentdescent.agents.base import Model
from agentdescent.errors import AgentError, UserError
from agentdescent.process import OutputTooLarge, TimedOut, run_process
from agentdescent.quoting import quoted
from agentdescent.reflect import templates
from agentdescent.returned import as_text, plain_callable
from agentdescent.types import Task

__all__ = ["SCORER_NAMES", "Judge", "last_number", "llm_judge", "normalize", "parse_score", "scorer"]

Reward = Callable[[Task, str], float]
SCORER_NAMES = ("exact", "contains", "f1", "numeric", "regex")
GRADER_TIMEOUT = 30.0  # seconds a grader command may run, unless its timeout says otherwise

# --- text -----------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize(text: str) -> str:
    """SQuAD-style normal form (any Unicode punctuation goes too). normalize("The  Cat's hat!") == "cats hat" """
    kept = "".join(c for c in text.lower() if c not in string.punctuation and unicodedata.category(c)[0] != "P")
    return " ".join(_ARTICLES.sub(" ", kept).split())


def _exact(gold: str, output: str) -> float:
    return float(normalize(gold) == normalize(output))


def _contains(gold: str, output: str) -> float:
    """Whole-word containment: _contains("4", "it is 42") == 0.0; an empty gold needs an empty output."""
    g, o = normalize(gold), normalize(output)
    return float(o == "") if g == "" else float(f" {g} " in f" {o} ")


def _f1(gold: str, output: str) -> float:
    """Token F1 with multiset overlap: _f1("the cat sat", "cat sat down") == 0.8"""
    g, o = normalize(gold).split(), normalize(output).split()
    if not g or not o:
        return float(g == o)
    common = sum((Counter(g) & Counter(o)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(o), common / len(g)
    return 2 * precision * recall / (precision + recall)


_TEXT_SCORERS: dict[str, Callable[[str, str], float]] = {"exact": _exact, "contains": _contains, "f1": _f1}

# --- numbers --------------------------------------------------------------------------------

_NUMBER = re.compile(
    r"(?:(?<![\w)\]])(?P<sign>[-+\u2212]))?"  # a sign, unless glued to a word: "3-4" is 3 and 4
    r"(?<![\d./])"  # never start inside another number or fraction
    r"(?P<body>\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?P<exp>[eE][-+]?\d+)?"
    r"(?:/(?P<den>\d*[1-9]\d*)(?![\d./]))?"  # a tight fraction with a non-zero denominator
)


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    return next(reversed(list(pattern.finditer(text))), None)


def last_number(text: str) -> float | None:
    """The last number written in `text`, or None. last_number("x = -3, total $1,234.5") == 1234.5"""
    match = _last(_NUMBER, text)
    if match is None:
        return None
    value = float(match["body"].replace(",", "") + (match["exp"] or ""))
    if match["den"]:
        value /= int(match["den"])
    return -value if match["sign"] in ("-", "\u2212") else value


# --- scorers --------------------------------------------------------------------------------


def _gold(task: Task, name: str) -> str:
    if task.gold is None:
        raise UserError(
            f"scorer {name!r} compares with a gold answer, but task {task.id!r} has none; give tasks a gold answer "
            "(a spec: tasks: {file: ..., gold: COLUMN}; Python: tasks_from(..., gold=...)) or score without one "
            "(a spec: scorer: {command: [...]}; Python: llm_judge(model, rubric))"
        )
    return task.gold


def _compile(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UserError(f"{where}: {pattern!r} is not a valid regular expression ({exc}); fix or escape it") from None


@dataclass(frozen=True)
class _Text:
    name: str

    def __call__(self, task: Task, output: str) -> float:
        return _TEXT_SCORERS[self.name](_gold(task, self.name), output)


@dataclass(frozen=True)
class _Numeric:
    tolerance: float
    relative: bool

    def __call__(self, task: Task, output: str) -> float:
        gold = _gold(task, "numeric")
        target = last_number(gold)
        if target is None:
            raise UserError(f"scorer 'numeric': the gold of task {task.id!r} is {gold!r}, which holds no number; "
                            "give numeric tasks a number as gold, or use scorer('exact')")
        got = last_number(output)
        if got is None:
            return 0.0
        bound = self.tolerance * abs(target) if self.relative else self.tolerance
        return float(abs(got - target) <= bound)


@dataclass(frozen=True)
class _Regex:
    pattern: re.Pattern[str] | None  # None: each task's gold is its pattern

    def __call__(self, task: Task, output: str) -> float:
        pattern = self.pattern
        if pattern is None:
            pattern = _compile(_gold(task, "regex"), f"scorer 'regex': the gold of task {task.id!r}")
        return float(pattern.search(output) is not None)


@dataclass(frozen=True)
class _Command:
    argv: tuple[str, ...]
    timeout: float

    def __call__(self, task: Task, output: str) -> float:
        payload = {"task": {"id": task.id, "prompt": task.prompt, "gold": task.gold, "meta": task.meta},
                   "output": output}
        stdout, stderr, code = _run(self.argv, json.dumps(payload, ensure_ascii=False, default=str), self.timeout)
        where = f"grader {' '.join(self.argv)!r} on task {task.id!r}"
        if code != 0:
            raise AgentError(f"{where} exited with code {code}; stderr ends: {quoted(stderr[-500:], 500)}")
        value = _read_grade(stdout)
        if value is None:
            raise AgentError(f"{where} printed no number on its last line (want 0.7 or {{\"reward\": 0.7}}); "
                             f"stdout ends: {quoted(stdout[-300:], 300)}; stderr ends: {quoted(stderr[-300:], 300)}")
        if not 0.0 <= value <= 1.0:
            raise AgentError(f"{where} printed {value}, outside [0, 1]")
        return value


def _read_grade(stdout: str) -> float | None:
    """The grade on the last non-empty line. _read_grade('ok\\n{"reward": 0.5}\\n') == 0.5"""
    last = (stdout.strip().splitlines() or [""])[-1].strip()
    try:
        return float(last)
    except ValueError:
        pass
    try:
        value: Any = json.loads(last)
    except ValueError:
        return None
    value = value.get("reward") if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _run(argv: Sequence[str], stdin: str, timeout: float) -> tuple[str, str, int]:
    """Run a grader to its end; a timeout kills whatever it started."""
    try:
        finished = run_process(argv, timeout=timeout, stdin=stdin)
    except OSError as exc:
        raise UserError(f"cannot start grader {argv[0]!r}: {exc}; check its path and that it is executable") from None
    except OutputTooLarge as exc:
        raise AgentError(f"grader {' '.join(argv)!r} {exc}; only its last line is read, so make it print "
                         "less") from None
    except TimedOut:
        raise AgentError(f"grader {' '.join(argv)!r} did not finish within {timeout}s and was killed; if it needs "
                         "longer, raise its timeout (a spec: scorer: {command: [...], timeout: SECONDS}; Python: "
                         "scorer(command=[...], timeout=SECONDS))") from None
    return finished.stdout, finished.stderr, finished.returncode


def _command(command: Sequence[str], timeout: float) -> _Command:
    if isinstance(command, (str, bytes)) or not command:
        raise UserError(f"command must be a non-empty list of arguments like ['python', 'grade.py']; got {command!r}")
    argv = tuple(str(arg) for arg in command)
    if shutil.which(argv[0]) is None:
        raise UserError(f"grader executable {argv[0]!r} was not found (or is not executable); "
                        "give its full path, or put it on PATH")
    if not timeout > 0:
        raise UserError(f"timeout must be a positive number of seconds; got {timeout}")
    return _Command(argv, float(timeout))


def scorer(name: str | None = None, *, command: Sequence[str] | None = None, pattern: str | None = None,
           tolerance: float = 1e-6, relative: bool = False, timeout: float = GRADER_TIMEOUT) -> Reward:
    """A reward function by name (one of SCORER_NAMES) or an external grader `command`.

    Exactly one of `name` and `command`. `pattern` is for "regex" only; `tolerance` (absolute, or a
    fraction of |gold| when `relative`) for "numeric"; `timeout` (seconds) for `command`. Setup
    mistakes raise `UserError` here; missing or unusable gold raises `UserError` at scoring time,
    naming the task. A grader program reads `{"task": {"id", "prompt", "gold", "meta"}, "output"}`
    as JSON on stdin and prints a number in [0, 1] (or `{"reward": x}`) on its last non-empty
    line; a non-zero exit, a timeout, or a missing or out-of-range number raises `AgentError`.
    """
    if (name is None) == (command is None):
        raise UserError("give scorer() exactly one of a name (" + ", ".join(SCORER_NAMES) + ") and command=[...]")
    if command is not None:
        return _command(command, timeout)
    if pattern is not None and name != "regex":
        raise UserError(f"pattern= is for scorer('regex'), not scorer({name!r})")
    if name in _TEXT_SCORERS:
        return _Text(name)
    if name == "numeric":
        if not tolerance >= 0:
            raise UserError(f"tolerance must be a number >= 0; got {tolerance}")
        return _Numeric(float(tolerance), relative)
    if name == "regex":
        return _Regex(None if pattern is None else _compile(pattern, "scorer('regex', pattern=...)"))
    raise UserError(f"unknown scorer {name!r}; choose one of {', '.join(SCORER_NAMES)}, or pass command=[...]")


# --- LLM judge ------------------------------------------------------------------------------

_NUM = r"(?<![\d.])[-+]?\d+(?:\.\d+)?"  # never inside a longer number: a digit run is read once
_DEN = r"\s*(?:/|out\s+of)\s*(?P<{}>\d+(?:\.\d+)?)"
_FILLER = r"[\s:=*\"'`-]*?"  # what may stand between "score" and its number: ": ", " = ", "\": ", ":** "
_KEYWORD = re.compile(  # Score: 7, score = 9.5 out of 10, "score": 7, Final score is **8**, Score: 85%
    rf"\bscore\b{_FILLER}(?:(?:is|of|was)\b{_FILLER})?(?P<n>{_NUM})(?:{_DEN.format('d')}|(?P<pct>\s*%))?",
    re.IGNORECASE)
_RATIO = re.compile(rf"(?P<n>{_NUM}){_DEN.format('d')}|\*\*\s*(?P<b>{_NUM})\s*\*\*", re.IGNORECASE)  # 7/10, **8**
_PERCENT = re.compile(rf"(?P<n>{_NUM})(?P<pct>\s*%)")  # 80%: read after the forms above ("7/10, 90% sure" is 0.7)
_BARE = re.compile(rf"(?P<n>{_NUM})(?:{_DEN.format('d')})?")
_REMINDER = ("\n\nYour previous reply did not end with a score I could read. Reply again, ending with "
             "one line of the form 'Score: N/{scale}', where N is a number from 0 to {scale}.")
_UNCLEAR = "; a decimal score up to 1 ('0.9') is read only with its denominator ('0.9/1', '0.5/{scale}')"
_NO_GOLD = "(none given: grade by the rubric alone)"


_TAIL = 4000  # the score ends a reply; what comes before it is not read
_SPACE = re.compile(r"\s")


def parse_score(reply: str, scale: int) -> float | None:
    """The judge's score as a fraction of 1, or None. parse_score("Score: 7/10", 10) == 0.7

    The last "score ..." phrase wins; without one, the last "N/M", "N out of M" or **N**; then the
    last "N%" (a confidence after a score is not the score); then a last line that is only a
    number. A denominator in the reply overrides `scale`, and a score past `scale` takes the one
    the reply gives the same number elsewhere ("30 out of 100 ... Score: 30" is 0.3). A score
    still outside [0, 1] is unreadable (None), never clamped: parse_score("Score: 85", 10) is
    None. On a scale above 1, so is a decimal above 0 and at most 1 ("0.9", "1.0") unless the
    reply states its denominator ("0.9/1", "0.5/10", "90%"): read on `scale` it would be a tenth
    of what a judge grading from 0 to 1 meant. Whole numbers ("0", "1") are read on `scale`. Only
    the reply's last 4,000 characters are read (a word the cut splits is left out).
    """
    text = _tail(reply)
    for match in (_last(_KEYWORD, text), _last(_RATIO, text), _last(_PERCENT, text), _bare_last_line(text)):
        if match is not None:
            return _fraction(match, scale, text)
    return None


def _tail(reply: str) -> str:
    if len(reply) <= _TAIL:
        return reply
    tail = reply[-_TAIL:]
    space = _SPACE.search(tail)
    return "" if space is None else tail[space.start():]


def _bare_last_line(text: str) -> re.Match[str] | None:
    last_line = next((line for line in reversed(text.splitlines()) if line.strip()), "")
    return _BARE.fullmatch(last_line.strip().strip("*#`").rstrip(".").strip())


def _fraction(match: re.Match[str], scale: int, text: str) -> float | None:
    groups = match.groupdict()
    written = groups.get("n") or groups["b"] or ""
    number = float(written)
    ambiguous = scale > 1 and "." in written and 0 < number <= 1  # "0.9": of 1, or of 10?
    den = _denominator(groups)
    if den is None and (ambiguous or not 0 <= number <= scale):
        den = _stated(text, number)
    if den is None and ambiguous:
        return None
    value = number / (scale if den is None else den)
    return value if 0.0 <= value <= 1.0 else None


def _denominator(groups: dict[str, str | None]) -> float | None:
    """The denominator a match states: N/M, N out of M, N%."""
    den = groups.get("d")
    if den and float(den) > 0:
        return float(den)
    return 100.0 if groups.get("pct") else None


def _stated(text: str, number: float) -> float | None:
    """The denominator of the last "N/M", "N out of M" or "N%" in `text` whose N is `number`."""
    for match in sorted([*_RATIO.finditer(text), *_PERCENT.finditer(text)], key=re.Match.start, reverse=True):
        if match["n"] is not None and float(match["n"]) == number:
            return _denominator(match.groupdict())
    return None


class Judge:
    """A reward that asks `model` to grade each output against `rubric` (see `llm_judge`)."""

    def __init__(self, model: Model, rubric: str, *, scale: int, template: str) -> None:
        self.model, self.rubric, self.scale, self.template = model, rubric, scale, template
        self.unparseable = 0  # replies that held no readable score, retries included
        self._lock = threading.Lock()

    def prompt(self, task: Task, output: str) -> str:
        gold = _NO_GOLD if task.gold is None else task.gold
        return templates.fill(self.template, rubric=self.rubric, prompt=task.prompt, gold=gold, output=output,
                              scale=self.scale)

    def __call__(self, task: Task, output: str) -> float:
        prompt = self.prompt(task, output)
        for asked in (prompt, prompt + _REMINDER.format(scale=self.scale)):  # one retry, with a reminder
            reply = as_text(self.model(asked), "the model given to llm_judge()", what="the reply", strict=True)
            score = parse_score(reply, self.scale)
            if score is not None:
                return score
            with self._lock:
                self.unparseable += 1
        unclear = _UNCLEAR.format(scale=self.scale) if self.scale > 1 else ""
        raise AgentError(f"judge gave no readable score for task {task.id!r}, twice{unclear}; last reply ends: {quoted(reply[-300:], 300)}")


def llm_judge(model: Model, rubric: str, *, scale: int = 10, template: str | None = None) -> Judge:
    """A reward from a model's grade: it sees the task prompt, the gold (when known), the output and
    the rubric, and answers with a score from 0 to `scale`; the reward is score / scale.

    `template` replaces `prompts/judge.txt`; it may use the fields {rubric} {prompt} {gold}
    {output} {scale} and must use {output}. A reply without a readable score (see `parse_score`:
    a score outside 0 to `scale`, or on a scale above 1 a decimal score up to 1 such as "0.9", is
    unreadable unless the reply states its denominator) gets one retry with a reminder asking for
    "Score: N/scale"; a second one raises `AgentError`, so the rollout fails visibly instead of
    passing for a zero, a tenth of its mark or a full mark. `judge.unparseable` counts such
    replies. A reply that is
    not a str (an async model's coroutine, None, a reply object) raises `UserError` at once.
    """
    if not callable(model):
        raise UserError(f"llm_judge needs a model: a callable prompt -> text; got {model!r}")
    plain_callable(model, "llm_judge's model")
    if not isinstance(rubric, str) or not rubric.strip():
        raise UserError("llm_judge needs a rubric: say in words what a good output does")
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise UserError(f"scale must be a whole number >= 1; got {scale!r}")
    text = templates.template("judge") if template is None else _check_template(template)
    return Judge(model, rubric, scale=scale, template=text)


def _check_template(text: str) -> str:
    fields = {"rubric", "prompt", "gold", "output", "scale"}
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as exc:
        raise UserError(f"judge template is not a format string ({exc}); write literal braces as {{{{ }}}}") from None
    if not used <= fields or "output" not in used:
        raise UserError(f"judge template may use only {{{'}, {'.join(sorted(fields))}}} and must use {{output}}; "
                        f"it uses {sorted(used)}")
    return text
