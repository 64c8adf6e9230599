#!/usr/bin/env bash
# regenerate.sh -- rebuild every example flamegraph in flamegraphs/ from real runs.
#
#   ./flamegraphs/regenerate.sh          (as root, or with CAP_BPF+CAP_PERFMON and sudo for runuser)
#
# 1. cargo build --release (target/release/wprof)
# 2. builds the C fixture (tests/fixtures/build.sh) into a temporary directory and records it:
#      - one run with the fdatasync kernel phase (fixture-kernel.toml), CPU sampling at 999 Hz
#        and off-CPU tracking; wal_sync writes+fdatasyncs a file and sleeps instead of spinning
#        -> fixture-phases.svg, fixture-cpu.svg, fixture-offcpu.svg, fixture-tree.txt
#      - a baseline run and a run with --flush-us doubled (100 -> 200 µs), compared with
#        `wprof compare --flamegraph` -> fixture-diff.svg (and the comparison text, fixture-diff.txt)
# 3. creates a throwaway PostgreSQL 15 cluster (temp dir, free port, unix socket in the temp
#    dir), opens one psql session, attaches wprof to its backend with --cpu-sample 999 --off-cpu,
#    runs CREATE TABLE + CREATE INDEX, a COPY FROM of 200k CSV rows and a few INSERT batches,
#    stops wprof with SIGINT
#      -> postgres-copy-phases.svg, postgres-copy-cpu.svg, postgres-copy-offcpu.svg,
#         postgres-copy-tree.txt
#    The cluster is stopped and removed on exit, failure included.
#
# Idempotent (outputs are overwritten); takes well under two minutes once wprof is built.
# Environment: PG_BIN (default /usr/lib/postgresql/15/bin), COPY_ROWS (default 200000).
set -euo pipefail
# Run as root, even through sudo: wprof record would run the traced commands as SUDO_UID
# (docs/security.md), and they live in root-only temporary directories.
unset SUDO_UID SUDO_GID

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
COPY_ROWS=${COPY_ROWS:-200000}
export PATH=${CARGO_HOME:-$HOME/.cargo}/bin:$PATH

