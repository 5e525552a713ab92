#!/usr/bin/env bash
# The cost of issue 14's trust work — mutual TLS on every internal link,
# encryption at rest of answers and payloads, time stamped by the store
# leader — on new payments and replays. The build before it (BASE, commit
# 8c488bb: plaintext links, plaintext records) and the current build run
# side by side in one run, alternating A B B A … so drift and position on a
# noisy machine hit both alike. Three configurations:
#
#   node-pg   `once node`, sql mode on PostgreSQL, hit directly: encryption
#             at rest is the only change (no internal link).
#   node-pg-plain  the same with `sslmode=disable`: the build before had
#             no TLS to PostgreSQL, the current one negotiates it by default.
#   up-1      `once up --regions 1` through its router: router → node and
#             node → store member over mutual TLS, records sealed, leader time.
#   up-3      `once up --regions 3` (members on one machine, three voters).
#   up-3-wan  `once up --regions 3 --wan-latency 70`, a tenant homed in the
#             router's region: the same across simulated regions.
#
#   BASE=/path/to/old/once [NEW=/path/to/new/once] ROUNDS=2 bash bench/trust.sh [seconds-per-point] [clients]
#   (defaults: 2 rounds, 10 s, 32 clients; CONFIGS="node-pg up-3-wan" runs some only)
#
# Besides throughput and latency, CPU per request (utime + stime from /proc
# over the measured run: the node's for node-pg, the sum over every process
# of `once up` otherwise), which a noisy 2-core machine disturbs less.
#
# BASE defaults to a release build of 8c488bb in a worktree under /tmp. The
# load generator is the current build's `once bench` for both. Prints a
# Markdown table and the medians' ratios; raw JSON lines go to
# bench/out/trust.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
CLIENTS=${2:-32}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
OUT=bench/out; mkdir -p "$OUT"
KEY=sk_bench_0000000000000001
# NEW=/path/to/once measures that binary instead of building this checkout.
if [ -z "${NEW:-}" ]; then
  cargo build --release -q --bin once
  NEW=$(realpath "${CARGO_TARGET_DIR:-target}/release/once")
fi
if [ -z "${BASE:-}" ]; then
  BASE_DIR=/tmp/once-trust-base
  [ -d "$BASE_DIR" ] || git worktree add -q --detach "$BASE_DIR" 8c488bb
  (cd "$BASE_DIR" && CARGO_TARGET_DIR=/tmp/once-trust-base-target cargo build --release -q --bin once)
  BASE=/tmp/once-trust-base-target/release/once
fi
# The one benchmark tenant is never refused by its rate or quota (the gate
# still runs on every request); `once up`'s children inherit these.
export ONCE_TENANT_RATE=10000000 ONCE_TENANT_BURST=10000000 ONCE_TENANT_IN_FLIGHT=100000
WORK=$(mktemp -d)
PID=; DB=
cleanup() {
  [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  [ -n "$DB" ] && psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_line() { # file pattern
  for _ in $(seq 1 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.2; done
  echo "no '$2' in $1:" >&2; cat "$1" >&2; exit 1
}

# Starts configuration $2 of binary $1; sets PID, URL, API_KEY.
start() {
  local bin=$1 config=$2 port; port=$(free_port)
  case $config in
    node-pg|node-pg-plain)
      DB=bench_trust_$$_$RANDOM
      # sqlx with rustls asks for TLS by default (sslmode=prefer) and this
      # server offers it; node-pg-plain turns it off, leaving encryption at
      # rest as the only difference.
      local params=""
      [ "$config" = node-pg-plain ] && params="?sslmode=disable"
      psql "$PG/postgres" -qc "CREATE DATABASE $DB"
      local keys=()
      # The current build seals with a key file (required on PostgreSQL).
      if [ "$bin" = "$NEW" ]; then
        "$NEW" keys init --file "$WORK/data-keys-$DB" >/dev/null
        keys=(--data-keys "$WORK/data-keys-$DB")
      fi
      ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn "$bin" node --listen 127.0.0.1:$port \
        --admin-listen 127.0.0.1:0 --max-db-connections 32 --database-url "$PG/$DB$params" "${keys[@]}" \
        > "$WORK/node.out" 2> "$WORK/node.err" &
      PID=$!
      wait_line "$WORK/node.out" "^listening"
      URL=http://127.0.0.1:$port; API_KEY=$KEY ;;
    up-1|up-3|up-3-wan)
      local dir="$WORK/up-$RANDOM" flags=(--regions 1)
      [ "$config" = up-3 ] && flags=(--regions 3)
      [ "$config" = up-3-wan ] && flags=(--regions 3 --wan-latency 70)
      # Its own session: every child's CPU is summed by session id.
      RUST_LOG=error setsid "$bin" up --dir "$dir" --listen "127.0.0.1:$port" "${flags[@]}" > "$dir.out" 2>&1 &
      PID=$!
      wait_line "$dir.out" "^once is up"
      URL=http://127.0.0.1:$port
      API_KEY=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); home=d["regions"][0]["name"]; print(next(t["api_key"] for t in d["tenants"] if t["home_region"]==home))' "$dir/cluster.json") ;;
  esac
}
stop() {
  kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=
  if [ -n "$DB" ]; then psql "$PG/postgres" -qc "DROP DATABASE $DB WITH (FORCE)"; DB=; fi
}

