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
# Run as root: benches/rocksdb_budget.sh [KEYS] [ROUNDS]     (defaults: 2000000 2)
# WPROF_BIN=path runs another wprof build; WPROF_ARGS adds to wprof's arguments (e.g.
# "--aggregate kernel"; "--aggregate event" for per event: the budget defaults to auto).
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/setup.sh
W=${WPROF_BIN:-$W}
N=${1:-2000000}; R=${2:-2}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ARGS=(--benchmarks=fillrandom --num="$N" --statistics=1 --write_buffer_size=4194304)
bench() { rm -rf "$tmp/db"; "$@" /usr/bin/db_bench "${ARGS[@]}" --db="$tmp/db" 2>/dev/null; }
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
  out=$(bench "$W" record -q --target rocksdb --max-overhead 10 ${WPROF_ARGS:-} --json "$tmp/r.json" -- 2>"$tmp/err")
  wait "$mon" || true
  t=$(ops <<<"$out"); o=$(own <<<"$out")
  a=$(bench env | ops)
  python3 - "$tmp/r.json" "$b" "$t" "$a" "$o" "$tmp/pace" <<'PY'
import json,sys
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
roots=[r for r in run["tree"]["roots"]]
r=[x for x in roots if x["name"]=="write_impl"][0]
mean=r.get("corrected",r)["total_ns"]/max(r["count"],1)/1e3
kids=", ".join(f'{c["name"]} {c["sampled"]["samples"]/max(c["sampled"]["parent_samples"],1):.0%}' for c in r["children"] if "sampled" in c)
pr=run["probe_cost"].get("progress") or {}
ex=",".join(f'{e["root"]} {e["ns_per_hit"]:.0f}' for e in pr.get("excess_by_root",[]))
print(f"before {b:.0f} traced {t:.0f} after {a:.0f} ratio {2*t/(a+b):.3f} {pace_line} live {run['provenance'].get('probes_live_fraction')} root {r['name']} corr_mean {mean:.2f}us own(traced run) {o:.2f}us in_situ {run['probe_cost'].get('in_situ',{}).get('factor')} progress {pr.get('slowdown_pct',0):.0f}% excess/hit ns: {ex or '-'} ratio_mean {mean/o if o else 0:.3f} sampled: {kids}")
PY
  grep -E "probes took|first" "$tmp/err" | cut -c1-250 | head -4 || true
  b=$a
done
