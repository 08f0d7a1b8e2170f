"""One RESULT line from the logs of a kill -9 run of run.sh.

    rebalance_figures.py SYSTEM N SESSION_MS DIR VICTIM KILL_MS OK LOAD_START LOAD_END

Every time is in ms after the kill (KILL_MS, ms since the epoch, taken
just before `kill -9`):
- detect: the group watcher's first change after the kill (the
  coordinator left the Stable state or dropped the member);
- floe: assigned = the first survivor's `rebalance` line (stamped on
  arrival) of a generation that holds some of the victim's partitions;
  first = the first `first_record` of such a generation (at_ms), last =
  the last survivor's; plan = first - assigned;
- Kafka Streams: rebalancing = a survivor's state change to REBALANCING;
  assigned = the first `task_init` of one of the victim's tasks at a
  survivor; first_in / all_in = the first / last of the victim's input
  tasks' first records at a survivor; first_count / all_count the same
  for its count tasks (the repartition topic's).
"""
import os
import re
import sys
from pathlib import Path

system, n, session, d, victim, tk, ok, l0, l1 = sys.argv[1:]
n, victim, tk = int(n), int(victim), int(tk)
d = Path(d)
survivors = [i for i in range(1, n + 1) if i != victim]
out = {"what": "rebalance", "round": os.environ.get("ROUND", 0), "system": system, "members": n, "session_ms": session, "ok": ok}


def after(ms):
    return None if ms is None else int(ms) - tk


detect = None
for line in (d / "watch.log").read_text().splitlines():
    m = re.match(r"group at_ms=(\d+) (.*)", line)
    if m and int(m.group(1)) > tk:
        detect = int(m.group(1))
        out["detect_state"] = m.group(2).replace(" ", ",")
        break
out["detect_ms"] = after(detect)

if system == "floe":
    victim_parts = set((d / "victim-parts").read_text().split())
    assigned, firsts, plans = [], [], []
    for i in survivors:
        lines = (d / f"m{i}.log").read_text().splitlines()
        gen = None
        for line in lines:
            stamp, _, rest = line.partition(" ")
            m = re.match(r"rebalance generation=(\d+) partitions=(.*)", rest)
            if m and int(stamp) > tk and gen is None and victim_parts & set(m.group(2).split(",")):
                gen = m.group(1)
                assigned.append(int(stamp))
            m = re.match(r"first_record generation=(\d+) after_ms=(\d+) at_ms=(\d+)", rest)
            if m and gen is not None and m.group(1) == gen:
                firsts.append(int(m.group(3)))
                plans.append(int(m.group(2)))
                break
    out["assigned_ms"] = after(min(assigned)) if assigned else None
    out["first_ms"] = after(min(firsts)) if firsts else None
    out["last_ms"] = after(max(firsts)) if firsts else None
    out["plan_ms"] = ",".join(map(str, plans))
else:
    tasks = (d / "victim-tasks").read_text().split("\n")
    tasks = [t for t in tasks if t]
    rebalancing, inits, first = [], {}, {}
    for i in survivors:
        for line in (d / f"m{i}.log").read_text().splitlines():
            at = re.search(r"at_ms=(\d+)", line)
            if not at or int(at.group(1)) <= tk:
                continue
            at = int(at.group(1))
            if line.startswith("state RUNNING->REBALANCING"):
                rebalancing.append(at)
            for t in tasks:
                if line.startswith(f"task_init {t} "):
                    inits[t] = min(inits.get(t, at), at)
                if line.startswith(f"first_record {t} "):
                    first[t] = min(first.get(t, at), at)
    out["rebalancing_ms"] = after(min(rebalancing)) if rebalancing else None
    out["assigned_ms"] = after(min(inits.values())) if inits else None
    out["victim_tasks"] = ",".join(sorted(t.split()[1][5:] for t in tasks))
    for stage in ("in", "count"):
        got = [first[t] for t in tasks if t.startswith(f"stage={stage} ") and t in first]
        want = [t for t in tasks if t.startswith(f"stage={stage} ")]
        out[f"first_{stage}_ms"] = after(min(got)) if got else None
        out[f"all_{stage}_ms"] = after(max(got)) if got and len(got) == len(want) else None
    out["first_ms"] = out["first_in_ms"]

out["busy_pct_before"] = os.environ.get("QUIET")
out["load_start"] = l0
out["load_end"] = l1
print("RESULT " + " ".join(f"{k}={v}" for k, v in out.items()))
