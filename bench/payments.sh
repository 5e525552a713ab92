#!/usr/bin/env bash
# POST /payments throughput, latency and CPU per request: new payments and
# replays, on SQLite and PostgreSQL, at 1, 32 and 128 clients; and, in the
# same run, the bare `INSERT … ON CONFLICT DO NOTHING` claim through pgbench
# on the same PostgreSQL, so the cost of the whole contract reads as a ratio.
#
#   bash bench/payments.sh [seconds-per-point] [clients…]   (defaults: 10; 1 32 128)
#   ROLE=api bash bench/payments.sh                       (the node without its event path)
#   ONCE=/path/to/once bash bench/payments.sh             (another build, e.g. the one before a change)
#   BACKENDS=sqlite bash bench/payments.sh                (one backend only: sqlite or postgres)
#
# CPU per request is utime + stime from /proc over the measured run: the
# node process's, and for PostgreSQL the sum over every `postgres` process
# (backends, WAL writer, checkpointer; a backend that exits mid-run loses
# its share, so this is a lower bound). The event path's lag is the p99 of
# the ledger consumer's commit → effect histogram over each run of new
# payments, read once the consumer has caught up. Needs PostgreSQL at $PG (default
# postgres://postgres@127.0.0.1:5432) on this machine and pgbench. Prints a
# Markdown table and the ratio; raw JSON lines go to bench/out/payments.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
shift || true
CLIENTS=("${@:-1 32 128}")
read -r -a CLIENTS <<< "${CLIENTS[*]}"
PG=${PG:-postgres://postgres@127.0.0.1:5432}
OUT=bench/out; mkdir -p "$OUT"
KEY=sk_bench_0000000000000001
PORT=18091
# ONCE=/path/to/once measures that binary instead of building this checkout.
BIN=${ONCE:-}
if [ -z "$BIN" ]; then
  cargo build --release -q --bin once
  BIN=${CARGO_TARGET_DIR:-target}/release/once
fi
WORK=$(mktemp -d)
NODE=; DB=
cleanup() {
  [ -n "$NODE" ] && kill "$NODE" 2>/dev/null && wait "$NODE" 2>/dev/null
  [ -n "$DB" ] && psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
  rm -rf "$WORK"
}
trap cleanup EXIT
TICK_US=$(( 1000000 / $(getconf CLK_TCK) ))
role=()
[ -n "${ROLE:-}" ] && role=(--role "$ROLE")

start_node() { # database-url
  # Encryption at rest: every stored answer and payload sealed with this key
  # file (required on PostgreSQL; SQLite would make one beside its file).
  [ -f "$WORK/data-keys" ] || $BIN keys init --file "$WORK/data-keys" > /dev/null
  ONCE_DATA_KEYS="$WORK/data-keys" ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn ONCE_ADMIN_LISTEN=127.0.0.1:0 \
    ONCE_TENANT_RATE=10000000 ONCE_TENANT_BURST=10000000 ONCE_TENANT_IN_FLIGHT=100000 \
    $BIN node --listen 127.0.0.1:$PORT --max-db-connections 32 --database-url "$1" "${role[@]}" \
    > "$WORK/node.out" 2> "$WORK/node.err" &
  NODE=$!
  for _ in $(seq 1 100); do
    grep -q listening "$WORK/node.out" 2>/dev/null && ADMIN=$(awk '/^admin on/ {print $3}' "$WORK/node.out") && return
    sleep 0.1
  done
  echo "node did not start" >&2; cat "$WORK/node.err" >&2; exit 1
}
stop_node() { kill "$NODE"; wait "$NODE" 2>/dev/null || true; NODE=; }
ticks_of() { awk '{print $14 + $15}' /proc/"$1"/stat 2>/dev/null || echo 0; }
# Ticks of every postgres process, as "pid ticks" lines.
postgres_ticks() {
  for pid in $(pgrep -x postgres); do echo "$pid $(ticks_of "$pid")"; done
}
# CPU µs spent by postgres processes between two postgres_ticks snapshots.
postgres_cpu_us() { # before-file after-file
  awk -v tick="$TICK_US" 'NR==FNR {b[$1]=$2; next} {d += $2 - ($1 in b ? b[$1] : 0)} END {print d * tick}' "$1" "$2"
}

# The node's Prometheus text, for the event path's lag.
scrape() { curl -sf "$ADMIN/metrics" || true; }
# After a run of new payments: waits until the ledger consumer has caught up
# (its count of processed events stops moving for a second), then prints
# the p99 of commit → ledger effect lag over the run, in ms, from the
# histogram's buckets (upper bound of the bucket holding the 99th
# percentile); "–" when the node runs no event path.
ledger_lag_p99() { # metrics-before-file
  local last=-1 now
  for _ in $(seq 1 60); do
    now=$(scrape | awk '/events_consumed_total\{.*consumer="ledger".*outcome="processed"/ {print $NF}')
    [ "${now:-0}" = "$last" ] && break
    last=${now:-0}; sleep 1
  done
  scrape > "$WORK/metrics.after"
  python3 - "$1" "$WORK/metrics.after" <<'PY'
import re, sys
def buckets(path):
    out = {}
    for line in open(path):
        m = re.match(r'\S*events_consume_lag_seconds_bucket\{(.*)\} (\S+)', line)
        if m and 'consumer="ledger"' in m.group(1):
            le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
            out[float(le)] = float(m.group(2))
    return out
before, after = buckets(sys.argv[1]), buckets(sys.argv[2])
delta = sorted((le, after[le] - before.get(le, 0)) for le in after)
total = delta[-1][1] if delta else 0
if total <= 0:
    print("–")
else:
    p99 = next(le for le, n in delta if n >= 0.99 * total)
    print("> 65 s" if p99 == float("inf") else f"≤ {p99 * 1000:.0f}")
PY
}

# One Markdown row of the results table from a run's JSON line; a run with
# answers that were not 2xx says so in its mode.
table_row() { # json
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); d=r["db_cpu_us"]; bad=r.get("non_2xx", 0); print("| %s | %s | %d | %.0f | %.2f | %.2f | %.0f | %s | %s |" % (r["backend"], r["mode"] + (" (%d not 2xx!)" % bad if bad else ""), r["concurrency"], r["throughput"], r["p50_ms"], r["p99_ms"], r["node_cpu_us"], "in the node" if d is None else "%.0f" % d, r["ledger_lag_p99_ms"]))' "$1"
}
# CPU of the node and of PostgreSQL over a measured run: cpu_start before,
# cpu_stop <backend> after; cpu_stop sets node_us and db_us (empty on SQLite).
cpu_start() { node_before=$(ticks_of "$NODE"); postgres_ticks > "$WORK/pg.before"; }
cpu_stop() { # backend
  node_us=$(( ($(ticks_of "$NODE") - node_before) * TICK_US ))
  postgres_ticks > "$WORK/pg.after"
  db_us=$(postgres_cpu_us "$WORK/pg.before" "$WORK/pg.after")
  [ "$1" = sqlite ] && db_us=
  return 0
}

