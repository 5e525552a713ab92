#!/usr/bin/env bash
# POST /payments throughput and latency: new payments and replays, on SQLite
# and PostgreSQL, at 1 and 32 clients, with the node's peak RSS; and, in the
# same run, the bare `INSERT … ON CONFLICT DO NOTHING` claim through pgbench
# on the same PostgreSQL, so the cost of the whole contract reads as a ratio.
#
#   bash bench/payments.sh [seconds-per-point]      (default 10)
#
# Needs PostgreSQL at $PG (default postgres://postgres@127.0.0.1:5432) and
# pgbench. Prints a Markdown table; raw JSON lines go to bench/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
OUT=bench/out; mkdir -p "$OUT"
KEY=sk_bench_0000000000000001
PORT=18091
cargo build --release -q
BIN=target/release/once
WORK=$(mktemp -d)
trap 'kill $NODE 2>/dev/null || true; rm -rf "$WORK"' EXIT

start_node() { # database-url
  ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn ONCE_ADMIN_LISTEN=127.0.0.1:0 ONCE_TENANT_RATE=10000000 ONCE_TENANT_BURST=10000000 ONCE_TENANT_IN_FLIGHT=100000 $BIN node --listen 127.0.0.1:$PORT \
    --max-db-connections 32 --database-url "$1" > "$WORK/node.out" 2> "$WORK/node.err" &
  NODE=$!
  for _ in $(seq 1 100); do grep -q listening "$WORK/node.out" 2>/dev/null && return; sleep 0.1; done
  echo "node did not start" >&2; cat "$WORK/node.err" >&2; exit 1
}
stop_node() { kill "$NODE"; wait "$NODE" 2>/dev/null || true; }
peak_rss_mib() { awk '/VmHWM/ {printf "%.0f", $2/1024}' /proc/"$NODE"/status; }

rows=()
run_backend() { # label database-url
  start_node "$2"
  for mode in new replay; do
    for c in 1 32; do
      json=$($BIN bench --url http://127.0.0.1:$PORT --api-key $KEY --mode $mode --concurrency $c \
        --duration "$SECS" --warmup 2 --label "$1-$mode-$c" 2>/dev/null)
      echo "$json" >> "$OUT/payments.jsonl"
      rows+=("$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("| %s | %s | %d | %.0f | %.2f | %.2f | %s |" % (sys.argv[2], r["mode"], r["concurrency"], r["throughput"], r["p50_ms"], r["p99_ms"], sys.argv[3]))' "$json" "$1" "$(peak_rss_mib)")")
    done
  done
  stop_node
}

: > "$OUT/payments.jsonl"
run_backend sqlite "$WORK/bench.db"
DB=bench_$$
psql "$PG/postgres" -qc "CREATE DATABASE $DB"
run_backend postgres "$PG/$DB"

# The bare claim, same server, same table shape, pgbench's own clients.
cat > "$WORK/claim.sql" <<'SQL'
\set n random(1, 2000000000)
INSERT INTO idempotency_requests (tenant_id, principal_id, operation, idempotency_key, fingerprint, fingerprint_version, status, step, fence, locked_until, region, created_at, updated_at) VALUES ('bench', 'pgbench', 'payments.create', :client_id || '-' || :n, 'f', 1, 'IN_PROGRESS', 'RECEIVED', 1, 0, 'r', 0, 0) ON CONFLICT DO NOTHING;
SQL
for c in 1 32; do
  tps=$(pgbench -n -M prepared -c $c -j $(( c < 2 ? 1 : 2 )) -T "$SECS" -f "$WORK/claim.sql" "$PG/$DB" 2>/dev/null | awk '/^tps/ {printf "%.0f", $3}')
  lat=$(pgbench -n -M prepared -c $c -j $(( c < 2 ? 1 : 2 )) -T 2 -f "$WORK/claim.sql" "$PG/$DB" 2>/dev/null | awk '/latency average/ {print $4}')
  rows+=("| postgres: bare INSERT … ON CONFLICT DO NOTHING (pgbench) | claim | $c | $tps | avg $lat | – | – |")
done
psql "$PG/postgres" -qc "DROP DATABASE $DB WITH (FORCE)"

echo "| backend | mode | clients | req/s | p50 ms | p99 ms | node peak RSS MiB |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
