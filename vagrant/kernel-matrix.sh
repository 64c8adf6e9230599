#!/usr/bin/env bash
# kernel-matrix.sh - run wprof's attach smoke test under Debian's own kernels, one qemu guest
# each, and print a pass/fail table per kernel.
#
# Usage:  sudo vagrant/kernel-matrix.sh [PKG...]
#   PKG   a Debian kernel image package or meta-package (followed to its current
#         linux-image-<abi> package). Default: linux-image-cloud-amd64 (bookworm's 6.1) and
#         linux-image-6.12-cloud-amd64 (6.12). Candidates:
#           apt-cache search '^linux-image-6' | grep -v -e dbg -e unsigned
#
# Each kernel is fetched with `apt-get download` and unpacked with `dpkg -x` (never installed
# on the host), then booted with `qemu-system-x86_64 -accel tcg` (no KVM needed) and a busybox
# initramfs holding wprof, the C fixture (tests/fixtures) and their shared libraries. The
# guest (/init = vagrant/kernel-matrix-guest.sh) runs `wprof doctor`, then `wprof record`,
# `wprof attach --pid` and, where the attach used uprobe_multi, the same attach with
# WPROF_PER_POINT_LINKS=1, an attach that loads the kernel-side programs (an fdatasync
# syscall phase, --off-cpu, --cpu-sample, --follow-forks) and a `record --aggregate kernel`
# (summaries and histograms in BPF maps); each run must see all 200 write_record calls and
# pass a small `wprof check` (the in-kernel run: exact counts on every node).
# See docs/kernel-matrix.md.
#
# Environment:
#   KM_DIR      cache and results (default ~/.cache/wprof-kmatrix): debs/ and kernels/ are
#               reused between runs; runs/<package>/console.log and last-run.md are rewritten
#   WPROF_BIN   wprof to test (default target/release/wprof; `cargo build --release` if absent)
#   KM_TIMEOUT  seconds one guest may take, boot included (default 1500)
#   KM_MEM      guest memory (default 1G);  KM_SMP  guest CPUs (default 2)
#   KM_TCG_THREAD  single (default) or multi: TCG's vCPU threads. With multi, a vCPU can run
#               code another vCPU has just patched from a stale translation: the kernel's
#               int3-based text patching (the sched_switch static key, toggled by every run
#               that follows preemptions) then Oopsed 6.12 in __schedule ("Oops: int3")
#   KM_APPEND   extra kernel command line; `km.full` puts long outputs (a verifier log) on
#               the console whole instead of their first and last 60 lines
#
# Exit status: 0 every kernel passed; 1 a kernel failed (the table says which); 2 usage.
# Needs qemu-system-x86, busybox-static, gcc and binutils (installed when missing, as root).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KM_DIR=${KM_DIR:-$HOME/.cache/wprof-kmatrix}
KM_TIMEOUT=${KM_TIMEOUT:-1500}
KM_MEM=${KM_MEM:-1G}
KM_SMP=${KM_SMP:-2}
KM_TCG_THREAD=${KM_TCG_THREAD:-single}
KM_APPEND=${KM_APPEND:-}
WPROF_BIN=${WPROF_BIN:-$ROOT/target/release/wprof}
DEFAULT_KERNELS=(linux-image-cloud-amd64 linux-image-6.12-cloud-amd64)

log() { printf '[kmatrix %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
    exit 2
}

# static_busybox: whether /bin/busybox runs without shared libraries (busybox-static's does)
static_busybox() {
    [ -x /bin/busybox ] || return 1
    ! ldd /bin/busybox >/dev/null 2>&1
}

