#!/usr/bin/env bash
# Webhook delivery: the lag from a payment's event to its delivery at a
# steady 500 payments/s (p50/p99, measured by the receiver as arrival time
# minus the event's `createdAt`), and what one webhook endpoint costs the
# payments path: new payments/s at 32 clients on a node without an
# endpoint, then on a fresh node with one (target: at most 10 % fewer).
#
#   bash bench/webhooks.sh [seconds-per-run]          (default 10)
#   BACKEND=postgres bash bench/webhooks.sh           (default sqlite)
#   ONCE=/path/to/once bash bench/webhooks.sh         (another build)
#
# The receiver is a small Python HTTP server on 127.0.0.1 answering 200 to
# every POST; it shares the two cores with the node and the load client, so
# the lag includes its own queueing. Prints a Markdown table; raw JSON lines
# go to bench/out/webhooks.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
BACKEND=${BACKEND:-sqlite}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
OUT=bench/out; mkdir -p "$OUT"
KEY=sk_bench_0000000000000001
PORT=18093
HOOK_PORT=18094
BIN=${ONCE:-}
if [ -z "$BIN" ]; then
  cargo build --release -q --bin once
  BIN=${CARGO_TARGET_DIR:-target}/release/once
fi
WORK=$(mktemp -d)
NODE=; HOOK=; DB=
cleanup() {
  [ -n "$NODE" ] && kill "$NODE" 2>/dev/null && wait "$NODE" 2>/dev/null
  [ -n "$HOOK" ] && kill "$HOOK" 2>/dev/null
  [ -n "$DB" ] && psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
  rm -rf "$WORK"
}
trap cleanup EXIT

# The receiver: one line "<arrival ms> <createdAt ms> <event id>" per delivery.
cat > "$WORK/receiver.py" <<'PY'
import json, sys, time, datetime
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
out = open(sys.argv[2], "a", buffering=1)
class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        now = time.time() * 1000
        event = json.loads(body)
        created = datetime.datetime.fromisoformat(event["createdAt"].replace("Z", "+00:00")).timestamp() * 1000
        out.write("%d %d %s\n" % (now, created, event["id"]))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Hook).serve_forever()
PY
python3 "$WORK/receiver.py" $HOOK_PORT "$WORK/deliveries" & HOOK=$!

start_node() {
  [ -f "$WORK/data-keys" ] || $BIN keys init --file "$WORK/data-keys" > /dev/null
  local url
  if [ "$BACKEND" = postgres ]; then
    DB=bench_webhooks_$$_$RANDOM
    psql "$PG/postgres" -qc "CREATE DATABASE $DB"
    url="$PG/$DB"
  else
    rm -f "$WORK"/bench.db*; url="$WORK/bench.db"
  fi
  ONCE_DATA_KEYS="$WORK/data-keys" ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn ONCE_ADMIN_LISTEN=127.0.0.1:0 \
    ONCE_TENANT_RATE=10000000 ONCE_TENANT_BURST=10000000 ONCE_TENANT_IN_FLIGHT=100000 \
    $BIN node --listen 127.0.0.1:$PORT --max-db-connections 32 --database-url "$url" \
      --webhook-allow-private-targets \
    > "$WORK/node.out" 2> "$WORK/node.err" &
  NODE=$!
  for _ in $(seq 1 100); do
    grep -q listening "$WORK/node.out" 2>/dev/null && return
    sleep 0.1
  done
  echo "node did not start" >&2; cat "$WORK/node.err" >&2; exit 1
}
stop_node() {
  kill "$NODE"; wait "$NODE" 2>/dev/null || true; NODE=
  if [ -n "$DB" ]; then psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"; DB=; fi
}
add_endpoint() {
  curl -sf -X POST "http://127.0.0.1:$PORT/webhook-endpoints" -H "Authorization: Bearer $KEY" \
    -H 'Content-Type: application/json' \
    -d "{\"url\":\"http://127.0.0.1:$HOOK_PORT/hook\",\"events\":[\"*\"]}" > /dev/null
}
load() { # label warmup-seconds [--rate N]
  local label=$1 warmup=$2; shift 2
  ONCE_BENCH_API_KEY=$KEY $BIN bench --url http://127.0.0.1:$PORT --mode new --concurrency 32 \
    --duration "$SECS" --warmup "$warmup" --label "$label" "$@" 2>/dev/null
}
# Waits until the receiver has every event of the run (its count stops
# moving for two seconds).
drained() {
  local last=-1 now
  for _ in $(seq 1 120); do
    now=$(wc -l < "$WORK/deliveries")
    [ "$now" = "$last" ] && return
    last=$now; sleep 2
  done
}

: > "$OUT/webhooks.jsonl"
# 1. Payments/s without an endpoint.
start_node
without=$(load "$BACKEND-no-endpoint" 2); echo "$without" >> "$OUT/webhooks.jsonl"
stop_node
# 2. Payments/s with one endpoint taking every event.
start_node; add_endpoint
with=$(load "$BACKEND-one-endpoint" 2); echo "$with" >> "$OUT/webhooks.jsonl"
stop_node
# 3. Delivery lag at a steady 500 payments/s (no warmup: every payment of
# the run is one event the receiver must get).
: > "$WORK/deliveries"
start_node; add_endpoint
steady=$(load "$BACKEND-500-per-s" 0 --rate 500); echo "$steady" >> "$OUT/webhooks.jsonl"
drained
stop_node

python3 - "$without" "$with" "$steady" "$WORK/deliveries" "$BACKEND" <<'PY'
import json, sys
without, with_, steady = (json.loads(a) for a in sys.argv[1:4])
lags, seen = [], set()
for line in open(sys.argv[4]):
    arrived, created, eid = line.split()
    if eid in seen:
        continue
    seen.add(eid)
    lags.append(int(arrived) - int(created))
lags.sort()
pct = lambda p: lags[min(len(lags) - 1, int(p * len(lags)))] if lags else float("nan")
cost = 1 - with_["throughput"] / without["throughput"]
print("| backend | payments/s, no endpoint | payments/s, one endpoint | cost | 500/s run: payments/s | events delivered | lag p50 | lag p99 |")
print("|---|---|---|---|---|---|---|---|")
print("| %s | %.0f | %.0f | %.1f %% | %.0f | %d of %d | %d ms | %d ms |" % (
    sys.argv[5], without["throughput"], with_["throughput"], cost * 100, steady["throughput"],
    len(lags), steady["requests"], pct(0.50), pct(0.99)))
PY
