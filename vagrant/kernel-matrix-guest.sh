#!/bin/busybox sh
# shellcheck shell=dash
# kernel-matrix-guest.sh - /init of the kernel matrix's initramfs (see kernel-matrix.sh).
#
# Runs as PID 1 under busybox sh inside a qemu guest booted from a Debian kernel package.
# The initramfs holds busybox, /km/wprof, /km/writepath (the C fixture), the unwind torture
# fixtures, /km/db_bench (RocksDB's, when the host has it), the shared libraries
# they need, and kernel-matrix.sh's files: smoke.toml (hypotheses on the fixture profile),
# kernel.toml (a profile with an fdatasync syscall phase) and kernel-check.toml. Everything it reports goes to the serial console:
#   KM@ begin NAME / KM@ end NAME   a block of raw output (doctor, record, attach, ...)
#   KM@ set KEY VALUE               one result; kernel-matrix.sh builds its table from these
# Then it powers the guest off. It never exits early: a failed step is reported and the
# next one runs.

ITER=200                 # write_record calls per smoke run
WAIT_S=300               # longest wait for a "ready" or "attached" line (TCG is slow)
W=/km/wprof
FX=/km/writepath
# every wal_sync writes and fdatasyncs a file: the syscall phase of kernel.toml
FX_ARGS="--iterations $ITER --sync-file /tmp/sync"

say() { echo "KM@ $*"; }
up() { cut -d' ' -f1 /proc/uptime; }

setup() {
    /bin/busybox mkdir -p /proc /sys /dev /tmp /run /sbin /usr/bin /usr/sbin
    /bin/busybox --install -s
    export PATH=/km:/usr/sbin:/usr/bin:/sbin:/bin
    mount -t proc proc /proc
    mount -t sysfs sysfs /sys
    mount -t devtmpfs devtmpfs /dev
    mount -t tracefs nodev /sys/kernel/tracing || say "note tracefs mount failed"
    mount -t debugfs nodev /sys/kernel/debug || say "note debugfs mount failed"
    mount -t bpf bpf /sys/fs/bpf || say "note bpffs mount failed"
    ulimit -l unlimited || say "note could not raise RLIMIT_MEMLOCK"
}

# show FILE : FILE on the console; a long one (a verifier log) cut to its head and tail,
# since the emulated serial port is slow, unless km.full is on the kernel command line
show() {
    n=$(wc -l <"$1")
    if [ "$n" -le 150 ] || grep -qw km.full /proc/cmdline; then
        cat "$1"
    else
        head -n 60 "$1"
        echo "[... $((n - 120)) lines left out; boot with km.full to see them ...]"
        tail -n 60 "$1"
    fi
}

# block NAME CMD... : runs CMD, its output between begin/end markers; returns its status
block() {
    name=$1
    shift
    say "begin $name"
    "$@" >/tmp/block.out 2>&1
    brc=$?
    show /tmp/block.out
    say "end $name rc=$brc"
    return $brc
}

