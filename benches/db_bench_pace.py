#!/usr/bin/env python3
"""db_bench's write calls over time, from outside: one WAL write(2) a write.

Usage: db_bench_pace.py OUT [EVERY_S]   (default every 0.02 s)

Waits for a process whose argv[0] ends in db_bench, writes OUT.t0 (the wall-clock time it
was found), then every EVERY_S appends "WALL_TIME TOTAL" to OUT: the summed `syscw` of its
threads (/proc/PID/task/*/io), until it exits. A thread that exits between two reads takes
its count out of the sum: readers skip a drop. Used by rocksdb_pace.sh and rocksdb_budget.sh.
"""
import os
import sys
import time

out = open(sys.argv[1], "w")
every = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
pid = None
while pid is None:
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[0].endswith(b"db_bench"):
                pid = p
        except OSError:
            pass
    time.sleep(0.002)
with open(sys.argv[1] + ".t0", "w") as f:
    print(time.time(), file=f)
while True:
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        break  # db_bench exited
    for t in tasks:
        try:
            for line in open(f"/proc/{pid}/task/{t}/io"):
                if line.startswith("syscw"):
                    total += int(line.split()[1])
        except OSError:
            pass  # a thread that just exited
    out.write(f"{time.time():.4f} {total}\n")
    out.flush()
    time.sleep(every)
