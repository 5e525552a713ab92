#!/usr/bin/env bash
# What PostgreSQL executes for new payments: `once node` on a fresh database,
# `once bench --mode new` for a warm-up, then pg_stat_statements reset and N
# seconds measured. Prints the statements by total execution time and by
# calls (round trips per payment: calls / payments), and each table's inserts,
# updates and HOT updates. With perf installed, also the node's sends per
# payment (`sendto` calls: every query and every ping to PostgreSQL is one,
# which pg_stat_statements does not see, besides the HTTP answer and the
# event path's publishes). And the server's WAL per payment (pg_stat_wal).
#
#   ONCE=/path/to/once bash bench/pg-statements.sh [seconds] [clients]   (defaults: 8 32)
#
# Needs pg_stat_statements loaded by the server (`shared_preload_libraries =
# 'pg_stat_statements'`, then a restart; the script says so if it is not) and
# PostgreSQL at $PG (default postgres://postgres@127.0.0.1:5432). It creates
# and drops a database of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-8}
CLIENTS=${2:-32}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
BIN=${ONCE:-}
if [ -z "$BIN" ]; then
  cargo build --release -q --bin once
  BIN=${CARGO_TARGET_DIR:-target}/release/once
fi
if ! psql "$PG/postgres" -qAtc "show shared_preload_libraries" | grep -q pg_stat_statements; then
  echo "pg_stat_statements is not loaded: ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements', then restart PostgreSQL" >&2
  exit 1
fi
psql "$PG/postgres" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
KEY=sk_bench_0000000000000001
PORT=18099
WORK=$(mktemp -d)
DB=pg_statements_$$
NODE=
cleanup() {
  [ -n "$NODE" ] && kill "$NODE" 2>/dev/null && wait "$NODE" 2>/dev/null
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
  rm -rf "$WORK"
}
trap cleanup EXIT
psql "$PG/postgres" -qc "CREATE DATABASE $DB"
$BIN keys init --file "$WORK/keys" > /dev/null
ONCE_DATA_KEYS="$WORK/keys" ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn ONCE_ADMIN_LISTEN=127.0.0.1:0 \
  ONCE_TENANT_RATE=10000000 ONCE_TENANT_BURST=10000000 ONCE_TENANT_IN_FLIGHT=100000 \
  $BIN node --listen 127.0.0.1:$PORT --max-db-connections 32 --database-url "$PG/$DB" \
  > "$WORK/node.out" 2> "$WORK/node.err" &
NODE=$!
for _ in $(seq 1 100); do
  grep -q listening "$WORK/node.out" 2>/dev/null && break
  sleep 0.1
done
load() { # seconds label
  ONCE_BENCH_API_KEY=$KEY $BIN bench --url http://127.0.0.1:$PORT --mode new --concurrency "$CLIENTS" \
    --duration "$1" --warmup 0 --label "$2" 2>/dev/null
}
load 2 warmup > /dev/null
psql "$PG/postgres" -qAtc "SELECT pg_stat_statements_reset(), pg_stat_reset_shared('wal')" > /dev/null
PERF=
if command -v perf > /dev/null; then
  perf stat -x, -e syscalls:sys_enter_sendto -p "$NODE" -o "$WORK/perf" 2> /dev/null &
  PERF=$!
fi
payments=$(load "$SECS" measured | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["requests"])')
if [ -n "$PERF" ]; then
  kill -INT "$PERF" && wait "$PERF" || true
fi
# Wait for the event path to finish these payments (nothing left to publish,
# no receipt left to send), so its statements are counted with them.
for _ in $(seq 1 300); do
  left=$(psql "$PG/$DB" -qAtc "SELECT (SELECT COUNT(*) FROM outbox WHERE published_at IS NULL)
    + (SELECT COUNT(*) FROM email_notifications WHERE status = 'PENDING')")
  [ "$left" = 0 ] && break
  sleep 0.2
done
echo "new payments: $payments ($CLIENTS clients, $SECS s)"
if [ -n "$PERF" ] && grep -q sendto "$WORK/perf" 2> /dev/null; then
  awk -F, -v n="$payments" '/sendto/ { printf "node sends (sendto) per payment: %.2f\n", $1 / n }' "$WORK/perf"
fi
# WAL of the whole server over the run and the event path's catch-up (the
# other databases are idle): full-page images are the first change of a
# page after a checkpoint, written whole.
psql "$PG/postgres" -qAtc "SELECT round(wal_records::numeric / $payments, 1), round(wal_fpi::numeric / $payments, 2),
    round(wal_bytes / $payments), checkpoints_timed + checkpoints_req FROM pg_stat_wal, pg_stat_bgwriter" |
  awk -F'|' '{ printf "WAL per payment: %s records, %s full-page images, %s bytes (checkpoints since the server started: %s)\n", $1, $2, $3, $4 }'
for order in total_exec_time calls; do
  psql "$PG/postgres" -c "SELECT calls, round((calls::numeric / $payments), 2) AS per_payment,
      round(total_exec_time::numeric, 0) AS total_ms, round((total_exec_time / calls)::numeric, 3) AS ms_per_call,
      rows, wal_bytes, left(regexp_replace(query, '\s+', ' ', 'g'), 100) AS query
    FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$DB')
    ORDER BY $order DESC LIMIT 16"
done
psql "$PG/$DB" -c "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables ORDER BY relname"
