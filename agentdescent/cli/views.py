"""The live part of what a run shows: which ledger it writes, a progress bar, and warnings as they
come, all fed by the run's events. What the events told is kept (`ProgressView.seen`) for the
report at the end (`agentdescent.cli.report`), which the result alone cannot give: how the run
started and the diffs themselves.

    view = ProgressView(Console())
    with view:
        result = evolve(..., on_event=view.on_event)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from agentdescent import events as ev
from agentdescent.types import Diff


def plural(count: int, noun: str) -> str:
    """plural(1, "worker") == "1 worker"; plural(8, "worker") == "8 workers"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


@dataclass(kw_only=True)
class Seen:
    """What the events of one run told that its result does not: how it started, and each diff by id."""

    started: ev.RunStarted | None = None
    diffs: dict[str, Diff] = field(default_factory=dict)


def ledger_line(started: ev.RunStarted) -> str:
    """Which ledger the run writes, and whether it carries on from an earlier run."""
    if started.resumed_round is not None:
        return f"resuming an interrupted run at round {started.resumed_round + 1} (ledger {started.ledger})"
    if started.continued_from is not None:
        said = f"continuing the ledger at {started.ledger} from version {started.continued_from}"
    elif started.temporary:
        said = f"new ledger at {started.ledger} (a temporary folder)"
    else:
        said = f"new ledger at {started.ledger}"
    return said


class ProgressView:
    """A rich progress bar fed by the run's events; lines the user must see (the ledger, warnings)
    are printed above it as they arrive. Where the console is not a terminal (a pipe, a log file,
    CI) there is no bar to redraw: each round ends in a line of its own instead."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.seen = Seen()
        self.lines = not console.is_terminal
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(), TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(), TextColumn("{task.fields[spent]}"),
            TextColumn("{task.fields[status]}", markup=False),  # a stop reason may quote outside text: never markup
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> "ProgressView":
        if not self.lines:
            self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.lines:
            self._progress.__exit__(*exc)

    def on_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted):
            self._started(event)
        elif isinstance(event, ev.Warned):
            self._say(f"[yellow]warning: {escape(event.message)}[/yellow]", soft_wrap=False)
        elif isinstance(event, ev.DiffOutcome) and event.diff is not None:
            self.seen.diffs[event.diff.id] = event.diff
        elif self.seen.started is not None:
            self._advance(event)

    def _started(self, event: ev.RunStarted) -> None:
        self.seen.started = event
        self._say(escape(ledger_line(event)), soft_wrap=True)  # a path to copy: never broken across lines
        done = event.resumed_round or 0
        if self.lines:
            self._say(f"evolving: at most {plural(event.rounds, 'round')}, train {event.train} / held-out "
                      f"{event.held_out} tasks", soft_wrap=True)
            return
        if self._task is not None:  # the same run again, resumed by another process: one bar goes on
            self._progress.update(self._task, total=event.rounds, completed=done, spent=_calls(event.calls))
            return
        self._task = self._progress.add_task(
            "evolving", total=event.rounds, completed=done, unit="round" if event.rounds == 1 else "rounds",
            status=f"train {event.train} / held-out {event.held_out} tasks", spent=_calls(event.calls),
        )

    def _advance(self, event: ev.Event) -> None:
        if self.lines:
            self._line(event)
            return
        assert self._task is not None
        if isinstance(event, ev.Evaluated):
            mark = " (promoted)" if event.promoted else ""
            bound = "≤ " if event.partial else ""
            self._progress.update(self._task, status=f"held-out {bound}{event.held_out_reward:.3f}{mark}")
        elif isinstance(event, ev.Spent):
            self._progress.update(self._task, spent=_calls(event.calls))
        elif isinstance(event, ev.RoundEnded):
            self._progress.advance(self._task)
        elif isinstance(event, ev.RunEnded):
            self._progress.update(self._task, status=event.reason)

    def _line(self, event: ev.Event) -> None:
        """The bar's news as a line: a round's end, and the run's."""
        assert self.seen.started is not None  # events reach here only after RunStarted
        if isinstance(event, ev.Evaluated):
            self._say(f"held-out {'≤ ' if event.partial else ''}{event.held_out_reward:.3f} at version {event.version}"
                      f"{' (promoted)' if event.promoted else ''}", soft_wrap=True)
        elif isinstance(event, ev.RoundEnded):
            self._say(f"round {event.round + 1} of {self.seen.started.rounds} done: {_calls(event.calls) or 'no calls'}", soft_wrap=True)
        elif isinstance(event, ev.RunEnded):
            self._say(escape(f"ended: {event.reason}"), soft_wrap=True)

    def _say(self, markup: str, *, soft_wrap: bool) -> None:
        """One line above the live bar (the progress console prints there while it runs)."""
        self._progress.console.print(markup, soft_wrap=soft_wrap, highlight=False)


def _calls(calls: int) -> str:
    """_calls(0) == ""; _calls(12) == "12 calls": the bill so far, beside the bar."""
    return plural(calls, "call") if calls else ""