# wait_for PATTERN FILE PID : until FILE has a line matching PATTERN; fails when process PID
# (the one writing FILE) has exited or after WAIT_S seconds
wait_for() {
    deadline=$(($(cut -d. -f1 /proc/uptime) + WAIT_S))
    while ! grep -q "$1" "$2" 2>/dev/null; do
        kill -0 "$3" 2>/dev/null || return 1
        [ "$(cut -d. -f1 /proc/uptime)" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# links_of STDERR_FILE : "POINTS LINKS" from wprof's "N probe points ... (M links" line
links_of() {
    sed -n 's/.* \([0-9][0-9]*\) probe points[^(]*(\([0-9][0-9]*\) links.*/\1 \2/p' "$1" | head -n1
}

# verify NAME HYPOTHESES : PASS if NAME.json has ITER root calls and the hypotheses hold
verify() {
    rows=$($W report "/tmp/$1.json" --format csv 2>/dev/null | wc -l)
    if [ "$rows" -ne $((ITER + 1)) ]; then
        echo "FAIL(rows=$((rows - 1)))"
    elif ! block "$1-check" $W check --hypotheses "$2" "/tmp/$1.json" >&2; then
        echo "FAIL(check)"
    else
        echo PASS
    fi
}

# report NAME RC HYPOTHESES : KM@ set lines for one run (result, which link mechanism)
report() {
    LINKS=$(links_of "/tmp/$1.err")
    say "set $1_links ${LINKS:-none}"
    if [ "$2" -ne 0 ]; then
        say "set $1 FAIL(rc=$2)"
    else
        say "set $1 $(verify "$1" "$3")"
    fi
}

doctor() {
    block doctor $W doctor
    say "set doctor_rc $?"
}

record() {
    say "begin record"
    # shellcheck disable=SC2086 # FX_ARGS is a list of words
    $W record --target fixture --json /tmp/record.json -- $FX $FX_ARGS \
        >/tmp/record.out 2>/tmp/record.err
    rc=$?
    # a corrected run follows preemptions by default (sched_switch without stacks)
    if [ "$rc" -eq 0 ] && ! grep -q 'preemptions followed' /tmp/record.err; then
        echo "the corrected run did not follow preemptions"
        rc=97
    fi
    show /tmp/record.out
    show /tmp/record.err
    say "end record rc=$rc"
    report record $rc /km/smoke.toml
}

# verify_kagg NAME : PASS if every write-path node of NAME.json (an --aggregate kernel run: no
# call table to check per call) has exactly ITER calls and the run says where it aggregated
verify_kagg() {
    $W report "/tmp/$1.json" >"/tmp/$1.tree" 2>&1 || { echo "FAIL(report)"; return; }
    for phase in write_record encode_record persist_block compress_block flush_block \
        wal_append wal_sync; do
        grep -q "$phase .*n=$ITER " "/tmp/$1.tree" || { echo "FAIL($phase)"; return; }
    done
    grep -q '"aggregation": "kernel"' "/tmp/$1.json" || { echo "FAIL(aggregation)"; return; }
    echo PASS
}

# record_kernel: `record --aggregate kernel`, where each call updates summaries and
# histogram buckets in BPF maps instead of sending a span
record_kernel() {
    say "begin kagg"
    # shellcheck disable=SC2086 # FX_ARGS is a list of words
    $W record --target fixture --aggregate kernel --json /tmp/kagg.json -- $FX $FX_ARGS \
        >/tmp/kagg.out 2>/tmp/kagg.err
    rc=$?
    show /tmp/kagg.out
    show /tmp/kagg.err
    say "end kagg rc=$rc"
    if [ "$rc" -ne 0 ]; then
        say "set kagg FAIL(rc=$rc)"
    else
        say "set kagg $(verify_kagg kagg)"
    fi
}

# attach NAME PER_POINT TARGET HYPOTHESES [WPROF_ARGS...] : start the fixture waiting on a
# fifo, attach to its pid (WPROF_PER_POINT_LINKS=PER_POINT), release it, check the run
attach() {
    name=$1 per_point=$2 target=$3 hyp=$4
    shift 4
    rm -f /tmp/go
    mkfifo /tmp/go
    # shellcheck disable=SC2086 # FX_ARGS is a list of words
    $FX --wait $FX_ARGS </tmp/go >"/tmp/$name.fx" 2>&1 &
    fx=$!
    exec 3>/tmp/go
    rc=1
    say "begin $name"
    if wait_for '^ready pid=' "/tmp/$name.fx" "$fx"; then
        pid=$(sed -n 's/^ready pid=//p' "/tmp/$name.fx")
        WPROF_PER_POINT_LINKS=$per_point $W attach --target "$target" --pid "$pid" "$@" \
            --json "/tmp/$name.json" >"/tmp/$name.out" 2>"/tmp/$name.err" &
        wp=$!
        wait_for 'attached' "/tmp/$name.err" "$wp" || echo "wprof never printed 'attached'"
        echo go >&3
        exec 3>&-
        wait "$wp"
        rc=$?
    else
        echo "fixture never printed 'ready pid='"
        exec 3>&-
    fi
    wait "$fx"
    show "/tmp/$name.fx"
    show "/tmp/$name.out"
    show "/tmp/$name.err"
    say "end $name rc=$rc"
    report "$name" "$rc" "$hyp"
}

# tree_row CASE: a row the case's tree must hold (the calls that returned after their catch
# re-armed them: exact counts), or nothing
tree_row() {
    case $1 in
        torture-nested | torture-clang-nested) echo '^f1 .* n=56 ' ;;   # 28 per round
        torture-rs-nested) echo '^f1 .* n=30 ' ;;                       # 6 per round
        *-threads) echo '─ f2 .* n=10000 ' ;;                           # caught in f2
    esac
}

