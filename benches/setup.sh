# shellcheck shell=bash disable=SC2034  # sets variables for the sourcing script
# Sourced by the benchmark scripts: builds wprof and the fixtures, then sets
#   W     the wprof binary
#   FX    the fixture directory
#   prog  the absolute path of the C fixture (writepath)
# The caller has already cd'ed to the repository root.
export PATH=${CARGO_HOME:-$HOME/.cargo}/bin:$PATH
cargo build --release --quiet
FX=target/bench-fixtures
bash tests/fixtures/build.sh "$FX"
W=target/release/wprof
prog=$(readlink -f "$FX/writepath")
