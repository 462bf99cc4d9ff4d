#!/usr/bin/env python3
"""fair_plot: the PNG of t/bench/fair.sh: tenant A's share of served
tokens and of KV block-seconds under each policy, from bench_fair's
"fair_run ..." lines, as a bar chart.

Needs nothing beyond Python's standard library: the chart is drawn into
an RGB pixel buffer (with a 5x7 bitmap font for the labels) and written
as a PNG with zlib and struct, so CI needs no plotting package.

usage: fair_plot.py RESULTS OUT.png [TITLE]
  RESULTS  bench_fair's output (only its fair_run lines are read)
  TITLE    default: the cache and prompt lengths of the first run
"""

import struct
import sys
import zlib

W, H = 720, 400
BG = (255, 255, 255)
INK = (40, 40, 40)
GRID = (215, 215, 215)
BAND = (222, 245, 222)
TOK = (66, 114, 196)
KV = (230, 130, 40)

# 5x7 glyphs, a row a string, "#" set
FONT = {
    'A': [" ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"],
    'B': ["#### ", "#   #", "#   #", "#### ", "#   #", "#   #", "#### "],
    'C': [" ### ", "#   #", "#    ", "#    ", "#    ", "#   #", " ### "],
    'D': ["#### ", "#   #", "#   #", "#   #", "#   #", "#   #", "#### "],
    'E': ["#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#####"],
    'F': ["#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#    "],
    'G': [" ### ", "#   #", "#    ", "# ###", "#   #", "#   #", " ####"],
    'H': ["#   #", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"],
    'I': [" ### ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "],
    'J': ["  ###", "   # ", "   # ", "   # ", "   # ", "#  # ", " ##  "],
    'K': ["#   #", "#  # ", "# #  ", "##   ", "# #  ", "#  # ", "#   #"],
    'L': ["#    ", "#    ", "#    ", "#    ", "#    ", "#    ", "#####"],
    'M': ["#   #", "## ##", "# # #", "# # #", "#   #", "#   #", "#   #"],
    'N': ["#   #", "##  #", "# # #", "#  ##", "#   #", "#   #", "#   #"],
    'O': [" ### ", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "],
    'P': ["#### ", "#   #", "#   #", "#### ", "#    ", "#    ", "#    "],
    'Q': [" ### ", "#   #", "#   #", "#   #", "# # #", "#  # ", " ## #"],
    'R': ["#### ", "#   #", "#   #", "#### ", "# #  ", "#  # ", "#   #"],
    'S': [" ####", "#    ", "#    ", " ### ", "    #", "    #", "#### "],
    'T': ["#####", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "],
    'U': ["#   #", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "],
    'V': ["#   #", "#   #", "#   #", "#   #", "#   #", " # # ", "  #  "],
    'W': ["#   #", "#   #", "#   #", "# # #", "# # #", "# # #", " # # "],
    'X': ["#   #", "#   #", " # # ", "  #  ", " # # ", "#   #", "#   #"],
    'Y': ["#   #", "#   #", " # # ", "  #  ", "  #  ", "  #  ", "  #  "],
    'Z': ["#####", "    #", "   # ", "  #  ", " #   ", "#    ", "#####"],
    '0': [" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "],
    '1': ["  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "],
    '2': [" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"],
    '3': ["#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "],
    '4': ["   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "],
    '5': ["#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "],
    '6': ["  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "],
    '7': ["#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "],
    '8': [" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "],
    '9': [" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "],
    '%': ["##   ", "##  #", "   # ", "  #  ", " #   ", "#  ##", "   ##"],
    '.': ["     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "],
    ',': ["     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "],
    '-': ["     ", "     ", "     ", "#####", "     ", "     ", "     "],
    '+': ["     ", "  #  ", "  #  ", "#####", "  #  ", "  #  ", "     "],
    '=': ["     ", "     ", "#####", "     ", "#####", "     ", "     "],
    ':': ["     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     "],
    '/': ["     ", "    #", "   # ", "  #  ", " #   ", "#    ", "     "],
    '(': ["   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "],
    ')': [" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "],
    "'": ["  #  ", "  #  ", " #   ", "     ", "     ", "     ", "     "],
    ' ': ["     "] * 7,
}


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(bytes(BG) * (w * h))

    def rect(self, x0, y0, x1, y1, c):
        """Fills [x0, x1) x [y0, y1), clipped."""
        x0, x1 = max(0, int(x0)), min(self.w, int(x1))
        y0, y1 = max(0, int(y0)), min(self.h, int(y1))
        if x0 >= x1:
            return
        row = bytes(c) * (x1 - x0)
        for y in range(y0, y1):
            o = (y * self.w + x0) * 3
            self.px[o:o + len(row)] = row

    def text(self, x, y, s, c=INK, scale=2):
        for ch in s.upper():
            g = FONT.get(ch, FONT[' '])
            for r, bits in enumerate(g):
                for k, b in enumerate(bits):
                    if b == '#':
                        self.rect(x + k * scale, y + r * scale,
                                  x + (k + 1) * scale, y + (r + 1) * scale, c)
            x += 6 * scale

    @staticmethod
    def text_w(s, scale=2):
        return len(s) * 6 * scale - scale

    def png(self):
        raw = b''.join(b'\x00' + bytes(self.px[y * self.w * 3:
                                                (y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(kind, data):
            return (struct.pack('>I', len(data)) + kind + data
                    + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff))

        return (b'\x89PNG\r\n\x1a\n'
                + chunk(b'IHDR', struct.pack('>IIBBBBB', self.w, self.h, 8, 2,
                                             0, 0, 0))
                + chunk(b'IDAT', zlib.compress(raw, 9))
                + chunk(b'IEND', b''))


def read_runs(path):
    runs = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0] != 'fair_run':
                continue
            runs.append(dict(p.split('=', 1) for p in parts[1:] if '=' in p))
    return runs


def plot(runs, title):
    c = Canvas(W, H)
    left, right, top, bottom = 70, W - 20, 60, H - 70
    ph = bottom - top

    def ypos(share):
        return bottom - share * ph

    c.text((W - c.text_w(title)) // 2, 14, title)

    # the goal: within 10% of an equal share
    c.rect(left, ypos(0.55), right, ypos(0.45), BAND)
    for v in (0, 0.25, 0.5, 0.75, 1.0):
        c.rect(left, ypos(v), right, ypos(v) + 1, GRID)
        label = '%d%%' % round(v * 100)
        c.text(left - 8 - c.text_w(label), ypos(v) - 7, label)
    c.rect(left, top, left + 1, bottom + 1, INK)
    c.rect(left, bottom, right, bottom + 1, INK)

    n = max(1, len(runs))
    gw = (right - left) / n
    bw = min(70, gw / 3)
    for i, r in enumerate(runs):
        cx = left + gw * (i + 0.5)
        for k, (key, col) in enumerate((('share_tokens', TOK),
                                        ('share_kv', KV))):
            v = float(r.get(key, 0))
            x0 = cx - bw - 4 + k * (bw + 8)
            c.rect(x0, ypos(v), x0 + bw, bottom, col)
            label = '%.0f%%' % (v * 100)
            c.text(x0 + (bw - c.text_w(label)) / 2, ypos(v) - 20, label)
        name = r.get('policy', '?')
        c.text(cx - c.text_w(name) / 2, bottom + 10, name)

    # legend
    y = H - 30
    c.rect(left, y, left + 14, y + 14, TOK)
    c.text(left + 22, y, "A: served tokens")
    x = left + 22 + c.text_w("A: served tokens") + 30
    c.rect(x, y, x + 14, y + 14, KV)
    c.text(x + 22, y, "A: KV block-s")
    x = x + 22 + c.text_w("A: KV block-s") + 30
    c.rect(x, y, x + 14, y + 14, BAND)
    c.text(x + 22, y, "goal 45-55%")
    return c.png()


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    runs = read_runs(argv[1])
    if not runs:
        sys.stderr.write('fair_plot: no fair_run lines in %s\n' % argv[1])
        return 1
    r = runs[0]
    title = argv[3] if len(argv) > 3 else (
        "A's share: cache %s, A %s vs B %s tokens"
        % (r.get('cache_tokens', '?'), r.get('a_prompt', '?'),
           r.get('b_prompt', '?')))
    with open(argv[2], 'wb') as f:
        f.write(plot(runs, title))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
