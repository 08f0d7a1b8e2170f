"""Medians and ratios from run.sh's RESULT lines.

    summarize.py [RESULTS=build/results.txt]

Throughput: per system and member count, the median records/s over the
rounds, its range, and per-round ratios (taken within a round, then their
median): against the same system with 1 member, and floe against Kafka
Streams at the same member count. Rebalance: per system and session
timeout, the median of each part over the kills (ms after the kill).
"""
import statistics
import sys
from collections import defaultdict
from pathlib import Path

path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "build" / "results.txt")
rows = []
for line in path.read_text().splitlines():
    if line.startswith("RESULT "):
        rows.append(dict(f.split("=", 1) for f in line.split()[1:] if "=" in f))


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=0):
    return "-" if x is None else f"{x:,.{nd}f}"


tp = [r for r in rows if r["what"] == "throughput" and "rps" in r]
by = defaultdict(list)
for r in tp:
    by[(r["system"], int(r["members"]))].append(r)
rps = {(r["system"], int(r["members"]), r["round"]): float(r["rps"]) for r in tp}
if tp:
    print("throughput: words/s from the members' start to complete committed output")
    print(f"{'system':<8}{'N':>3}{'runs':>5}{'median':>10}{'range':>22}{'from 1st rec':>13}"
          f"{'xN=1':>7}{'floe/KS':>8}{'members':>9}{'broker':>8}{'machine':>8}{'load':>12}")
    for (s, n), rs in sorted(by.items()):
        x1 = med([rps[(s, n, r["round"])] / rps[(s, 1, r["round"])]
                  for r in rs if (s, 1, r["round"]) in rps])
        vs = None if s != "floe" else med([rps[("floe", n, r["round"])] / rps[("streams", n, r["round"])]
                  for r in rs if ("floe", n, r["round"]) in rps and ("streams", n, r["round"]) in rps])
        vals = [float(r["rps"]) for r in rs]
        loads = [float(r["load_start"]) for r in rs]
        print(f"{s:<8}{n:>3}{len(rs):>5}{fmt(med(vals)):>10}{fmt(min(vals)) + '-' + fmt(max(vals)):>22}"
              f"{fmt(med([float(r['rps_from_first_record']) for r in rs])):>13}"
              f"{fmt(x1, 2):>7}{fmt(vs, 2):>8}"
              f"{fmt(med([float(r['members_cores']) for r in rs]), 2):>9}"
              f"{fmt(med([float(r['broker_cores']) for r in rs]), 2):>8}"
              f"{fmt(med([float(r['machine_cores']) for r in rs]), 2):>8}"
              f"{fmt(min(loads), 1) + '-' + fmt(max(loads), 1):>12}")
    print("(members/broker/machine: cores busy on average over the run, of 2)")

rb = [r for r in rows if r["what"] == "rebalance"]
groups = defaultdict(list)
for r in rb:
    groups[(r["system"], r["session_ms"])].append(r)
if rb:
    print()
    print("rebalance after kill -9: ms after the kill, medians (ok runs)")
    parts = ["detect_ms", "rebalancing_ms", "assigned_ms", "first_ms", "last_ms",
             "first_count_ms", "all_in_ms", "all_count_ms"]
    print(f"{'system':<8}{'session':>8}{'runs':>5}" + "".join(f"{p[:-3]:>12}" for p in parts) + f"{'load':>12}")
    for (s, sess), rs in sorted(groups.items()):
        ok = [r for r in rs if r["ok"] == "1"]

        def num(r, p):
            v = r.get(p)
            return None if v in (None, "None") else float(v)
        loads = [float(r["load_start"]) for r in ok] or [0]
        print(f"{s:<8}{sess:>8}{len(ok):>3}/{len(rs):<1}"
              + "".join(f"{fmt(med([num(r, p) for r in ok])):>12}" for p in parts)
              + f"{fmt(min(loads), 1) + '-' + fmt(max(loads), 1):>12}")
        firsts = sorted(num(r, "first_ms") for r in ok if num(r, "first_ms") is not None)
        print(f"{'':<16}first record, each run: {', '.join(fmt(x) for x in firsts)}")
