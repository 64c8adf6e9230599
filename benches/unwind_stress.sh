#!/usr/bin/env bash
# The unwind safety suite's cases (tests/unwind_guard.rs), each traced by `wprof record` in the
# default return mode (guarded where the unwind guard loads) and run untraced, PASSES times over,
# for g++ and clang++: prints every case whose traced run differs from the untraced one (exit
# status or last line), with the guard's counters, and each case's time traced and untraced.
# Where the kernel refuses BPF's writes to the stacks, the guard's writes go through wprof
# (docs/design-notes.md): this is the repeated run behind docs/benchmarks.md §24.
#
# Each pass also runs the 4-thread case short (`threads 4 50`, 4 threads' first exceptions
# together) SHORT_RUNS times a program (default 10): the runs where the guard's programs sleep
# while other threads' programs run on their CPU (docs/benchmarks.md §24).
#
# Run as root: benches/unwind_stress.sh [PASSES] [SHORT_RUNS]     (defaults 4, 10)
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
# shellcheck source=benches/setup.sh
. benches/setup.sh
PASSES=${1:-4}
SHORT_RUNS=${2:-10}
F=target/tmp/fixtures
[ -x "$F/unwind-torture" ] || bash tests/fixtures/build.sh "$F" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mismatches=0
secs() { local t0 rc; t0=$(date +%s.%N); "$@" >"$tmp/out" 2>"$tmp/err" && rc=0 || rc=$?; echo "$rc" "$(echo "$(date +%s.%N) - $t0" | bc)"; }
printf '%-6s %-22s %-18s %10s %10s\n' pass program case untraced_s traced_s
for pass in $(seq "$PASSES"); do
  for prog in unwind-torture unwind-torture-clang; do
    short=()
    for _ in $(seq "$SHORT_RUNS"); do short+=("threads 4 50"); done
    for c in "nested 20" "rethrow 50" "dtor 50" "cancel 4" "backtrace 20" terminate noexcept "threads 4 25000" "${short[@]}"; do
      # shellcheck disable=SC2086  # the case's words are its arguments
      read -r rc0 t0 < <(secs "$F/$prog" $c)
      a=$(grep -v '^wprof' "$tmp/out" | tail -n1 || true)
      # shellcheck disable=SC2086
      read -r rc1 t1 < <(secs "$W" record -q --target tests/fixtures/unwind/unwind.toml \
        --json "$tmp/run.json" -- "$F/$prog" $c)
      b=$(grep -v '^wprof' "$tmp/out" | tail -n1 || true)
      printf '%-6s %-22s %-18s %10.2f %10.2f\n' "$pass" "$prog" "$c" "$t0" "$t1"
      if [ "$rc0" != "$rc1" ] || [ "$a" != "$b" ]; then
        mismatches=$((mismatches + 1))
        echo "MISMATCH: status $rc0 / $rc1, [$a] / [$b]: $(python3 -c "import json,sys;c=json.load(open(sys.argv[1]))['counters'];print({k:v for k,v in c.items() if 'unwind' in k})" "$tmp/run.json" 2>&1)"
      fi
    done
  done
done
echo "mismatches: $mismatches"
