#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (idempotent), builds wprof and the bundled C fixture, traces
# the fixture from its first instruction, prints the phase tree and writes a flamegraph.
set -euo pipefail
cd "$(dirname "$0")/.."
./.ci/install.sh
export PATH=${CARGO_HOME:-$HOME/.cargo}/bin:$PATH
cargo build --release --quiet
out=${WPROF_DEMO_OUT:-target/demo}
mkdir -p "$out"
bash tests/fixtures/build.sh "$out/fixtures"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO target/release/wprof record --target fixture \
  --json "$out/run.json" --folded "$out/phases.folded" --flamegraph "$out/phases.svg" \
  -- "$out/fixtures/writepath" --iterations 2000
echo
echo "wrote $out/run.json, $out/phases.folded and the flamegraph $out/phases.svg"