: > "$OUT/trust.jsonl"
rows=()
TICK_US=$(( 1000000 / $(getconf CLK_TCK) ))
# CPU ticks (utime + stime) of what serves: the node for node-pg, every
# process of `once up`'s session (router, nodes, store members) otherwise.
cpu_ticks() { # config
  local pids=$PID
  [[ "$1" != node-pg* ]] && pids=$(pgrep -s "$PID")
  for p in $pids; do awk '{print $14 + $15}' /proc/"$p"/stat 2>/dev/null || echo 0; done |
    awk '{s += $1} END {print s + 0}'
}
for config in ${CONFIGS:-node-pg up-1 up-3-wan}; do
  for round in $(seq 1 "${ROUNDS:-2}"); do
    order="base trust"; [ $((round % 2)) = 0 ] && order="trust base"
    for build in $order; do
      bin=$BASE; [ $build = trust ] && bin=$NEW
      start "$bin" "$config"
      for mode in new replay; do
        ONCE_BENCH_API_KEY="$API_KEY" "$NEW" bench --url "$URL" --mode $mode --concurrency "$CLIENTS" \
          --duration 2 --label warmup >/dev/null 2>&1
        before=$(cpu_ticks "$config")
        json=$(ONCE_BENCH_API_KEY="$API_KEY" "$NEW" bench --url "$URL" --mode $mode --concurrency "$CLIENTS" \
          --duration "$SECS" --warmup 0 --label "$config/$build/$mode/r$round" 2>/dev/null)
        cpu_us=$(( ($(cpu_ticks "$config") - before) * TICK_US ))
        json=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["cpu_us_per_req"]=int(sys.argv[2])/max(r["requests"],1); print(json.dumps(r))' "$json" "$cpu_us")
        echo "$json" >> "$OUT/trust.jsonl"
        rows+=("$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("| %s | %s | %s | %s | %.0f | %.2f | %.2f | %.0f |" % (sys.argv[2], sys.argv[3], sys.argv[4], r["mode"], r["throughput"], r["p50_ms"], r["p99_ms"], r["cpu_us_per_req"]))' "$json" "$config" "$round" "$build")")
      done
      stop
    done
  done
done
echo "# $(nproc) cores, $CLIENTS clients, ${SECS}s per point; base $BASE, trust $NEW"
echo "| config | round | build | mode | req/s | p50 ms | p99 ms | CPU µs/req |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
python3 - "$OUT/trust.jsonl" <<'PY'
import json, sys, collections, statistics
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line); config, build, mode, _ = r["label"].split("/")
    by[(config, mode, build)].append(r)
print()
print("| config | mode | base req/s | trust req/s | trust/base | base p99 ms | trust p99 ms | base CPU µs/req | trust CPU µs/req | CPU trust/base |")
print("|---|---|---|---|---|---|---|---|---|---|")
for config in ("node-pg", "node-pg-plain", "up-1", "up-3-wan"):
    for mode in ("new", "replay"):
        b, t = by[(config, mode, "base")], by[(config, mode, "trust")]
        if not b or not t:
            continue
        bt = statistics.median(r["throughput"] for r in b); tt = statistics.median(r["throughput"] for r in t)
        bp = statistics.median(r["p99_ms"] for r in b); tp = statistics.median(r["p99_ms"] for r in t)
        bc = statistics.median(r["cpu_us_per_req"] for r in b); tc = statistics.median(r["cpu_us_per_req"] for r in t)
        print(f"| {config} | {mode} | {bt:.0f} | {tt:.0f} | {tt/bt:.3f} | {bp:.1f} | {tp:.1f} | {bc:.0f} | {tc:.0f} | {tc/bc:.3f} |")
PY
