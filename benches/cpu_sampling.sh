#!/usr/bin/env bash
# What CPU sampling at 99 Hz adds to a traced program's run time, wprof next to bpftrace's
# `profile:hz:99` with user stacks, on the same workload in the same run.
#
# Workload: the C fixture with its default phase times (a ~281 µs write of 7 spinning phases),
# ITERATIONS writes; the fixture times itself (elapsed_ns), so tool start-up is not counted.
# Each round runs, in order: untraced; wprof with the fixture profile (phases only); the same
# plus --cpu-sample 99; the same plus --off-cpu; bpftrace sampling user stacks at 99 Hz. The
# figures are medians over ROUNDS. The sampling cost is wprof+sampling against wprof alone.
#
# Run as root: benches/cpu_sampling.sh [ITERATIONS] [ROUNDS] [HZ]
set -euo pipefail
# Run as root, even through sudo: wprof record would run the traced commands as SUDO_UID
# (docs/security.md), and they live in root-only temporary directories.
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
N=${1:-3000}
ROUNDS=${2:-5}
HZ=${3:-99}
# shellcheck source=benches/setup.sh
. benches/setup.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

elapsed_of() { sed -n 's/.*elapsed_ns=\([0-9]*\).*/\1/p'; }
plain()    { "$prog" --iterations "$N" | elapsed_of; }
phases()   { "$W" record -q --target fixture -- "$prog" --iterations "$N" | elapsed_of; }
sampled()  { "$W" record -q --target fixture --cpu-sample "$HZ" --json "$out/s.json" -- "$prog" --iterations "$N" | elapsed_of; }
offcpu()   { "$W" record -q --target fixture --cpu-sample "$HZ" --off-cpu -- "$prog" --iterations "$N" | elapsed_of; }
bt_sample(){ bpftrace -e "profile:hz:$HZ /pid == cpid/ { @[ustack] = count(); }" -c "$prog --iterations $N" 2>/dev/null | elapsed_of; }

declare -a P F S O B
printf '%-6s %12s %12s %12s %12s %12s %9s\n' round plain_ms phases_ms +sample_ms +offcpu_ms bt_sample_ms samples
for r in $(seq "$ROUNDS"); do
  P+=("$(plain)"); F+=("$(phases)"); S+=("$(sampled)"); O+=("$(offcpu)"); B+=("$(bt_sample)")
  n=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["cpu_profile"]["records"])' "$out/s.json")
  i=$((r - 1))
  python3 - "$r" "${P[$i]}" "${F[$i]}" "${S[$i]}" "${O[$i]}" "${B[$i]}" "$n" <<'PY'
import sys
r, *v, n = sys.argv[1:]
print(f"{r:<6}" + "".join(f" {float(x)/1e6:12.1f}" for x in v) + f" {n:>9}")
PY
done
python3 - "$HZ" "${P[*]}" "${F[*]}" "${S[*]}" "${O[*]}" "${B[*]}" <<'PY'
import statistics as st, sys
hz = sys.argv[1]
p, f, s, o, b = (st.median(map(float, a.split())) for a in sys.argv[2:])
print(f"median   {p/1e6:12.1f} {f/1e6:12.1f} {s/1e6:12.1f} {o/1e6:12.1f} {b/1e6:12.1f}")
print(f"wprof --cpu-sample {hz} adds {100*(s/f-1):+.2f}% to the phases-only run "
      f"(+{100*(o/f-1):.2f}% with --off-cpu too); "
      f"bpftrace profile:hz:{hz} adds {100*(b/p-1):+.2f}% to the untraced run")
print(f"ratio (wprof sampling cost / bpftrace sampling cost): "
      f"{(s-f)/(b-p):.2f}" if b > p else "ratio: bpftrace added nothing measurable")
PY
