#!/usr/bin/env bash
# POST /payments with trace export off vs on (100 % sampling, OTLP/gRPC to a
# local receiver), in one run, same node build, same PostgreSQL.
#
#   bash bench/tracing.sh [seconds-per-point]      (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
KEY=sk_bench_0000000000000001
PORT=18092
cargo build --release -q --bin once --example otlp_sink
BIN=target/release/once
WORK=$(mktemp -d)
NODE=""; SINK=""
trap 'kill $NODE $SINK 2>/dev/null || true; psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1; rm -rf "$WORK"' EXIT
DB=bench_tracing_$$
psql "$PG/postgres" -qc "CREATE DATABASE $DB"

target/release/examples/otlp_sink > "$WORK/sink.out" 2> "$WORK/sink.err" &
SINK=$!
for _ in $(seq 1 100); do grep -q listening "$WORK/sink.out" 2>/dev/null && break; sleep 0.1; done
ENDPOINT=$(sed -n 's/listening on //p' "$WORK/sink.out")

# Encryption at rest: required on PostgreSQL.
$BIN keys init --file "$WORK/data-keys" > /dev/null

run() { # label, then env assignments
  local label=$1; shift
  env "$@" ONCE_DATA_KEYS="$WORK/data-keys" ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn ONCE_ADMIN_LISTEN=127.0.0.1:0 ONCE_TENANT_RATE=10000000 ONCE_TENANT_BURST=10000000 ONCE_TENANT_IN_FLIGHT=100000 $BIN node --listen 127.0.0.1:$PORT \
    --max-db-connections 32 --database-url "$PG/$DB" > "$WORK/node.out" 2> "$WORK/node.err" &
  NODE=$!
  for _ in $(seq 1 100); do grep -q listening "$WORK/node.out" 2>/dev/null && break; sleep 0.1; done
  grep -q listening "$WORK/node.out" || { echo "node did not start" >&2; cat "$WORK/node.err" >&2; exit 1; }
  ONCE_BENCH_API_KEY=$KEY $BIN bench --url http://127.0.0.1:$PORT --mode new --concurrency 32 --duration "$SECS" --warmup 2 --label "$label" 2>/dev/null
  kill -TERM $NODE; wait $NODE 2>/dev/null || true
}

off=$(run "export off" OTEL_SDK_DISABLED=false)
on=$(run "export on (100%)" OTEL_EXPORTER_OTLP_ENDPOINT="$ENDPOINT" OTEL_EXPORTER_OTLP_PROTOCOL=grpc OTEL_TRACES_SAMPLER=always_on)
kill -INT $SINK; wait $SINK 2>/dev/null || true

python3 - "$off" "$on" "$(cat "$WORK/sink.err")" <<'PY'
import json, sys
off, on = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("| trace export | req/s | p50 ms | p99 ms |")
print("|---|---|---|---|")
for r in (off, on):
    print(f"| {r['label']} | {r['throughput']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")
print(f"\nthroughput change with export on: {100 * (on['throughput'] / off['throughput'] - 1):+.1f} %  ({sys.argv[3]})")
PY
