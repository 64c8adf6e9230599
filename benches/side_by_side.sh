#!/usr/bin/env bash
# wprof (per-event and in-kernel aggregation), bpftrace and funclatency (libbpf-tools and bcc)
# on the same fixture, the same probe, in one run with the rounds interleaved: what each adds
# per call, and whether their means of a 20 µs (and a 100 µs) phase agree with the fixture's own
# timer.
#
# The probe: write_record of the C fixture (tests/fixtures/writepath.c, gcc -O2
# -fcf-protection=none: entry `push %rbp`), entry uprobe + uretprobe in every tool (funclatency
# times one function per run, so every tool times just this one). write_record is the phase the
# fixture times itself: it reads the clock around each call in its calling loop and prints the
# mean (write_mean_ns). Its six child phases run untraced.
#
#  cost:  every phase time 0 (a write is ~0.35 µs of real work, one probed call);
#         add/call = traced median write - untraced median write (write_p50_ns), the same
#         round: on a shared 2-vCPU VM a few writes preempted for milliseconds move a mean of
#         0.35 µs writes by microseconds, a median not.
#  agree20, agree100: write_record's own spin 20 µs (AGREE_ITERATIONS writes) or 100 µs (a
#         fifth as many), the children 0; each tool's mean of write_record against the
#         fixture's mean over the same calls in the same run. The fixture's timer sits outside
#         the call, so it also holds the parts of the two probe traps that come before the
#         tool's entry timestamp and after its return one: a fixed gap in ns, so a smaller
#         share of a longer phase.
#  The fixture (and the tool that starts it) runs under SCHED_FIFO (chrt -f 10) in every test.
#
# Tools:
#   wprof       wprof record, a profile with the one phase; raw total_ns / count from the JSON
#   wprof-kagg  the same with --aggregate kernel (in-kernel aggregation); n/a until built
#   bpftrace    uprobe + uretprobe, @lat = avg(nsecs - @s[tid]) keyed by tid (-B line)
#   fl-libbpf   /usr/sbin/funclatency (libbpf-tools, CO-RE): a log2 histogram, no mean
#   fl-bcc      funclatency-bpfcc (bcc's Python tool): histogram + "avg = N nsecs"; needs
#               bpfcc-tools and kernel headers, which .ci/install.sh does not install: it runs
#               when bpfcc-tools and linux-headers-amd64 are installed (Debian's 6.1 headers,
#               merged into one tree and passed as BCC_KERNEL_SOURCE; uprobe programs do not
#               touch kernel structures), else n/a
#
# Run as root: benches/side_by_side.sh [COST_ITERATIONS] [AGREE_ITERATIONS] [ROUNDS]
set -euo pipefail
# Run as root, even through sudo: wprof record would run the traced commands as SUDO_UID
# (docs/security.md), and they live in root-only temporary directories.
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
N=${1:-20000}
M=${2:-20000}
ROUNDS=${3:-5}
# shellcheck source=benches/setup.sh
. benches/setup.sh
command -v bpftrace >/dev/null || { echo "side_by_side: needs bpftrace (apt-get install bpftrace; .ci/install.sh installs it)" >&2; exit 2; }
out=$(mktemp -d)
bg=""
stop_bg() { # SIGINT (the tools print their summary on it); SIGKILL if still there after 10 s
  local _i
  [ -n "$bg" ] || return 0
  kill -INT "$bg" 2>/dev/null || true
  for _i in $(seq 100); do kill -0 "$bg" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$bg" 2>/dev/null; then
    echo "side_by_side: $bg ignored SIGINT; killed" >&2
    kill -KILL "$bg" 2>/dev/null || true
  fi
  wait "$bg" 2>/dev/null || true
  bg=""
}
cleanup() {
  stop_bg
  rm -rf "$out"
}
trap cleanup EXIT

# The fixture (and the tool that starts it) runs under SCHED_FIFO, so that other tenants of the
# machine cannot preempt it inside a timed call: on a loaded 2-vCPU VM preemption otherwise
# inflates the mean of a 20 µs phase by up to 50% (the medians move by 0.1%).
RT=(chrt -f 10)
FN=write_record
ZERO=(--write-us 0 --encode-us 0 --persist-us 0 --compress-us 0 --flush-us 0 --wal-us 0 --sync-us 0)
CHILDREN0=(--encode-us 0 --persist-us 0 --compress-us 0 --flush-us 0 --wal-us 0 --sync-us 0)

