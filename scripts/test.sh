#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (idempotent) and runs every test: formatting, lints, unit
# tests and the privileged integration tests (real probes; run as root, or they are skipped —
# unless WPROF_REQUIRE_BPF=1, as CI sets, which makes a missing capability a failure).
set -euo pipefail
cd "$(dirname "$0")/.."
./.ci/install.sh
export PATH=${CARGO_HOME:-$HOME/.cargo}/bin:$PATH
# The pgrx fixture extension (cached; ~5 minutes cold, legacy and v0 manglings): built here so
# its time shows; tests/pgrx.rs runs the same script, which is then a no-op.
tests/fixtures/pgrx_refresh/build.sh target/pgrx-fixture
# The Go fixture (cached; ~3-4.5 minutes cold): built here so its time shows, not inside a test.
tests/fixtures/go-parquet/build.sh target/go-fixtures
cargo fmt --all --check
cargo clippy --release --all-targets -- -D warnings
cargo test --release -- --test-threads=2
