#!/usr/bin/env bash
# The full `rocksdb` profile (every phase probed, exact counts) against RocksDB's own write
# mean with no probe live, in the same db_bench run: one long db_bench fillrandom
# (--stats_dump_period_sec=1: RocksDB writes its cumulative rocksdb.db.write.micros COUNT and
# SUM to its LOG every second, timestamped), and `wprof attach --pid` to it for LIVE seconds,
# GAP seconds apart, ROUNDS times; the attaches alternate the calibration alone and
# `--in-situ`. The LOG's seconds outside every wprof process's lifetime (its calibration
# included) give RocksDB's own mean with nothing attached (`own_paused`: the gaps before and
# after the attach); those inside its live span, the same mean with the probes live
# (`own_live`: what they did to the program, in its own eyes).
#
# Printed per attach: wprof's corrected write_impl mean, `own_paused`, their ratio, `own_live`
# and live/paused. wprof times all of WriteImpl, RocksDB's StopWatch less of it: with the
# root alone the two read 1.04-1.07x apart in the same run (benches/rocksdb_window.sh), so
# the ratio is to be read against that, not against 1. Unless WPROF_ARGS has
# --keep-preemptions (the correction then keeps every preemption), it also prints the write's
# preempted time (JSON preempted_ns; with --off-cpu its off-CPU time too), the probes' share
# taken out (corrected.preempted_ns) and the corrected time on the CPU over own_paused (which
# holds the untraced writer's own preemptions). RocksDB's dumps carry percentiles
# only for the whole run so far, so no per-gap p99 can be taken from them: the p99 is left to
# benches/rocksdb_accuracy.sh's untraced runs.
#
# Run as root: benches/rocksdb_full.sh [ROUNDS] [LIVE] [GAP]     (defaults: 6 4 4)
# WPROF_BIN=path runs another wprof build; WPROF_ARGS adds to every attach's arguments;
# WPROF_TARGET another profile than the built-in rocksdb (its root must be write_impl);
# WPROF_ODD_ARGS adds to the odd attaches' (e.g. --in-situ);
# WPROF_EVEN_TARGET a profile the even attaches take instead of `--in-situ` (e.g. the root alone);
# WPROF_PREFIX runs wprof under a command (e.g. "nice -n 19"); WPROF_KEEP=dir keeps the runs' JSON, the spans and RocksDB's LOG there.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/setup.sh
W=${WPROF_BIN:-$W}
R=${1:-6}; LIVE=${2:-4}; GAP=${3:-4}
tmp=$(mktemp -d)
# Random keys out of a million for longer than the attaches take (it is stopped once the last
# gap is over): the database stops growing, so its compactions hold a steady state (in a
# fillrandom of 100 M keys its own mean rose from 4 to 13 µs in 70 s).
/usr/bin/db_bench --benchmarks=fillrandom --num=1000000 --duration=3600 --statistics=1 \
  --write_buffer_size=4194304 --stats_dump_period_sec=1 --db="$tmp/db" >"$tmp/bench.out" 2>&1 &
bench=$!
trap 'kill "$bench" "${sched:-}" 2>/dev/null || true; wait "$bench" 2>/dev/null || true
  [ -n "${WPROF_KEEP:-}" ] && cp "$tmp"/r*.json "$tmp"/spans "$tmp"/sched "$tmp"/db/LOG "$WPROF_KEEP"/
  rm -rf "$tmp"' EXIT
sleep "$GAP"
# The writer (db_bench's busiest thread): its schedstat every 0.25 s (ns on the CPU, ns
# waiting on a run queue), to tell how long it waits for a CPU untraced and traced.
writer=$(for t in /proc/"$bench"/task/*; do
  echo "$(awk '{print $14 + $15}' "$t/stat") ${t##*/}"; done | sort -n | tail -1 | cut -d' ' -f2)
( while kill -0 "$bench" 2>/dev/null; do
    echo "$(date +%s.%N) $(cat /proc/"$bench"/task/"$writer"/schedstat 2>/dev/null)"
    sleep 0.25
  done >"$tmp/sched" ) &
sched=$!
for r in $(seq "$R"); do
  mode=${WPROF_ODD_ARGS:-}; target=${WPROF_TARGET:-rocksdb}
  if [ $((r % 2)) -eq 0 ]; then
    mode=""
    if [ -n "${WPROF_EVEN_TARGET:-}" ]; then target=$WPROF_EVEN_TARGET; else mode="--in-situ"; fi
  fi
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086  # WPROF_ARGS and mode are words
  ${WPROF_PREFIX:-} "$W" attach -q --target "$target" --pid "$bench" --duration "${LIVE}s" $mode ${WPROF_ARGS:-} \
    --json "$tmp/r$r.json" >/dev/null 2> >(while IFS= read -r l; do echo "$(date +%s.%N) $l"; done >"$tmp/err$r")
  t1=$(date +%s.%N)
  label=${mode:-calibrated}; [ "$target" != "${WPROF_TARGET:-rocksdb}" ] && label=even-target
  echo "$r $t0 $t1 $label" >>"$tmp/spans"
  sleep "$GAP"
