#!/usr/bin/env bash
# What `group_by` (a phase's calls grouped by a string argument, literals folded in BPF) adds
# per call, against the same phase ungrouped and against bpftrace keying a map by the same
# string (`str(arg0)`), in one run with the rounds interleaved.
#
# Target: benches/fixtures/statements.c, run_statement(const char *sql) with four statements
# of 55-100 bytes whose literals change every ninth of the run; its own timer gives the median
# per-call time of nine slices. Entry `push %rbp` (-fcf-protection=none -fno-omit-frame-pointer
# -fno-optimize-sibling-calls: emulated, not single-stepped); returns by uretprobe in every
# tool (a C function).
#
#   plain      untraced
#   wprof      wprof record, the phase without group_by
#   grouped    wprof record, the phase with group_by = { arg = 0 } (4 nodes: literals folded)
#   bpftrace   uprobe: @s[tid] = nsecs, @q[tid] = str(arg0); uretprobe: @lat[@q[tid]] =
#              avg(...) (no folding: a key per distinct text, 36 here)
#
# Prints per round the fixture's per-call ns for each, then the medians: added ns per call
# (tool - plain) and the ratios grouped/wprof and grouped/bpftrace.
# Run as root: benches/group_by.sh [CALLS] [ROUNDS]
set -euo pipefail
# Run as root, even through sudo: wprof record would run the traced commands as SUDO_UID
# (docs/security.md), and they live in root-only temporary directories.
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
N=${1:-200000}
ROUNDS=${2:-5}
# shellcheck source=benches/setup.sh
. benches/setup.sh
command -v bpftrace >/dev/null || { echo "group_by: needs bpftrace (.ci/install.sh installs it)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gcc -O2 -fcf-protection=none -fno-omit-frame-pointer -fno-optimize-sibling-calls -o "$out/statements" benches/fixtures/statements.c
bin=$out/statements
profile() { # profile FILE EXTRA_LINE
  printf 'name = "group-by-bench"\nobject = "exe"\n[[phase]]\nname = "run_statement"\nsymbol = "run_statement"\n%s\n' "$2" >"$1"
}
profile "$out/plain.toml" ""
profile "$out/grouped.toml" 'group_by = { arg = 0 }'
cat >"$out/key.bt" <<BT
uprobe:${bin}:run_statement { @s[tid] = nsecs; @q[tid] = str(arg0); }
uretprobe:${bin}:run_statement /@s[tid]/ { @lat[@q[tid]] = avg(nsecs - @s[tid]); delete(@s[tid]); delete(@q[tid]); }
BT
per_call() { sed -n 's/^per_call_ns=\([0-9]*\).*/\1/p' "$1"; }
run_tool() { # run_tool NAME -> prints the fixture's per-call ns
  local f=$out/$1.out
  case $1 in
    plain) "$bin" "$N" >"$f" ;;
    wprof) "$W" record -q --target "$out/plain.toml" --json "$out/w.json" -- "$bin" "$N" >"$f" 2>"$out/w.err" ;;
    grouped)
      "$W" record -q --target "$out/grouped.toml" --json "$out/g.json" -- "$bin" "$N" >"$f" 2>"$out/g.err"
      # The four statements, one node each, every call counted.
      python3 - "$out/g.json" "$N" <<'PY' >&2
import json, sys
run = json.load(open(sys.argv[1]))
nodes = run["tree"]["roots"]
calls = sum(n["count"] for n in nodes)
keys = sorted(n.get("key", "") for n in nodes)
want = int(sys.argv[2]) // 9 * 9
assert len(nodes) == 4 and calls == want, (len(nodes), calls, want, keys)
PY
      ;;
    bpftrace) bpftrace -q -c "$bin $N" "$out/key.bt" >"$f" 2>&1 ;;
  esac
  per_call "$f"
}
TOOLS=(plain wprof grouped bpftrace)
declare -A ALL=()
printf '%-6s' round; printf ' %9s' "${TOOLS[@]}"; echo "   (fixture ns per call)"
for r in $(seq "$ROUNDS"); do
  printf '%-6s' "$r"
  for t in "${TOOLS[@]}"; do
    v=$(run_tool "$t")
    ALL[$t]+="$v "
    printf ' %9s' "$v"
  done
  echo
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A MED=()
for t in "${TOOLS[@]}"; do MED[$t]=$(echo "${ALL[$t]}" | median); done
add() { echo $(( MED[$1] - MED[plain] )); }
echo "median ns per call: plain ${MED[plain]} · wprof ${MED[wprof]} · grouped ${MED[grouped]} · bpftrace ${MED[bpftrace]}"
echo "added per call: wprof $(add wprof) ns · grouped $(add grouped) ns · bpftrace (str key) $(add bpftrace) ns"
awk -v w="$(add wprof)" -v g="$(add grouped)" -v b="$(add bpftrace)" \
  'BEGIN { printf "grouped/wprof %.2fx · grouped/bpftrace %.2fx (added cost per call)\n", g / w, g / b }'
