#!/usr/bin/env bash
# How attaching scales with the number of phases: 10, 100 and 200 phases of one object, with
# uprobe_multi links (wprof's default on 6.6+) and with one perf link per probe point
# (WPROF_PER_POINT_LINKS=1, the mechanism of kernels before 6.6), in the same run.
#
# Fixture: a generated C program with 200 distinct functions f000..f199 (noinline, noclone,
# no_icf; each a few multiply-adds with its own constants), built with
# gcc -O2 -fno-omit-frame-pointer -fcf-protection=none, so every entry is `push %rbp`; main
# calls each function once. Profiles: the first 10, 100 or 200 functions, one [[phase]] each
# (object "exe"), not nested: main calls them one after another, so each is a root phase. C
# phases get uretprobes: every phase is 2 probe points (entry + return).
#
# Measured per run: the attach time wprof reports ("N probe points live (L links) in T ms",
# the time from the first attach call until every probe is live; resolving symbols and loading
# the BPF object come before it and are not in it), and the wall time of the whole
# `wprof record` (start, resolve, load, attach, the program, detach, output), taken by this
# script. Each round runs every (size, mechanism) once, in that interleaved order; the table
# shows the median of ROUNDS.
#
# Run as root: benches/attach_scale.sh [ROUNDS]
set -euo pipefail
# Run as root, even through sudo: wprof record would run the traced commands as SUDO_UID
# (docs/security.md), and they live in root-only temporary directories.
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SIZES=(10 100 200)
# shellcheck source=benches/setup.sh
. benches/setup.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# --- the fixture ---------------------------------------------------------------------------
src=$out/many.c
{
  echo '#include <stdio.h>'
  echo '#define PHASE __attribute__((noinline, noclone, no_icf, used))'
  for i in $(seq 0 199); do
    printf 'PHASE int f%03d(int x) { volatile int y = x; for (int k = 0; k < %d; k++) y = y * %d + %d; return y; }\n' \
      "$i" $((i % 7 + 3)) $((2 * i + 3)) "$i"
  done
  echo 'int main(void) {'
  echo '  int s = 1;'
  for i in $(seq 0 199); do printf '  s += f%03d(s);\n' "$i"; done
  printf '  printf("many: calls=200 sum=%%d\\n", s);\n'
  echo '  return 0;'
  echo '}'
} >"$src"
bin=$(readlink -f "$FX")/attach-scale-many
gcc -O2 -fno-omit-frame-pointer -fcf-protection=none -Wall -o "$bin" "$src"
# Every function is distinct (no folded aliases) and starts with push %rbp.
nfun=$(nm "$bin" | awk '$2 == "T" && $3 ~ /^f[0-9][0-9][0-9]$/ { print $1 }' | sort -u | wc -l)
[ "$nfun" -eq 200 ] || { echo "attach_scale: expected 200 distinct functions, found $nfun" >&2; exit 1; }

for n in "${SIZES[@]}"; do
  {
    echo "name = \"scale$n\""
    echo "description = \"attach_scale.sh: $n flat phases\""
    echo 'object = "exe"'
    for i in $(seq 0 $((n - 1))); do
      printf '\n[[phase]]\nname = "f%03d"\nsymbol = "f%03d"\n' "$i" "$i"
    done
  } >"$out/scale$n.toml"
done

# --- one run: prints "points links attach_ms wall_ms traced_ms" ------------------------------
# traced_ms = the JSON's provenance.duration_s (from the program's start to wprof seeing its
# exit); wall - attach - traced is the rest: start-up, resolve, BPF load, the probe-cost
# calibration (when this wprof calibrates), detach, outputs.
one() { # one SIZE MULTI|PERPOINT
  local n=$1 mode=$2 t0 t1 line
  local -a env=()
  [ "$mode" = PERPOINT ] && env=(WPROF_PER_POINT_LINKS=1)
  t0=$(date +%s%N)
  env "${env[@]}" "$W" record --target "$out/scale$n.toml" --json "$out/run.json" -- "$bin" \
    >"$out/stdout" 2>"$out/stderr" || { cat "$out/stderr" >&2; exit 1; }
  t1=$(date +%s%N)
  grep -q "many: calls=200" "$out/stdout" || { echo "attach_scale: the fixture did not run" >&2; exit 1; }
  line=$(grep "probe points live" "$out/stderr") ||
    { echo "attach_scale: no 'probe points live' line from wprof" >&2; cat "$out/stderr" >&2; exit 1; }
  # "wprof: 400 probe points live (2 links) in 5.5 ms; starting ..."
  sed -n 's/^wprof: \([0-9]*\) probe points live (\([0-9]*\) links[^)]*) in \([0-9.]*\) ms;.*/\1 \2 \3/p' <<<"$line" |
    tr '\n' ' '
  echo -n "$(((t1 - t0) / 1000000)) "
  python3 -c 'import json,sys;print(round(json.load(open(sys.argv[1]))["provenance"]["duration_s"]*1e3))' "$out/run.json"
}

res=$out/results
: >"$res"
printf '%-6s %-9s %6s %7s %6s %10s %9s %10s\n' round mechanism phases points links attach_ms wall_ms traced_ms
for r in $(seq "$ROUNDS"); do
  for n in "${SIZES[@]}"; do
    for mode in MULTI PERPOINT; do
      read -r pts links att wall traced <<<"$(one "$n" "$mode")"
      printf '%-6s %-9s %6s %7s %6s %10s %9s %10s\n' "$r" "$mode" "$n" "$pts" "$links" "$att" "$wall" "$traced"
      echo "$n $mode $pts $links $att $wall $traced" >>"$res"
    done
  done
done

python3 - "$res" "$ROUNDS" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(n, mode, col):
    return st.median(float(r[col]) for r in rows if r[0] == n and r[1] == mode)
def rest(n, mode):  # wall - attach - traced, per run, then the median
    return st.median(float(r[5]) - float(r[4]) - float(r[6]) for r in rows if r[0] == n and r[1] == mode)
def first(n, mode, col):
    return next(r[col] for r in rows if r[0] == n and r[1] == mode)
print()
print(f"median of {sys.argv[2]} rounds (ms); multi = uprobe_multi links, per-point = one perf link per probe point")
print(f"{'phases':>6} {'points':>6} | {'multi links':>11} {'attach':>7} {'wall':>7} {'rest':>7} | "
      f"{'per-point links':>15} {'attach':>7} {'wall':>7} {'rest':>7} | {'attach x':>8} {'wall x':>7}")
for n in sorted({r[0] for r in rows}, key=int):
    ma, mw = med(n, "MULTI", 4), med(n, "MULTI", 5)
    pa, pw = med(n, "PERPOINT", 4), med(n, "PERPOINT", 5)
    print(f"{n:>6} {first(n, 'MULTI', 2):>6} | {first(n, 'MULTI', 3):>11} {ma:7.1f} {mw:7.0f} {rest(n, 'MULTI'):7.0f} | "
          f"{first(n, 'PERPOINT', 3):>15} {pa:7.1f} {pw:7.0f} {rest(n, 'PERPOINT'):7.0f} | {pa / ma:8.1f} {pw / mw:7.1f}")
print("attach = wprof's own 'probe points live ... in T ms'; wall = the whole `wprof record` run; "
      "rest = wall - attach - traced time\n(start-up, resolve, BPF load, calibration, detach, outputs); x = per-point / multi")
PY