cat >"$out/one.toml" <<TOML
name = "side-by-side"
description = "benches/side_by_side.sh: write_record only"
object = "exe"

[[phase]]
name = "$FN"
symbol = "$FN"
TOML
cat >"$out/one.bt" <<BT
uprobe:${prog}:${FN} { @s[tid] = nsecs; }
uretprobe:${prog}:${FN} /@s[tid]/ { @lat = avg(nsecs - @s[tid]); @n = count(); delete(@s[tid]); }
BT

# --- which tools this host has ----------------------------------------------------------------
TOOLS=(plain wprof wprof-kagg bpftrace fl-libbpf fl-bcc)
declare -A WHY=()
EVENT=()
if "$W" record --help | grep -q -- --aggregate; then
  EVENT=(--aggregate event)   # per event, even if a later default is auto
else
  WHY[wprof-kagg]="n/a (not built)"
fi
FL=/usr/sbin/funclatency
[ -x "$FL" ] || WHY[fl-libbpf]="n/a (no /usr/sbin/funclatency: apt-get install libbpf-tools)"
FLBCC=$(command -v funclatency-bpfcc || true)
khdr=$(readlink -f target)/bench-khdr
if [ -z "$FLBCC" ]; then
  WHY[fl-bcc]="n/a (needs bpfcc-tools + linux-headers-amd64, not in .ci/install.sh)"
elif ! compgen -G "/usr/src/linux-headers-*-common" >/dev/null || ! compgen -G "/usr/src/linux-headers-*-amd64" >/dev/null; then
  WHY[fl-bcc]="n/a (bcc needs kernel headers: apt-get install linux-headers-amd64)"
elif [ ! -e "$khdr/Makefile" ]; then
  # Debian splits the headers in two trees; bcc wants one. Symlink copies, a few seconds.
  rm -rf "$khdr.tmp"
  common=$(compgen -G "/usr/src/linux-headers-*-common" | sort -V | tail -1)
  arch=$(compgen -G "/usr/src/linux-headers-*-amd64" | sort -V | tail -1)
  cp -rs "$common" "$khdr.tmp" && cp -rsf "$arch/." "$khdr.tmp/" && mv "$khdr.tmp" "$khdr"
fi

# --- one run of a tool: prints "fixture_mean_ns fixture_p50_ns tool_mean_ns tool_count" --------
fix_of() { sed -n 's/^fixture: .*write_mean_ns=\([0-9]*\) write_p50_ns=\([0-9]*\).*/\1 \2/p' "$1"; }
# Background tools (funclatency): start, wait until it says it is tracing, run the fixture,
# SIGINT, wait for the summary. Their stdout is a file, so it is made line-buffered (stdbuf for
# the C tool, PYTHONUNBUFFERED for bcc's), or "Tracing" would only appear at exit; and SIGINT,
# which bash leaves ignored in background jobs, is reset so that bcc's Python tool gets its
# KeyboardInterrupt (the libbpf tool installs its own handler).
start_bg() { # start_bg OUTFILE TOOL ARGS... -> 0 once it printed "Tracing"
  local file=$1 t0 alive=no
  shift
  python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    env PYTHONUNBUFFERED=1 stdbuf -oL "$@" >"$file" 2>&1 &
  bg=$!
  t0=$(date +%s)
  while [ $(($(date +%s) - t0)) -lt 60 ]; do
    grep -q "^Tracing" "$file" && return 0
    kill -0 "$bg" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "^Tracing" "$file" && return 0
  kill -0 "$bg" 2>/dev/null && alive=yes
  echo "side_by_side: $* did not say 'Tracing' (after $(($(date +%s) - t0)) s; still running: $alive); output:" >&2
  cat "$file" >&2
  stop_bg
  return 1
}
with_bg() { # with_bg OUTFILE FIXTURE_ARGS -- TOOL ARGS...; one retry if the tool does not start
  local file=$1
  shift
  local -a fargs=()
  while [ "$1" != -- ]; do fargs+=("$1"); shift; done
  shift
  # this runs in one's $( ) subshell, which does not inherit the script's EXIT trap
  trap stop_bg EXIT
  start_bg "$file" "$@" || start_bg "$file" "$@" || return 1
  sleep 0.2
  "${RT[@]}" "$prog" "${fargs[@]}" >"$out/fx.out"
  sleep 0.2
  stop_bg
}
one() { # one TOOL FIXTURE_ARGS...
  local tool=$1
  shift
  case $tool in
  plain)
    "${RT[@]}" "$prog" "$@" >"$out/fx.out"
    echo "$(fix_of "$out/fx.out") - -" ;;
  wprof | wprof-kagg)
    local -a extra=("${EVENT[@]}")
    [ "$tool" = wprof-kagg ] && extra=(--aggregate kernel)
    "${RT[@]}" "$W" record -q --target "$out/one.toml" "${extra[@]}" --json "$out/w.json" -- "$prog" "$@" >"$out/fx.out"
    # In-kernel aggregation reads summaries, not one event per call: as many events as calls
    # means the flag is parsed but not in effect yet ("unwired").
    echo "$(fix_of "$out/fx.out") $(python3 - "$out/w.json" "$FN" "$tool" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def walk(ns):
    for n in ns:
        yield n
        yield from walk(n["children"])
