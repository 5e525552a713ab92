#!/usr/bin/env bash
# The event path on PostgreSQL: outbox publisher → broker → ledger consumer.
#
#   bash bench/events.sh [steady-seconds] [backlog-events]     (defaults 30, 20000)
#
# For each broker (NATS JetStream at $NATS_URL, then the in-process bus):
#  1. steady: `once bench --rate 500` (open model) for the given seconds; then
#     the end-to-end lag of every payment, from its commit (outbox.created_at,
#     written in the payment's transaction) to its ledger entry
#     (ledger_entries.created_at), p50/p99/max, and the ledger's booking rate;
#  2. drain: the node stopped, N payment.succeeded events put in the outbox,
#     the node started; events/s from the first publish to the last ledger
#     entry = the path's capacity with the API idle;
#  3. restart (NATS only): `--rate $RATE` (default 500), the node sent SIGTERM
#     halfway and a new one started as soon as it exited (a rolling deploy of
#     one replica); the lag p99 and max (the longest a payment of the run
#     waited for its ledger entry). A consumer that drops the deliveries it
#     took when it stops leaves them to the broker's redelivery (`ack_wait`,
#     30 s).
#
#   PHASES="restart" bash bench/events.sh 10    (some phases only)
#   ONCE=/path/to/once bash bench/events.sh      (another build)
# Needs PostgreSQL at $PG (default postgres://postgres@127.0.0.1:5432) and, for
# the NATS rows, NATS with JetStream at $NATS_URL (default nats://127.0.0.1:4222).
# Prints a Markdown table; raw lines go to bench/out/events.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
BACKLOG=${2:-20000}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
NATS=${NATS_URL:-nats://127.0.0.1:4222}
OUT=bench/out; mkdir -p "$OUT"
KEY=sk_bench_0000000000000001
PORT=18092
BROKERS=${BROKERS:-nats in-process}   # which brokers to measure
INSTANCES=${CONSUMER_INSTANCES:-16}     # delivery loops per consumer
PHASES=${PHASES:-steady drain restart}
RATE=${RATE:-500}   # payments/s offered in the restart phase
BIN=${ONCE:-}
if [ -z "$BIN" ]; then
  cargo build --release -q --bin once
  BIN=${CARGO_TARGET_DIR:-target}/release/once
fi
WORK=$(mktemp -d)
NODE=; DB=; STREAM=
cleanup() {
  [ -n "$NODE" ] && kill "$NODE" 2>/dev/null
  [ -n "$DB" ] && psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
  [ -n "$STREAM" ] && delete_stream "$STREAM"
  rm -rf "$WORK"
}
trap cleanup EXIT

start_node() { # database-url broker stream
  local extra=()
  if [ "$2" = nats ]; then extra=(--nats-url "$NATS" --events-stream "$3" --events-subject-prefix "$3.events"); fi
  # Encryption at rest: required on PostgreSQL.
  [ -f "$WORK/data-keys" ] || $BIN keys init --file "$WORK/data-keys" > /dev/null
  ONCE_DATA_KEYS="$WORK/data-keys" ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn ONCE_ADMIN_LISTEN=127.0.0.1:0 ONCE_TENANT_RATE=10000000 ONCE_TENANT_BURST=10000000 ONCE_TENANT_IN_FLIGHT=100000 $BIN node --listen 127.0.0.1:$PORT \
    --max-db-connections 32 --consumer-instances "$INSTANCES" --database-url "$1" "${extra[@]}" > "$WORK/node.out" 2> "$WORK/node.err" &
  NODE=$!
  for _ in $(seq 1 100); do grep -q listening "$WORK/node.out" 2>/dev/null && return; sleep 0.1; done
  echo "node did not start" >&2; cat "$WORK/node.err" >&2; exit 1
}
stop_node() { kill "$NODE"; wait "$NODE" 2>/dev/null || true; NODE=; }
q() { psql "$PG/$DB" -Atqc "$1"; }
wait_for() { # sql expected-value timeout-seconds
  for _ in $(seq 1 $(( $3 * 10 ))); do [ "$(q "$1")" = "$2" ] && return; sleep 0.1; done
  echo "timed out waiting for: $1 = $2 (now $(q "$1"))" >&2; exit 1
}
# Deletes a JetStream stream over the plain NATS protocol (no CLI needed).
delete_stream() {
  local hostport=${NATS#nats://}
  exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}"
  printf 'CONNECT {"verbose":false}\r\nSUB _INBOX.bench 1\r\nPUB $JS.API.STREAM.DELETE.%s _INBOX.bench 0\r\n\r\n' "$1" >&3
  timeout 5 grep -q -m1 '^MSG _INBOX.bench' <&3 || true
  exec 3>&-
}

rows=()
: > "$OUT/events.txt"
for broker in $BROKERS; do
  DB=bench_events_$$_${broker//-/_}
  STREAM=; [ $broker = nats ] && STREAM=BENCH_$$_${broker//-/_}
  psql "$PG/postgres" -qc "CREATE DATABASE $DB"

  # 1. Steady load.
  if [[ " $PHASES " == *" steady "* ]]; then
  start_node "$PG/$DB" $broker $STREAM
  ONCE_BENCH_API_KEY=$KEY $BIN bench --url http://127.0.0.1:$PORT --mode new --concurrency 64 \
    --rate 500 --duration "$SECS" --warmup 2 --label "events-$broker" > "$WORK/bench.json" 2>/dev/null
  paid=$(q "SELECT count(*) FROM payments WHERE status = 'succeeded'")
  wait_for "SELECT count(*) FROM ledger_entries" "$paid" 60
  lag=$(q "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l.created_at - o.created_at)::numeric),
                  round(percentile_cont(0.99) WITHIN GROUP (ORDER BY l.created_at - o.created_at)::numeric),
                  max(l.created_at - o.created_at),
                  round(count(*) * 1000.0 / greatest(max(l.created_at) - min(l.created_at), 1))
           FROM ledger_entries l JOIN outbox o ON o.event_id = l.source_event_id")
  IFS='|' read -r p50 p99 max rate <<< "$lag"
  api=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.0f req/s, p99 %.1f ms" % (r["throughput"], r["p99_ms"]))' "$WORK/bench.json")
  echo "steady $broker: paid=$paid lag_p50=$p50 p99=$p99 max=$max ledger_rate=$rate api=[$api]" | tee -a "$OUT/events.txt"
  rows+=("| $broker | steady, \`--rate 500\`, ${SECS}s | $paid | $rate | $p50 | $p99 | $max | $api |")
  stop_node
  fi

  # 2. Drain a backlog with the API idle.
  if [[ " $PHASES " == *" drain "* ]]; then
  q "INSERT INTO outbox (event_id, event_type, schema_version, aggregate_id, tenant_id, payload, created_at)
     SELECT 'evt_drain_' || g, 'payment.succeeded', 1, 'pay_drain_' || g, 'bench',
            json_build_object('paymentId', 'pay_drain_' || g, 'tenantId', 'bench', 'accountId', 'acc_drain',
              'merchantReference', 'drain-' || g, 'amount', '10.00', 'currency', 'EUR', 'amountMinor', 1000,
              'status', 'succeeded', 'declineCode', null)::text,
            (extract(epoch from clock_timestamp()) * 1000)::bigint
     FROM generate_series(1, $BACKLOG) g" > /dev/null
  start_node "$PG/$DB" $broker $STREAM
  wait_for "SELECT count(*) FROM ledger_entries WHERE source_payment_id LIKE 'pay_drain_%'" "$BACKLOG" 300
  drain=$(q "SELECT round($BACKLOG * 1000.0 / greatest(
               (SELECT max(created_at) FROM ledger_entries WHERE source_payment_id LIKE 'pay_drain_%')
             - (SELECT min(published_at) FROM outbox WHERE event_id LIKE 'evt_drain_%'), 1))")
  echo "drain $broker: events=$BACKLOG rate=$drain/s" | tee -a "$OUT/events.txt"
  rows+=("| $broker | drain a backlog of $BACKLOG | $BACKLOG | $drain | – | – | – | API idle |")
  stop_node
  fi

  # 3. A rolling restart under load (NATS only: the in-process bus is the
  # process's own, and what it held dies with it).
  if [[ " $PHASES " == *" restart "* && $broker = nats ]]; then
  start_node "$PG/$DB" $broker $STREAM
  since=$(q "SELECT coalesce(max(seq), 0) FROM outbox")
  ONCE_BENCH_API_KEY=$KEY $BIN bench --url http://127.0.0.1:$PORT --mode new --concurrency 64 \
    --rate "$RATE" --duration "$SECS" --warmup 0 --label "restart-$broker" > "$WORK/bench.json" 2>/dev/null &
  load=$!
  # Halfway through the load (a point in it, not a wait for a condition).
  sleep $(( SECS / 2 ))
  stop_node
  start_node "$PG/$DB" $broker $STREAM
  wait "$load" || true
  paid=$(q "SELECT count(*) FROM payments WHERE status = 'succeeded'")
  wait_for "SELECT count(*) FROM ledger_entries l JOIN payments p ON p.id = l.source_payment_id" "$paid" 90
  lag=$(q "SELECT count(*),
                  round(percentile_cont(0.99) WITHIN GROUP (ORDER BY l.created_at - o.created_at)::numeric),
                  max(l.created_at - o.created_at)
           FROM ledger_entries l JOIN outbox o ON o.event_id = l.source_event_id WHERE o.seq > $since")
  IFS='|' read -r n p99 max <<< "$lag"
  echo "restart $broker: events=$n lag_p99=$p99 max=$max" | tee -a "$OUT/events.txt"
  rows+=("| $broker | restart halfway, \`--rate $RATE\`, ${SECS}s | $n | – | – | $p99 | $max | SIGTERM, then a new node |")
  stop_node
  fi

  psql "$PG/postgres" -qc "DROP DATABASE $DB WITH (FORCE)"; DB=
  if [ $broker = nats ]; then delete_stream "$STREAM"; fi; STREAM=
done

echo "consumer instances: $INSTANCES"
echo "| broker | load | events | ledger entries/s | lag p50 ms | lag p99 ms | lag max ms | API (once bench) |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
