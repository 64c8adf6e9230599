#!/usr/bin/env bash
# Installs everything wprof needs to build and test on a fresh Debian 12 machine.
# Idempotent: each step checks whether its result is already there and skips if so.
# Shared by .ci/run, the README's commands and vagrant/Vagrantfile's provision step.
set -euo pipefail

TC=nightly-2026-10-29          # keep in sync with rust-toolchain.toml
BPF_LINKER_VERSION=0.13.0
APT_PACKAGES=(curl ca-certificates build-essential g++ pkg-config bpftrace bpftool linux-perf postgresql-15 python3-jsonschema libxml2-utils
              libprotobuf-dev protobuf-compiler libzstd-dev libpq-dev    # the PAX fixture
              qemu-system-x86 busybox-static                              # vagrant/kernel-matrix.sh
              clang libclang-dev postgresql-server-dev-15                 # the pgrx fixture (bindgen)
              librocksdb-dev rocksdb-tools                               # RocksDB 7.8 and db_bench, a real C++ target
              libcap2-bin)                                               # setcap: tests/privilege.rs

log() { printf '[install %s] %s\n' "$(date +%T)" "$*" >&2; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Prometheus 2.42 for tests/serve.rs (`--serve` scraped by a real Prometheus with native
# histograms). The tests start their own server on 127.0.0.1 with a temp dir; the package's
# postinst would start its own daemon on *:9090 (invoke-rc.d, or systemd where it runs), so
# a policy-rc.d that refuses every start is in place while it installs (unless the machine
# already has one), and the unit is disabled afterwards so it does not come up at boot either.
if ! dpkg-query -W -f='${Status}' prometheus 2>/dev/null | grep -q "install ok installed"; then
  log "apt: prometheus (service kept stopped and disabled)"
  own_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  [ ${#missing[@]} -gt 0 ] || $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  [ -z "$own_policy" ] || $SUDO rm -f /usr/sbin/policy-rc.d
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  else
    $SUDO update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
fi

# The Debian package starts a default cluster; the tests make their own, so stop it.
if command -v pg_lsclusters >/dev/null && pg_lsclusters -h 2>/dev/null | grep -q online; then
  $SUDO pg_ctlcluster 15 main stop || true
fi

CARGO_BIN=${CARGO_HOME:-$HOME/.cargo}/bin
export PATH=$CARGO_BIN:$PATH
if ! command -v rustup >/dev/null; then
  log "rustup"
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain none
fi
if ! rustup run "$TC" rustc --version >/dev/null 2>&1 || \
   ! [ -d "$(rustc +$TC --print sysroot)/lib/rustlib/src/rust/library" ]; then
  log "rust $TC + rust-src"
  rustup toolchain install "$TC" --profile minimal --component rust-src,rustfmt,clippy
fi

# bpf-linker links against the nightly's own libLLVM; Debian's llvm-config (LLVM 14) is the
# wrong one, so point LLVM_PREFIX at a directory holding the toolchain's library.
S=$(rustc +$TC --print sysroot)/lib
L=$(cd "$S" && ls libLLVM.so.* | head -n1)
P=$HOME/.local/bpf-llvm
mkdir -p "$P/lib"
ln -sf "$S/$L" "$P/lib/libLLVM.so"
ln -sf "$S/$L" "$P/lib/$L"
if ! "$CARGO_BIN/bpf-linker" --version 2>/dev/null | grep -q "$BPF_LINKER_VERSION"; then
  log "bpf-linker $BPF_LINKER_VERSION"
  LLVM_PREFIX=$P cargo +$TC install bpf-linker --version "$BPF_LINKER_VERSION" --locked --quiet
fi

# The pgrx fixture (tests/fixtures/pgrx_refresh): cargo-pgrx built with a *stable* toolchain,
# as real pgrx extensions are (stable mangles legacy, nightly v0), in a cache dir of its own so
# the project's pinned nightly and a user's own ~/.pgrx are left alone. Cold: ~9 minutes
# (8.8 measured here with empty caches; facts.md saw 13), then 0.
# tests/fixtures/pgrx_refresh/build.sh reads the same variables (keep in sync).
PGRX_VERSION=0.18.1            # 0.19.x needs rustc >= 1.96
PGRX_TC=1.95.0                 # the stable toolchain the fixture is built with
PGRX_CACHE=$HOME/.cache/wprof-pgrx
if ! rustup run "$PGRX_TC" rustc --version >/dev/null 2>&1; then
  log "rust $PGRX_TC (stable, for pgrx)"
  rustup toolchain install "$PGRX_TC" --profile minimal --no-self-update
fi
if ! "$PGRX_CACHE/cargo/bin/cargo-pgrx" pgrx --version 2>/dev/null | grep -qw "$PGRX_VERSION"; then
  log "cargo-pgrx $PGRX_VERSION with rust $PGRX_TC (~9-13 minutes, once)"
  (cd "$HOME" && cargo "+$PGRX_TC" install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet \
      --root "$PGRX_CACHE/cargo")
fi
PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
if ! grep -qs "pg15 = \"$PG15_CONFIG\"" "$PGRX_CACHE/pgrx-home/config.toml"; then
  log "cargo pgrx init --pg15"
  mkdir -p "$PGRX_CACHE/pgrx-home"
  (cd "$HOME" && PATH=$PGRX_CACHE/cargo/bin:$PATH PGRX_HOME=$PGRX_CACHE/pgrx-home \
      cargo "+$PGRX_TC" pgrx init --pg15 "$PG15_CONFIG" >/dev/null)
fi

# Go for the Go fixture (tests/fixtures/go-parquet): a Go 1.25+ already there, else Go's own
# toolchain module from the Go module proxy into ~/.cache/wprof-go (Debian 12's golang is 1.19,
# too old for arrow-go). scripts/test.sh builds the fixture (~3-4.5 minutes cold, cached).
GO_FIXTURE_BUILD=$(cd "$(dirname "$0")/.." && pwd)/tests/fixtures/go-parquet/build.sh
if ! "$GO_FIXTURE_BUILD" --find-go >/dev/null; then
  log "Go toolchain (golang.org/toolchain from the Go module proxy, ~70 MB)"
  "$GO_FIXTURE_BUILD" --install-go
fi

if ! mountpoint -q /sys/kernel/tracing; then
  $SUDO mount -t tracefs nodev /sys/kernel/tracing || log "could not mount tracefs (not fatal)"
fi
log "done"