log() { printf '[regenerate] %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

[ "$(id -u)" -eq 0 ] || die "run as root (BPF, and runuser to start PostgreSQL as user postgres)"

TMP=$(mktemp -d /tmp/wprof-flamegraphs.XXXXXX)
chmod 755 "$TMP" # the postgres server reads the CSV file and owns a directory in here
WPROF_PID=""
PG_STARTED=""
PSQL_CHILD=""

cleanup() {
    local rc=$?
    set +eu
    if [ -n "$WPROF_PID" ] && kill -0 "$WPROF_PID" 2>/dev/null; then
        kill -INT "$WPROF_PID"
        wait "$WPROF_PID" 2>/dev/null
    fi
    if [ -n "$PSQL_CHILD" ] && kill -0 "$PSQL_CHILD" 2>/dev/null; then
        kill "$PSQL_CHILD"
        wait "$PSQL_CHILD" 2>/dev/null
    fi
    if [ -n "$PG_STARTED" ]; then
        (cd "$TMP" && runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$TMP/pg/data" -m immediate \
            -w stop >/dev/null 2>&1)
    fi
    if [ "$rc" -ne 0 ]; then
        for f in "$TMP"/*.err "$TMP/pg/server.log"; do
            [ -s "$f" ] && { log "--- $f (last lines)"; tail -n 20 "$f" >&2; }
        done
    fi
    if [ -n "${WPROF_FLAMEGRAPHS_KEEP:-}" ]; then
        log "kept the runs (run.json, *.folded) in $TMP"
    else
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. wprof -------------------------------------------------------------------------------
log "cargo build --release"
(cd "$ROOT" && cargo build --release --quiet)
WPROF=$ROOT/target/release/wprof

# --- 2. the fixture -------------------------------------------------------------------------
log "building the fixture into $TMP/fx"
bash "$ROOT/tests/fixtures/build.sh" "$TMP/fx"
WRITEPATH=$TMP/fx/writepath

log "fixture: phases + CPU (999 Hz) + off-CPU, fdatasync kernel phase"
"$WPROF" record -q --target "$HERE/fixture-kernel.toml" --cpu-sample 999 --off-cpu \
    --out "$TMP/fixture" -- "$WRITEPATH" --iterations 2000 \
    --sleep-phase-us 200 --sync-file "$TMP/wal.dat" >"$TMP/fixture.out" 2>"$TMP/fixture.err"

log "fixture: baseline and --flush-us 200 runs, differential flamegraph"
"$WPROF" record -q --target fixture --json "$TMP/fixture-base.json" -- \
    "$WRITEPATH" --iterations 1000 >"$TMP/base.out" 2>"$TMP/base.err"
"$WPROF" record -q --target fixture --json "$TMP/fixture-flush-us-200.json" -- \
    "$WRITEPATH" --iterations 1000 --flush-us 200 >"$TMP/new.out" 2>"$TMP/new.err"
# compare exits 0 here (no --fail-if); the text is kept next to the SVG.
"$WPROF" compare "$TMP/fixture-base.json" "$TMP/fixture-flush-us-200.json" --flamegraph "$TMP/fixture-diff.svg" \
    >"$TMP/fixture-diff.txt" 2>"$TMP/compare.err"

# --- 3. PostgreSQL 15 COPY ------------------------------------------------------------------
[ -x "$PG_BIN/postgres" ] || die "no PostgreSQL at $PG_BIN (apt-get install postgresql-15)"

PORT=""
for p in $(seq 54330 54429); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && [ ! -e "$TMP/pg/sock/.s.PGSQL.$p" ]; then
        PORT=$p
        break
    fi
done
[ -n "$PORT" ] || die "no free port in 54330-54429"

log "PostgreSQL: initdb + start (port $PORT, socket in $TMP/pg/sock)"
mkdir -p "$TMP/pg/sock"
chown -R postgres:postgres "$TMP/pg"
(cd "$TMP" && runuser -u postgres -- "$PG_BIN/initdb" -D "$TMP/pg/data" -U postgres \
    --auth=trust --no-sync -E UTF8 --locale=C >"$TMP/initdb.err" 2>&1) ||
    die "initdb failed"
(cd "$TMP" && runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$TMP/pg/data" -l "$TMP/pg/server.log" -w \
    -o "-p $PORT -c listen_addresses='' -c unix_socket_directories='$TMP/pg/sock'" \
    start >"$TMP/pg_ctl.err" 2>&1) || die "pg_ctl start failed"
PG_STARTED=1

# The CSV the server reads (server-side COPY FROM 'file': the connection is the superuser).
awk -v n="$COPY_ROWS" 'BEGIN { for (i = 1; i <= n; i++)
    printf "%d,%d,row-%d-%s\n", i, (i * 7919) % n, i, "payload-payload-payload" }' >"$TMP/rows.csv"
chmod 644 "$TMP/rows.csv"

# One psql session that stays connected: a coprocess reading statements from its stdin.
coproc PSQL { exec "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$TMP/pg/sock" -p "$PORT" \
    -U postgres -d postgres 2>"$TMP/psql.err"; }
# bash unsets PSQL and PSQL_PID when the coprocess exits: keep copies.
PSQL_CHILD=$PSQL_PID
PSQL_IN=${PSQL[1]}
PSQL_OUT=${PSQL[0]}

# sql STATEMENTS... : send them, then wait until the session has run them all.
sql() {
    local line
    printf '%s\n' "$@" '\echo __wprof_done__' >&"$PSQL_IN"
    while IFS= read -r -t 120 -u "$PSQL_OUT" line; do
        [ "$line" = "__wprof_done__" ] && return 0
        printf '%s\n' "$line" >>"$TMP/psql.out"
    done
    die "the psql session ended or timed out (see psql.err below)"
}

printf 'select pg_backend_pid();\n' >&"$PSQL_IN"
IFS= read -r -t 30 -u "$PSQL_OUT" BACKEND || die "no backend pid from psql"
[[ $BACKEND =~ ^[0-9]+$ ]] || die "unexpected pg_backend_pid() answer: $BACKEND"
log "PostgreSQL: backend pid $BACKEND; attaching wprof"

"$WPROF" attach -q --target postgres --pid "$BACKEND" --cpu-sample 999 --off-cpu \
    --out "$TMP/postgres" >"$TMP/wprof-pg.out" 2>"$TMP/wprof-pg.err" &
WPROF_PID=$!
for _ in $(seq 300); do
    grep -q 'attached' "$TMP/wprof-pg.err" && break
    kill -0 "$WPROF_PID" 2>/dev/null || die "wprof attach exited before attaching"
    sleep 0.1
done
grep -q 'attached' "$TMP/wprof-pg.err" || die "wprof did not attach within 30 s"

log "PostgreSQL: CREATE TABLE + index, COPY $COPY_ROWS rows, 5 INSERT batches"
sql "create table t (id int primary key, k int not null, payload text not null);" \
    "create index t_k on t (k);" \
    "copy t from '$TMP/rows.csv' with (format csv);"
for b in 1 2 3 4 5; do
    lo=$((COPY_ROWS + (b - 1) * 2000 + 1))
    sql "insert into t select g, g % 997, 'batch-$b-' || g from generate_series($lo, $((lo + 1999))) g;"
done
sql "select count(*) from t;"
log "PostgreSQL: $(tail -n 1 "$TMP/psql.out") rows in t; stopping wprof"

kill -INT "$WPROF_PID"
wprc=0
wait "$WPROF_PID" || wprc=$?
WPROF_PID=""
[ "$wprc" -eq 0 ] || die "wprof attach exited with $wprc"

# --- outputs ----------------------------------------------------------------------------------
for f in phases.svg cpu.svg offcpu.svg tree.txt; do
    [ -s "$TMP/fixture/$f" ] || die "fixture run wrote no $f"
    [ -s "$TMP/postgres/$f" ] || die "postgres run wrote no $f"
done
[ -s "$TMP/fixture-diff.svg" ] || die "compare wrote no fixture-diff.svg"

cp "$TMP/fixture/phases.svg" "$HERE/fixture-phases.svg"
cp "$TMP/fixture/cpu.svg" "$HERE/fixture-cpu.svg"
cp "$TMP/fixture/offcpu.svg" "$HERE/fixture-offcpu.svg"
cp "$TMP/fixture/tree.txt" "$HERE/fixture-tree.txt"
cp "$TMP/fixture-diff.svg" "$HERE/fixture-diff.svg"
cp "$TMP/fixture-diff.txt" "$HERE/fixture-diff.txt"
cp "$TMP/postgres/phases.svg" "$HERE/postgres-copy-phases.svg"
cp "$TMP/postgres/cpu.svg" "$HERE/postgres-copy-cpu.svg"
cp "$TMP/postgres/offcpu.svg" "$HERE/postgres-copy-offcpu.svg"
cp "$TMP/postgres/tree.txt" "$HERE/postgres-copy-tree.txt"

log "wrote:"
(cd "$HERE" && ls -l fixture-*.svg fixture-*.txt postgres-copy-* >&2)