# unwind_case PROGRAM NAME WANT_RC WANT_LINE ARGS...: an unwind torture fixture (torture: g++,
# torture-clang, torture-rs) recorded with its frames in guarded (uretprobe + unwind guard)
# mode; prints PASS or FAIL(NAME...)
unwind_case() {
    prog=$1 name=$1-$2 want_rc=$3 want=$4
    shift 4
    profile=/km/unwind.toml
    [ "$prog" = torture-rs ] && profile=/km/unwind-rs.toml
    $W record --target $profile --json "/tmp/unwind-$name.json" -- "/km/$prog" "$@" \
        >"/tmp/unwind-$name.out" 2>"/tmp/unwind-$name.err"
    rc=$?
    show "/tmp/unwind-$name.out" >&2
    show "/tmp/unwind-$name.err" >&2
    if [ "$rc" -ne "$want_rc" ]; then
        echo "FAIL($name rc=$rc)"
    elif ! grep -q "$want" "/tmp/unwind-$name.out"; then
        echo "FAIL($name output)"
    elif [ "$want_rc" -eq 0 ] && ! grep -q '"return_mode": "guarded"' "/tmp/unwind-$name.json"; then
        echo "FAIL($name not guarded)"
    elif [ -n "$(tree_row "$name")" ] && ! grep -q "$(tree_row "$name")" "/tmp/unwind-$name.out"; then
        echo "FAIL($name count)"
    else
        echo PASS
    fi
}

# The unwind guard's safety suite (see tests/unwind_guard.rs): these kernels allow the
# guard's writes to user stacks (no lockdown), the development VMs do not.
unwind() {
    say "begin unwind"
    verdict=PASS
    for prog in torture torture-clang; do
        for c in "nested 0 nested.ok nested 2" "rethrow 0 rethrow.ok rethrow 20" \
            "dtor 0 dtor.ok dtor 20" "cancel 0 cancel.ok cancel 2" \
            "backtrace 0 backtrace.ok backtrace 5" "threads 0 threads.ok threads 4 2500" \
            "terminate 134 handler.reached terminate" "noexcept 134 handler.reached noexcept"; do
            # shellcheck disable=SC2086 # the case's words are its arguments
            v=$(unwind_case $prog $c)
            [ "$v" = PASS ] || verdict=$v
        done
    done
    for c in "nested 0 nested.ok nested 5" "threads 0 threads.ok threads 4 2500"; do
        # shellcheck disable=SC2086 # as above
        v=$(unwind_case torture-rs $c)
        [ "$v" = PASS ] || verdict=$v
    done
    say "end unwind rc=0"
    say "set unwind $verdict"
    unwind_cost
}

# unwind_cost: what one call of eight nested frames costs per frame (entry + return) in each
# return mode, next to untraced (TCG's times are not a real machine's: read the ratios)
unwind_cost() {
    say "begin unwind_cost"
    n=20000
    plain=$(/km/torture plain $n | sed -n 's/.*ns_per_call=//p')
    line="untraced ${plain} ns/call"
    for mode in guarded uretprobe ret-sites; do
        t=$($W record -q --return $mode --target /km/unwind.toml -- /km/torture plain $n \
            2>/dev/null | sed -n 's/.*ns_per_call=//p')
        line="$line; $mode $(((${t:-0} - plain) / 8)) ns/frame"
    done
    echo "$line"
    say "end unwind_cost rc=0"
    say "set unwind_cost $line"
}

