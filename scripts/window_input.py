#!/usr/bin/env python3
"""Writes the `floe run window` benchmark input: `key,timestamp_ms,value` lines.

Seeded, so a run writes the same file byte for byte. Lines are 1 ms apart in
event time, each timestamp jittered back by up to `--out-of-orderness` ms (so
with that bound no record is late); keys follow a Zipf(1) mix over `--keys`
keys (a few hot keys, a long tail); values are 0..999.

    python3 scripts/window_input.py --lines 5000000 --keys 10000 \
        --out-of-orderness 500 --seed 16 > /tmp/window-5m.csv
"""

import argparse
import random
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--out-of-orderness", type=int, default=500)
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    names = [f"key{k}" for k in range(args.keys)]
    cumulative = []
    total = 0.0
    for rank in range(1, args.keys + 1):
        total += 1.0 / rank
        cumulative.append(total)
    out = sys.stdout
    chunk = 100_000
    for base in range(0, args.lines, chunk):
        n = min(chunk, args.lines - base)
        keys = rng.choices(names, cum_weights=cumulative, k=n)
        lines = []
        for i in range(n):
            ts = base + i - rng.randint(0, args.out_of_orderness)
            lines.append(f"{keys[i]},{ts},{rng.randrange(1000)}\n")
        out.write("".join(lines))


if __name__ == "__main__":
    main()
