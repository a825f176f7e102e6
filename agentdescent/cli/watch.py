"""Following a detached run from any shell: the run's events.jsonl, replayed from its start and
then read as the run's process writes it, drives the progress bar `agentdescent demo` shows
(`ProgressView`), until the run's status leaves starting/running. Its clock is the run's: from
the status's `created`, and for a run that has ended, to its last event.

The follower only reads the run's folder, so stopping it (Ctrl-C) leaves the run going. One file
can hold the events of several processes (a run cancelled, then resumed): an earlier process's
RunEnded is not the end, the status is. Left out: the verbs that call it (`agentdescent.cli.verbs`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console

from agentdescent import events as ev
from agentdescent.cli.views import ProgressView
from agentdescent.commands import command
from agentdescent.runs import Service
from agentdescent.runs.status import LIVE, RunStatus

POLL_SECONDS = 0.2
DONE = ("finished", "accepted", "rejected", "restored")  # a run that got to its end
FAILURE, INTERRUPTED = 1, 130


class EventTail:
    """The events appended to a file so far, read a batch at a time; a line not yet ended waits for
    the rest of it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self) -> list[ev.Event]:
        try:
            with self.path.open("rb") as file:
                file.seek(self._offset)
                chunk = file.read()
        except FileNotFoundError:  # the run's process has not written its first event yet
            return []
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        return [event for event in map(_event, lines) if event is not None]

    def written(self, otherwise: float) -> float:
        """When the last event was written (the file's time), or `otherwise` where it has none."""
        try:
            return self.path.stat().st_mtime
        except OSError:
            return otherwise


def _event(line: bytes) -> ev.Event | None:
    """The event on one line; a line a killed process cut short, which the next process's first
    line was appended to, yields that next line."""
    for start in (0, line.find(b'{"event"', 1)):
        if start < 0 or not line[start:].strip():
            continue
        try:
            return ev.from_json(json.loads(line[start:]))
        except (ValueError, KeyError, TypeError):
            continue
    return None


def follow(service: Service, run_id: str, console: Console) -> RunStatus:
    """Show the run's progress until it ends; its last status. Each poll reads the status before
    the events, so every event of a run seen ended has been shown when this returns."""
    tail = EventTail(service.store.get(run_id).file("events.jsonl"))
    waiting: str | None = None
    status = service.status(run_id)
    with ProgressView(console, since=status.created) as view:
        while True:
            if status.state not in LIVE:  # every event is written: the last one's time is the run's end
                view.ended_at(tail.written(status.updated))
            for event in tail.read():
                view.on_event(event)
            if status.state not in LIVE:
                return status
            if status.waiting_on != waiting and status.waiting_on:
                console.print(f"waiting on {status.waiting_on}", markup=False, soft_wrap=True, highlight=False)
            waiting = status.waiting_on
            time.sleep(POLL_SECONDS)
            status = service.status(run_id)


def watched(service: Service, run_id: str, console: Console) -> int:
    """Follow the run, then say how it ended and what to do next; 0 when it got to its end, 1 when
    it failed, was cancelled or interrupted, 130 when the user stopped watching."""
    run_id = service.store.get(run_id).id
    try:
        status = follow(service, run_id, console)
    except KeyboardInterrupt:
        say(console, f"stopped watching; run {run_id} goes on in its own process",
            f"next: {command('watch', run_id)} follows it again; {command('cancel', run_id)} stops it")
        return INTERRUPTED
    ending(console, status)
    return 0 if status.state in DONE else FAILURE


def ending(console: Console, status: RunStatus, *details: str) -> None:
    """The run's state and message in one line, then `details`, its error if any, and the next step."""
    say(console, f"run {status.id} ({status.state}): {status.message}", *details)
    if status.error:
        say(console, f"  error: {status.error}")
    say(console, f"next: {next_step(status)}")


def next_step(status: RunStatus) -> str:
    """What to do with a run in this state, as commands."""
    run = status.id
    if status.state in LIVE:
        host = (f"in your coding agent, with the AgentDescent plugin, ask for the host work of AgentDescent run {run} "
                "(its skill starts the helpers that do it); " if (status.waiting_on or "").startswith("the host:") else "")
        return f"{host}{command('watch', run)} follows it; {command('cancel', run)} stops it (what it committed stays)"
    if status.next:
        return status.next
    if status.state == "rejected":
        return "nothing more to do with it; agentdescent evolve SPEC starts a new run"
    if status.state == "accepted":
        return f"nothing more to do with it: {status.target} holds its change"
    return f"{command('show', run)} shows what it did"


def say(console: Console, *lines: str) -> None:
    """Plain lines, never wrapped, so that a path or a command in them can be copied whole."""
    for line in lines:
        console.print(line, markup=False, soft_wrap=True, highlight=False)
