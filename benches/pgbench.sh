#!/usr/bin/env bash
# pgbench tpcb-like (one client, a fixed number of transactions) on a throwaway PostgreSQL 15
# (Debian's), untraced, then under wprof's built-in `postgres` profile (the postmaster with
# --follow-forks, plus the WAL writer, checkpointer and background writer by pid), then under
# the profile as it was before UPDATE and DELETE were added (inserts only; taken from git, the
# commit before attach-profiles/postgres.toml got heap_update), then the built-in profile with
# in-kernel aggregation (no per-call events for wprof to read). Prints per run: pgbench's
# latency average and tps, the pg_stat_wal and pg_stat_user_tables deltas, and wprof's
# figures next to them (WAL pwrites and fdatasyncs with their times, heap_update and its HOT
# units, executor_run's self share). What tests/postgres_pgbench.rs asserts, with the numbers.
#
# Run as root: benches/pgbench.sh [TRANSACTIONS]
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
N=${1:-2000}
export PATH=${CARGO_HOME:-$HOME/.cargo}/bin:$PATH
cargo build --release --quiet
W=$PWD/target/release/wprof
B=/usr/lib/postgresql/15/bin
[ -x "$B/pgbench" ] || { echo "no $B/pgbench: apt install postgresql-15" >&2; exit 1; }
D=$(mktemp -d)
chown postgres:postgres "$D"
mkdir "$D/sock" && chown postgres "$D/sock"
PORT=$((20000 + RANDOM % 20000))
stop() {
  runuser -u postgres -- "$B/pg_ctl" -D "$D/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$D"
}
trap stop EXIT
runuser -u postgres -- "$B/initdb" -D "$D/data" -U postgres --auth=trust --no-sync -E UTF8 \
  --locale=C >/dev/null
runuser -u postgres -- "$B/pg_ctl" -D "$D/data" -l "$D/log" -w -o "-p $PORT \
  -c listen_addresses='' -c unix_socket_directories='$D/sock' -c fsync=on \
  -c track_wal_io_timing=on -c autovacuum=off" start >/dev/null
CONN=(-h "$D/sock" -p "$PORT" -U postgres)
psql() { "$B/psql" -X -q -A -t "${CONN[@]}" -d postgres -c "$1"; }
"$B/pgbench" "${CONN[@]}" -i -s 1 -q postgres >/dev/null 2>&1
psql CHECKPOINT
git show "$(git log -n1 --format=%H -S'name = "heap_update"' -- attach-profiles/postgres.toml)^:attach-profiles/postgres.toml" \
  >"$D/inserts-only.toml"

WALQ="SELECT wal_write || ' ' || wal_sync || ' ' || wal_write_time || ' ' || wal_sync_time FROM pg_stat_wal"
TABQ="SELECT sum(n_tup_upd) || ' ' || sum(n_tup_hot_upd) FROM pg_stat_user_tables WHERE relname LIKE 'pgbench%'"
settle() { sleep 1.5; }

