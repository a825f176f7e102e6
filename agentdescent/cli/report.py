"""The report at the end of a run: the held-out reward with what its numbers mean, the learned
change as a diff, what became of every diff (`agentdescent.cli.diffs`), why the run stopped,
its warnings, and where the ledger is.

Paths and commands are printed whole on one line (rich's `soft_wrap`), so that a copy of them
works at any width, piped or not; so is each line of the learned change, which keeps its `+` or
`-` first however the terminal folds it. What it leaves out: the live part (`agentdescent.cli.views`).
"""

from __future__ import annotations

import difflib
import os
import sys
import time
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from agentdescent.artifacts.strategies import Strategy
from agentdescent.cli.diffs import diff_outcomes
from agentdescent.cli.terminal import coloured, kept, lines
from agentdescent.cli.views import Seen, plural
from agentdescent.commands import command
from agentdescent.result import EvolveResult


@dataclass(frozen=True, kw_only=True)
class Timing:
    evolution: float  # seconds the evolution took
    command: float  # seconds the whole command took, start-up included


def process_seconds(fallback_start: float) -> float:
    """Seconds since this process started, Python's start-up and imports included (read from
    /proc on Linux); elsewhere since `fallback_start`, a `time.perf_counter()` reading."""
    try:
        with open("/proc/self/stat", encoding="utf-8") as stat, open("/proc/uptime", encoding="utf-8") as uptime:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
            return float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - fallback_start


def report(console: Console, result: EvolveResult, strategy: Strategy, seen: Seen, timing: Timing, *,
           limit: int | None = 3) -> None:
    """Everything the run did, for someone who has never seen one. `limit` diffs of each kind are
    listed (None: every diff)."""
    scores(console, result, seen, timing)
    learned_change(console, result, strategy)
    diff_outcomes(console, result, strategy, seen, limit=limit)
    ending(console, result, seen)


def scores(console: Console, result: EvolveResult, seen: Seen, timing: Timing) -> None:
    figures = {
        "before": _measured(result.initial_reward),
        "after": f"[bold green]{_measured(result.final_reward)}[/bold green]"
                 + (f" ± {result.final_margin:.2f}" if result.final_margin else ""),
        "rounds": str(len(result.history)), "calls": str(result.usage.calls), "time": f"{timing.evolution:.2f} s",
    }
    console.print(_figures_table(console, figures))
    held_out = f"the {seen.started.held_out} held-out tasks" if seen.started else "the held-out tasks"
    most = f" (at most {seen.started.rounds})" if seen.started else ""
    legend = [
        f"before / after: the mean reward on {held_out} (kept apart from training)"
        + ("; ± is its 90 % margin" if result.final_margin else ""),
        f"rounds: aggregator steps run{most}, each one commit at most",
        "calls: rollouts and proposals, each one model call for a real model",
        f"time: the evolution alone (the whole command: {timing.command:.2f} s so far, start-up included)",
    ]
    console.print("\n".join(legend), style="dim", highlight=False)


def _figures_table(console: Console, figures: dict[str, str]) -> Table:
    """The figures as one row under their names; where that row cannot fit (a narrow terminal
    would cut the names to "befo…"), one figure a row beside its name."""
    wide = Table(title="Held-out reward")
    for name in figures:
        wide.add_column(name)
    wide.add_row(*figures.values())
    unbounded = console.options.update_width(sys.maxsize)  # measured within the console's width, a table always fits
    if Measurement.get(console, unbounded, wide).minimum <= console.options.max_width:
        return wide
    tall = Table(title="Held-out reward", show_header=False)
    tall.add_column(no_wrap=True)
    tall.add_column()
    for name, value in figures.items():
        tall.add_row(name, value)
    return tall


def learned_change(console: Console, result: EvolveResult, strategy: Strategy) -> None:
    """The final artifact against the one the run started from, as the agent reads both."""
    commits = [h.version for h in result.history if h.version is not None]
    kept = [v for v in commits if v <= result.version]
    change = difflib.unified_diff(
        _lines(strategy.render(result.initial_state)), _lines(result.rendered), lineterm="",
        fromfile=f"version {result.initial_version} (start)",
        tofile=f"version {result.version} (after {plural(len(kept), 'commit')})",
    )
    console.print("[bold]The learned change[/bold] (as the agent reads it; the ledger holds one file per key):")
    console.print(coloured("\n".join(change)) or Text("(no change)"), soft_wrap=True)
    if len(kept) < len(commits):
        console.print(f"This run committed up to version {max(commits)}, but no version after "
                      f"{result.version} did better on the held-out tasks, so version {result.version} "
                      "is the result (the ledger's `stable`).", highlight=False)


def _lines(rendered: object) -> list[str]:
    """A rendering as lines: text, or each file of a tree under its path."""
    if isinstance(rendered, str):
        return lines(rendered)
    if isinstance(rendered, dict):
        return [f"{path}: {line}" for path in sorted(rendered) for line in lines(str(rendered[path]))]
    return lines(str(rendered))


def ending(console: Console, result: EvolveResult, seen: Seen) -> None:
    """Why the run stopped, what it warned of, and where its ledger is."""
    console.print(f"Stopped: {escape(result.stop_reason)}.", highlight=False)
    if result.warnings:
        console.print(f"[yellow]{plural(len(result.warnings), 'warning')}:[/yellow]")
        listed = Table.grid(padding=(0, 1))  # a wrapped warning stays indented under its dash
        listed.add_column(style="yellow")
        listed.add_column(style="yellow")
        for message in result.warnings:
            listed.add_row("  -", Text(kept(message)))
        console.print(listed)
    path = str(result.ledger_path)
    temporary = seen.started is not None and seen.started.temporary
    console.print(f"Ledger: {escape(path)}{' (a temporary folder)' if temporary else ''}", soft_wrap=True,
                  highlight=False)
    if temporary:
        console.print("  --store DIR keeps the ledger where you choose; a run on it again continues it",
                      highlight=False)
    console.print("A picture of the run (rewards, calls, every diff and commit) as one HTML page:", highlight=False)
    console.print(escape(f"  {command('report', path)}"), soft_wrap=True, highlight=False)
    console.print("Every commit, with the diffs it took:", highlight=False)
    console.print(escape(f"  git -C {path} log --stat dev"), soft_wrap=True, highlight=False)


def _measured(reward: float | None) -> str:
    """_measured(0.5) == "0.500"; a reward the run stopped before measuring reads as such."""
    return "not measured" if reward is None else f"{reward:.3f}"
