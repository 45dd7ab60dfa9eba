"""A speedup bar chart as PNG bytes, with no plotting library.

The publishing stage must not need matplotlib (it installs only the bot), so the chart is drawn
into an RGB buffer with a 5x7 bitmap font and encoded with zlib + struct. A chart is about
1,000 x 40*rows pixels; the pure-Python loops draw one in tens of milliseconds.
"""

from __future__ import annotations

import math
import struct
import zlib

from bot.report_data import chart_rows

Color = tuple[int, int, int]
BACKGROUND: Color = (255, 255, 255)
INK: Color = (33, 37, 41)
GRID: Color = (222, 226, 230)
FASTER: Color = (46, 160, 67)  # whole interval above 1.0x
UNCLEAR: Color = (140, 149, 159)  # interval straddles 1.0x
SLOWER: Color = (207, 34, 46)  # whole interval below 1.0x
PARITY: Color = (130, 80, 223)  # the 1.0x line

SCALE = 2  # each font pixel is 2x2 screen pixels: 10x14 glyphs, readable on GitHub
GLYPH_W, GLYPH_H = 6 * SCALE, 7 * SCALE  # 5 columns + 1 column of spacing
ROW_H, BAR_H, PAD = 34, 18, 12
PLOT_W = 420
MAX_LABEL_CHARS = 28

# 5x7 glyphs: each token is the character, then seven rows of five bits as 2-digit hex
# (bit 4 = left column), after the classic HD44780 character ROM.
_FONT_SPEC = """
00E11131519110E 1040C040404040E 20E11010204081F 31F02040201110E 402060A121F0202 51F101E0101110E
60608101E11110E 71F010204080808 80E11110E11110E 90E11110F01020C A0E1111111F1111 B1E11111E11111E
C0E11101010110E D1C12111111121C E1F10101E10101F F1F10101E101010 G0E11101711110F H1111111F111111
I0E04040404040E J0702020202120C K11121418141211 L1010101010101F M111B1515111111 N11111915131111
O0E11111111110E P1E11111E101010 Q0E11111115120D R1E11111E141211 S0F10100E01011E T1F040404040404
U1111111111110E V11111111110A04 W1111111515150A X11110A040A1111 Y1111110A040404 Z1F01020408101F
a00000E010F110F b1010161911111E c00000E1010110E d01010D1311110F e00000E111F100E f0609081C080808
g000F11110F010E h10101619111111 i04000C0404040E j0200060202120C k10101214181412 l0C04040404040E
m00001A15151111 n00001619111111 o00000E1111110E p00001E111E1010 q00000D130F0101 r00001619101010
s00000E100E011E t08081C08080906 u0000111111130D v00001111110A04 w0000111115150A x0000110A040A11
y000011110F010E z00001F0204081F .00000000000C0C -000000001F0000 _0000000000001F [0E08080808080E
]0E02020202020E :000C0C000C0C00 %18190204081303 /00010204081000 ,00000000000C04 (02040808080402
)08040202020408 +0004041F040400 =00001F001F0000 ?0E110102040004 #0A0A1F0A1F0A0A
"""


def _parse_font(spec: str) -> dict[str, tuple[int, ...]]:
    font = {" ": (0,) * 7}
    for token in spec.split():
        font[token[0]] = tuple(int(token[i:i + 2], 16) for i in range(1, 15, 2))
    return font


FONT: dict[str, tuple[int, ...]] = _parse_font(_FONT_SPEC)


class _Canvas:
    def __init__(self, width: int, height: int):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(BACKGROUND) * (width * height))

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        """Fill [x0, x1) x [y0, y1), clipped to the canvas."""
        x0, x1 = max(0, x0), min(self.width, x1)
        if x1 <= x0:
            return
        run = bytes(color) * (x1 - x0)
        for y in range(max(0, y0), min(self.height, y1)):
            start = (y * self.width + x0) * 3
            self.pixels[start:start + len(run)] = run

    def text(self, x: int, y: int, s: str, color: Color = INK) -> None:
        for i, char in enumerate(s):
            rows = FONT.get(char) or FONT.get(char.upper()) or FONT["?"]
            for r, bits in enumerate(rows):
                for c in range(5):
                    if bits & (0x10 >> c):
                        px, py = x + i * GLYPH_W + c * SCALE, y + r * SCALE
                        self.rect(px, py, px + SCALE, py + SCALE, color)

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.pixels[y * self.width * 3:(y + 1) * self.width * 3])
                       for y in range(self.height))  # filter type 0 (None) on every scanline
        ihdr = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw, 9))
                + _chunk(b"IEND", b""))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _label(text: str) -> str:
    return text if len(text) <= MAX_LABEL_CHARS else text[:MAX_LABEL_CHARS - 2] + ".."


