# shellcheck shell=bash disable=SC2034  # sets variables for the sourcing script
# Sourced by the benchmark scripts that drive PostgreSQL 15: functions for a throwaway cluster
# in a directory of the caller's (unix socket only, synchronous_commit=off), initialised for
# pgbench at scale 4.
#   pg_start DIR   initdb DIR/pg, start it on a random port; sets PGBIN, port, pm (postmaster)
#   pgb ARGS...    pgbench against it, as postgres
#   pg_stop        stop it (fast); harmless when it is not running
#   pg_throwaway   a cluster in a new temporary directory ($tmp), both gone when the script exits
#   pg_tps SECONDS pgbench tpcb-like, 2 clients, for SECONDS: its tps
#   pg_executor_bt FILE  write a bpftrace script timing standard_ExecutorRun (one entry +
#                  uretprobe pair, the cheapest exact figure a probe tool gets) to FILE
PGBIN=/usr/lib/postgresql/15/bin
[ -x "$PGBIN/pgbench" ] || { echo "no $PGBIN/pgbench: apt install postgresql-15" >&2; exit 1; }

pg_start() {
  pg_dir=$1
  chmod 755 "$pg_dir"
  mkdir "$pg_dir/pg" && chown postgres "$pg_dir" "$pg_dir/pg" && chmod 700 "$pg_dir/pg"
  runuser -u postgres -- "$PGBIN/initdb" -D "$pg_dir/pg" >/dev/null 2>&1
  port=$((20000 + RANDOM % 20000))
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$pg_dir/pg" -l "$pg_dir/pg.log" -w \
    -o "-p $port -c listen_addresses='' -c unix_socket_directories='$pg_dir' -c synchronous_commit=off" \
    start >/dev/null
  pgb -i -s 4 >/dev/null
  pm=$(head -n1 "$pg_dir/pg/postmaster.pid")
}

pgb() { runuser -u postgres -- "$PGBIN/pgbench" -h "$pg_dir" -p "$port" "$@" postgres 2>&1; }

pg_stop() {
  [ -n "${pg_dir:-}" ] || return 0
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$pg_dir/pg" -m fast stop >/dev/null 2>&1 || true
}

pg_throwaway() {
  tmp=$(mktemp -d)
  trap 'pg_stop; rm -rf "$tmp"' EXIT
  pg_start "$tmp"
}

pg_tps() { pgb -c 2 -T "$1" | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }

pg_executor_bt() {
  cat >"$1" <<BT
uprobe:$PGBIN/postgres:standard_ExecutorRun { @s[tid] = nsecs; }
uretprobe:$PGBIN/postgres:standard_ExecutorRun /@s[tid]/ { @lat = avg(nsecs - @s[tid]); delete(@s[tid]); }
BT
}
