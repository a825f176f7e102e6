"""What became of every diff: a count per outcome with what the outcome means, then one row per
diff (its round, id, author, the change it proposed and the aggregator's reason), grouped by
outcome and in round order.

The change comes from the run's events (`DiffOutcome.diff`), so a diff the events did not carry
shows its reason alone. A landed diff that deletes text reads "removes": even when the learned
change shows no removal, because the rule went in and out within the run, the user sees it.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentdescent.artifacts.strategies import Strategy
from agentdescent.cli.terminal import kept, lines
from agentdescent.cli.views import Seen, plural
from agentdescent.result import EvolveResult
from agentdescent.types import OUTCOME_MEANINGS as MEANINGS
from agentdescent.types import Diff, Edit, Outcome

LANDED = ("committed", "fused")
MAX_LINES, MAX_CHARS = 6, 400  # of one edit's text: a whole file would drown the table


def diff_outcomes(console: Console, result: EvolveResult, strategy: Strategy, seen: Seen, *,
                  limit: int | None = 3) -> None:
    """The counts, then the diffs of each outcome: `limit` of each (and every landed removal), or
    all of them when `limit` is None."""
    if not result.outcome_list:
        console.print("No diffs were proposed.")
        return
    groups = _grouped(result.outcome_list)
    console.print(_counts(groups))
    show_key = getattr(strategy, "named_keys", True)  # AppendRules' keys are content hashes, which say nothing
    hidden = 0
    for kind, outcomes in groups.items():
        shown = outcomes if limit is None else _first(outcomes, limit, seen)
        hidden += len(outcomes) - len(shown)
        console.print(_table(kind, outcomes, shown, seen, show_key))
    _removal_note(console, groups, seen)
    if any("P(improve)" in o.reason for o in result.outcome_list):
        console.print(
            "P(improve)=p (bar b), +w/-l on n tasks: p is the posterior probability that the change beats "
            "the current version on n paired tasks, b the bar p must pass to land, w and l the tasks it "
            "fixed and broke.", style="dim", highlight=False)
    if hidden:
        console.print(f"{plural(hidden, 'more diff')} not listed: --all-diffs lists every one.", highlight=False)


def _grouped(outcomes: Sequence[Outcome]) -> dict[str, list[Outcome]]:
    order = {kind: i for i, kind in enumerate(MEANINGS)}
    groups: dict[str, list[Outcome]] = {}
    for outcome in sorted(outcomes, key=lambda o: (order.get(o.kind, len(order)), _round(o), o.author, o.diff_id)):
        groups.setdefault(outcome.kind, []).append(outcome)
    return groups


def _round(outcome: Outcome) -> int:
    """The 1-based round it was judged in; -1 when the outcome does not say."""
    return -1 if outcome.step is None else outcome.step + 1


def _first(outcomes: list[Outcome], limit: int, seen: Seen) -> list[Outcome]:
    """The first `limit`, and every landed removal past them (they are the easiest to miss)."""
    return [o for i, o in enumerate(outcomes) if i < limit or (o.kind in LANDED and _removes(seen.diffs.get(o.diff_id)))]


def _removes(diff: Diff | None) -> bool:
    return diff is not None and any(e.after is None for e in diff.edits)


def _counts(groups: dict[str, list[Outcome]]) -> Table:
    table = Table(title="What became of each diff", box=box.SIMPLE_HEAD)
    table.add_column("outcome", no_wrap=True)
    table.add_column("diffs", justify="right")
    table.add_column("what it means", overflow="fold")  # a word too long for the column is broken, never cut
    for kind, outcomes in groups.items():
        table.add_row(kind, str(len(outcomes)), MEANINGS.get(kind, ""))
    return table


def _table(kind: str, outcomes: list[Outcome], shown: list[Outcome], seen: Seen, show_key: bool) -> Table:
    title = f"{kind}: {plural(len(outcomes), 'diff')}"
    if len(shown) < len(outcomes):
        title += f", {len(shown)} shown"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("round", justify="right", no_wrap=True)
    table.add_column("diff", no_wrap=True)
    table.add_column("by", no_wrap=True)
    table.add_column("the change, and the reason for its outcome", ratio=1, overflow="fold")  # "(P(improve)=0.91" whole
    for o in shown:
        table.add_row(str(_round(o)) if o.step is not None else "-", Text(o.diff_id), Text(kept(o.author or "-")),
                      _change_and_reason(seen.diffs.get(o.diff_id), o, show_key))
    return table


def _change_and_reason(diff: Diff | None, outcome: Outcome, show_key: bool) -> Text:
    parts = [edit_text(e, show_key) for e in diff.edits] if diff is not None else []
    parts.append(Text(kept(outcome.reason), style="dim"))
    return Text("\n").join(parts)


def edit_text(edit: Edit, show_key: bool) -> Text:
    """One edit as a reader wants it: edit_text(Edit(key="k", before="x", after=None), False)
    reads "removes x"; an added key "adds ...", a changed one "changes k: old → new"."""
    where = kept(f"{edit.key}: ") if show_key else ""
    if edit.after is None:
        return Text.assemble(("removes ", "bold red"), (where + _clip(edit.before or ""), "red"))
    if edit.before == edit.after:
        return Text.assemble(("already has ", "dim"), where + _clip(edit.after))
    if not edit.before:
        return Text.assemble(("adds ", "bold green"), (where + _clip(edit.after), "green"))
    if "\n" not in edit.before.strip() and "\n" not in edit.after.strip():
        return Text.assemble(("changes ", "bold yellow"), f"{where}{_clip(edit.before)} → {_clip(edit.after)}")
    return Text.assemble(("changes ", "bold yellow"), where.rstrip(), "\n", _line_changes(edit.before, edit.after))


def _line_changes(before: str, after: str) -> Text:
    """The lines a multi-line edit takes out (-) and puts in (+), the ones it keeps left out."""
    changed = [line for line in difflib.ndiff(lines(before), lines(after)) if line.startswith(("+", "-"))]
    shown = [Text(kept(line), style="green" if line.startswith("+") else "red") for line in changed[:MAX_LINES]]
    if len(changed) > MAX_LINES:
        shown.append(Text(f"… {len(changed) - MAX_LINES} more changed lines", style="dim"))
    return Text("\n").join(shown)


def _clip(text: str) -> str:
    """Its first lines, cut to `MAX_CHARS`, with what rich's `Text` deletes kept (`kept`)."""
    clipped = "\n".join(lines(text.strip())[:MAX_LINES])[:MAX_CHARS]
    return kept(clipped if clipped == text.strip() else clipped + " …")


def _removal_note(console: Console, groups: dict[str, list[Outcome]], seen: Seen) -> None:
    removals = [o for kind in LANDED for o in groups.get(kind, []) if _removes(seen.diffs.get(o.diff_id))]
    if removals:
        rounds = sorted({_round(o) for o in removals})
        when = ("round " if len(rounds) == 1 else "rounds ") + ", ".join(map(str, rounds))
        console.print(f"{plural(len(removals), 'landed diff')} removed text ({when}), marked \"removes\" above; "
                      "a rule that went in and out within the run is not in the learned change.", highlight=False)
