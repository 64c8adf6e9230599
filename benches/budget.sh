#!/usr/bin/env bash
# `--max-overhead` on real programs: what the budget costs them and what it keeps of the tree.
#
# RocksDB's db_bench fillrandom (Debian's librocksdb 7.8, ~4-5 µs writes) and PostgreSQL 15's
# pgbench (tpcb-like, 2 clients, synchronous_commit=off so the write path is CPU-bound), each
# untraced, under `wprof --max-overhead` with the full built-in profile, and under bpftrace
# timing only the root phase (entry + uretprobe: the cheapest exact tree a probe tool has),
# in the same run. Prints per tool: throughput and its ratio to untraced; for wprof, the root's
# corrected mean against the program's own (RocksDB: rocksdb.db.write.micros SUM / COUNT of
# the untraced run), the share of the run the probes were live, and the sampled children.
#
# Run as root: benches/budget.sh [KEYS] [ROUNDS] [PGBENCH_SECONDS]
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
N=${1:-2000000}
ROUNDS=${2:-2}
T=${3:-15}
# shellcheck source=benches/setup.sh
. benches/setup.sh
LIB=/usr/lib/x86_64-linux-gnu/librocksdb.so.7.8
[ -e "$LIB" ] || { echo "no $LIB: apt install librocksdb-dev rocksdb-tools" >&2; exit 1; }
# shellcheck source=benches/pg_cluster.sh
. benches/pg_cluster.sh
tmp=$(mktemp -d)
chmod 755 "$tmp"
trap 'pg_stop; rm -rf "$tmp"' EXIT

summary() { # summary RUN.json ROOT -> "corr_mean_us live sampled-children"
  python3 - "$1" "$2" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
roots = [r for r in run["tree"]["roots"] if r["name"] == sys.argv[2]]
n = sum(r["count"] for r in roots)
tot = sum(r.get("corrected", r)["total_ns"] for r in roots)
live = run["provenance"].get("probes_live_fraction", 1.0)
kids = ", ".join(f'{c["name"]} {c["sampled"]["samples"] / max(c["sampled"]["parent_samples"], 1):.0%}'
                 for r in roots for c in r["children"] if "sampled" in c)
print(f"{tot / max(n, 1) / 1e3:.2f} {live:.2f} {kids or '-'}")
PY
}

if [ "${SKIP_ROCKSDB:-0}" != 1 ]; then
echo "== RocksDB db_bench fillrandom, $N keys (wprof --max-overhead 10%)"
ARGS=(--benchmarks=fillrandom --num="$N" --statistics=1 --write_buffer_size=4194304)
bench() { rm -rf "$tmp/db"; "$@" /usr/bin/db_bench "${ARGS[@]}" --db="$tmp/db" 2>/dev/null; }
ops() { sed -n 's/^fillrandom .* \([0-9]*\) ops\/sec.*/\1/p' | head -n1; }
own() { awk '$1 == "rocksdb.db.write.micros" { print ($(NF-3) > 0 ? $NF / $(NF-3) : 0) }'; }
wi=$(nm -D --defined-only "$LIB" | awk '{ print $3 }' | grep '^_ZN7rocksdb6DBImpl9WriteImpl' | head -n1)
cat >"$tmp/root.bt" <<BT
uprobe:$LIB:$wi { @s[tid] = nsecs; }
uretprobe:$LIB:$wi /@s[tid]/ { @lat = avg(nsecs - @s[tid]); delete(@s[tid]); }
BT
printf '%-6s %-26s %9s %6s %9s %10s %6s  %s\n' round tool ops/s ratio own_us wprof_us live sampled
for r in $(seq "$ROUNDS"); do
  base=$(bench env)
  b_ops=$(ops <<<"$base")
  b_own=$(own <<<"$base")
  printf '%-6s %-26s %9s %6s %9.2f %10s %6s  %s\n' "$r" untraced "$b_ops" 1.00 "$b_own" - - -
  out=$(bench "$W" record -q --target rocksdb --max-overhead 10 --json "$tmp/r.json" --)
  o=$(ops <<<"$out")
  read -r corr live kids < <(summary "$tmp/r.json" write_impl)
  printf '%-6s %-26s %9s %6.2f %9.2f %10s %6s  %s\n' "$r" "wprof --max-overhead 10%" "$o" \
    "$(echo "$o / $b_ops" | bc -l)" "$(own <<<"$out")" "$corr" "$live" "$kids"
  out=$(rm -rf "$tmp/db"; bpftrace "$tmp/root.bt" -c "/usr/bin/db_bench ${ARGS[*]} --db=$tmp/db" 2>/dev/null)
  o=$(ops <<<"$out")
  printf '%-6s %-26s %9s %6.2f %9.2f %10s %6s  %s\n' "$r" "bpftrace (root only)" "$o" \
    "$(echo "$o / $b_ops" | bc -l)" "$(own <<<"$out")" - - -
done
fi

echo "== PostgreSQL 15 pgbench tpcb-like, 2 clients, ${T} s (wprof --follow-forks --max-overhead 5%)"
pg_start "$tmp"
tps() { pg_tps "$T"; }
pg_executor_bt "$tmp/pg.bt"
printf '%-6s %-34s %9s %6s %10s %6s  %s\n' round tool tps ratio wprof_us live sampled
for r in $(seq "$ROUNDS"); do
  b=$(tps)
  printf '%-6s %-34s %9s %6s %10s %6s  %s\n' "$r" untraced "$b" 1.00 - - -
  "$W" attach -q --target postgres --pid "$pm" --follow-forks --max-overhead 5 \
    --duration $((T + 3)) --json "$tmp/p.json" >/dev/null 2>"$tmp/w.err" &
  wp=$!
  for _ in $(seq 100); do grep -q "attached" "$tmp/w.err" && break; sleep 0.1; done
  t=$(tps)
  wait "$wp" || true
  read -r corr live kids < <(summary "$tmp/p.json" executor_run)
  printf '%-6s %-34s %9s %6.2f %10s %6s  %s\n' "$r" "wprof --follow-forks --max-overhead 5%" \
    "$t" "$(echo "$t / $b" | bc -l)" "$corr" "$live" "$kids"
  bpftrace "$tmp/pg.bt" >/dev/null 2>&1 &
  bp=$!
  sleep 3
  t=$(tps)
  kill -INT "$bp"; wait "$bp" || true
  printf '%-6s %-34s %9s %6.2f %10s %6s  %s\n' "$r" "bpftrace (executor_run only)" "$t" \
    "$(echo "$t / $b" | bc -l)" - - -
done
echo "ratio = traced / untraced throughput; own_us = RocksDB's own mean write in that run;"
echo "wprof_us = the root's corrected mean over its live windows; live = share of the run the"
echo "probes were live (1.00: always); sampled = children moved to CPU sampling, share of the root"
