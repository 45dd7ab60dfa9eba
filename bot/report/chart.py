"""The speedup chart: one horizontal bar per operator and shape on a log axis, as a small PNG.

Drawn with matplotlib's Agg backend (no display needed). A log axis gives 0.5x and 2x the same
length, so slower operators are as visible as faster ones; bars start at the 1x line. matplotlib
is imported when a chart is drawn, never at import time: `bot optimize` on a bare GPU image
reaches this module without it.

Labels are artifact text: they are drawn as plain text, never as mathtext or TeX (a label of
nested `$a^{b^{...}}$` superscripts makes mathtext's parser recurse until RecursionError).
"""

from __future__ import annotations

import datetime as dt
import io
import math
from typing import Any

from bot.core.results import Results
from bot.report.data import ChartBar, chart_bars, device_label

CLAIMED = "#1a7f37"  # claimed: the whole interval cleared the threshold
FASTER = "#8fd19e"  # faster, not claimed (interval too wide, or under the threshold)
SLOWER = "#cf222e"  # whole interval under 1x
UNCLEAR = "#8c959f"  # interval straddles 1x
PARITY = "#6639ba"  # the 1x line
INK = "#24292f"
WIDTH_IN, DPI = 8.0, 100  # 800 px: GitHub's column shows it at full size
ROW_IN = 0.3
MAX_LABEL = 34
PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}  # no `$...$` mathtext, no TeX


def _color(bar: ChartBar) -> str:
    low, high = bar.ci or (0.0, 0.0)
    if bar.claimed:
        return CLAIMED
    return FASTER if low > 1.0 else SLOWER if high < 1.0 else UNCLEAR


def _label(bar: ChartBar) -> str:
    text = f"{bar.problem} · {bar.shape}" if bar.shape else bar.problem
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _ratio(value: float) -> str:
    return f"{value:.2f}x" if value >= 0.1 else f"{value:#.2g}x"


def _limits(bars: list[ChartBar]) -> tuple[float, float]:
    """Log-axis limits holding every whisker and 1x, with room for the value labels."""
    values = [v for b in bars if b.ci for v in (*b.ci, b.speedup or 1.0) if v > 0 and math.isfinite(v)] + [1.0]
    low, high = min(values), max(values)
    return low / 1.9, high * 2.2


def speedup_figure(bars: list[ChartBar], title: str) -> Any:
    """The chart as a matplotlib Figure (Agg canvas), for rendering or inspection; every text
    of it plain (PLAIN_TEXT)."""
    from matplotlib import rc_context

    with rc_context(PLAIN_TEXT):
        fig = _figure(bars, title)
    for text in fig.findobj(lambda artist: hasattr(artist, "set_parse_math")):
        text.set_parse_math(False)  # also for tick labels drawn later, outside the rc context
    return fig


def _figure(bars: list[ChartBar], title: str) -> Any:
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = max(len(bars), 1)
    fig = Figure(figsize=(WIDTH_IN, 1.35 + ROW_IN * rows), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    left, right = _limits(bars)
    ax.set_xlim(left, right)
    ys = list(range(len(bars)))[::-1]  # the first operator on top
    for y, bar in zip(ys, bars):
        if bar.speedup is None or bar.ci is None:
            ax.text(1.0, y, f"  {bar.note}", va="center", ha="left", fontsize=8, color=INK, style="italic")
            continue
        lo, hi = bar.ci
        ax.barh(
            y,
            bar.speedup - 1.0,
            left=1.0,
            height=0.62,
            color=_color(bar),
            edgecolor=INK if bar.claimed else "none",
            linewidth=0.8,
            gid="speedup-bar",
        )
        ax.errorbar(
            bar.speedup,
            y,
            xerr=[[max(bar.speedup - lo, 0.0)], [max(hi - bar.speedup, 0.0)]],
            fmt="none",
            ecolor=INK,
            elinewidth=1.0,
            capsize=2.5,
        )
        # The value sits beyond the whisker, on the side the bar grows to.
        text = f"{_ratio(bar.speedup)}" + ("  claimed" if bar.claimed else "")
        faster = bar.speedup >= 1.0
        ax.text(
            hi * 1.06 if faster else lo / 1.06,
            y,
            text,
            va="center",
            ha="left" if faster else "right",
            fontsize=8,
            color=INK,
            weight="bold" if bar.claimed else "normal",
        )
    ax.axvline(1.0, color=PARITY, linewidth=1.4, zorder=3, gid="parity-line")
    ax.set_yticks(ys, [_label(b) for b in bars], fontsize=8)
    for tick, bar in zip(ax.get_yticklabels(), bars):
        if bar.claimed:
            tick.set_fontweight("bold")
    ax.set_ylim(-0.7, rows - 0.3)
    ax.tick_params(axis="x", labelsize=8)
    ax.xaxis.set_major_locator(_ratio_locator())
    ax.xaxis.set_major_formatter(_ratio_formatter())
    ax.xaxis.set_minor_formatter(_ratio_formatter(blank=True))
    ax.grid(axis="x", which="major", color="#d0d7de", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_xlabel("speedup over the current implementation (log scale; whiskers: 95% interval)", fontsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if not bars:
        ax.text(1.0, 0, "  no timed candidates", va="center", fontsize=9, color=INK)
    ax.set_title(title, fontsize=10, loc="left", color=INK)
    handles = [
        Patch(color=CLAIMED, label="claimed"),
        Patch(color=FASTER, label="faster, not claimed"),
        Patch(color=UNCLEAR, label="no clear difference"),
        Patch(color=SLOWER, label="slower"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=7, frameon=False)
    return fig


def _ratio_locator() -> Any:
    from matplotlib.ticker import LogLocator

    return LogLocator(base=10, subs=(1.0, 2.0, 5.0))  # 0.2x, 0.5x, 1x, 2x, 5x: readable steps


def _ratio_formatter(blank: bool = False) -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _pos: "" if blank else f"{value:g}x")


def figure_png(fig: Any) -> bytes:
    """PNG bytes of a Figure, through the Agg canvas."""
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    with rc_context(PLAIN_TEXT):  # tick labels made while drawing are plain text too
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def chart_title(results: Results) -> str:
    created = (results.created or "")[:10] or dt.date.today().isoformat()
    return f"kernel-bot speedups on {device_label(results)}, {created}"


def _order(bars: list[ChartBar]) -> list[ChartBar]:
    """Claimed first, then fastest to slowest; operators without a bar (notes) last."""
    return sorted(bars, key=lambda b: (b.speedup is None, not b.claimed, -(b.speedup or 0.0)))


def results_chart(results: Results) -> bytes | None:
    """The chart of a results document, or None when no operator has a bar or a note."""
    bars = _order(chart_bars(results))
    return figure_png(speedup_figure(bars, chart_title(results))) if bars else None