rows=()
run_backend() { # label database-url
  start_node "$2"
  for mode in new replay; do
    for c in "${CLIENTS[@]}"; do
      ONCE_BENCH_API_KEY=$KEY $BIN bench --url http://127.0.0.1:$PORT --mode $mode --concurrency "$c" \
        --duration 2 --label warmup >/dev/null 2>&1
      scrape > "$WORK/metrics.before"
      cpu_start
      json=$(ONCE_BENCH_API_KEY=$KEY $BIN bench --url http://127.0.0.1:$PORT --mode $mode --concurrency "$c" \
        --duration "$SECS" --warmup 0 --label "$1-$mode-$c" 2>/dev/null)
      cpu_stop "$1"
      lag=–
      [ "$mode" = new ] && lag=$(ledger_lag_p99 "$WORK/metrics.before")
      json=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); n=max(r["requests"],1); r["node_cpu_us"]=int(sys.argv[2])/n; r["db_cpu_us"]=int(sys.argv[3])/n if sys.argv[3] else None; r["backend"]=sys.argv[4]; r["ledger_lag_p99_ms"]=sys.argv[5]; print(json.dumps(r))' "$json" "$node_us" "$db_us" "$1" "$lag")
      echo "$json" >> "$OUT/payments.jsonl"
      rows+=("$(table_row "$json")")
    done
  done
  command -v wrk > /dev/null && wrk_replays "$1"
  stop_node
}

# Replays once more with wrk, a load generator in C that costs the shared
# cores far less than `once bench` (reqwest, JSON decoding of every answer),
# so the row shows what the node itself can serve. Every request replays
# the same finished payment.
wrk_replays() { # label
  local body='{"accountId":"acc_wrk","amount":"10.00","currency":"EUR","merchantReference":"ref-wrk"}'
  local key="wrk-$$-$RANDOM"
  curl -sf -o /dev/null -X POST "http://127.0.0.1:$PORT/payments" -H "Authorization: Bearer $KEY" \
    -H "Idempotency-Key: $key" -H 'Content-Type: application/json' -d "$body"
  cat > "$WORK/replay.lua" <<LUA
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
wrk.headers["Idempotency-Key"] = "$key"
LUA
  for c in "${CLIENTS[@]}"; do
    wrk -t1 -c"$c" -d2 -s "$WORK/replay.lua" "http://127.0.0.1:$PORT/payments" > /dev/null
    cpu_start
    wrk -t1 -c"$c" -d"$SECS" --latency -s "$WORK/replay.lua" "http://127.0.0.1:$PORT/payments" > "$WORK/wrk.out"
    cpu_stop "$1"
    json=$(python3 - "$WORK/wrk.out" "$node_us" "$db_us" "$1" "$c" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
def ms(v):
    m = re.match(r"([\d.]+)(us|ms|s)", v)
    if m is None:
        sys.exit("cannot read wrk's latency %r from:\n%s" % (v, text))
    n, unit = m.groups()
    return float(n) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
done = int(re.search(r"(\d+) requests in", text).group(1))
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
r = {"backend": sys.argv[4], "mode": "replay (wrk)", "concurrency": int(sys.argv[5]),
     "throughput": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)),
     "p50_ms": ms(re.search(r"^\s+50%\s+(\S+)", text, re.M).group(1)),
     "p99_ms": ms(re.search(r"^\s+99%\s+(\S+)", text, re.M).group(1)),
     "requests": done, "non_2xx": int(bad.group(1)) if bad else 0,
     "node_cpu_us": int(sys.argv[2]) / max(done, 1),
     "db_cpu_us": int(sys.argv[3]) / max(done, 1) if sys.argv[3] else None,
     "ledger_lag_p99_ms": "–"}
