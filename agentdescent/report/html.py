"""The report as one self-contained HTML page: its style inline, its plots embedded as base64 PNG,
no script and nothing fetched from anywhere.

Every text that comes from the ledger or the run (targets, commit messages, reasons, keys, file
content) is untrusted: it goes through `escape` on its way in (which redacts the keys of this
shell's environment in it, then HTML-escapes it), and nothing is inserted raw but the page's own
markup. Each part opens with a plain-language caption, so that someone who has
never seen a run can read it. Left out: gathering the data (`data`) and drawing (`plots`).
"""

from __future__ import annotations

import base64
import difflib
import html
from collections import Counter
from collections.abc import Iterable, Sequence

from agentdescent.agents.redact import redact
from agentdescent.quoting import shown
from agentdescent.report.data import ReportData
from agentdescent.report.plots import per_round
from agentdescent.runs.status import said_tokens
from agentdescent.types import OUTCOME_MEANINGS as MEANINGS
from agentdescent.usage import money_spent

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #212529; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid #dee2e6; }
.caption { color: #495057; max-width: 60em; } .note { background: #fff3bf; padding: .5em 1em; border-radius: 4px; }
table { border-collapse: collapse; margin: .5em 0; font-size: 13px; } th, td { border: 1px solid #dee2e6;
padding: 3px 8px; text-align: left; vertical-align: top; } th { background: #f1f3f5; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 1em; } dt { font-weight: 600; }
pre { background: #f8f9fa; padding: .6em; overflow-x: auto; font-size: 12.5px; }
.add { color: #2b8a3e; background: #ebfbee; } .del { color: #c92a2a; background: #fff5f5; } .hunk { color: #1971c2; }
code, .mono { font-family: ui-monospace, monospace; }
img { max-width: 100%; }
"""


OPENING = '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
GENERATOR = '<meta name="generator" content="AgentDescent report">'  # how a later report knows the file is one
TITLE = "AgentDescent report: "
HEAD_BYTES = 512  # the part of a file `written_here` reads


def escape(text: str) -> str:
    """`text` for the page: each key in it redacted, what a browser would not show as written (a
    bidi override turning a rule's words around, a zero-width mark) as its visible escape, then
    HTML-escaped. Redacting comes first: `redact` does not read a named reference, so a key holding
    `&` or `"` is no longer found once escaped (`&amp;`, `&quot;`)."""
    return html.escape(shown(redact(text)))


def page(data: ReportData, images: dict[str, bytes | str]) -> str:
    """The whole page for `data`; `images` holds each plot's PNG bytes, or the text to show instead."""
    title = f"{TITLE}{data.target}"
    parts = [
        f"<h1>{escape(title)}</h1>", _intro(data), _summary(data), _notes(data.notes),
        _rewards(data, images["rewards"]), _calls(data, images["calls"]), _outcomes(data), _lineage(data),
        _change(data), _changed_keys(data),
    ]
    return (f'{OPENING}{GENERATOR}<title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def written_here(head: bytes) -> bool:
    """Whether a file starting with `head` (its first `HEAD_BYTES`) is a page `page` wrote, which a
    new report may replace: the opening, then the generator tag, or the report's title (a page of
    a version that wrote no tag)."""
    opening = OPENING.encode()
    return head.startswith(opening) and head[len(opening):].startswith((GENERATOR.encode(), f"<title>{TITLE}".encode()))


def _intro(data: ReportData) -> str:
    return _caption(
        "AgentDescent improves an artifact (a prompt, a set of rules, a skill folder) in rounds. In each round "
        "several workers try the current version on a few training tasks, each proposes an edit (a diff), and "
        "an aggregator keeps only the diffs that make the version score better on a paired test, then commits "
        "them to a git ledger as a new version. Tasks held out from training measure whether a version really "
        "is better; the best one (the ledger's stable version) is the run's result. "
        f"Written {data.written_at} from {data.source}.")


def _summary(data: ReportData) -> str:
    spent = "not recorded" if data.calls is None else str(data.calls)
    if data.tokens:
        spent += f", {said_tokens(data.tokens, data.estimated_tokens)}"
    if data.cost_usd:
        spent += f", {money_spent(data.cost_usd, data.unpriced)}"
    rounds = f"{len(data.steps)}" + (f" of at most {data.rounds_max}" if data.rounds_max else "")
    rows = [
        ("what was evolved", f"{data.target} ({data.kind or 'unknown kind'}; artifact {data.artifact_id!r})"),
        *([("state", f"{data.state}: {data.state_message}" if data.state_message else data.state)] if data.state else []),
        ("held-out reward", f"{_reward(data.initial_reward)} at the start -> {_reward(data.final_reward)} at the end"),
        ("versions", f"{_version(data.initial_version)} (start) -> {_version(data.final_version)} (the result, stable)"),
        ("why it stopped", data.stop_reason or "not recorded"),
        ("rounds", rounds), ("calls", spent), ("ledger", data.ledger),
    ]
    body = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows)
    return (f"<dl>{body}</dl>" + _caption(
        "Rewards go from 0 (every task failed) to 1 (every task passed). Calls are rollouts (one task tried on "
        "one version) and proposals (one edit asked for); with a real model each is one model call."))


def _notes(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    return "<h2>What this report lacks</h2>" + "".join(f'<p class="note">{escape(n)}</p>' for n in notes)


def _rewards(data: ReportData, image: bytes | str) -> str:
    return ("<h2>1. Reward per round</h2>" + _caption(
        "Green: the train reward of each round's candidate (the current version with the round's accepted "
        "diffs) in the acceptance test; grey: the version it started from, on the same tasks. Blue squares: "
        "the held-out reward, only where it was measured (round 0 is the start). The star: the held-out reward "
        "of the result.") + _image(image, "reward per round"))


def _calls(data: ReportData, image: bytes | str) -> str:
    per_step = zip(per_round(data, "calls"), per_round(data, "tokens"), per_round(data, "cost_usd"))
    rows = [(s.round + 1, s.base_version, _version(s.version), len(s.diffs), _counts(s.outcomes),
             f"{_reward(s.acceptance_head)} -> {_reward(s.acceptance_candidate)}", _reward(s.held_out),
             n, s.calls, tokens, f"${cost:.4f}") for s, (n, tokens, cost) in zip(data.steps, per_step)]
    table = _table(("round", "from version", "committed version", "diffs", "outcomes", "train reward (head -> candidate)",
                    "held-out reward", "calls in the round", "calls so far", "tokens in the round",
                    "cost in the round"), rows) if rows else _caption("No round recorded.")
    spent = f" The run spent {said_tokens(data.tokens, data.estimated_tokens)} in all." if data.tokens else (
        " No tokens were recorded (the run's agent and reflector report none, as plain functions do).")
    if data.steps and data.calls is not None and data.calls > data.steps[-1].calls:
        spent += (f" The run's total ({data.calls}) also counts the {data.calls - data.steps[-1].calls} calls made "
                  "after its last recorded round (measuring the result on the held-out tasks, or a round cut short).")
    return ("<h2>2. Calls per round</h2>" + _caption(
        "Bars: the calls each round made (the first includes measuring the starting version); line: the running "
        "total. The table has each round's tokens and cost beside its calls (the cost as the CLI agents report it, "
        "or at the spec's price for the calls that report none; zero where neither is known; a ledger of an older "
        "version records them for the whole run only)." + spent) + _image(image, "calls per round")
            + table)


def _outcomes(data: ReportData) -> str:
    if not data.outcomes:
        return "<h2>3. What became of every diff</h2>" + _caption("No diff outcome is recorded.")
    legend = _table(("outcome", "diffs", "what it means"),
                    [(kind, n, MEANINGS.get(kind, "")) for kind, n in Counter(o.kind for o in data.outcomes).most_common()])
    rows = [(_round(o.step), o.diff_id, o.author or "-", o.kind, o.reason, _version(o.version)) for o in data.outcomes]
    return ("<h2>3. What became of every diff</h2>" + _caption(
        "Every diff a worker proposed gets exactly one outcome, with the aggregator's reason. In a reason, "
        "P(improve)=p (bar b), +w/-l on n tasks means: the probability that the change beats the current version "
        "on n paired tasks is p, it had to pass b to land, and it fixed w tasks and broke l.") + legend
            + _table(("round", "diff", "author (worker)", "outcome", "reason", "version landed"), rows, mono=(1,)))


def _lineage(data: ReportData) -> str:
    if not data.commits:
        return "<h2>4. The commits</h2>" + _caption("No commit to show.")
    rows = []
    for c in data.commits:
        diffs = ", ".join(f"{d.diff_id} by {d.author or '-'}" for d in c.diffs) or "-"
        keys = ", ".join(c.keys) if data.named_keys else (f"{len(c.keys)} rule{'' if len(c.keys) == 1 else 's'}" if c.keys else "")
        rows.append((c.version, _role(data, c.version), c.sha[:10], c.round or "-", c.message, diffs, keys or "-"))
    return ("<h2>4. The commits</h2>" + _caption(
        "The ledger is a git repository: each version is one commit on its dev branch, oldest first here. For "
        "each: the diffs that went into it and the worker that proposed each (w0, w1, ...), read from the "
        "commit's trailers. A version after the result was committed but did not do better on the held-out "
        "tasks, so it was not promoted to stable.")
            + _table(("version", "role", "commit", "round", "message", "diffs (by worker)", "keys changed"), rows,
                     mono=(2, 5)))


def _change(data: ReportData) -> str:
    if not data.named_keys:
        return _rules_change(data)
    head = "<h2>5. The final change</h2>" + _caption(
        f"The artifact at version {_version(data.initial_version)} (where the run started) against version "
        f"{_version(data.final_version)} (its result), one section per key"
        f"{' (file)' if data.folder else ''}: lines starting with + were added, with - removed.")
    sections = []
    for change in data.changes():
        a, b = data.before.get(change.key), data.after.get(change.key)
        lines = difflib.unified_diff((a or "").splitlines(), (b or "").splitlines(), lineterm="",
                                     fromfile=f"a/{change.key}" if a is not None else "/dev/null",
                                     tofile=f"b/{change.key}" if b is not None else "/dev/null")
        sections.append(f"<h3 class=\"mono\">{escape(f'{change.key} ({change.change})')}</h3><pre>{_diff_lines(lines)}</pre>")
    return head + ("".join(sections) or _caption("No change: the result is the artifact as it started."))


def _rules_change(data: ReportData) -> str:
    """A rule set's change as one list of rules, each by its text: its keys are hashes, which say nothing."""
    head = "<h2>5. The final change</h2>" + _caption(
        f"The rules at version {_version(data.initial_version)} (where the run started) against version "
        f"{_version(data.final_version)} (its result): lines starting with + are rules the run added, with - rules it "
        "removed; the rules it kept are left out.")
    lines = []
    for c in data.changes():  # a rule's key is its text's hash: one is added or removed, never modified
        lines += [f"-{data.before[c.key]}"] if c.change != "added" else []
        lines += [f"+{data.after[c.key]}"] if c.change != "removed" else []
    return head + (f"<pre>{_diff_lines(lines)}</pre>" if lines else
                   _caption("No change: the result is the artifact as it started."))


def _changed_keys(data: ReportData) -> str:
    if not data.named_keys:
        return ""  # the rules themselves are the list above
    changes = data.changes()
    what = "files" if data.folder else "keys"
    title = f"<h2>6. The {what} changed</h2>"
    caption = _caption("The files of the folder the run added, removed or modified." if data.folder else
                       "The artifact is held as keys; those the run added, removed or modified.")
    if not changes:
        return title + caption + _caption(f"No {what} changed.")
    return title + caption + _table(("change", "file" if data.folder else "key"), [(c.change, c.key) for c in changes],
                                    mono=(1,))


def _diff_lines(lines: Iterable[str]) -> str:
    out = []
    for line in lines:
        kind = "hunk" if line.startswith("@@") else "" if line.startswith(("+++", "---")) else \
            "add" if line.startswith("+") else "del" if line.startswith("-") else ""
        text = escape(line)
        out.append(f'<span class="{kind}">{text}</span>' if kind else text)
    return "\n".join(out)


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, mono: Sequence[int] = ()) -> str:
    """A table of plain text cells, every one escaped; the columns in `mono` in a fixed-width font."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f'<td{" class=mono" if i in mono else ""}>{escape(str(cell))}</td>' for i, cell in enumerate(row)) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _image(image: bytes | str, alt: str) -> str:
    if isinstance(image, bytes):
        return f'<p><img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(image).decode("ascii")}"></p>'
    return f'<p class="note">{escape(image)}</p>'


def _caption(text: str) -> str:
    return f'<p class="caption">{escape(text)}</p>'


def _role(data: ReportData, version: int) -> str:
    if version == data.final_version:
        return "the result (stable)" + (" and the start" if version == data.initial_version else "")
    if version == data.initial_version:
        return "the start"
    if data.final_version is not None and version > data.final_version:
        return "not promoted"
    return ""


def _counts(outcomes: dict[str, int]) -> str:
    """_counts({"committed": 2, "duplicate": 1}) == "committed 2, duplicate 1" """
    return ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items(), key=lambda kv: -kv[1])) or "-"


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _version(value: int | None) -> str:
    return "-" if value is None else str(value)


def _round(step: int | None) -> str:
    return "-" if step is None else str(step + 1)