done
# A background job of a script ignores SIGINT.
kill -TERM "$bench" 2>/dev/null || true
wait "$bench" 2>/dev/null || true
python3 - "$tmp" <<'PY'
import json, statistics, sys
sys.path.insert(0, "benches")
from rocksdb_log import write_dumps
tmp = sys.argv[1]
spans = [l.split() for l in open(f"{tmp}/spans")]
spans = [(int(r), float(a), float(b), m) for r, a, b, m in spans]
dumps = write_dumps(f"{tmp}/db/LOG")
secs = [(t0, t1, c1 - c0, s1 - s0) for (t0, c0, s0), (t1, c1, s1) in zip(dumps, dumps[1:])]
def mean(rows):
    c = sum(r[2] for r in rows)
    return (sum(r[3] for r in rows) / c if c else float("nan")), len(rows)
def pace(rows):
    """Writes a second of the wall clock."""
    t = sum(r[1] - r[0] for r in rows)
    return sum(r[2] for r in rows) / t if t else float("nan")
paused = [s for s in secs if not any(a < s[1] and s[0] < b for _, a, b, _ in spans)]
sched = [tuple(map(float, l.split()[:3])) for l in open(f"{tmp}/sched") if len(l.split()) >= 3]
def waiting(t0, t1):
    """The writer's time waiting for a CPU over its time on one, between t0 and t1."""
    rows = [s for s in sched if t0 <= s[0] <= t1]
    if len(rows) < 2:
        return float("nan")
    return (rows[-1][2] - rows[0][2]) / max(rows[-1][1] - rows[0][1], 1.0)
def waiting_in(rows):
    """The same over a set of LOG seconds, weighted by their CPU time."""
    w = [waiting(r[0], r[1]) for r in rows]
    w = [x for x in w if x == x]
    return statistics.mean(w) if w else float("nan")
ratios = {}
for i, (r, a, b, mode) in enumerate(spans):
    run = json.load(open(f"{tmp}/r{r}.json"))
    root = next(x for x in run["tree"]["roots"] if x["name"] == "write_impl")
    corr = root["corrected"]["total_ns"] / max(root["count"], 1) / 1e3
    raw = root["total_ns"] / max(root["count"], 1) / 1e3
    # The gaps on either side of this attach: from the last attach's end to the next's start.
    lo = spans[i - 1][2] if i else 0.0
    hi = spans[i + 1][1] if i + 1 < len(spans) else float("inf")
    gaps = [s for s in paused if lo <= s[0] and s[1] <= hi]
    own_p, np = mean(gaps)
    # The live span: from the moment wprof said it attached, for the run's duration (what
    # follows it, writing the JSON, is not live).
    live_from = next(float(l.split()[0]) for l in open(f"{tmp}/err{r}") if " attached " in l)
    live_to = live_from + run["provenance"]["duration_s"]
    live = [s for s in secs if live_from <= s[0] and s[1] <= live_to]
    own_l, nl = mean(live)
    # The probes' calibrated price a write, and the wall time a write added while live, µs
    # (db_bench's writer is one busy thread).
    price = root["corrected"]["probe_ns"] / max(root["count"], 1) / 1e3
    added = 1e6 / pace(live) - 1e6 / pace(gaps)
    ratios.setdefault(mode, []).append(corr / own_p)
    # Unless --keep-preemptions: the write's time preempted (runnable; off the CPU in all with
    # --off-cpu), the probes' share
    # of it the correction took out, and the corrected mean less what it kept of it (its time
    # on the CPU) against the same reference.
    off, pre = root.get("off_cpu_ns"), root.get("preempted_ns")
    per = lambda ns: (ns or 0) / root["count"] / 1e3
    theirs = per(root["corrected"].get("preempted_ns"))
    on_cpu = "" if pre is None else (
        ("" if off is None else f" off_cpu {per(off):.2f}us")
        + f" preempted {per(pre):.2f}us probes' {theirs:.2f}us (wprof's "
        f"threads {per(root['corrected'].get('wprof_ns')):.2f}us) "
        f"on_cpu/own_paused {(corr - (per(pre) - theirs)) / own_p:.3f}")
    # The writer's wait for a CPU over its time on one: in the gaps, and while live. In the
    # gaps, own_paused * w / (1 + w) is about the untraced write's own preempted time.
    w_p, w_l = waiting_in(gaps), waiting_in(live)
    on_cpu += (f" wait/cpu paused {w_p:.3f} live {w_l:.3f} (untraced preempted ~"
               f"{own_p * w_p / (1 + w_p):.2f}us)")
    # With --in-situ: write_impl's mean in the light epochs (its descendants' probes off).
    light = next((c for c in run.get("in_situ", []) if c["name"] == "write_impl"
                  and len(c.get("path") or ["write_impl"]) == 1), None)
    if light:
        on_cpu += (f" light {light['light_mean_ns'] / 1e3:.2f}us ({light['light_calls']} calls, "
                   f"/own_paused {light['light_mean_ns'] / 1e3 / own_p:.3f}) factor {light['factor']:.3f}")
    print(f"attach {r} {mode:<10} calls {root['count']:>7} raw {raw:.2f}us corrected "
          f"{corr:.2f}us own_paused {own_p:.2f}us ({np} s) corrected/own_paused "
          f"{corr / own_p:.3f} own_live {own_l:.2f}us ({nl} s) live/paused {own_l / own_p:.2f} "
          f"pace live/paused {pace(live) / pace(gaps):.3f} ({added:+.2f}us a write, priced {price:.2f}us){on_cpu}")
for mode, v in ratios.items():
    print(f"{mode}: corrected/own_paused median {statistics.median(v):.3f} over {len(v)}")
PY
