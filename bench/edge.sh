#!/usr/bin/env bash
# The cost of the hardened edge: new payments/s and replays/s of `once node`
# on PostgreSQL at 32 clients, with the build before the edge (BASE) and the
# current build side by side in one run, alternating A B A B so drift on a
# noisy machine hits both alike.
#
#   BASE=/path/to/old/once bash bench/edge.sh [seconds-per-point]   (default 10)
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
  ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=warn "$1" node --listen 127.0.0.1:$PORT \
    --max-db-connections 32 --database-url "$2" "${extra[@]}" > "$WORK/node.out" 2> "$WORK/node.err" &
  NODE=$!
  for _ in $(seq 1 100); do grep -q "^listening" "$WORK/node.out" 2>/dev/null && return; sleep 0.1; done
  echo "node did not start" >&2; cat "$WORK/node.err" >&2; exit 1
}
stop_node() { kill "$NODE"; wait "$NODE" 2>/dev/null || true; NODE=; }

: > "$OUT/edge.jsonl"
rows=()
for round in 1 2; do
  for build in base edge; do
    bin=$BASE; [ $build = edge ] && bin=$NEW
    DB=bench_edge_$$_${round}_$build
    psql "$PG/postgres" -qc "CREATE DATABASE $DB"
    start_node "$bin" "$PG/$DB"
    for mode in new replay; do
      json=$("$NEW" bench --url http://127.0.0.1:$PORT --api-key $KEY --mode $mode --concurrency 32 \
        --duration "$SECS" --warmup 2 --label "$build-$mode-r$round" 2>/dev/null)
      echo "$json" >> "$OUT/edge.jsonl"
      rows+=("$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("| %s | %s | %s | %.0f | %.2f | %.2f |" % (sys.argv[2], sys.argv[3], r["mode"], r["throughput"], r["p50_ms"], r["p99_ms"]))' "$json" "$round" "$build")")
    done
    stop_node
    psql "$PG/postgres" -qc "DROP DATABASE $DB WITH (FORCE)"; DB=
  done
done
echo "| round | build | mode | req/s | p50 ms | p99 ms |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
python3 - "$OUT/edge.jsonl" <<'PY'
import json, sys, collections
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line); build, mode, _ = r["label"].split("-")
    by[(build, mode)].append(r["throughput"])
for mode in ("new", "replay"):
    base = sum(by[("base", mode)]) / len(by[("base", mode)])
    edge = sum(by[("edge", mode)]) / len(by[("edge", mode)])
    print(f"\n{mode}: base {base:.0f}/s, edge {edge:.0f}/s, edge/base {edge/base:.3f}")
PY
