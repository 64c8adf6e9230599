#!/usr/bin/env bash
# USDT phases on a real PostgreSQL 15: what tracing through the server's own probes costs it,
# next to the function-probe profile and to bpftrace on the same probes, in the same run.
#
# pgbench tpcb-like (2 clients, T seconds, default synchronous_commit), untraced, under
# `wprof attach --follow-forks` with the built-in `postgres-usdt` profile (11 USDT phases, 2
# function phases, fdatasync) and with `postgres` (function phases only), and under bpftrace
# timing the same USDT pairs, functions and syscall into per-phase histograms. Prints tps and
# its ratio to the untraced run of the round, and the transactions wprof counted against the
# server's own commit + rollback counts.
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

# bpftrace: the same pairs as postgres-usdt, each into a histogram.
{
  pair() { # pair NAME START DONE...
    local n=$1 s=$2; shift 2
    echo "usdt:$PG:postgresql:$s { @s_$n[tid] = nsecs; }"
    for d in "$@"; do
      echo "usdt:$PG:postgresql:$d /@s_$n[tid]/ { @$n = hist(nsecs - @s_$n[tid]); delete(@s_$n[tid]); }"
    done
  }
  pair transaction transaction__start transaction__commit transaction__abort
  pair parse query__parse__start query__parse__done
  pair rewrite query__rewrite__start query__rewrite__done
  pair plan query__plan__start query__plan__done
  pair execute query__execute__start query__execute__done
  pair lwlock lwlock__wait__start lwlock__wait__done
  pair lock lock__wait__start lock__wait__done
  pair bufread buffer__read__start buffer__read__done
  pair bufdirty buffer__write__dirty__start buffer__write__dirty__done
  pair walbuf wal__buffer__write__dirty__start wal__buffer__write__dirty__done
  for f in standard_ExecutorRun XLogFlush; do
    echo "uprobe:$PG:$f { @s_$f[tid] = nsecs; }"
    echo "uretprobe:$PG:$f /@s_$f[tid]/ { @$f = hist(nsecs - @s_$f[tid]); delete(@s_$f[tid]); }"
  done
  echo "tracepoint:syscalls:sys_enter_fdatasync { @s_fd[tid] = nsecs; }"
  echo "tracepoint:syscalls:sys_exit_fdatasync /@s_fd[tid]/ { @fdatasync = hist(nsecs - @s_fd[tid]); delete(@s_fd[tid]); }"
  echo "usdt:$PG:postgresql:transaction__start { @transactions = count(); }"
} >"$tmp/usdt.bt"

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

printf '%-6s %-40s %9s %6s  %s\n' round tool tps ratio "transactions (wprof / server)"
for r in $(seq "$ROUNDS"); do
  b=$(tps)
  printf '%-6s %-40s %9s %6s\n' "$r" untraced "$b" 1.00
  read -r t n s < <(wprof_run postgres-usdt)
  printf '%-6s %-40s %9s %6.2f  %s / %s\n' "$r" "wprof --target postgres-usdt" "$t" "$(echo "$t / $b" | bc -l)" "$n" "$s"
  read -r t _ _ < <(wprof_run postgres)
  printf '%-6s %-40s %9s %6.2f\n' "$r" "wprof --target postgres" "$t" "$(echo "$t / $b" | bc -l)"
  bpftrace "$tmp/usdt.bt" >"$tmp/bt.out" 2>&1 &
  bp=$!
  for _ in $(seq 100); do grep -q "Attaching" "$tmp/bt.out" && break; sleep 0.1; done
  sleep 2
  t=$(tps)
  kill -INT "$bp"; wait "$bp" || true
  printf '%-6s %-40s %9s %6.2f  %s\n' "$r" "bpftrace (same USDT pairs, functions)" "$t" \
    "$(echo "$t / $b" | bc -l)" "$(sed -n 's/^@transactions: //p' "$tmp/bt.out")"
done
echo "ratio = traced / untraced tps of the round; transactions: wprof's transaction calls against"
echo "pg_stat_database's commits + rollbacks over the same window (less the reading session's two)"
