"""The report's two plots, drawn with matplotlib's Agg backend into PNG bytes.

matplotlib is an optional extra (`pip install "agentdescent[report]"`): without it `draw` returns
no images and the page says how to get them. Figures are made with the object API (`Figure` on an
Agg canvas), not pyplot, so that drawing touches no global state of the process. Left out: the
numbers themselves (`data`) and where the images go on the page (`html`).
"""

from __future__ import annotations

import io
from typing import Any

from agentdescent.report.data import ReportData

INSTALL_HINT = 'pip install "agentdescent[report]" draws the plots'
WIDTH, HEIGHT, DPI = 7.5, 3.8, 100


def draw(data: ReportData) -> dict[str, bytes | str]:
    """{"rewards": ..., "calls": ...}: each plot's PNG bytes, or what to say in its place (text)."""
    canvas = _agg()
    if canvas is None:
        return {"rewards": INSTALL_HINT, "calls": INSTALL_HINT}
    nothing = "nothing to plot: no round has been recorded"
    return {"rewards": _rewards(canvas, data) or nothing, "calls": _calls(canvas, data) if data.steps else nothing}


def _agg() -> Any:
    """matplotlib's Agg canvas class, or None when matplotlib is not installed."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError:
        return None
    return FigureCanvasAgg


def per_round(data: ReportData, field: str) -> list:
    """What each round spent of `field` ("calls", "tokens", "cost_usd"): a step record counts it
    cumulatively (the first round's includes measuring the starting version).
    per_round of calls 139, 183 -> [139, 44]."""
    totals = [getattr(s, field) for s in data.steps]
    return [now - before for now, before in zip(totals, [0, *totals])]


def _rewards(canvas: Any, data: ReportData) -> bytes | None:
    """Train (acceptance) rewards per round, and held-out rewards only where they were measured."""
    rounds = [s.round + 1 for s in data.steps]
    head = [(r, s.acceptance_head) for r, s in zip(rounds, data.steps) if s.acceptance_head is not None]
    candidate = [(r, s.acceptance_candidate) for r, s in zip(rounds, data.steps) if s.acceptance_candidate is not None]
    held = [(0, data.initial_reward)] if data.initial_reward is not None else []
    held += [(r, s.held_out) for r, s in zip(rounds, data.steps) if s.held_out is not None]
    if not (head or candidate or held):
        return None
    figure, axes = _figure(canvas)
    if candidate:
        axes.plot(*zip(*candidate), "o-", color="#2b8a3e", label="train: the round's candidate (acceptance test)")
    if head:
        axes.plot(*zip(*head), "o--", color="#868e96", label="train: the version it started from (same tasks)")
    if held:
        axes.plot(*zip(*held), "s", color="#1c7ed6", markersize=8, label="held out: measured")
    if data.final_reward is not None:
        axes.plot([rounds[-1] if rounds else 0], [data.final_reward], "*", color="#e8590c", markersize=15,
                  label=f"held out: the result (version {data.final_version})")
    axes.set(xlabel="round (0: before any change)", ylabel="reward (0 to 1)", ylim=(-0.03, 1.03))
    figure.legend(loc="outside lower center", ncols=2, fontsize=8)  # below the axes: it hides no point
    return _png(figure)


def _calls(canvas: Any, data: ReportData) -> bytes:
    """Calls per round as bars, and the running total as a line on its own axis."""
    rounds = [s.round + 1 for s in data.steps]
    figure, axes = _figure(canvas)
    axes.bar(rounds, per_round(data, "calls"), color="#74c0fc", label="calls in the round")
    axes.set(xlabel="round", ylabel="calls in the round")
    total = axes.twinx()
    total.plot(rounds, [s.calls for s in data.steps], "o-", color="#1864ab", label="calls so far")
    total.set_ylabel("calls so far")
    total.set_ylim(bottom=0)
    figure.legend(loc="outside lower center", ncols=2, fontsize=8)
    return _png(figure)


def _figure(canvas: Any) -> tuple[Any, Any]:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(WIDTH, HEIGHT), dpi=DPI, layout="constrained")
    canvas(figure)
    axes = figure.add_subplot()
    axes.grid(alpha=0.3)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    return figure, axes


def _png(figure: Any) -> bytes:
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()
