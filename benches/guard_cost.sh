#!/usr/bin/env bash
# What the safe return mode costs against a plain uretprobe, on this host: guarded uretprobes
# (wprof's default for C++ and Rust where the unwind guard loads) and plain uretprobes
# (`--return uretprobe`, unsafe for C++), interleaved in each round with untraced runs:
#   - the unwind fixture's eight nested C++ frames, no exception (`torture plain N`, g++ and
#     clang++ builds): added ns per frame (entry + return) = (traced - untraced) / 8, by the
#     fixture's own clock;
#   - RocksDB's db_bench fillrandom under the `rocksdb` profile: added µs per write =
#     1/ops traced - 1/ops untraced (untraced = the mean of the runs before and after).
# Prints each round's figures and the guarded / uretprobe ratio of each.
#
# Run as root: benches/guard_cost.sh [ROUNDS] [FRAMES_CALLS] [DB_KEYS]   (defaults: 5 200000 200000)
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
N=${2:-200000}
KEYS=${3:-200000}
# shellcheck source=benches/setup.sh
. benches/setup.sh
F=target/tmp/fixtures
[ -x "$F/unwind-torture-clang" ] || bash tests/fixtures/build.sh "$F" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ARGS=(--benchmarks=fillrandom --num="$KEYS" --statistics=1 --write_buffer_size=4194304)
ns() { sed -n 's/.*ns_per_call=\([0-9]*\).*/\1/p' | tail -n1; }
torture() { # PROGRAM [MODE]: ns per call of the eight frames
  if [ -z "${2:-}" ]; then
    "$F/$1" plain "$N" | ns
  else
    "$W" record -q --return "$2" --target tests/fixtures/unwind/unwind.toml -- "$F/$1" plain "$N" 2>/dev/null | ns
  fi
}
dbops() { # [MODE]: db_bench ops/s
  rm -rf "$tmp/db"
  if [ -z "${1:-}" ]; then
    /usr/bin/db_bench "${ARGS[@]}" --db="$tmp/db" 2>/dev/null
  else
    "$W" record -q --return "$1" --target rocksdb -- /usr/bin/db_bench "${ARGS[@]}" --db="$tmp/db" 2>/dev/null
  fi | sed -n 's/^fillrandom .* \([0-9]*\) ops\/sec.*/\1/p' | head -n1
}
printf '%-6s %-22s %10s %12s %12s %8s\n' round workload untraced guarded uretprobe ratio
for r in $(seq "$ROUNDS"); do
  for prog in unwind-torture unwind-torture-clang; do
    u0=$(torture "$prog"); g=$(torture "$prog" guarded); u1=$(torture "$prog"); p=$(torture "$prog" uretprobe)
    u=$(((u0 + u1) / 2))
    printf '%-6s %-22s %8s ns %9s ns/f %9s ns/f %8.2f\n' "$r" "$prog" "$u" $(((g - u) / 8)) $(((p - u) / 8)) \
      "$(echo "($g - $u) / ($p - $u)" | bc -l)"
  done
  b0=$(dbops); g=$(dbops guarded); b1=$(dbops); p=$(dbops uretprobe)
  b=$(echo "($b0 + $b1) / 2" | bc -l)
  ag=$(echo "1000000 / $g - 1000000 / $b" | bc -l)
  ap=$(echo "1000000 / $p - 1000000 / $b" | bc -l)
  printf '%-6s %-22s %6.0f op/s %9.2f µs/w %9.2f µs/w %8.2f\n' "$r" "db_bench fillrandom" "$b" "$ag" "$ap" \
    "$(echo "$ag / $ap" | bc -l)"
done
echo "ratio = what the guarded mode adds / what a plain uretprobe adds (same round)"
