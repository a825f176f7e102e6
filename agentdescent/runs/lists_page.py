"""Answers whose lists grow with the target, cut to one page a host shows whole (`hostwork.PAGE_BYTES`
of JSON): an accept's or reject's (`verdict.Accepted`: every file written, deleted, merged, kept or
in conflict) and a status's `wrote` (every path its write-back left). A folder of thousands of files
would name them all, and a host cuts a longer tool result anywhere, the middle of a list included.

Each list keeps its first `SHOWN` entries (fewer where long names would fill the page), its total
beside it (`kept_total`, `wrote_total`), and an accept's message says where every list is whole: a
dry run's in `agentdescent accept --dry-run RUN`, a write-back's in the run's `accepted.json`.

    page = accepted(service.accept(run_id, dry_run=True))   # kept: the first 20; kept_total: 400

Left out: what the answers hold (`verdict`, `status`); `show`'s page (`shown_page`). The command
line prints every list whole.
"""

from __future__ import annotations

from agentdescent.commands import command
from agentdescent.quoting import closed
from agentdescent.runs.hostfiles import sent_bytes
from agentdescent.runs.hostwork import PAGE_BYTES, cut_to
from agentdescent.runs.status import RunStatus
from agentdescent.runs.verdict import LISTS, Accepted

SHOWN = 20  # the entries a page names of each list: a page, not a folder's listing


def accepted(done: Accepted, *, budget: int = PAGE_BYTES) -> Accepted:
    """`done` on a page: each list its first entries, and where the whole lists are when one was cut."""
    page = _said_where(done.model_copy(update={name: getattr(done, name)[:SHOWN] for name in LISTS}), done)
    while sent_bytes(page) > budget and any(getattr(page, name) for name in LISTS):  # long names: the longest list shorter
        longest = max(LISTS, key=lambda name: sent_bytes(getattr(page, name)))
        page = _said_where(page.model_copy(update={longest: getattr(page, longest)[:-1]}), done)
    room = budget - (sent_bytes(page) - sent_bytes(page.message)) - 8  # and a quote the cut leaves open, closed
    return page if sent_bytes(page) <= budget else page.model_copy(update={"message": closed(cut_to(page.message, room))})


def _said_where(page: Accepted, done: Accepted) -> Accepted:
    """`page` with its message saying where the whole lists are, once one of them is cut."""
    if page.message != done.message or all(len(getattr(page, name)) == len(getattr(done, name)) for name in LISTS):
        return page
    whole = done.answer_file or command("accept", "--dry-run", done.run_id)
    return page.model_copy(update={"message": f"{done.message}; each list names only its first entries (its _total "
                                              f"counts them all): {whole} {'holds' if done.answer_file else 'lists'} "
                                              "every one"})


def status(status: RunStatus, *, budget: int = PAGE_BYTES) -> RunStatus:
    """`status` on a page: `wrote` its first paths, `wrote_total` counting them all; then, past the
    page still (a run that warned of many things), its first warnings and a count of the rest."""
    kept = list(status.wrote)[:SHOWN]
    page = status.model_copy(update={"wrote": {path: status.wrote[path] for path in kept}, "wrote_total": len(status.wrote)})
    while sent_bytes(page) > budget and page.wrote:
        page = page.model_copy(update={"wrote": dict(list(page.wrote.items())[:-1])})
    warnings = list(status.warnings)
    while sent_bytes(page) > budget and len(warnings) > 1:
        warnings.pop()
        rest = len(status.warnings) - len(warnings)
        page = page.model_copy(update={"warnings": [*warnings, f"... and {rest} more warning{'s' if rest > 1 else ''}: "
                                                    f"{command('status', status.id)} prints them all"]})
    return page
