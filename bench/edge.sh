#!/usr/bin/env bash
# The cost of the hardened edge: new payments/s and replays/s of `once node`
# on PostgreSQL at 32 clients, with the build before the edge (BASE) and the
# current build side by side in one run, alternating A B B A A B … so drift
# and position on a noisy machine hit both alike. Besides throughput, the
# node's CPU time per request (utime + stime from /proc over the measured
# run) is the edge's cost with the load generator's share taken out.
#
#   BASE=/path/to/old/once ROUNDS=4 bash bench/edge.sh [seconds-per-point]   (defaults: 4 rounds, 10 s)
#
# BASE defaults to a release build of the commit before the edge crate
# (45fb68d), built in a worktree under /tmp. The current build runs with its
# default edge limits, except the per-tenant rate and quota, raised so the
# benchmark's one tenant is never refused (the gate still runs on every
# request). Prints a Markdown table; raw JSON lines go to bench/out/edge.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
OUT=bench/out; mkdir -p "$OUT"
KEY=sk_bench_0000000000000001
PORT=18093
cargo build --release -q
NEW=${CARGO_TARGET_DIR:-target}/release/once
if [ -z "${BASE:-}" ]; then
  BASE_DIR=/tmp/once-edge-base
  [ -d "$BASE_DIR" ] || git worktree add -q --detach "$BASE_DIR" 45fb68d
  (cd "$BASE_DIR" && CARGO_TARGET_DIR=/tmp/once-edge-base-target cargo build --release -q)
  BASE=/tmp/once-edge-base-target/release/once
fi
WORK=$(mktemp -d)
NODE=; DB=
cleanup() {
  [ -n "$NODE" ] && kill "$NODE" 2>/dev/null
  [ -n "$DB" ] && psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
  rm -rf "$WORK"
}
trap cleanup EXIT

start_node() { # binary database-url
  local extra=()
  if [ "$1" = "$NEW" ]; then
    extra=(--admin-listen 127.0.0.1:0 --tenant-rate 10000000 --tenant-burst 10000000 --tenant-in-flight 100000)
  fi
  # Encryption at rest (the current build needs it on PostgreSQL; the base
  # build ignores the variable).
  [ -f "$WORK/data-keys" ] || "$NEW" keys init --file "$WORK/data-keys" > /dev/null
  ONCE_DATA_KEYS="$WORK/data-keys" ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn "$1" node --listen 127.0.0.1:$PORT \
    --max-db-connections 32 --database-url "$2" "${extra[@]}" > "$WORK/node.out" 2> "$WORK/node.err" &
  NODE=$!
  for _ in $(seq 1 100); do grep -q "^listening" "$WORK/node.out" 2>/dev/null && return; sleep 0.1; done
  echo "node did not start" >&2; cat "$WORK/node.err" >&2; exit 1
}
stop_node() { kill "$NODE"; wait "$NODE" 2>/dev/null || true; NODE=; }

: > "$OUT/edge.jsonl"
rows=()
cpu_ticks() { awk '{print $14 + $15}' /proc/"$NODE"/stat; }
TICK_US=$(( 1000000 / $(getconf CLK_TCK) ))
for round in $(seq 1 "${ROUNDS:-4}"); do
  order="base edge"; [ $((round % 2)) = 0 ] && order="edge base"
  for build in $order; do
    bin=$BASE; [ $build = edge ] && bin=$NEW
    DB=bench_edge_$$_${round}_$build
    psql "$PG/postgres" -qc "CREATE DATABASE $DB"
    start_node "$bin" "$PG/$DB"
    for mode in new replay; do
      # The warm-up runs first, then the measured run with the node's CPU
      # clock read around it.
      ONCE_BENCH_API_KEY=$KEY "$NEW" bench --url http://127.0.0.1:$PORT --mode $mode --concurrency 32 \
        --duration 2 --label warmup >/dev/null 2>&1
      before=$(cpu_ticks)
      json=$(ONCE_BENCH_API_KEY=$KEY "$NEW" bench --url http://127.0.0.1:$PORT --mode $mode --concurrency 32 \
        --duration "$SECS" --warmup 0 --label "$build-$mode-r$round" 2>/dev/null)
      cpu_us=$(( ($(cpu_ticks) - before) * TICK_US ))
      json=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["node_cpu_us_per_req"]=int(sys.argv[2])/r["requests"]; print(json.dumps(r))' "$json" "$cpu_us")
      echo "$json" >> "$OUT/edge.jsonl"
      rows+=("$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("| %s | %s | %s | %.0f | %.2f | %.2f | %.1f |" % (sys.argv[2], sys.argv[3], r["mode"], r["throughput"], r["p50_ms"], r["p99_ms"], r["node_cpu_us_per_req"]))' "$json" "$round" "$build")")
    done
    stop_node
    psql "$PG/postgres" -qc "DROP DATABASE $DB WITH (FORCE)"; DB=
  done
done
echo "| round | build | mode | req/s | p50 ms | p99 ms | node CPU µs/req |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
python3 - "$OUT/edge.jsonl" <<'PY'
import json, sys, collections
import statistics
by = collections.defaultdict(list); cpu = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line); build, mode, _ = r["label"].split("-")
    by[(build, mode)].append(r["throughput"]); cpu[(build, mode)].append(r["node_cpu_us_per_req"])
for mode in ("new", "replay"):
    b, e = statistics.median(by[("base", mode)]), statistics.median(by[("edge", mode)])
    cb, ce = statistics.median(cpu[("base", mode)]), statistics.median(cpu[("edge", mode)])
    print(f"\n{mode} (medians): base {b:.0f}/s, edge {e:.0f}/s, edge/base {e/b:.3f}; "
          f"node CPU base {cb:.1f} µs/req, edge {ce:.1f} µs/req, edge/base {ce/cb:.3f}")
PY
