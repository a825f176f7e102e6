"""The run report: one self-contained HTML page of what a run did, for someone who has never seen one.

    write_report("my-skill-3f2a1c")            # a run of the run store, by id (or its first letters)
    write_report("/tmp/ledger", out="r.html")  # the ledger folder evolve(store=...) wrote

The page shows the reward per round (plotted when matplotlib is installed: the `report` extra),
the calls, what became of every diff and why, which diffs went into each commit, the final change
as a diff and the files it changed. `data` gathers it from the ledger and the run's folder,
`plots` draws, `html` writes the page. The page replaces an earlier report, any other file only
when forced, and never one of the run's own files. Left out: anything live (`agentdescent watch`).
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
from agentdescent.runs import origin
from agentdescent.runs.draft import spec_path
from agentdescent.runs.store import RunStore

__all__ = ["ReportData", "Source", "gather", "locate", "write_report"]


def write_report(ref: str, *, out: str | os.PathLike | None = None, store: RunStore | None = None,
                 force: bool = False) -> Path:
    """Write the report of `ref` (a run id or prefix in `store`, a run's folder, or a ledger folder)
    to `out` (default: `report.html` in the run's folder, or `<ledger>/agentdescent/report.html`;
    missing folders on the way are made) and return its path. `UserError` when `ref` names no run
    or ledger, or `out` cannot be written, is a file that is not an earlier report (unless `force`),
    or is one of the run's own: its target (or inside it), its tasks file, the spec file it was
    started from or the one `init` writes beside its target, its folder or its ledger (whatever
    `force` says), or lies below a file, where no folder can be made."""
    source = locate(ref, store or RunStore())
    target = Path(out).expanduser().absolute() if out is not None else source.default_out
    _in_a_folder(target)
    _writable_as_a_file(target)
    _not_the_runs_own(target, source)
    if not force:
        _not_another_file(target)
    data = gather(source)
    try:
        # a second net: `html.escape` redacts every text before escaping it, but the page is made
        # to be passed around, and a key this shell has that the run's texts quote must not be on it
        atomic.write_text(target, redact(html.page(data, plots.draw(data))))
    except OSError as exc:
        raise UserError(f"cannot write the report to {target}: {exc.strerror or exc}; give the report (--out) another path") from None
    return target


def _in_a_folder(target: Path) -> None:
    """Refuse a `target` below a path that is there and is not a folder (`--out notes.md/x.html`):
    no folder can be made there, whatever `force` says."""
    folder = reading.in_the_way(target)
    if folder is not None:
        raise UserError(f"{folder} is {reading.kind(folder.stat().st_mode)}, not a folder, so {target} cannot be made "
                        "in it; give the report (--out) a path in a folder")


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


def _not_another_file(target: Path) -> None:
    """Refuse to replace a file that holds something and is not a page `html.page` wrote: the
    user's notes, a prompt, a spec would be lost, as the write keeps no copy."""
    try:
        with open(target, "rb") as file:
            head: bytes | None = file.read(html.HEAD_BYTES)
    except FileNotFoundError:
        return
    except OSError:  # unreadable: what it holds is unknown, so it is not known to be a report
        head = None
    if head is None or (head and not html.written_here(head)):
        raise UserError(f"{target} is already there and is not an AgentDescent report; give the report (--out) a new "
                        "path, or add --force to write over it")


def _not_the_runs_own(target: Path, source: Source) -> None:
    """Refuse a `target` that is one of the run's own files, `force` or not: its target (any path
    in a folder target), its tasks file, the spec file it was started from, the spec `agentdescent
    init` writes beside its target, and anything in the run's folder or its ledger but the default
    page. Both the path the write replaces and the file a symlink there leads to are compared."""
    places = {Path(os.path.realpath(target.parent)) / target.name, Path(os.path.realpath(target))}
    for what, path, whole_folder in _own_paths(source):
        path = Path(os.path.realpath(path))
        for place in places:
            inside = whole_folder and path in place.parents
            if (place == path or inside) and place != Path(os.path.realpath(source.default_out)):
                where = f"in {what} {path}" if inside else f"{what} ({path})"
                raise UserError(f"{target} is {where}: a report is never written there, with --force or without; "
                                f"give the report (--out) a path outside the run's own files, or leave --out out to "
                                f"write {source.default_out}")


def _own_paths(source: Source) -> list[tuple[str, Path, bool]]:
    """(what it is, its path, whether every path inside it is the run's too) of each of the run's own files."""
    own = [("the ledger", source.ledger, True)]
    if source.run is None:
        return own
    own.append((f"the folder of run {source.run.id}", source.run.path, True))
    try:
        spec = source.run.spec()
    except (UserError, OSError):  # a damaged run: its folder and ledger are still known
        return own
    folder = spec.kind != "text" if spec.kind else Path(spec.target).is_dir()
    own.append((f"the target of run {source.run.id}" if not folder else f"the target folder of run {source.run.id}",
                Path(spec.target), folder))
    started_from = origin.spec_file(source.run)  # None: a spec object, or an origin that does not name its file
    if started_from is not None:
        own.append((f"the spec run {source.run.id} was started from", started_from, False))
    own.append((f"the spec beside the target of run {source.run.id}", spec_path(spec.target), False))
    if spec.tasks.file:
        own.append((f"the tasks file of run {source.run.id}", Path(spec.tasks.file), False))
    return own
