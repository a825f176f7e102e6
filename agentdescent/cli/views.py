"""What the command shows: a live progress bar fed by a run's events, and the report at its end."""

from __future__ import annotations

import difflib

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.syntax import Syntax
from rich.table import Table

from agentdescent import events as ev
from agentdescent.artifacts.strategies import Strategy
from agentdescent.result import EvolveResult


class ProgressView:
    """A rich progress bar fed by the run's events."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("rounds"),
            TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=console, transient=False,
        )
        self._task = None

    def __enter__(self) -> "ProgressView":
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)

    def on_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunStarted):
            self._task = self._progress.add_task(
                "evolving", total=event.rounds, status=f"train {event.train} / held-out {event.held_out}"
            )
        elif isinstance(event, ev.Evaluated) and self._task is not None:
            mark = " (promoted)" if event.promoted else ""
            self._progress.update(self._task, status=f"held-out {event.held_out_reward:.3f}{mark}")
        elif isinstance(event, ev.RoundEnded) and self._task is not None:
            self._progress.advance(self._task)
        elif isinstance(event, ev.RunEnded) and self._task is not None:
            self._progress.update(self._task, status=event.reason)


def report(console: Console, result: EvolveResult, elapsed: float, strategy: Strategy) -> None:
    scores = Table(title="Held-out reward", show_header=True)
    scores.add_column("before")
    scores.add_column("after")
    scores.add_column("rounds")
    scores.add_column("calls")
    scores.add_column("time")
    scores.add_row(
        f"{result.initial_reward:.3f}", f"[bold green]{result.final_reward:.3f}[/bold green]",
        str(len(result.history)), str(result.usage.calls), f"{elapsed:.2f} s",
    )
    console.print(scores)
    with result.ledger as ledger:
        before = strategy.render(ledger.snapshot("artifact", result.initial_version))
    change = difflib.unified_diff(
        before.splitlines(), result.rendered.splitlines(), lineterm="",
        fromfile=f"version {result.initial_version}", tofile=f"version {result.version}",
    )
    console.print("[bold]The learned change[/bold] (as the agent reads it; the ledger holds one file per key):")
    console.print(Syntax("\n".join(change) or "(no change)", "diff", word_wrap=True))
    outcomes = Table(title="What became of each diff")
    outcomes.add_column("outcome")
    outcomes.add_column("diffs", justify="right")
    outcomes.add_column("for example")
    for kind, count in sorted(result.outcomes().items(), key=lambda kv: -kv[1]):
        example = next(o for o in result.outcome_list if o.kind == kind)
        outcomes.add_row(kind, str(count), example.reason)
    console.print(outcomes)
    console.print(f"Stopped: {result.stop_reason}.")
    console.print(f"Ledger: {result.ledger_path}  (try: git -C {result.ledger_path} log --stat dev)")