c = t = 0
for n in walk(r["tree"]["roots"]):
    if n["name"] == sys.argv[2]:
        c += n["count"]; t += n["total_ns"]
if sys.argv[3] == "wprof-kagg" and r["counters"]["events"] >= c:
    print("unwired", c)
else:
    print(f"{t / c:.1f} {c}" if c else "- 0")
PY
)" ;;
  bpftrace)
    "${RT[@]}" bpftrace -B line "$out/one.bt" -c "$prog $*" >"$out/fx.out" 2>/dev/null
    echo "$(fix_of "$out/fx.out") $(sed -n 's/^@lat: \([0-9]*\)/\1/p' "$out/fx.out") $(sed -n 's/^@n: \([0-9]*\)/\1/p' "$out/fx.out")" ;;
  fl-libbpf)
    # ns buckets, no mean: report the share of calls in the bucket of the fixture's own median
    with_bg "$out/fl.out" "$@" -- "$FL" "$prog:$FN" || { echo "- - failed -"; return; }
    local f
    f=$(fix_of "$out/fx.out")
    echo "$f $(python3 - "$out/fl.out" "${f##* }" <<'PY'
import re, sys
fm = float(sys.argv[2]); tot = inb = 0; b = "?"
for lo, hi, c in re.findall(r"^\s*(\d+) -> (\d+)\s*: (\d+)", open(sys.argv[1]).read(), re.M):
    tot += int(c)
    if int(lo) <= fm <= int(hi):
        inb, b = int(c), f"{lo}-{hi}"
print(f"hist:{100 * inb / max(tot, 1):.1f}%in{b}ns {tot}")
PY
)" ;;
  fl-bcc)
    with_bg "$out/fl.out" "$@" -- env BCC_KERNEL_SOURCE="$khdr" "$FLBCC" "$prog:$FN" || { echo "- - failed -"; return; }
    echo "$(fix_of "$out/fx.out") $(sed -n 's/^avg = \([0-9]*\) nsecs, total: [0-9]* nsecs, count: \([0-9]*\).*/\1 \2/p' "$out/fl.out")" ;;
  esac
}

