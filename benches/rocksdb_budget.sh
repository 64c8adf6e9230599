#!/usr/bin/env bash
# RocksDB's db_bench fillrandom under `wprof record --target rocksdb --max-overhead 10`, each
# traced run bracketed by untraced runs (ratio against the mean of the runs before and after
# it). Prints ops/s, the probes' live share, write_impl's corrected mean against RocksDB's own
# mean in the traced run (ratio_mean), the budget's in-situ reading, the program's pace (the
# slowdown while live, and what a hit cost the code after it beyond its price, per root) and
# the sampled children's shares.
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
b=$(bench env | ops)
for r in $(seq $R); do
  # shellcheck disable=SC2086  # WPROF_ARGS is words
  out=$(bench "$W" record -q --target rocksdb --max-overhead 10 ${WPROF_ARGS:-} --json "$tmp/r.json" -- 2>"$tmp/err")
  t=$(ops <<<"$out"); o=$(own <<<"$out")
  a=$(bench env | ops)
  python3 - "$tmp/r.json" "$b" "$t" "$a" "$o" <<'PY'
import json,sys
run=json.load(open(sys.argv[1])); b,t,a,o=map(float,sys.argv[2:6])
roots=[r for r in run["tree"]["roots"]]
r=[x for x in roots if x["name"]=="write_impl"][0]
mean=r.get("corrected",r)["total_ns"]/max(r["count"],1)/1e3
kids=", ".join(f'{c["name"]} {c["sampled"]["samples"]/max(c["sampled"]["parent_samples"],1):.0%}' for c in r["children"] if "sampled" in c)
pr=run["probe_cost"].get("progress") or {}
ex=",".join(f'{e["root"]} {e["ns_per_hit"]:.0f}' for e in pr.get("excess_by_root",[]))
print(f"before {b:.0f} traced {t:.0f} after {a:.0f} ratio {2*t/(a+b):.3f} live {run['provenance'].get('probes_live_fraction')} root {r['name']} corr_mean {mean:.2f}us own(traced run) {o:.2f}us in_situ {run['probe_cost'].get('in_situ',{}).get('factor')} progress {pr.get('slowdown_pct',0):.0f}% excess/hit ns: {ex or '-'} ratio_mean {mean/o if o else 0:.3f} sampled: {kids}")
PY
  grep -E "probes took|first" "$tmp/err" | cut -c1-250 | head -4 || true
  b=$a
done
