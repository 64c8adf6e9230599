#!/usr/bin/env bash
# What CPU sampling costs the code it samples, against what wprof's calibration says (the
# figure `--max-overhead` counts). benches/fixtures/fixedwork.c runs a fixed amount of
# arithmetic in one function, `work`, probed as the only phase (one call: the probes cost
# nothing measurable); each round runs it untraced, traced without sampling, and traced with
# `--cpu-sample` at 199, 999 and 1999 Hz and at the rate `--max-overhead 5` picks, and prints
# each sampled run's slowdown against the traced run without sampling of the same round (the
# sampler's own cost) next to what the calibration predicts (rate × measured cost of one
# sample). Runs of 1.6 s move by ~1% on these VMs: read the medians over rounds.
#
# Run as root: benches/sampler_cost.sh [ROUNDS]     (default 3)
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
. benches/setup.sh
ROUNDS=${1:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -fno-omit-frame-pointer -o "$tmp/fixedwork" benches/fixtures/fixedwork.c
cat >"$tmp/work.toml" <<'TOML'
name = "fixedwork"
description = "benches/fixtures/fixedwork.c: one function of fixed work"
object = "exe"
[[phase]]
name = "work"
symbol = "work"
TOML
secs() { sed -n 's/^fixedwork: seconds=\([0-9.]*\).*/\1/p'; }
traced() { "$W" record --target "$tmp/work.toml" "$@" -- "$tmp/fixedwork" 2>"$tmp/err" | secs; }
# The calibrated cost of one sample, µs, and the rate --max-overhead 5 picks.
traced --max-overhead 5 >/dev/null
line=$(grep -o 'CPU sampling at [0-9]* Hz.*a sample costs [0-9.]* µs' "$tmp/err" || true)
hz=$(sed -n 's/.*CPU sampling at \([0-9]*\) Hz.*/\1/p' <<<"$line")
cost=$(sed -n 's/.*a sample costs \([0-9.]*\) µs.*/\1/p' <<<"$line")
echo "calibrated: one sample costs ${cost:-?} µs; --max-overhead 5 samples at ${hz:-?} Hz"
printf '%-6s %-22s %9s %10s %10s\n' round run seconds sampler predicted
for r in $(seq "$ROUNDS"); do
  base=$("$tmp/fixedwork" | secs)
  printf '%-6s %-22s %9s %10s %10s\n' "$r" untraced "$base" - -
  plain=$(traced)
  printf '%-6s %-22s %9s %10s %10s\n' "$r" "probes, no sampling" "$plain" - -
  for rate in 199 999 1999 "${hz:-999}"; do
    t=$(traced --cpu-sample "$rate")
    printf '%-6s %-22s %9s %9.2f%% %9.2f%%\n' "$r" "--cpu-sample $rate" "$t" \
      "$(echo "($t / $plain - 1) * 100" | bc -l)" "$(echo "$rate * ${cost:-0} / 10000" | bc -l)"
  done
done