# ensure_tools: installs the Debian packages the matrix needs, only those missing
ensure_tools() {
    local need=()
    command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
    static_busybox || need+=(busybox-static)
    command -v gcc >/dev/null || need+=(gcc libc6-dev)
    command -v objcopy >/dev/null || need+=(binutils)
    [ ${#need[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || die "missing ${need[*]}: run as root or apt-get install them"
    log "apt: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

# resolve_pkg PKG: the concrete linux-image-<abi> package behind a meta-package
resolve_pkg() {
    local pkg=$1 dep
    while dep=$(apt-cache depends "$pkg" 2>/dev/null |
        sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1) && [ -n "$dep" ]; do
        pkg=$dep
    done
    apt-cache show "$pkg" >/dev/null 2>&1 || die "no package $pkg (apt-get update?)"
    echo "$pkg"
}

# download PKG=VERSION: the .deb into the cache, not installed
download() {
    (cd "$KM_DIR/debs" && apt-get download -q -o APT::Sandbox::User=root "$1" >/dev/null)
}

# fetch_kernel PKG: downloads and unpacks PKG once; prints the unpacked tree's path
fetch_kernel() {
    local pkg=$1 ver deb tree
    ver=$(apt-cache policy "$pkg" | sed -n 's/^ *Candidate: //p')
    tree=$KM_DIR/kernels/${pkg}_$ver
    deb=$(find "$KM_DIR/debs" -name "${pkg}_${ver//:/%3a}_*.deb" -size +0 -print -quit)
    if [ -z "$deb" ]; then
        log "download $pkg $ver"
        download "$pkg=$ver" || { [ "$(id -u)" -eq 0 ] && apt-get update -qq && download "$pkg=$ver"; } ||
            die "apt-get download $pkg=$ver failed"
        deb=$(find "$KM_DIR/debs" -name "${pkg}_${ver//:/%3a}_*.deb" -print -quit)
    fi
    if [ ! -e "$tree/.unpacked" ]; then
        rm -rf "$tree"
        dpkg -x "$deb" "$tree"
        touch "$tree/.unpacked"
    fi
    echo "$tree"
}

# ensure_wprof: builds target/release/wprof when no WPROF_BIN exists yet
ensure_wprof() {
    [ -x "$WPROF_BIN" ] && return 0
    command -v cargo >/dev/null || die "no $WPROF_BIN and no cargo on PATH: build wprof first"
    log "cargo build --release"
    (cd "$ROOT" && cargo build --release --quiet)
}

# copy_with_libs FILE DEST STAGE: FILE to STAGE/DEST plus its ldd libraries at their own paths
copy_with_libs() {
    local file=$1 dest=$2 stage=$3 lib
    mkdir -p "$stage/$(dirname "$dest")"
    cp -L "$file" "$stage/$dest"
    for lib in $(ldd "$file" | grep -o '/[^ ]*'); do
        mkdir -p "$stage/$(dirname "$lib")"
        cp -Ln "$lib" "$stage/$lib"
    done
}

# build_initramfs OUT: the guest's root: busybox, /init, wprof, the fixture, smoke.toml
build_initramfs() {
    local out=$1 stage=$KM_DIR/stage
    rm -rf "$stage"
    mkdir -p "$stage/bin" "$stage/km"
    cp /bin/busybox "$stage/bin/busybox"
    install -m 755 "$ROOT/vagrant/kernel-matrix-guest.sh" "$stage/init"
    "$ROOT/tests/fixtures/build.sh" "$KM_DIR/fixtures"
    copy_with_libs "$KM_DIR/fixtures/writepath" km/writepath "$stage"
    copy_with_libs "$KM_DIR/fixtures/unwind-torture" km/torture "$stage"
    copy_with_libs "$KM_DIR/fixtures/unwind-torture-clang" km/torture-clang "$stage"
    copy_with_libs "$KM_DIR/fixtures/unwind-torture-rs" km/torture-rs "$stage"
    cp "$ROOT/tests/fixtures/unwind/unwind-rs.toml" "$stage/km/unwind-rs.toml"
    cp "$ROOT/tests/fixtures/unwind/unwind.toml" "$stage/km/unwind.toml"
    # RocksDB's db_bench (rocksdb-tools, which .ci/install.sh installs): a real C++ engine
    # under the guard; without it the guest says the stage did not run
    if [ -x /usr/bin/db_bench ]; then
        copy_with_libs /usr/bin/db_bench km/db_bench "$stage"
    fi
    objcopy --strip-debug "$WPROF_BIN" "$KM_DIR/wprof"    # 60 MB -> 9 MB: faster to load
    copy_with_libs "$KM_DIR/wprof" km/wprof "$stage"
    write_checks "$stage/km"
    (cd "$stage" && find . | busybox cpio -o -H newc 2>/dev/null) >"$out"
}

# once PHASE: a hypothesis that PHASE runs exactly once per root call
once() {
    printf '[[hypothesis]]\nid = "%s"\nphase = "%s"\ncount_per_call = "== 1"\n\n' "${1##*/}" "$1"
}

# write_checks DIR: the guest's profile and hypothesis files
write_checks() {
    local phase
    for phase in encode_record persist_block compress_block flush_block wal_append wal_sync; do
        once "$phase"
    done >"$1/smoke.toml"
    once write_record/wal_sync/fdatasync >"$1/kernel-check.toml"
    cat >"$1/kernel.toml" <<'EOF'
name = "fixture-kernel"
description = "the fixture's write path with its fdatasync as a kernel (syscall) phase"
object = "exe"
[[phase]]
name = "write_record"
symbol = "write_record"
[[phase]]
name = "wal_sync"
symbol = "wal_sync"
[[phase]]
name = "fdatasync"
syscall = "fdatasync"
EOF
}

# boot KERNEL_TREE INITRD CONSOLE: one qemu guest, its serial console to CONSOLE
boot() {
    local tree=$1 initrd=$2 console=$3 vmlinuz
    vmlinuz=$(find "$tree/boot" -name 'vmlinuz-*' -print -quit)
    [ -n "$vmlinuz" ] || die "no vmlinuz in $tree/boot"
    timeout "$KM_TIMEOUT" qemu-system-x86_64 -accel "tcg,thread=$KM_TCG_THREAD" \
        -m "$KM_MEM" -smp "$KM_SMP" \
        -nodefaults -display none -no-reboot -serial stdio -monitor none \
        -kernel "$vmlinuz" -initrd "$initrd" -append "console=ttyS0 panic=-1 quiet $KM_APPEND" \
        </dev/null 2>&1 | tr -d '\r' >"$console" || true
}

# value KEY CONSOLE: the last `KM@ set KEY VALUE` the guest printed
value() {
    sed -n "s/^KM@ set $1 //p" "$2" | tail -n1
}

# block NAME CONSOLE: the output the guest printed between `KM@ begin NAME` and its end
block() {
    sed -n "/^KM@ begin $1\$/,/^KM@ end $1 rc=/{/^KM@ /d;p}" "$2"
}

# multi_cell LINKS...: whether uprobe_multi links were used, from the first run that attached
# ("POINTS LINKS" as the guest reports it; "none" for a run that did not get that far)
multi_cell() {
    local run points links
    for run in "$@"; do
        case $run in none | "") continue ;; esac
        points=${run% *} links=${run#* }
        if [ "$links" -lt "$points" ]; then
            echo "yes ($links links, $points points)"
        else
            echo "no ($links per-point links)"
        fi
        return
    done
    echo "? (nothing attached)"
}

# doctor_cell CONSOLE
doctor_cell() {
    local rc
    rc=$(value doctor_rc "$1")
    if [ "$rc" = 0 ]; then
        echo ok
    elif block doctor "$1" | grep -q "unrecognized subcommand"; then
        echo "n/a (not in this wprof)"
    else
        echo "FAIL(rc=${rc:-none})"
    fi
}

# verdict_of CONSOLE CELL...: PASS, or FAIL when the guest did not finish or a cell failed
verdict_of() {
    local console=$1 cell
    shift
    grep -q '^KM@ done' "$console" || { echo "FAIL (guest did not finish)"; return; }
    for cell in "$@"; do
        case $cell in
            "" | FAIL*) echo FAIL; return ;;
        esac
    done
    echo PASS
}

# run_kernel PKG INITRD: boots one kernel, appends its row to ROWS, sets FAILED on a failure
run_kernel() {
    local pkg tree dir console t0 secs kernel doctor multi rec att pp kern kagg unw rdb verdict
    pkg=$(resolve_pkg "$1")
    tree=$(fetch_kernel "$pkg")
    dir=$KM_DIR/runs/$pkg
    console=$dir/console.log
    mkdir -p "$dir"
    log "boot $pkg"
    t0=$(date +%s)
    boot "$tree" "$2" "$console"
    secs=$(($(date +%s) - t0))
    kernel=$(value release "$console")
    doctor=$(doctor_cell "$console")
    multi=$(multi_cell "$(value attach_links "$console")" "$(value record_links "$console")")
    rec=$(value record "$console")
    att=$(value attach "$console")
    pp=$(value perpoint "$console")
    kern=$(value kernel "$console")
    kagg=$(value kagg "$console")
    unw=$(value unwind "$console")
    rdb=$(value rocksdb "$console")
    block doctor "$console" >"$dir/doctor.txt"
    verdict=$(verdict_of "$console" "$doctor" "$rec" "$att" "$pp" "$kern" "$kagg" "$unw" "$rdb")
    [ "$verdict" = PASS ] || { FAILED=1; log "$pkg: $verdict, see $console"; }
    ROWS+=("| ${kernel:-$pkg} | $doctor | $multi | ${rec:--} | ${att:--} | ${pp:--} | ${kern:--} | ${kagg:--} | ${unw:--} | ${rdb:--} | $secs (boot $(value boot_s "$console")) | $verdict |")
    DOCTORS+=("$pkg" "$dir/doctor.txt")
    COSTS+=("| ${kernel:-$pkg} | $(value unwind_cost "$console") |")
    DBCOSTS+=("| ${kernel:-$pkg} | $(value rocksdb_cost "$console") |")
}

# clip FILE: FILE, or its first 10 and last 22 lines when longer than 40 (a verifier log:
# its end says why, and the checks after it follow)
clip() {
    local n
    n=$(wc -l <"$1")
    if [ "$n" -le 40 ]; then
        cat "$1"
    else
        head -n 10 "$1"
        echo "[... $((n - 32)) lines left out here; see console.log, KM_APPEND=km.full for all ...]"
        tail -n 22 "$1"
    fi
}

# report: the table, then each kernel's `wprof doctor` output; also saved as last-run.md
report() {
    local i
    {
        echo "| kernel | doctor | uprobe_multi | record | attach | per-point attach | kernel programs | in-kernel aggregation | unwind guard | db_bench guarded | seconds | result |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
        printf '%s\n' "${ROWS[@]}"
        printf '\n%s\n\n| kernel | per frame (entry + return), torture plain 20000 |\n|---|---|\n' \
            "Return modes on eight nested C++ frames (TCG: compare within a row, not with real hardware):"
        printf '%s\n' "${COSTS[@]}"
        printf '\n%s\n\n| kernel | db_bench fillrandom |\n|---|---|\n' \
            "RocksDB's db_bench under the rocksdb profile (own = RocksDB's mean write, wprof = corrected write_impl mean):"
        printf '%s\n' "${DBCOSTS[@]}"
        for ((i = 0; i < ${#DOCTORS[@]}; i += 2)); do
            printf '\n%s on %s:\n\n~~~\n%s\n~~~\n' "\`wprof doctor\`" "${DOCTORS[i]}" "$(clip "${DOCTORS[i + 1]}")"
        done
    } | tee "$KM_DIR/last-run.md"
}

main() {
    case ${1:-} in -h | --help) usage ;; esac
    local kernels=("$@") start
    [ ${#kernels[@]} -gt 0 ] || kernels=("${DEFAULT_KERNELS[@]}")
    start=$(date +%s)
    ensure_tools
    ensure_wprof
    mkdir -p "$KM_DIR/debs" "$KM_DIR/kernels" "$KM_DIR/runs"
    build_initramfs "$KM_DIR/initrd.cpio"
    ROWS=() DOCTORS=() COSTS=() DBCOSTS=() FAILED=0
    local k
    for k in "${kernels[@]}"; do
        run_kernel "$k" "$KM_DIR/initrd.cpio"
    done
    report
    log "${#kernels[@]} kernels in $(($(date +%s) - start)) s; console logs under $KM_DIR/runs"
    return "$FAILED"
}

main "$@"
