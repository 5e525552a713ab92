#!/usr/bin/env bash
# Queries the node sends SQLite per new payment: every statement sqlx runs is
# one hand-off to its SQLite connection's thread and back. `once node` on a
# fresh file with sqlx's statement log on, `once bench --mode new` for N
# seconds, log lines counted.
#
#   ONCE=/path/to/once bash bench/queries-per-payment.sh [seconds] [clients]   (defaults: 5 32)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CLIENTS=${2:-32}
BIN=${ONCE:-}
if [ -z "$BIN" ]; then
  cargo build --release -q --bin once
  BIN=${CARGO_TARGET_DIR:-target}/release/once
fi
KEY=sk_bench_0000000000000001
PORT=18096
WORK=$(mktemp -d)
NODE=
cleanup() {
  [ -n "$NODE" ] && kill "$NODE" 2>/dev/null && wait "$NODE" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
$BIN keys init --file "$WORK/keys" > /dev/null
ONCE_DATA_KEYS="$WORK/keys" ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn,sqlx::query=debug \
  ONCE_ADMIN_LISTEN=127.0.0.1:0 ONCE_TENANT_RATE=10000000 ONCE_TENANT_BURST=10000000 ONCE_TENANT_IN_FLIGHT=100000 \
  $BIN node --listen 127.0.0.1:$PORT --max-db-connections 32 --database-url "$WORK/bench.db" \
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
count() { cat "$WORK/node.out" "$WORK/node.err" | grep -c "sqlx::query"; }
# Waits until the event path has finished what the payments so far started:
# nothing left to publish, no receipt left to send.
settle() {
  python3 - "$WORK/bench.db" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=5)
for _ in range(300):
    left = db.execute("SELECT (SELECT COUNT(*) FROM outbox WHERE published_at IS NULL)"
                      " + (SELECT COUNT(*) FROM email_notifications WHERE status = 'PENDING')").fetchone()[0]
    if left == 0:
        break
    time.sleep(0.2)
PY
}
load 2 warmup > /dev/null
settle
before=$(count)
payments=$(load "$SECS" measured | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])')
# Wait for the event path to finish these payments, so its queries are
# counted with them.
settle
after=$(count)
python3 -c "import sys; q, p = int(sys.argv[1]), int(sys.argv[2]); print(f'new payments: {p}, queries: {q}, per payment: {q / p:.2f}')" \
  "$((after - before))" "$payments"
