#!/usr/bin/env bash
# RocksDB's db_bench fillrandom under `wprof record --target rocksdb --max-overhead 10`, each
# traced run bracketed by untraced runs (ratio against the mean of the runs before and after
# it), and against itself: `run/paused` is the traced run's write rate over that of its own
# paused windows (the duty cycle's, from JSON provenance.live_windows), `live/paused` the live
# windows' over the paused ones', `first_live` how long the probes were live before the first
# pause. Prints ops/s, the probes' live share, write_impl's corrected mean against RocksDB's
# own mean in the traced run (ratio_mean), the budget's in-situ reading, the program's pace
# (the slowdown while live, and what a hit cost the code after it beyond its price, per root)
# and the sampled children's shares.
#
# RocksDB's own mean in the paused windows (`own_paused`, and `ratio_paused` = write_impl's
# corrected mean over it): db_bench dumps its statistics to its LOG every second
# (--stats_dump_period_sec=1; rocksdb.db.write.micros COUNT and SUM, cumulative); the seconds
# that no live window touches give the program's own write time with no probe live (a duty
# cycle pauses the root too: counts are windowed),
# same run, same host minute. `own_live` is what the live windows' writes then averaged (the
# run's SUM less the paused seconds' mean over the pace's share of writes in live windows).
# wprof times all of WriteImpl, RocksDB's StopWatch less of it: with the root alone probed the
# two read 1.06-1.07x apart whatever the return detection (benches/rocksdb_window.sh), so
# ratio_paused is to be read against that, not against 1.
#
# Run as root: benches/rocksdb_budget.sh [KEYS] [ROUNDS]     (defaults: 2000000 2)
# WPROF_BIN=path runs another wprof build; WPROF_ARGS adds to wprof's arguments (e.g.
# "--aggregate kernel"; "--aggregate event" for per event: the budget defaults to auto);
# WPROF_TARGET another profile than the built-in rocksdb (its root must be write_impl).
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/setup.sh
W=${WPROF_BIN:-$W}
N=${1:-2000000}; R=${2:-2}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ARGS=(--benchmarks=fillrandom --num="$N" --statistics=1 --write_buffer_size=4194304
  --stats_dump_period_sec=1)
bench() { rm -rf "$tmp/db" "$tmp/db.LOG"; "$@" /usr/bin/db_bench "${ARGS[@]}" --db="$tmp/db" 2>/dev/null
  cp "$tmp/db/LOG" "$tmp/db.LOG" 2>/dev/null || true; }
ops() { sed -n 's/^fillrandom .* \([0-9]*\) ops\/sec.*/\1/p' | head -n1; }
own() { awk '$1 == "rocksdb.db.write.micros" { print ($(NF-3) > 0 ? $NF / $(NF-3) : 0) }'; }
# db_bench's write calls (one WAL write(2) a write; /proc/PID/task/*/io syscw), every 10 ms on
# the wall clock, from the moment it exists to its exit: split by wprof's live windows (JSON
# provenance.live_windows), the paused windows are the same run without the probes.
pace() { python3 benches/db_bench_pace.py "$1" 0.01 & }
b=$(bench env | ops)
for r in $(seq $R); do
  pace "$tmp/pace"
  mon=$!
  # shellcheck disable=SC2086  # WPROF_ARGS is words
  out=$(bench "$W" record -q --target "${WPROF_TARGET:-rocksdb}" --max-overhead 10 ${WPROF_ARGS:-} --json "$tmp/r.json" -- 2>"$tmp/err")
  wait "$mon" || true
  t=$(ops <<<"$out"); o=$(own <<<"$out")
  cp "$tmp/db.LOG" "$tmp/traced.LOG"
  a=$(bench env | ops)
  python3 - "$tmp/r.json" "$b" "$t" "$a" "$o" "$tmp/pace" "$tmp/traced.LOG" <<'PY'
import json,sys
sys.path.insert(0,"benches")
from rocksdb_log import write_dumps
run=json.load(open(sys.argv[1])); b,t,a,o=map(float,sys.argv[2:6])
# The run's write rate against its own paused windows' (and the live ones').
rows=[tuple(map(float,l.split())) for l in open(sys.argv[6]) if len(l.split())==2]
wins=[(x/1e9,y/1e9) for x,y in run["provenance"].get("live_windows",[])]
rate={True:[0.0,0.0],False:[0.0,0.0]}
for (t0,c0),(t1,c1) in zip(rows,rows[1:]):
    if c1<c0: continue  # a thread exited: its count left the sum
    m=(t0+t1)/2; k=any(x<=m<y for x,y in wins)
    rate[k][0]+=c1-c0; rate[k][1]+=t1-t0
per=lambda k: rate[k][0]/rate[k][1] if rate[k][1] else float("nan")
run_rate=(rate[True][0]+rate[False][0])/max(rate[True][1]+rate[False][1],1e-9)
# The first live window runs from the attach to the cycle's first pause.
pace_line=f"run/paused {run_rate/per(False):.3f} live/paused {per(True)/per(False):.3f} first_live {wins[0][1]-wins[0][0]:.2f}s" if wins else "run/paused - (no duty cycle)"
# RocksDB's own cumulative write COUNT and SUM at each of its LOG's statistics dumps.
dumps=write_dumps(sys.argv[7])
calm=[(c1-c0,s1-s0) for (t0,c0,s0),(t1,c1,s1) in zip(dumps,dumps[1:])
      if wins and t0>=wins[0][1] and not any(x<t1 and t0<y for x,y in wins)]
pc,ps=sum(c for c,_ in calm),sum(s for _,s in calm)
own_p=ps/pc if pc else float("nan")
# The live windows' writes: the run's COUNT over the pace's share of its writes while live.
share_l=rate[True][0]/max(rate[True][0]+rate[False][0],1)
if dumps:
    n,tot=dumps[-1][1],dumps[-1][2]
    own_l=(tot-own_p*n*(1-share_l))/max(n*share_l,1)
else:
    own_l=float("nan")
roots=[r for r in run["tree"]["roots"]]
r=[x for x in roots if x["name"]=="write_impl"][0]
mean=r.get("corrected",r)["total_ns"]/max(r["count"],1)/1e3
raw=r["total_ns"]/max(r["count"],1)/1e3
kids=", ".join(f'{c["name"]} {c["sampled"]["samples"]/max(c["sampled"]["parent_samples"],1):.0%}' for c in r["children"] if "sampled" in c)
pr=run["probe_cost"].get("progress") or {}
ex=",".join(f'{e["root"]} {e["ns_per_hit"]:.0f}' for e in pr.get("excess_by_root",[]))
print(f"before {b:.0f} traced {t:.0f} after {a:.0f} ratio {2*t/(a+b):.3f} {pace_line} live {run['provenance'].get('probes_live_fraction')} root {r['name']} raw_mean {raw:.2f}us corr_mean {mean:.2f}us own(traced run) {o:.2f}us in_situ {run['probe_cost'].get('in_situ',{}).get('factor')} progress {pr.get('slowdown_pct',0):.0f}% excess/hit ns: {ex or '-'} ratio_mean {mean/o if o else 0:.3f} own_paused {own_p:.2f}us ({len(calm)} s, {pc} writes) own_live {own_l:.2f}us ratio_paused {mean/own_p:.3f} sampled: {kids}")
PY
  grep -E "probes took|first" "$tmp/err" | cut -c1-250 | head -4 || true
  b=$a
done
