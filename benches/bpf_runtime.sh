#!/usr/bin/env bash
# What wprof's BPF programs cost per run, from the kernel's own BPF statistics
# (kernel.bpf_stats_enabled: run_time_ns / run_cnt per program), on the C fixture with every
# phase's spin at 0 (7 nested phase calls a write, entry + uretprobe). Unlike the end-to-end
# figures of benches/vs_bpftrace.sh, this is the programs' own time, without the trap, and does
# not move with the host's load. Prints ns per run of each wprof program that ran, per event
# and in the kernel mode (--aggregate kernel), over a 3 s window in the middle of the run.
#
# Run as root: benches/bpf_runtime.sh [ITERATIONS] [THREADS]
# WPROF_ARGS adds to wprof's arguments (e.g. --off-cpu, --keep-preemptions: what
# wprof_sched_switch costs each way); MODES picks the aggregation modes (default: event kernel).
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
N=${1:-1500000}
T=${2:-1}
# shellcheck source=benches/setup.sh
. benches/setup.sh
zero=(--write-us 0 --encode-us 0 --persist-us 0 --compress-us 0 --flush-us 0 --wal-us 0 --sync-us 0)
was=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
trap 'sysctl -qw kernel.bpf_stats_enabled="$was"' EXIT
window() {
  python3 - <<'PY'
import json, subprocess, time
def snap():
    progs = json.loads(subprocess.run(["bpftool", "prog", "show", "--json"],
                                      capture_output=True, text=True).stdout)
    return {p["id"]: (p.get("name", ""), p.get("run_time_ns", 0), p.get("run_cnt", 0)) for p in progs}
a = snap(); time.sleep(3); b = snap()
for k, (n, t, c) in sorted(b.items()):
    if k in a and c > a[k][2] and n.startswith("wprof"):
        print(f"  {n:20s} {c - a[k][2]:9d} runs {(t - a[k][1]) / (c - a[k][2]):6.0f} ns/run")
PY
}
for mode in ${MODES:-event kernel}; do
  echo "== --aggregate $mode"
  # shellcheck disable=SC2086  # WPROF_ARGS are words
  "$W" record -q --aggregate "$mode" ${WPROF_ARGS:-} --target fixture \
    --json /tmp/wprof-bpf-runtime.json -- "$prog" --iterations "$N" --threads "$T" "${zero[@]}" >/dev/null &
  pid=$!
  sleep 3
  window
  wait "$pid"
done
