"""The speedup chart: matplotlib figure content (bars, log axis, 1x line, whiskers) and the PNG read back."""

from __future__ import annotations

import io

import pytest
from conftest import typed

from bot.report.chart import CLAIMED, PARITY, SLOWER, chart_title, results_chart, speedup_figure
from bot.report.data import chart_bars

CPU = {"device": "cpu", "device_name": "AMD EPYC"}


def _problem(
    name: str, ratio: float | None, low: float | None, high: float | None, best: bool = False, **extra
) -> dict:
    attempt = {
        "name": f"cand-{name}",
        "accepted": True,
        "speedup": ratio,
        "speedup_ci": [low, high] if ratio else None,
        "shapes": [
            {
                "shape": "small",
                "speedup": ratio,
                "speedup_ci": [low, high] if ratio else None,
                "measurement": {"median_us": 10.0},
            }
        ],
    }
    return {
        "problem": name,
        "best": dict(attempt, source="x") if best else None,
        "attempts": [attempt] if ratio else [],
        "min_speedup": 1.05,
        "environment": CPU,
        **extra,
    }


@pytest.fixture
def results() -> dict:
    return {
        "schema_version": 1,
        "created": "2026-12-05T13:00:00+00:00",
        "problems": [
            _problem("rotary_embedding", 6.37, 6.25, 6.48, best=True),
            _problem("layernorm", 0.45, 0.44, 0.46),
            _problem("swiglu", 0.99, 0.96, 1.02),
            _problem("rmsnorm", None, None, None, not_timed="runs in Triton's interpreter on this CPU"),
            _problem("gelu", 4675.0, 4600.0, 4700.0, max_plausible_speedup=100.0),  # never drawn
        ],
    }


def test_figure_has_a_bar_per_operator_and_shape_on_a_log_axis_with_a_1x_line(results):
    bars = chart_bars(typed(results))
    assert [(b.problem, b.shape, b.claimed) for b in bars] == [
        ("rotary_embedding", "small", True),
        ("layernorm", "small", False),
        ("swiglu", "small", False),
        ("rmsnorm", "", False),
    ]
    fig = speedup_figure(bars, chart_title(typed(results)))
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    drawn = [p for p in ax.patches if p.get_gid() == "speedup-bar"]
    assert len(drawn) == 3  # rmsnorm is a note, gelu's 4675x is implausible: neither is a bar
    # Bars grow from 1x: right for faster, left for slower.
    spans = sorted((p.get_x(), p.get_x() + p.get_width()) for p in drawn)
    assert spans[0] == pytest.approx((1.0, 0.45)) or spans[0] == pytest.approx((1.0, 0.99))
    ends = sorted(round(p.get_x() + p.get_width(), 2) for p in drawn)
    assert ends == [0.45, 0.99, 6.37]
    parity = [line for line in ax.lines if line.get_gid() == "parity-line"]
    assert len(parity) == 1 and list(parity[0].get_xdata()) == [1.0, 1.0]
    low, high = ax.get_xlim()
    assert low < 0.44 and high > 6.48  # every whisker inside the axes
    whiskers = [c for c in ax.collections if c.get_segments()]
    assert len(whiskers) == 3
    assert "AMD EPYC" in ax.get_title(loc="left") and "2026-12-05" in ax.get_title(loc="left")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "rotary_embedding · small" in labels and "rmsnorm" in labels
    notes = [t.get_text() for t in ax.texts]
    assert any("not timed: runs in Triton's interpreter" in n for n in notes)
    assert not any("4675" in n for n in notes)


def test_png_reads_back_small_with_the_claimed_bar_right_and_the_slower_left_of_1x(results):
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    png = results_chart(typed(results))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) < 150_000
    pixels = imread(io.BytesIO(png))[..., :3]
    height, width = pixels.shape[:2]
    assert width == 800 and 150 < height < 600  # GitHub's column shows it unscaled

    plot = pixels[: height - 40]  # above the legend's swatches

    def columns(color: str) -> set[int]:
        near = (abs(plot - to_rgb(color)).sum(axis=2) < 0.03).nonzero()
        return set(near[1].tolist())

    claimed, slower, parity = columns(CLAIMED), columns(SLOWER), columns(PARITY)
    assert claimed and slower and parity
    one_x = sorted(parity)[len(parity) // 2]
    assert min(claimed) >= one_x - 2 and max(slower) <= one_x + 2
    assert max(claimed) - one_x > (one_x - min(slower)) * 1.5  # log(6.37) drawn longer than log(1/0.45)


def test_no_chart_without_anything_to_draw():
    assert results_chart(typed({"problems": [_problem("swiglu", None, None, None)]})) is None
