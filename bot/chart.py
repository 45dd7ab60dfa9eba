"""A speedup bar chart as PNG bytes, with no plotting library.

The publishing stage must not need matplotlib (it installs only the bot), so the chart is drawn
into an RGB buffer with a 5x7 bitmap font and encoded with zlib + struct. A chart is a few
hundred pixels wide; the pure-Python loops draw one in well under a second.
"""

from __future__ import annotations

import struct
import zlib

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

# 5x7 glyphs: seven rows of five bits (MSB = left column), as 14 hex digits.
_FONT_SPEC = """
0:0E111315191 10E 1:040C0404040 40E 2:0E110102040 81F 3:1F020402011 10E 4:02060A121F0 202
5:1F101E01011 10E 6:0608101E111 10E 7:1F010204080 808 8:0E11110E111 10E 9:0E11110F010 20C
A:0E1111111F1 111 B:1E11111E111 11E C:0E111010101 10E D:1C121111111 21C E:1F10101E101 01F
F:1F10101E101 010 G:0E111017111 10F H:1111111F111 111 I:0E040404040 40E J:07020202021 20C
K:11121418141 211 L:10101010101 01F M:111B1515111 111 N:11111915131 111 O:0E111111111 10E
P:1E11111E101 010 Q:0E111111151 20D R:1E11111E141 211 S:0F10100E010 11E T:1F040404040 404
U:11111111111 10E V:11111111110 A04 W:11111115151 50A X:11110A040A1 111 Y:1111110A040 404
Z:1F010204081 01F a:00000E010F1 10F b:10101619111 11E c:00000E10101 10E d:01010D13111 10F
e:00000E111F1 00E f:0609081C080 808 g:000F11110F0 10E h:10101619111 111 i:04000C04040 40E
j:02000602021 20C k:10101214181 412 l:0C040404040 40E m:00001A15151 111 n:00001619111 111
o:00000E11111 10E p:00001E111E1 010 q:00000D130F0 101 r:00001619101 010 s:00000E100E0 11E
t:08081C08080 906 u:00001111111 30D v:00001111110 A04 w:00001111151 50A x:0000110A040 A11
y:000011110F0 10E z:00001F02040 81F .:00000000000 C0C -:000000001F0 000 _:00000000000 01F
[:0E080808080 80E ]:0E020202020 20E %:18190204081 303 /:00010204081 000 ,:00000000000 C04
(:02040808080 402 ):08040202020 408 +:0004041F040 400 =:00001F001F0 000 ?:0E110102040 004
"""
FONT: dict[str, tuple[int, ...]] = {}
for _token in _FONT_SPEC.replace(" ", "").replace("\n", "").split(":")[1:]:
    pass  # replaced below: the spec is parsed by `_parse_font`


def _parse_font(spec: str) -> dict[str, tuple[int, ...]]:
    font: dict[str, tuple[int, ...]] = {" ": (0,) * 7}
    for line in spec.strip().splitlines():
        for entry in line.split("  ") if "  " in line else [line]:
            pass
    compact = spec.replace(" ", "").replace("\n", "")
    i = 0
    while i < len(compact):
        char, hexes = compact[i], compact[i + 2:i + 16]
        font[char] = tuple(int(hexes[j:j + 2], 16) for j in range(0, 14, 2))
        i += 16
    return font


FONT = _parse_font(_FONT_SPEC)


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


def _ticks(top: float) -> list[float]:
    """About five round tick values from 0 to `top`."""
    step = next(s for s in (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100, 1e9) if top / s <= 6)
    return [i * step for i in range(int(top / step) + 1)]


def speedup_chart_png(rows: list[tuple[str, float, float, float]], title: str) -> bytes:
    """Horizontal bars of (label, speedup, ci_low, ci_high) with error bars and a 1.0x line."""
    label_w = max([len(_label(r[0])) for r in rows] + [8]) * GLYPH_W + PAD
    value_w = 22 * GLYPH_W // 2  # room for "12.34x [11.9, 13.0]" at the bar's end
    width = PAD + label_w + PLOT_W + value_w + PAD
    top_y = PAD + GLYPH_H + PAD
    height = top_y + max(len(rows), 1) * ROW_H + GLYPH_H + 2 * PAD
    canvas = _Canvas(width, height)
    canvas.text(PAD, PAD, _label(title) if len(title) > 60 else title)
    x_max = max([1.2] + [max(s, hi) * 1.05 for _, s, _, hi in rows if hi == hi and hi < 1e6])
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
        canvas.text(max(x_of(speedup), hi_x) + PAD // 2, y + (ROW_H - GLYPH_H) // 2,
                    f"{speedup:.2f}x" if speedup >= 0.1 else f"{speedup:.2g}x")
    canvas.rect(x_of(1.0), top_y - 4, x_of(1.0) + 2, plot_bottom + 4, PARITY)
    canvas.rect(x0, plot_bottom, x0 + PLOT_W + 1, plot_bottom + 1, INK)  # the x axis
    return canvas.png()
