"""The live part of what a run shows: which ledger it writes, a progress bar, and warnings as they
come, all fed by the run's events. What the events told is kept (`ProgressView.seen`) for the
report at the end (`agentdescent.cli.report`), which the result alone cannot give: how the run
started and the diffs themselves.

    view = ProgressView(Console())
    with view:
        result = evolve(..., on_event=view.on_event)

The bar's counts, clock and bill stay whole at the widths terminals have: its status (the newest
held-out reward) gives way first, then the bar itself; why the run stopped is a line of its own
under it, as where there is no bar.
The clock is the run's: a watcher that joins a run, or replays one that ended, says when it began
(`since`) and, for an ended one, when it ended (`ended_at`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.table import Column
from rich.text import Text

from agentdescent import events as ev
from agentdescent.cli.terminal import kept
from agentdescent.types import Diff

BAR = 12  # cells: the bar, its counts, clock, bill and a held-out status fit in 80 columns


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
    CI) there is no bar to redraw: each round ends in a line of its own instead. `since`: when the
    run began (a time.time() reading), for a view that joins it late; else when its RunStarted comes."""

    def __init__(self, console: Console, *, since: float | None = None) -> None:
        self.console = console
        self.seen = Seen()
        self.lines = not console.is_terminal
        self._since = since  # the run's clock: when it began, and when its RunEnded came
        self._until: float | None = None
        self._ended_at: float | None = None  # when the run ended, as the caller knows it: the clock stops there
        self._ended: str | None = None  # why it stopped, said under the bar once the bar is done
        whole = Column(no_wrap=True)  # never cut: the status gives way to a narrow terminal, then the bar
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=BAR),
            MofNCompleteColumn(table_column=whole), TextColumn("{task.fields[unit]}"), _Clock(self.elapsed),
            TextColumn("{task.fields[spent]}"), _Status(),
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> "ProgressView":
        if not self.lines:
            self._progress.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if not self.lines:
            self._progress.__exit__(kind, exc, tb)
            self._say_ended()

    def elapsed(self) -> float | None:
        """Seconds the run has gone (or went, once ended); None before it started."""
        if self._since is None:
            return None
        return (self._ended_at or self._until or time.time()) - self._since

    def ended_at(self, when: float) -> None:
        """The run ended at `when` (a time.time() reading): its clock stops there, whatever events
        come (a watcher replaying an ended run's events gets them now, not when they happened)."""
        self._ended_at = when

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
        self._say_ended()  # an earlier process of the run ended before this one took it up
        self.seen.started = event
        self._until = None
        self._since = self._since or time.time()
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
        """The bar moved on, or, where there is no bar, its news as a line: a measurement, a round's end."""
        started, task = self.seen.started, self._task
        assert started is not None and (self.lines or task is not None)  # events reach here after RunStarted
        if isinstance(event, ev.Evaluated):
            line, status = held_out(event)
            if self.lines:
                self._say(line, soft_wrap=True)
            elif task is not None:
                self._progress.update(task, status=status)
        elif isinstance(event, ev.Spent) and task is not None and not self.lines:
            self._progress.update(task, spent=_calls(event.calls))
        elif isinstance(event, ev.RoundEnded):
            if self.lines:
                self._say(f"round {event.round + 1} of {started.rounds} done: {_calls(event.calls) or 'no calls'}",
                          soft_wrap=True)
            elif task is not None:
                self._progress.advance(task)
        elif isinstance(event, ev.RunEnded):
            self._until = self._until or time.time()
            self._ended = event.reason
            if self.lines:  # no bar to wait for: said at once
                self._say_ended()

    def _say_ended(self) -> None:
        if self._ended is not None:
            self._say(escape(f"ended: {self._ended}"), soft_wrap=True)
            self._ended = None

    def _say(self, markup: str, *, soft_wrap: bool) -> None:
        """One line above the live bar (the progress console prints there while it runs)."""
        self._progress.console.print(markup, soft_wrap=soft_wrap, highlight=False)


def held_out(event: ev.Evaluated) -> tuple[str, str]:
    """A held-out measurement as a line of its own and as the bar's status. A resumed run sends
    where it started from again (`again`): not a new measurement, so it reads as the start,
    beside the best so far, which the bar shows."""
    if event.again:
        return (f"held-out at the start {event.held_out_reward:.3f} (version {event.version}); "
                f"best so far {event.best_reward:.3f}", f"held-out best {event.best_reward:.3f}")
    reward = f"{'≤ ' if event.partial else ''}{event.held_out_reward:.3f}"
    mark = " (promoted)" if event.promoted else ""
    return f"held-out {reward} at version {event.version}{mark}", f"held-out {reward}{mark}"


class _Clock(ProgressColumn):
    """The run's time, as rich's TimeElapsedColumn shows a task's: 0:01:05."""

    def __init__(self, elapsed: Callable[[], float | None]) -> None:
        self._elapsed = elapsed
        super().__init__(table_column=Column(no_wrap=True))

    def render(self, task: Task) -> Text:
        seconds = self._elapsed()
        return Text("-:--:--" if seconds is None else str(timedelta(seconds=max(0, int(seconds)))), style="progress.elapsed")


class _Status(ProgressColumn):
    """The bar's last column, on one line cut (…) to the room the others leave; plain text, never
    read as markup."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=False))  # may shrink: rich shrinks the wider of it and the bar first

    def render(self, task: Task) -> Text:
        return Text(kept(task.fields["status"]), no_wrap=True, overflow="ellipsis")


def _calls(calls: int) -> str:
    """_calls(0) == ""; _calls(12) == "12 calls": the bill so far, beside the bar."""
    return plural(calls, "call") if calls else ""
