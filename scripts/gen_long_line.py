#!/usr/bin/env python3
"""One line of seeded random words, without a newline: the input of the
long-line memory benchmark of `floe run wordcount` (docs/benchmarks.md).

Words are drawn from a vocabulary of VOCAB words `w0` .. `w<VOCAB-1>`,
separated by single spaces, until the line holds BYTES bytes.

    python3 scripts/gen_long_line.py BYTES SEED [VOCAB] > FILE
"""
import random
import sys


def main():
    size, seed = int(sys.argv[1]), int(sys.argv[2])
    vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    rng = random.Random(seed)
    words = ["w%d" % i for i in range(vocab)]
    out = sys.stdout
    written = 0
    while written < size:
        chunk = " ".join(rng.choice(words) for _ in range(65536))
        if written:
            chunk = " " + chunk
        chunk = chunk[: size - written]
        out.write(chunk)
        written += len(chunk)


if __name__ == "__main__":
    main()
