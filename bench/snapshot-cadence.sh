#!/usr/bin/env bash
# How often a raft-store member builds a snapshot as its state grows: three
# members (bench/store-cluster.sh) with --snapshot-every EVERY take CLAIMS
# claims from 64 callers; the leader's status is read every 0.5 s and each
# change of its snapshot index counted as a snapshot built.
# Usage: ONCE=<binary> bench/snapshot-cadence.sh [CLAIMS] [EVERY]
#        (default 300000 claims, --snapshot-every 100)
set -euo pipefail
cd "$(dirname "$0")/.."
ONCE="${ONCE:-${CARGO_TARGET_DIR:-target}/release/once}"
CLAIMS="${1:-300000}"
EVERY="${2:-100}"
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$DIR"; }
trap cleanup EXIT
source bench/store-cluster.sh
store_cluster_start --snapshot-every "$EVERY"
"$ONCE" store bench --endpoints "$STORE_ENDPOINTS" --concurrency 64 --requests "$CLAIMS" > "$DIR/bench.json" &
BENCH=$!
: > "$DIR/snapshots"
while kill -0 "$BENCH" 2>/dev/null; do
  "$ONCE" store status --json --endpoints "$STORE_ENDPOINTS" |
    python3 -c 'import sys, json
for l in sys.stdin:
    s = json.loads(l)
    if s.get("state") == "Leader": print(s["snapshot_index"], s["last_log_index"])' >> "$DIR/snapshots" || true
  sleep 0.5
done
wait "$BENCH"
python3 - "$DIR/snapshots" "$DIR/bench.json" "$EVERY" "$ONCE" <<'PY'
import json, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
indexes = [r[0] for r in rows]
changes = sum(1 for a, b in zip(indexes, indexes[1:]) if a != b)
bench = json.load(open(sys.argv[2]))
print(json.dumps({"binary": sys.argv[4], "snapshot_every": int(sys.argv[3]),
    "claims": bench["claimed"], "claims_per_second": round(bench["claims_per_second"]),
    "p99_ms": round(bench["p99_ms"], 1), "log_entries": rows[-1][1] if rows else None,
    "snapshots_seen_on_the_leader": changes}))
PY
du -sh "$DIR"/m1/state.snapshots "$DIR"/m1/log.redb "$DIR"/m1/state.redb 2>/dev/null | tr '\n' ' '; echo