def _ratio(value: float) -> str:
    return f"{value:.2f}" if value >= 0.1 else f"{value:#.2g}"  # as bot.report_data.fmt_ratio


def _ticks(top: float) -> list[float]:
    """About five round tick values from 0 to `top`."""
    step = next(s for s in (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100, 1e9) if top / s <= 6)
    return [i * step for i in range(int(top / step) + 1)]


def speedup_chart_png(rows: list[tuple[str, float, float, float]], title: str) -> bytes:
    """Horizontal bars of (label, speedup, ci_low, ci_high) with error bars and a 1.0x line."""
    label_w = max([len(_label(r[0])) for r in rows] + [8]) * GLYPH_W + PAD
    value_w = 26 * GLYPH_W  # room for "0.0040x [0.0034, 0.0055]" right of the bar's end
    width = PAD + label_w + PLOT_W + value_w + PAD
    top_y = PAD + GLYPH_H + PAD
    height = top_y + max(len(rows), 1) * ROW_H + GLYPH_H + 2 * PAD
    canvas = _Canvas(width, height)
    fits = (width - 2 * PAD) // GLYPH_W
    canvas.text(PAD, PAD, title if len(title) <= fits else title[:fits - 2] + "..")
    rows = [(name, *(v if math.isfinite(v) else 0.0 for v in values)) for name, *values in rows]
    x_max = max([1.2] + [min(max(s, hi), 1e6) * 1.05 for _, s, _, hi in rows])
    x0 = PAD + label_w

    def x_of(value: float) -> int:
        return x0 + int(round(min(max(value, 0.0), x_max) / x_max * PLOT_W))

    plot_bottom = top_y + max(len(rows), 1) * ROW_H
    for tick in _ticks(x_max):
        canvas.rect(x_of(tick), top_y, x_of(tick) + 1, plot_bottom, GRID)
        canvas.text(x_of(tick) - GLYPH_W, plot_bottom + PAD // 2, f"{tick:g}x")
    if not rows:
        canvas.text(x0 + PAD, top_y + (ROW_H - GLYPH_H) // 2, "no timed candidates")
    for i, (name, speedup, low, high) in enumerate(rows):
        y = top_y + i * ROW_H
        bar_top = y + (ROW_H - BAR_H) // 2
        canvas.text(PAD, y + (ROW_H - GLYPH_H) // 2, _label(name))
        color = FASTER if low > 1.0 else SLOWER if high < 1.0 else UNCLEAR
        canvas.rect(x0, bar_top, max(x_of(speedup), x0 + 1), bar_top + BAR_H, color)
        mid, lo_x, hi_x = bar_top + BAR_H // 2, x_of(low), x_of(high)
        canvas.rect(lo_x, mid - 1, hi_x + 1, mid + 1, INK)  # whisker
        for cap in (lo_x, hi_x):
            canvas.rect(cap, bar_top + 3, cap + 2, bar_top + BAR_H - 3, INK)
        canvas.text(max(x_of(speedup), hi_x) + PAD, y + (ROW_H - GLYPH_H) // 2,
                    f"{_ratio(speedup)}x [{_ratio(low)}, {_ratio(high)}]")
    canvas.rect(x_of(1.0), top_y - 4, x_of(1.0) + 2, plot_bottom + 4, PARITY)
    canvas.rect(x0, plot_bottom, x0 + PLOT_W + 1, plot_bottom + 1, INK)  # the x axis
    return canvas.png()


def results_chart(results: dict) -> bytes | None:
    """The chart of a results payload's improved operators, or None when none was timed."""
    rows = chart_rows(results)
    return speedup_chart_png(rows, "kernel-bot speedups (95% CI)") if rows else None
