#!/usr/bin/env python3
"""Checks that two window jobs fired the same windows: the multisets of
(key, window_start, window_end, sum) of floe's and Flink's output must be equal.

    compare_outputs.py FLOE_OUT FLINK_OUT [INPUT WINDOW]

With INPUT (`key,timestamp_ms,value` lines) and WINDOW (`tumbling:SIZE` or
`sliding:SIZE,SLIDE`, ms) both are also checked against sums computed here
with a plain dict, which holds when no record is late (the generator's jitter
stays below the out-of-orderness bound).

Both files hold one firing per line. Lines are normalised before comparing:
surrounding whitespace and brackets (a tuple's `(..)`) are dropped, fields are
split on commas, the key is kept as text and the three numbers are read as
integers (so `+5`, `05` and `5` agree). The order of the lines is free (P
subtasks interleave their firings). Prints the counts and exits 1 on a
difference, listing a few firings found on one side only.
"""
import collections
import sys


def firings(path):
    out = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip().strip("()[]")
            if not line:
                continue
            fields = [x.strip() for x in line.rsplit(",", 3)]
            if len(fields) != 4:
                sys.exit(f"{path}:{n}: expected key,start,end,sum: {raw.rstrip()}")
            try:
                key, start, end, total = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
            except ValueError:
                sys.exit(f"{path}:{n}: not a number in: {raw.rstrip()}")
            out[(key, start, end, total)] += 1
    return out


def expected(path, spec):
    kind, _, sizes = spec.partition(":")
    if kind == "tumbling":
        size = slide = int(sizes)
    elif kind == "sliding":
        size, slide = (int(x) for x in sizes.split(","))
    else:
        sys.exit(f"window: {spec}")
    sums = collections.defaultdict(int)
    with open(path, encoding="utf-8") as f:
        for raw in f:
            key, ts, value = raw.rstrip("\n").split(",")
            ts, value = int(ts), int(value)
            last = ts - ts % slide  # Flink's getWindowStartWithOffset, offset 0
            for start in range(last, ts - size, -slide):
                sums[(key, start, start + size)] += value
    return collections.Counter({(k, s, e, v): 1 for (k, s, e), v in sums.items()})


def main():
    if len(sys.argv) not in (3, 5):
        sys.exit(__doc__)
    floe, flink = firings(sys.argv[1]), firings(sys.argv[2])
    if len(sys.argv) == 5:
        oracle = expected(sys.argv[3], sys.argv[4])
        for side, got in (("floe", floe), ("flink", flink)):
            same = got == oracle
            print(f"{side} vs dict oracle ({sum(oracle.values())} windows): {'same' if same else 'DIFFERENT'}")
            if not same:
                sys.exit(1)
    only_floe = floe - flink
    only_flink = flink - floe
    dup = sum(c - 1 for c in floe.values() if c > 1), sum(c - 1 for c in flink.values() if c > 1)
    print(
        f"floe: {sum(floe.values())} firings ({len(floe)} distinct, sum of sums "
        f"{sum(k[3] * c for k, c in floe.items())}); flink: {sum(flink.values())} firings "
        f"({len(flink)} distinct, sum of sums {sum(k[3] * c for k, c in flink.items())}); "
        f"duplicates floe/flink: {dup[0]}/{dup[1]}; keys: {len({k[0] for k in floe})}; "
        f"windows (start,end): {len({k[1:3] for k in floe})}"
    )
    if only_floe or only_flink:
        print(f"DIFFERENT: {sum(only_floe.values())} only in floe, {sum(only_flink.values())} only in flink")
        for side, d in (("floe", only_floe), ("flink", only_flink)):
            for k in sorted(d)[:5]:
                print(f"  only in {side}: {k[0]},{k[1]},{k[2]},{k[3]}")
        sys.exit(1)
    print("SAME: identical multisets of (key, window_start, window_end, sum)")


if __name__ == "__main__":
    main()
