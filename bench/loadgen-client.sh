#!/usr/bin/env bash
# Does `once bench` measure the same server after it started sending through
# once-client? One node (this checkout's release build, SQLite) and two load
# generators against it, interleaved: BEFORE's `once bench` (a build from
# before the switch) and this checkout's, new payments and replays at 32
# clients, `rounds` times each.
#
#   BEFORE=/path/to/old/once bash bench/loadgen-client.sh [seconds] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
ROUNDS=${2:-2}
: "${BEFORE:?BEFORE must name an older once binary}"
KEY=sk_bench_0000000000000001
PORT=18093
cargo build --release -q
AFTER=target/release/once
WORK=$(mktemp -d)
trap 'kill $NODE 2>/dev/null || true; rm -rf "$WORK"' EXIT
ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn ONCE_ADMIN_LISTEN=127.0.0.1:0 ONCE_TENANT_RATE=10000000 \
  ONCE_TENANT_BURST=10000000 ONCE_TENANT_IN_FLIGHT=100000 $AFTER node --listen 127.0.0.1:$PORT \
  --max-db-connections 32 --database-url "$WORK/bench.db" > "$WORK/node.out" 2> "$WORK/node.err" &
NODE=$!
for _ in $(seq 1 100); do grep -q listening "$WORK/node.out" 2>/dev/null && break; sleep 0.1; done
echo "| round | load generator | mode | req/s | p50 ms | p99 ms |"
echo "|---|---|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
  for side in before after; do
    bin=$BEFORE; [ "$side" = after ] && bin=$AFTER
    for mode in new replay; do
      json=$(ONCE_BENCH_API_KEY=$KEY $bin bench --url http://127.0.0.1:$PORT --mode $mode --concurrency 32 \
        --duration "$SECS" --warmup 2 --label "$side-$mode" 2>/dev/null)
      python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("| %s | %s | %s | %.0f | %.2f | %.2f |" % (sys.argv[2], sys.argv[3], r["mode"], r["throughput"], r["p50_ms"], r["p99_ms"]))' "$json" "$round" "$side"
    done
  done
done
