#!/usr/bin/env bash
# Many threads hitting one probe: throughput of 8 threads (and of 1 and 2, for reference)
# calling one probed function, untraced, under `wprof record` with that one phase, and under the
# equivalent bpftrace script, in the same run, rounds interleaved.
#
# Fixture: benches/fixtures/contention.c (gcc -O2 -fno-omit-frame-pointer -fcf-protection=none
# -pthread; probed_op starts with push %rbp): T threads released together, each calling
# probed_op() CALLS times in a loop (~20 multiply-adds, ~50 ns untraced); it prints the calls/s
# of all threads together and its own CPU time per call (CLOCK_PROCESS_CPUTIME_ID: the uprobe
# traps and BPF programs run on the calling threads and are counted there). wprof traces one phase (probed_op; C, so entry uprobe + uretprobe);
# bpftrace runs uprobe + uretprobe on it computing the latency keyed by tid
# (`@lat = avg(nsecs - @s[tid])`). `wprof record --aggregate kernel` (in-kernel aggregation) is
# measured too when this wprof has it, else shown as n/a.
#
# slowdown = untraced calls/s / traced calls/s (the same thread count, the same round); +CPU =
# the CPU ns per call a tool adds to the traced process. The wall-clock rates depend on how
# much CPU the machine's other tenants leave; the CPU per call does not, and a probe path that
# contends (locks, cache-line bouncing) shows as a larger +CPU at 2 and 8 threads than at 1.
# On a 2-vCPU machine at most 2 threads hit the probe at the same moment: 2 threads is the
# parallel case, 8 adds preemption inside probed calls. The untraced runs make 20x CALLS calls
# (untraced, a call is ~30x shorter) so that they last long enough to time.
#
# Run as root: benches/contention.sh [CALLS per thread] [ROUNDS]
set -euo pipefail
# Run as root, even through sudo: wprof record would run the traced commands as SUDO_UID
# (docs/security.md), and they live in root-only temporary directories.
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
CALLS=${1:-200000}
ROUNDS=${2:-5}
THREADS=(1 2 8)
# shellcheck source=benches/setup.sh
. benches/setup.sh
command -v bpftrace >/dev/null || { echo "contention: needs bpftrace (apt-get install bpftrace; .ci/install.sh installs it)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

cbin=$(readlink -f "$FX")/contention
gcc -O2 -fno-omit-frame-pointer -fcf-protection=none -Wall -Wextra -pthread \
  -o "$cbin" benches/fixtures/contention.c
cat >"$out/one.toml" <<'TOML'
name = "contention"
description = "benches/contention.sh: the one probed function"
object = "exe"

[[phase]]
name = "probed_op"
symbol = "probed_op"
TOML
cat >"$out/one.bt" <<BT
uprobe:${cbin}:probed_op { @s[tid] = nsecs; }
uretprobe:${cbin}:probed_op /@s[tid]/ { @lat = avg(nsecs - @s[tid]); @n = count(); delete(@s[tid]); }
BT
KAGG=0
EVENT=()
if "$W" record --help | grep -q -- --aggregate; then
  KAGG=1
  EVENT=(--aggregate event)   # per event, even if a later default is auto
fi

# "calls/s,CPU ns per call" from the fixture's line
cps_of() { sed -n 's/^contention: .*calls_per_s=\([0-9]*\) .*cpu_ns_per_call=\([0-9.]*\).*/\1,\2/p'; }
# wprof's count of probed_op calls and its lost spans, from the JSON
wprof_counts() {
  python3 - "$out/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def walk(ns):
    for n in ns:
        yield n
        yield from walk(n["children"])
print(sum(n["count"] for n in walk(r["tree"]["roots"]) if n["name"] == "probed_op"),
      r["counters"]["lost_spans"], r["counters"]["events"])
PY
}
# untraced, a call is ~30x shorter: 20x the calls, so the run is not over in a few ms
plain() { "$cbin" --threads "$1" --calls $((CALLS * 20)) | cps_of; }
wprof() { # wprof T [extra wprof args]; checks every call was counted
  local t=$1 c l e cps
  shift
  cps=$("$W" record -q --target "$out/one.toml" --json "$out/run.json" "$@" -- \
    "$cbin" --threads "$t" --calls "$CALLS" | cps_of)
  read -r c l e <<<"$(wprof_counts)"
  [ "$((c + l))" -eq "$((t * CALLS))" ] ||
    echo "contention: wprof $* counted $c calls + $l lost, expected $((t * CALLS))" >&2
  echo "$l" >"$out/lost"
  # In-kernel aggregation reads summaries, not one event per call: if as many events as calls
  # came through the ring buffer, the flag is there but not in effect yet.
  if [ "$*" = "--aggregate kernel" ] && [ "$e" -ge "$c" ]; then echo unwired; else echo "$cps"; fi
}
bt() {
  bpftrace -B line "$out/one.bt" -c "$cbin --threads $1 --calls $CALLS" 2>/dev/null >"$out/bt.out"
  local n
  n=$(sed -n 's/^@n: \([0-9]*\)/\1/p' "$out/bt.out")
  [ "${n:-0}" -eq "$(($1 * CALLS))" ] || echo "contention: bpftrace counted ${n:-0} calls, expected $(($1 * CALLS))" >&2
  cps_of <"$out/bt.out"
}

res=$out/results
: >"$res"
echo "each column: calls/s,CPU ns per call of the traced process"
printf '%-6s %7s %16s %16s %16s %16s %8s\n' round threads untraced wprof kernel-agg bpftrace wprof_lost
for r in $(seq "$ROUNDS"); do
  for t in "${THREADS[@]}"; do
    p=$(plain "$t")
    w=$(wprof "$t" "${EVENT[@]}"); lost=$(cat "$out/lost")
    k=n/a
    if [ "$KAGG" = 1 ]; then
      k=$(wprof "$t" --aggregate kernel)
      [ "$k" = unwired ] && { KAGG=2; k=n/a; }
    fi
    b=$(bt "$t")
    printf '%-6s %7s %16s %16s %16s %16s %8s\n' "$r" "$t" "$p" "$w" "$k" "$b" "$lost"
    echo "$t $p $w $k $b" >>"$res"
  done
done

python3 - "$res" "$ROUNDS" "$KAGG" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
rounds, kagg = sys.argv[2], sys.argv[3]
R = int(rounds)
threads = sorted({r[0] for r in rows}, key=int)
cols = {"untraced": 1, "wprof": 2, "kernel-agg": 3, "bpftrace": 4}
tools = ("wprof", "kernel-agg", "bpftrace")
runs = {t: [r for r in rows if r[0] == t] for t in threads}  # runs[t][i]: round i
def rate(t, i, c):
    x = runs[t][i][cols[c]]
    return None if x == "n/a" else float(x.split(",")[0])
def cpu(t, i, c):
    x = runs[t][i][cols[c]]
    return None if x == "n/a" else float(x.split(",")[1])
def per_round(f):  # median over rounds of f(i); None when an input is n/a
    try:
        return st.median(f(i) for i in range(R))
    except TypeError:
        return None
fmt = lambda x, spec, w: format(format(x, spec) if x is not None else "n/a", f">{w}")
print()
print(f"median of {rounds} rounds (ratios and differences: the median of each round's)")
print(f"{'threads':>7} {'untraced/s':>11} {'wprof/s':>9} {'k-agg/s':>9} {'bpftr/s':>9} | slowdown: "
      f"{'wprof':>6} {'k-agg':>6} {'bpftr':>6} {'w/bt':>5} | CPU ns/call: {'untr':>5} +{'wprof':>6} +{'k-agg':>6} +{'bpftr':>6}")
for t in threads:
    rates = [per_round(lambda i, c=c: rate(t, i, c)) for c in cols]
    slow = [per_round(lambda i, c=c: rate(t, i, "untraced") / rate(t, i, c)) for c in tools]
    wbt = per_round(lambda i: rate(t, i, "bpftrace") / rate(t, i, "wprof"))
    base = per_round(lambda i: cpu(t, i, "untraced"))
    add = [per_round(lambda i, c=c: cpu(t, i, c) - cpu(t, i, "untraced")) for c in tools]
    print(f"{t:>7} " + fmt(rates[0], ".0f", 11) + " " + " ".join(fmt(x, ".0f", 9) for x in rates[1:])
          + " |           " + " ".join(fmt(x, ".1f", 6) for x in slow) + " " + fmt(wbt, ".2f", 5)
          + " |              " + fmt(base, ".0f", 5) + "  " + "  ".join(fmt(x, ".0f", 6) for x in add))
print("slowdown = untraced / traced calls/s (wall clock); w/bt = wprof slowdown / bpftrace slowdown;\n"
      "CPU ns/call = the traced process's CPU time (user + system, all threads) per call, untraced, and what "
      "each tool adds to it:\nunlike calls/s it does not depend on how much of the 2 CPUs other tenants left; "
      "a probe path that contends shows as a larger +CPU with more threads")
if kagg == "0":
    print("k-agg: `wprof record --aggregate kernel` is not in this build: n/a (not built)")
elif kagg == "2":
    print("k-agg: this build takes --aggregate kernel but still sent one event per call: n/a (not in effect yet)")
PY
