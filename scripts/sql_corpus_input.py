#!/usr/bin/env python3
"""Seeded input of the SQL corpus (tests/sql_corpus/): the CSV files that
both Apache Flink (scripts/sql_corpus_flink.py) and floe (tests/sql/sql_corpus.rs)
read.

- events.csv: `user_id,item,qty,price,score,tag,ts`; event time moves
  forward with jitter, now and then jumps ahead (so sessions end), a quarter
  of the rows are out of order within 1.5 s and about 7 % are late by 3-30 s
  (with the corpus's 2 s watermark delay they fall into windows that have
  fired). qty, price, score and tag are sometimes NULL (written `NULL`, the
  tables' `csv.null-literal`: Flink's csv format fails on an empty number);
  tag is sometimes empty, padded, mixed case, or holds a comma or a quote;
  score is a multiple of 0.25.
- orders.csv: `order_id,user_id,amount,epoch_ms`; epoch milliseconds for
  a TIMESTAMP_LTZ event time, with out-of-order and late rows too.

    python3 scripts/sql_corpus_input.py [DIR]   # default tests/sql_corpus/input
"""
import os
import random
import sys

BASE_MS = 1_704_067_200_000  # 2024-01-01 00:00:00 UTC
USERS = ["u1", "u2", "u3", "u4", "u5", "u6"]
TAGS = ["red", "Blue", " green ", "GREEN", "", "x,y", 'say "hi"', "a_b%c", "  ", "blue", "NULL", " 42 ", "7"]


def timestamp(ms):
    """`yyyy-MM-dd HH:mm:ss.SSS` of `ms` after 2024-01-01 00:00:00."""
    s, frac = divmod(ms, 1000)
    return "2024-01-01 %02d:%02d:%02d.%03d" % (s // 3600, s // 60 % 60, s % 60, frac)


def quoted(text):
    if any(c in text for c in ',"'):
        return '"' + text.replace('"', '""') + '"'
    return text


def event_times(rng, n):
    """n event times (ms after BASE_MS): forward, out of order, late."""
    t = 60_000
    out = []
    for _ in range(n):
        t += rng.randrange(0, 400)
        if rng.random() < 0.03:
            t += rng.randrange(4_000, 12_000)
        r = rng.random()
        if r < 0.07:
            out.append(t - rng.randrange(3_000, 30_000))
        elif r < 0.32:
            out.append(t - rng.randrange(0, 1_500))
        else:
            out.append(t)
    return out


def events(rng, n):
    lines = []
    for ts in event_times(rng, n):
        user = rng.choices(USERS, weights=[5, 4, 3, 2, 1, 1])[0]
        item = rng.randrange(1, 21)
        qty = "NULL" if rng.random() < 0.1 else str(rng.randrange(-5, 51))
        price = "NULL" if rng.random() < 0.08 else "%d.%02d" % (rng.randrange(0, 1000), rng.randrange(100))
        if rng.random() < 0.1:
            score = "NULL"
        elif rng.random() < 0.05:
            score = "%d.5E6" % rng.randrange(1, 10)
        else:
            # Quarters: a DOUBLE sum is exact in any order (Flink's window
            # aggregate adds partial sums, floe adds row by row).
            score = "%.2f" % (rng.randrange(-400, 401) / 4)
        tag = quoted(rng.choice(TAGS))
        lines.append(",".join([user, str(item), qty, price, score, tag, timestamp(ts)]))
    return lines


def orders(rng, n):
    lines = []
    for i, ts in enumerate(event_times(rng, n)):
        user = rng.choice(USERS)
        amount = "%d.%03d" % (rng.randrange(0, 500), rng.randrange(1000))
        if rng.random() < 0.1:
            amount = "-" + amount
        lines.append("%d,%s,%s,%d" % (1000 + i, user, amount, BASE_MS + ts))
    return lines


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "sql_corpus", "input")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(34)
    for name, lines in [("events.csv", events(rng, 4000)), ("orders.csv", orders(rng, 1500))]:
        with open(os.path.join(out, name), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
