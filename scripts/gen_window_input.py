#!/usr/bin/env python3
"""Seeded input for `floe run window`: `key,timestamp_ms,value` lines.

Record i has event time BASE + i ms pulled back by a jitter below the
out-of-orderness bound (so `--out-of-orderness` at least that bound makes no
record late), a key from a skewed mix over KEYS keys (a quarter of the records
on 1 % of the keys, the rest uniform) and a value in 1..100.

    python3 scripts/gen_window_input.py LINES KEYS OOO_MS SEED > FILE
"""
import random
import sys


def main():
    lines, keys, ooo, seed = (int(a) for a in sys.argv[1:5])
    rng = random.Random(seed)
    hot = max(1, keys // 100)
    base = 1_700_000_000_000
    out = sys.stdout
    buf = []
    for i in range(lines):
        r = rng.random()
        k = rng.randrange(hot) if r < 0.25 else rng.randrange(keys)
        ts = base + i - (rng.randrange(ooo) if ooo > 0 else 0)
        buf.append("k%d,%d,%d\n" % (k, ts, rng.randrange(1, 101)))
        if len(buf) >= 65536:
            out.write("".join(buf))
            buf.clear()
    out.write("".join(buf))


if __name__ == "__main__":
    main()