# RocksDB's db_bench (Debian's librocksdb, a real C++ engine) under the `rocksdb` profile:
# untraced, guarded (wprof's default where the guard loads) and plain uretprobes, DB_N
# fillrandom writes each. A run passes when it exits 0, wprof counted exactly as many
# write_impl calls as RocksDB's own rocksdb.db.write.micros COUNT, and the default run was
# guarded. The cost line: db_bench's ops/s, RocksDB's own mean write time in that run (SUM /
# COUNT, µs: every probe inside the write adds to it) and wprof's corrected write_impl mean.
DB_N=5000
db_bench() {
    rm -rf /tmp/rdb
    # shellcheck disable=SC2068 # the words before db_bench are a command prefix
    $@ /km/db_bench --benchmarks=fillrandom --num=$DB_N --statistics=1 \
        --write_buffer_size=4194304 --db=/tmp/rdb
}
# db_field OUT FIELD: from db_bench's output, ops (ops/s), count or mean (µs) of
# rocksdb.db.write.micros (its line ends `... COUNT : n SUM : s`)
db_field() {
    case $2 in
        ops) sed -n 's/^fillrandom .* \([0-9][0-9]*\) ops\/sec.*/\1/p' "$1" | head -n1 ;;
        count) awk '$1 == "rocksdb.db.write.micros" { print $(NF-3) }' "$1" ;;
        mean) awk '$1 == "rocksdb.db.write.micros" && $(NF-3) > 0 { printf "%.1f", $NF / $(NF-3) }' "$1" ;;
    esac
}
# tree_field OUT FIELD: n (calls) or mean (corrected, with its unit) of the tree's write_impl row
tree_field() {
    case $2 in
        n) sed -n 's/^write_impl .* n=\([0-9][0-9]*\) .*/\1/p' "$1" | head -n1 ;;
        mean) sed -n 's/^write_impl .* mean *\([0-9.][0-9.]* [^ ]*\) .*/\1/p' "$1" | head -n1 ;;
    esac
}
rocksdb() {
    if [ ! -x /km/db_bench ]; then
        say "set rocksdb not run (no db_bench on the host)"
        return
    fi
    say "begin rocksdb"
    db_bench >/tmp/db-untraced.out 2>&1
    line="untraced $(db_field /tmp/db-untraced.out ops) ops/s, own $(db_field /tmp/db-untraced.out mean) µs"
    verdict=PASS
    for mode in auto uretprobe; do
        db_bench $W record --target rocksdb --return $mode --json "/tmp/db-$mode.json" -- \
            >"/tmp/db-$mode.out" 2>"/tmp/db-$mode.err"
        rc=$?
        show "/tmp/db-$mode.err"
        n=$(tree_field "/tmp/db-$mode.out" n)
        own=$(db_field "/tmp/db-$mode.out" count)
        name=$mode
        if grep -q '"return_mode": "guarded"' "/tmp/db-$mode.json" 2>/dev/null; then
            name=guarded
        fi
        if [ "$rc" -ne 0 ]; then
            verdict="FAIL($mode rc=$rc)"
        elif [ -z "$n" ] || [ "$n" != "$own" ] || [ "$own" != "$DB_N" ]; then
            verdict="FAIL($mode n=$n, RocksDB's COUNT $own)"
        elif [ "$mode" = auto ] && [ "$name" != guarded ]; then
            verdict="FAIL(default not guarded)"
        fi
        line="$line; $name $(db_field "/tmp/db-$mode.out" ops) ops/s, own $(db_field "/tmp/db-$mode.out" mean) µs, wprof $(tree_field "/tmp/db-$mode.out" mean)"
    done
    echo "$line"
    say "end rocksdb rc=0"
    say "set rocksdb $verdict"
    say "set rocksdb_cost $line"
}

main() {
    setup
    say "set release $(uname -r)"
    say "set boot_s $(up)"
    doctor
    record
    unwind
    rocksdb
    record_kernel
    attach attach "" fixture /km/smoke.toml
    # per-point links forced: only new where the plain attach used uprobe_multi (fewer links)
    if [ -z "$LINKS" ]; then
        say "set perpoint not run (attach failed)"
    elif [ "${LINKS#* }" -lt "${LINKS% *}" ]; then
        attach perpoint 1 fixture /km/smoke.toml
    else
        say "set perpoint same as attach"
    fi
    # the kernel-side programs: syscall tracepoints, sched_switch, cpu-clock sampling, fork
    attach kernel "" /km/kernel.toml /km/kernel-check.toml \
        --off-cpu --cpu-sample 99 --follow-forks
    say "set run_s $(up)"
    say "done"
    sync
    poweroff -f
}

main
