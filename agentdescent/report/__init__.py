"""The run report: one self-contained HTML page of what a run did, for someone who has never seen one.

    write_report("my-skill-3f2a1c")            # a run of the run store, by id (or its first letters)
    write_report("/tmp/ledger", out="r.html")  # the ledger folder evolve(store=...) wrote

The page shows the reward per round (plotted when matplotlib is installed: the `report` extra),
the calls, what became of every diff and why, which diffs went into each commit, the final change
as a diff and the files it changed. `data` gathers it from the ledger and the run's folder,
`plots` draws, `html` writes the page. Left out: anything live (`agentdescent watch`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agentdescent import atomic, reading
from agentdescent.agents.redact import redact
from agentdescent.errors import UserError
from agentdescent.report import html, plots
from agentdescent.report.data import ReportData, Source, gather, locate
from agentdescent.runs.store import RunStore

__all__ = ["ReportData", "Source", "gather", "locate", "write_report"]


def write_report(ref: str, *, out: str | os.PathLike | None = None, store: RunStore | None = None) -> Path:
    """Write the report of `ref` (a run id or prefix in `store`, a run's folder, or a ledger folder)
    to `out` (default: `report.html` in the run's folder, or `<ledger>/agentdescent/report.html`)
    and return its path. `UserError` when `ref` names no run or ledger, or `out` cannot be written."""
    source = locate(ref, store or RunStore())
    target = Path(out).expanduser().absolute() if out is not None else source.default_out
    _writable_as_a_file(target)
    data = gather(source)
    try:
        # the page is made to be passed around: a key in this shell's environment that the run's
        # texts quote (it was not set while the run went, so the store holds it) is not on it
        atomic.write_text(target, redact(html.page(data, plots.draw(data))))
    except OSError as exc:
        raise UserError(f"cannot write the report to {target}: {exc.strerror or exc}; give the report (--out) another path") from None
    return target


def _writable_as_a_file(target: Path) -> None:
    """Refuse a `target` that is there and is not a regular file: a folder, or a FIFO or a device
    node (`/dev/full`), which the page's atomic write would replace with a file of its own."""
    try:
        mode = target.stat().st_mode
    except OSError:  # nothing there (or nothing this can look at): the write says what is wrong
        return
    if not stat.S_ISREG(mode):
        raise UserError(f"{target} is {reading.kind(mode)}, not a regular file; give the report (--out) the path of "
                        "an .html file to write")
