#!/usr/bin/env bash
# Sampled phases against probed ones, on the C fixture (commanded phase times, a ~281 µs write).
#
# One run with every phase probed (--cpu-sample at the same rate, for the same perturbation),
# then runs with only the root probed and every other phase `measure = "sample"`, at several
# sampling rates. Prints each phase's share of the root's time: commanded (what the fixture was
# told to spin), probed, and sampled at each rate.
#
# Run as root: benches/sampled.sh [ITERATIONS] [RATES...]
set -euo pipefail
unset SUDO_UID SUDO_GID
cd "$(dirname "$0")/.."
N=${1:-8000}
shift || true
RATES=("${@:-997 1999 4999}")
# shellcheck source=benches/setup.sh
. benches/setup.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The built-in fixture profile with every phase but the root sampled (and the two optional
# phases this workload never calls left out).
python3 - attach-profiles/fixture.toml "$tmp/sampled.toml" <<'PY'
import sys
blocks = open(sys.argv[1]).read().split("[[phase]]")
out = [blocks[0]]
for b in blocks[1:]:
    if 'symbol = "recurse_phase"' in b or 'symbol = "risky_step"' in b:
        continue
    if 'symbol = "write_record"' not in b:
        b = b.replace("\nrole", '\nmeasure = "sample"\nrole', 1)
    out.append(b)
open(sys.argv[2], "w").write("[[phase]]".join(out))
PY
shares() { # shares RUN.json -> "path share" lines, share of the root's corrected total
  python3 - "$1" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
root = next(r for r in run["tree"]["roots"] if r["name"] == "write_record")
base = root["corrected"]["total_ns"]
def walk(n, path):
    for c in n["children"]:
        p = f"{path}/{c['name']}"
        t = c.get("corrected", c)["total_ns"]
        print(p, f"{t / base * 100:.1f}")
        walk(c, p)
walk(root, "write_record")
PY
}
# Commanded self times (µs): write 3, encode 5, persist 1, compress 20, flush 100, wal 2, sync 150.
commanded() {
  cat <<'EOF'
write_record/encode_record 1.8
write_record/persist_block 43.1
write_record/persist_block/compress_block 7.1
write_record/persist_block/flush_block 35.6
write_record/wal_append 54.1
write_record/wal_append/wal_sync 53.4
EOF
}
hz=${RATES[0]}
"$W" record -q --target fixture --cpu-sample "$hz" --json "$tmp/probed.json" -- "$prog" --iterations "$N" >/dev/null
shares "$tmp/probed.json" | sort >"$tmp/probed.txt"
commanded | sort >"$tmp/commanded.txt"
join "$tmp/commanded.txt" "$tmp/probed.txt" >"$tmp/table.txt"
header="phase commanded% probed%"
for hz in "${RATES[@]}"; do
  "$W" record -q --target "$tmp/sampled.toml" --cpu-sample "$hz" --json "$tmp/s.json" -- \
    "$prog" --iterations "$N" >/dev/null
  shares "$tmp/s.json" | sort >"$tmp/s.txt"
  join "$tmp/table.txt" "$tmp/s.txt" >"$tmp/t2.txt"
  mv "$tmp/t2.txt" "$tmp/table.txt"
  header="$header sampled@${hz}Hz%"
done
{ echo "$header"; cat "$tmp/table.txt"; } | column -t