res=$out/results
: >"$res"
printf '%-6s %-8s %-11s %11s %11s %14s %8s\n' round test tool fix_mean fix_p50 tool_mean_ns count
for r in $(seq "$ROUNDS"); do
  for test in cost agree20 agree100; do
    case $test in
    cost) n=$N; args=(--iterations "$n" "${ZERO[@]}") ;;
    agree20) n=$M; args=(--iterations "$n" --write-us 20 "${CHILDREN0[@]}") ;;
    agree100) n=$((M / 5)); args=(--iterations "$n" --write-us 100 "${CHILDREN0[@]}") ;;
    esac
    for tool in "${TOOLS[@]}"; do
      [ -n "${WHY[$tool]:-}" ] && continue
      read -r fm fp tm cnt <<<"$(one "$tool" "${args[@]}")"
      if [ "$tm" = unwired ]; then
        WHY[$tool]="n/a (--aggregate kernel is parsed but still sent one event per call)"
        sed -i "/^[a-z0-9]* $tool /d" "$res"
        continue
      fi
      [ "$tm" = failed ] && { echo "$r $test $tool: left out (did not start twice)"; continue; }
      [ "$cnt" = - ] || [ "$cnt" = "$n" ] || echo "side_by_side: $tool counted $cnt calls of $n" >&2
      printf '%-6s %-8s %-11s %11s %11s %14s %8s\n' "$r" "$test" "$tool" "$fm" "$fp" "$tm" "$cnt"
      echo "$test $tool $fm $fp $tm $cnt" >>"$res"
    done
  done
done

why=""
for t in "${!WHY[@]}"; do why+="$t=${WHY[$t]};"; done
python3 - "$res" "$ROUNDS" "$N" "$M" "$why" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
rounds, n, m = sys.argv[2:5]
why = dict(kv.split("=", 1) for kv in sys.argv[5].split(";") if kv)
def sel(test, tool):
    return [r for r in rows if r[0] == test and r[1] == tool]
p50 = lambda test, tool: st.median(float(r[3]) for r in sel(test, tool))
plain = p50("cost", "plain")
bt_add = p50("cost", "bpftrace") - plain
print()
print(f"median of {rounds} rounds. cost: {n} writes, all phase times 0, untraced median write {plain:.0f} ns")
print(f"{'tool':<11} {'add/call ns':>11} {'vs bpftrace':>11}")
for tool in ["wprof", "wprof-kagg", "bpftrace", "fl-libbpf", "fl-bcc"]:
    if tool in why:
        print(f"{tool:<11} {why[tool]}")
    elif sel("cost", tool):
        add = p50("cost", tool) - plain
        print(f"{tool:<11} {add:11.0f} {add / bt_add:11.2f}")
for test, us, k in (("agree20", 20, 1), ("agree100", 100, 5)):
    pl = sel(test, "plain")
    print()
    print(f"{test}: {int(m) // k} writes of write_record at {us} µs self time; untraced fixture: "
          f"mean {st.median(float(r[2]) for r in pl):.0f} ns, median {st.median(float(r[3]) for r in pl):.0f} ns")
    untr = st.median(float(r[2]) for r in pl)
    print(f"{'tool':<11} {'tool mean':>9} {'fixture':>9} {'tool/fixture':>12} {'gap ns':>7} {'tool/untraced':>13} {'count':>7}")
    for tool in ["wprof", "wprof-kagg", "bpftrace", "fl-libbpf", "fl-bcc"]:
        ag = sel(test, tool)
        if tool in why or not ag:
            continue
        if ag[0][4].startswith("hist:"):
            share = ag[0][4][5:].replace("in", " of calls in ").replace("ns", " ns")
            print(f"{tool:<11} no mean (log2 histogram): {share}")
            continue
        # per round: the tool and the fixture over the same calls; then the median of rounds
        fix = st.median(float(r[2]) for r in ag)
        mean = st.median(float(r[4]) for r in ag)
        dev = st.median(100 * (float(r[4]) / float(r[2]) - 1) for r in ag)
        gap = st.median(float(r[2]) - float(r[4]) for r in ag)
        print(f"{tool:<11} {mean:9.0f} {fix:9.0f} {dev:+11.2f}% {gap:7.0f} {100 * (mean / untr - 1):+12.2f}% {ag[0][5]:>7}")
print()
print("add/call = traced - untraced median write (one probed call per write; medians, since a few "
      "preempted writes move a mean by µs)\n"
      "tool/fixture = the tool's mean of write_record against the fixture's own mean over the same calls "
      "(median of the rounds' ratios);\ngap = fixture - tool, ns: the parts of both probe traps outside "
      "the tool's timestamps, which the fixture's clock holds;\ntool/untraced = the tool's mean against the "
      "untraced fixture's mean (the phase's real duration; medians of the rounds)")
PY