# run LABEL [PROFILE [WPROF OPTIONS...]]: one pgbench run, traced with PROFILE if given.
run() {
  local label=$1 profile=${2:-} wpid=
  local opts=("${@:3}")
  settle
  read -r w0 s0 wt0 st0 <<<"$(psql "$WALQ")"
  read -r u0 h0 <<<"$(psql "$TABQ")"
  if [ -n "$profile" ]; then
    local pids
    pids=$(psql "SELECT string_agg('--pid ' || pid, ' ') FROM pg_stat_activity WHERE backend_type IN ('walwriter', 'checkpointer', 'background writer')")
    # shellcheck disable=SC2086
    rm -f "$D/err.txt"
    "$W" attach "${opts[@]}" --target "$profile" --follow-forks --pid "$(head -1 "$D/data/postmaster.pid")" $pids \
      --json "$D/run.json" >"$D/tree.txt" 2>"$D/err.txt" &
    wpid=$!
    # Backends forked before the probes are live would not be followed: wait for them.
    for _ in $(seq 300); do grep -qs "wprof: attached" "$D/err.txt" && break; sleep 0.1; done
    grep -qs "wprof: attached" "$D/err.txt" || { cat "$D/err.txt" >&2; exit 1; }
  fi
  "$B/pgbench" "${CONN[@]}" -n -b tpcb-like -c 1 -t "$N" -r postgres >"$D/bench.txt" 2>&1
  settle
  read -r w1 s1 wt1 st1 <<<"$(psql "$WALQ")"
  read -r u1 h1 <<<"$(psql "$TABQ")"
  [ -n "$wpid" ] && { kill -INT "$wpid"; wait "$wpid"; }
  echo "== $label"
  grep -E "latency average|^tps" "$D/bench.txt" | sed 's/^/  pgbench: /'
  grep -E " END;$" "$D/bench.txt" | awk '{ print "  pgbench: END latency " $1 " ms" }'
  awk -v w="$((w1 - w0))" -v s="$((s1 - s0))" -v wt="$wt0" -v wt1="$wt1" -v st="$st0" -v st1="$st1" \
    'BEGIN { printf "  pg_stat_wal: wal_write %d (%.3f ms), wal_sync %d (%.3f ms)\n", w, wt1 - wt, s, st1 - st }'
  echo "  pg_stat_user_tables: n_tup_upd $((u1 - u0)), n_tup_hot_upd $((h1 - h0))"
  [ -n "$profile" ] || return 0
  python3 - "$D/run.json" "$N" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1])); n = int(sys.argv[2])
def walk(node, parent, f):
    f(node, parent)
    for c in node.get("children", []):
        walk(c, node["name"], f)
acc = {}
def add(node, parent):
    key = (node["name"], parent)
    a = acc.setdefault(key, [0, 0, 0, None])
    a[0] += node["count"]; a[1] += node["total_ns"]
    if node.get("units"): a[2] += node["units"]["total"]
for r in run["tree"]["roots"]:
    walk(r, "", add)
def tot(name, parents=None):
    c = t = u = 0
    for (nm, p), a in acc.items():
        if nm == name and (parents is None or p in parents):
            c += a[0]; t += a[1]; u += a[2]
    return c, t, u
pw = tot("pwrite", {"xlog_flush", "xlog_insert", "wal_bg_flush"})
fd = tot("fdatasync")
print(f"  wprof: WAL pwrite {pw[0]} ({pw[1] / 1e6:.3f} ms), fdatasync {fd[0]} ({fd[1] / 1e6:.3f} ms)")
ex = next(r for r in run["tree"]["roots"] if r["name"] == "executor_run")
c = ex["corrected"]
print(f"  wprof: executor_run n={ex['count']}, self {c['self_ns'] / c['total_ns']:.1%} of its corrected time ({ex['self_ns'] / ex['total_ns']:.1%} raw)")
up = tot("heap_update", {"executor_run"}); hot = tot("update_hot")
if up[0]:
    print(f"  wprof: heap_update {up[0]} under executor_run, update_hot n={hot[0]} hot={hot[2]}, index_insert {tot('index_insert', {'executor_run'})[0]}")
commit = next(r for r in run["tree"]["roots"] if r["name"] == "commit")
flush = tot("xlog_flush", {"commit"})
print(f"  wprof: executor_run + commit {(ex['total_ns'] + commit['total_ns']) / 1e6 / n:.3f} ms a transaction (raw), commit's WAL flush {flush[1] / 1e6 / n:.3f} ms")
EOF
  grep -E "probe cost \(calibrated\)" "$D/tree.txt" | sed 's/^/  wprof: /'
}

run untraced
run "wprof --target postgres" postgres
run "wprof, the inserts-only profile" "$D/inserts-only.toml"
run "wprof --target postgres --aggregate kernel" postgres --aggregate kernel
