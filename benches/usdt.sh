#!/usr/bin/env bash
# USDT phases on a real PostgreSQL 15: what tracing through the server's own probes costs it,
# next to the function-probe profile and to bpftrace on the same probes, in the same run.
#
# pgbench tpcb-like (2 clients, T seconds, default synchronous_commit), untraced, under
# `wprof attach --follow-forks` with the built-in `postgres-usdt` profile (11 USDT phases, 2
# function phases, fdatasync) and with `postgres` (function phases only), each next to bpftrace
# running the same profile's probes (`wprof export --bpftrace`: per-phase counts, sums and
# histograms). Prints tps and its ratio to the untraced run of the round, and the transactions
# each tool counted against the server's own commit + rollback counts.
#
# Run as root: benches/usdt.sh [ROUNDS] [PGBENCH_SECONDS]
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
T=${2:-15}
# shellcheck source=benches/setup.sh
. benches/setup.sh
PGBIN=/usr/lib/postgresql/15/bin
PG=$PGBIN/postgres
[ -x "$PGBIN/pgbench" ] || { echo "no $PGBIN/pgbench: apt install postgresql-15" >&2; exit 1; }
tmp=$(mktemp -d)
chmod 755 "$tmp"
pg_stop() { runuser -u postgres -- "$PGBIN/pg_ctl" -D "$tmp/pg" -m fast stop >/dev/null 2>&1 || true; }
trap 'pg_stop; rm -rf "$tmp"' EXIT
mkdir "$tmp/pg" && chown postgres "$tmp/pg" && chmod 700 "$tmp/pg"
chown postgres "$tmp"
runuser -u postgres -- "$PGBIN/initdb" -D "$tmp/pg" >/dev/null
port=$((20000 + RANDOM % 20000))
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$tmp/pg" -l "$tmp/pg.log" -w \
  -o "-p $port -c listen_addresses='' -c unix_socket_directories='$tmp' -c autovacuum=off" start >/dev/null
pgb() { runuser -u postgres -- "$PGBIN/pgbench" -h "$tmp" -p "$port" "$@" postgres 2>&1; }
psql1() { runuser -u postgres -- "$PGBIN/psql" -X -A -t -h "$tmp" -p "$port" -c "$1" postgres; }
pgb -i -s 4 >/dev/null
tps() { pgb -n -c 2 -T "$T" | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
xacts() { psql1 "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'postgres'"; }
pm=$(head -n1 "$tmp/pg/postmaster.pid")

# bpftrace with each profile's own probes: `wprof export --bpftrace` writes them (per-phase
# counts, sums and histograms in bpftrace's maps); its pid filter is dropped, as
# --follow-forks traces every backend (only PostgreSQL's processes map its binary).
bt_script() { # bt_script PROFILE > FILE
  "$W" export --target "$1" --binary "$PG" --bpftrace 2>/dev/null |
    sed -e 's#/pid == \$1/ ##' -e 's#/pid == \$1 && #/#' -e '/^BEGIN/d'
}
bt_script postgres-usdt >"$tmp/usdt.bt"
bt_script postgres >"$tmp/fn.bt"
bt_run() { # bt_run FILE -> "tps transactions"
  bpftrace "$1" >"$tmp/bt.out" 2>&1 &
  local bp=$!
  for _ in $(seq 100); do grep -q "Attaching" "$tmp/bt.out" && break; sleep 0.1; done
  sleep 2
  local t
  t=$(tps)
  kill -INT "$bp"; wait "$bp" || true
  echo "$t $(sed -n 's/^@calls\[transaction\]: //p' "$tmp/bt.out")"
}

wprof_run() { # wprof_run PROFILE -> "tps transactions server_transactions"
  local x0 t
  x0=$(xacts)
  "$W" attach -q --target "$1" --pid "$pm" --follow-forks --duration $((T + 4)) \
    --json "$tmp/p.json" >/dev/null 2>"$tmp/w.err" &
  local wp=$!
  for _ in $(seq 100); do grep -q "attached" "$tmp/w.err" && break; sleep 0.1; done
  t=$(tps)
  wait "$wp" || true
  local n
  n=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sum(x['count'] for x in r['tree']['roots'] if x['name'] == 'transaction'))" "$tmp/p.json")
  echo "$t $n $(($(xacts) - x0 - 2))"
}

printf '%-6s %-40s %9s %6s  %s\n' round tool tps ratio "transactions (tool / server)"
for r in $(seq "$ROUNDS"); do
  b=$(tps)
  printf '%-6s %-40s %9s %6s\n' "$r" untraced "$b" 1.00
  read -r t n s < <(wprof_run postgres-usdt)
  printf '%-6s %-40s %9s %6.2f  %s / %s\n' "$r" "wprof --target postgres-usdt" "$t" "$(echo "$t / $b" | bc -l)" "$n" "$s"
  read -r t n < <(bt_run "$tmp/usdt.bt")
  printf '%-6s %-40s %9s %6.2f  %s\n' "$r" "bpftrace, postgres-usdt's probes" "$t" "$(echo "$t / $b" | bc -l)" "$n"
  read -r t _ _ < <(wprof_run postgres)
  printf '%-6s %-40s %9s %6.2f\n' "$r" "wprof --target postgres" "$t" "$(echo "$t / $b" | bc -l)"
  read -r t _ < <(bt_run "$tmp/fn.bt")
  printf '%-6s %-40s %9s %6.2f\n' "$r" "bpftrace, postgres's probes" "$t" "$(echo "$t / $b" | bc -l)"
done
echo "ratio = traced / untraced tps of the round; transactions: wprof's transaction calls against"
echo "pg_stat_database's commits + rollbacks over the same window (less the reading session's two)"
