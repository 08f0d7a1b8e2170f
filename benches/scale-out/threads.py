#!/usr/bin/env python3
"""Where the threads of some processes spent a run: on a core, waiting for
one (runnable, in the run queue) or asleep (blocked on I/O, a lock, a
channel or a timer).

    threads.py OUT PID...      samples every 0.2 s until OUT.stop exists,
                               then writes one line per (process, thread
                               kind) to OUT

Per thread, /proc/PID/task/TID/schedstat gives the time on a core and the
time runnable but waiting for a core (the scheduler's own accounting,
nanoseconds), /proc/PID/task/TID/stat its start; a thread's life is from
its start (or the first sample) to its last sample, and asleep is its life
less the other two. Threads that end between samples keep their last
figures. Threads are grouped by kind: their name with digits and
per-instance suffixes taken out (`rdk:broker3` -> `rdk:broker`,
`actix-rt|system:0|arbiter:4` -> `actix-rt|arbiter`).
"""

import os
import re
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def boot_time():
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return int(line.split()[1])
    raise SystemExit("threads.py: no btime in /proc/stat")


def kind(name):
    name = re.sub(r"\|system:\d+", "", name)
    name = re.sub(r"\d+", "", name)
    return name.rstrip(":|-_ ") or "?"


def sample(pid, seen, now):
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(base + "/schedstat") as f:
                on_cpu, runq, _ = (int(x) for x in f.read().split())
            if (pid, tid) not in seen:
                with open(base + "/comm") as f:
                    name = f.read().strip()
                with open(base + "/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                start = BOOT + int(fields[19]) / CLK_TCK
                seen[(pid, tid)] = {"name": name, "start": max(start, T0), "cpu0": None}
        except (OSError, ValueError):
            continue
        t = seen[(pid, tid)]
        if t["cpu0"] is None:
            # A thread older than the sampler counts from the first sample.
            t["cpu0"], t["runq0"] = (on_cpu, runq) if t["start"] <= T0 else (0, 0)
        t["cpu"], t["runq"], t["last"] = on_cpu, runq, now


def main():
    out, pids = sys.argv[1], [int(p) for p in sys.argv[2:]]
    seen = {}
    while not os.path.exists(out + ".stop"):
        now = time.time()
        for pid in pids:
            sample(pid, seen, now)
        time.sleep(0.2)
    rows = {}
    for (pid, _), t in seen.items():
        if "last" not in t:
            continue
        life = max(t["last"] - t["start"], 0.0)
        cpu = (t["cpu"] - t["cpu0"]) / 1e9
        runq = (t["runq"] - t["runq0"]) / 1e9
        r = rows.setdefault((pid, kind(t["name"])), [0, 0.0, 0.0, 0.0])
        r[0] += 1
        r[1] += cpu
        r[2] += runq
        r[3] += max(life - cpu - runq, 0.0)
    with open(out, "w") as f:
        for (pid, k), (n, cpu, runq, asleep) in sorted(rows.items(), key=lambda kv: (kv[0][0], -kv[1][1])):
            f.write(f"THREADS pid={pid} kind={k} threads={n} cpu_s={cpu:.2f} runq_s={runq:.2f} asleep_s={asleep:.2f}\n")


BOOT = boot_time()
T0 = time.time()
if __name__ == "__main__":
    main()
