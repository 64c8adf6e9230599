#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (idempotent), builds wprof and the bundled C fixture, traces
# the fixture from its first instruction (CPU samples and off-CPU time included), prints the
# phase tree and writes the phase, CPU and off-CPU flamegraphs.
set -euo pipefail
cd "$(dirname "$0")/.."
./.ci/install.sh
export PATH=${CARGO_HOME:-$HOME/.cargo}/bin:$PATH
cargo build --release --quiet
out=${WPROF_DEMO_OUT:-target/demo}
mkdir -p "$out"
bash tests/fixtures/build.sh "$out/fixtures"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO target/release/wprof record --target fixture --cpu-sample 99 --off-cpu \
  --json "$out/run.json" --folded "$out/phases.folded" --flamegraph "$out/phases.svg" \
  --cpu-flamegraph "$out/cpu.svg" --off-cpu-flamegraph "$out/offcpu.svg" \
  -- "$out/fixtures/writepath" --iterations 2000 --sleep-phase-us 100
echo
echo "wrote $out/run.json, $out/phases.folded and the flamegraphs $out/phases.svg," \
  "$out/cpu.svg (CPU samples by phase) and $out/offcpu.svg (where threads blocked)"