print(json.dumps(r))
PY
)
    echo "$json" >> "$OUT/payments.jsonl"
    rows+=("$(table_row "$json")")
  done
}

: > "$OUT/payments.jsonl"
BACKENDS=${BACKENDS:-sqlite postgres}
[[ " $BACKENDS " == *" sqlite "* ]] && run_backend sqlite "$WORK/bench.db"
# PostgreSQL, then the bare claim on the same database (up to the `fi`).
if [[ " $BACKENDS " == *" postgres "* ]]; then
DB=bench_$$
psql "$PG/postgres" -qc "CREATE DATABASE $DB"
run_backend postgres "$PG/$DB"

# The bare claim, same server, same table (the node's migrations made it),
# pgbench's own clients.
cat > "$WORK/claim.sql" <<'SQL'
\set n random(1, 2000000000)
INSERT INTO idempotency_requests (tenant_id, principal_id, operation, idempotency_key, fingerprint, fingerprint_version, status, step, fence, locked_until, region, created_at, updated_at) VALUES ('bench', 'pgbench', 'payments.create', :client_id || '-' || :n, 'f', 1, 'IN_PROGRESS', 'RECEIVED', 1, 0, 'r', 0, 0) ON CONFLICT DO NOTHING;
SQL
for c in "${CLIENTS[@]}"; do
  # max_connections is 100 by default: pgbench's clients are capped at 90.
  c=$(( c > 90 ? 90 : c ))
  # pgbench's backends exit with it: their CPU is read while they run, over
  # the middle SECS-2 seconds, and divided by the claims of that window.
  pgbench -n -M prepared -c "$c" -j $(( c < 2 ? 1 : 2 )) -T "$SECS" -f "$WORK/claim.sql" "$PG/$DB" \
    > "$WORK/pgbench.out" 2>/dev/null &
  bench=$!
  sleep 1; postgres_ticks > "$WORK/pg.before"
  sleep $(( SECS - 2 )); postgres_ticks > "$WORK/pg.after"
  wait $bench
  out=$(cat "$WORK/pgbench.out")
  tps=$(awk '/^tps/ {printf "%.0f", $3}' <<< "$out")
  lat=$(awk '/latency average/ {print $4}' <<< "$out")
  db_us=$(postgres_cpu_us "$WORK/pg.before" "$WORK/pg.after")
  per_claim=$(( db_us / (tps * (SECS - 2) > 0 ? tps * (SECS - 2) : 1) ))
  echo "{\"backend\":\"pgbench\",\"mode\":\"claim\",\"concurrency\":$c,\"throughput\":$tps,\"db_cpu_us\":$per_claim}" >> "$OUT/payments.jsonl"
  rows+=("| postgres: bare \`INSERT … ON CONFLICT DO NOTHING\` (pgbench) | claim | $c | $tps | avg $lat | – | – | $per_claim | – |")
done
psql "$PG/postgres" -qc "DROP DATABASE $DB WITH (FORCE)"; DB=
fi

echo "# $(nproc) cores, ${SECS}s per point${ROLE:+, --role $ROLE}"
echo "| backend | mode | clients | req/s | p50 ms | p99 ms | node CPU µs/req | PostgreSQL CPU µs/req | commit → ledger p99 ms |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
python3 - "$OUT/payments.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for c in sorted({r["concurrency"] for r in rows}):
    new = [r for r in rows if r["backend"] == "postgres" and r["mode"] == "new" and r["concurrency"] == c]
    bare = [r for r in rows if r["backend"] == "pgbench" and r["concurrency"] == c]
    if new and bare and bare[0]["throughput"]:
        print(f"\n{c} clients: PostgreSQL new payments {new[0]['throughput']:.0f}/s = "
              f"{new[0]['throughput'] / bare[0]['throughput']:.3f} × the bare claim ({bare[0]['throughput']:.0f}/s)")
PY
