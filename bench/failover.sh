#!/usr/bin/env bash
# Failover of a region homing many tenants (issue 16): `once up` (3 regions,
# default router settings), TENANTS extra tenants placed in the first region
# (`once store place`), the raft-store leader moved to another region
# (`POST /admin/elect`), then SIGKILL of the first region's node and store
# member while a probe sends a NEW payment (fresh Idempotency-Key) for a
# tenant homed there every 20 ms through the router. Per run it prints:
#   SIGKILL -> the router declares the region down (its log, at_ms)
#   the bulk move's write (router -> raft-store -> reply, its log, write_ms)
#   SIGKILL -> first 2xx of a request sent after the kill (served elsewhere)
#   how far the directory's term moved (its elections; with LEADER=0 the
#   killed member led it)
#   the median time to answer the new requests sent in the second after
#   that first success (where the tenants' writes now go: a leader beside
#   their new home or a round trip away)
# and at the end min/median/max over the runs.
# Usage: bench/failover.sh [TENANTS (default 100000)] [RUNS (default 5)]
# LEADER=0 leaves the raft-store leader in the killed region (its election
# then comes first); the default, 1, moves it to the second region.
# UP_ARGS adds flags to `once up`, e.g. UP_ARGS="--wan-latency 70" (members
# 70 ms apart; `once up` scales the members' election timing with it).
# Needs a release build: cargo build --release --bin once (ONCE=path/to/once)
set -euo pipefail
cd "$(dirname "$0")/.."
ONCE="${ONCE:-${CARGO_TARGET_DIR:-target}/release/once}"
ONCE=$(realpath "$ONCE")
TENANTS="${1:-100000}"
RUNS="${2:-5}"
LEADER="${LEADER:-1}"
DIR=$(mktemp -d)
UP_PID=
PROBE_PID=
cleanup() {
  [[ -n $PROBE_PID ]] && kill "$PROBE_PID" 2>/dev/null || true
  [[ -n $UP_PID ]] && kill -TERM "$UP_PID" 2>/dev/null && wait "$UP_PID" 2>/dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up() {
  local dir=$1; shift
  RUST_LOG=${RUST_LOG:-error,once_router=warn} "$ONCE" up --dir "$dir" --listen "127.0.0.1:$(free_port)" "$@" >"$dir.out" 2>&1 &
  UP_PID=$!
  for _ in $(seq 1 600); do grep -q '^once is up' "$dir.out" 2>/dev/null && return 0; sleep 0.2; done
  cat "$dir.out"; exit 1
}
stop() { kill -TERM "$UP_PID"; wait "$UP_PID" || true; UP_PID=; }
json() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)"; }
# The highest term the directory's members that answer report.
max_term() {
  # A member that does not answer makes the command exit non-zero; the
  # others' lines still count.
  { "$ONCE" store status --json --endpoints "$ENDPOINTS" 2>/dev/null || true; } |
    python3 -c 'import json, sys; print(max((json.loads(l).get("term", 0) for l in sys.stdin if l.strip()), default=0))'
}

echo "# $(nproc) cores; once up --regions 3 ${UP_ARGS:-} (default router settings); $TENANTS tenants placed in the killed region; raft-store leader in region $LEADER (0: the killed one); binary $ONCE"
RESULTS="$DIR/results.txt"
: >"$RESULTS"
for run in $(seq 1 "$RUNS"); do
  # shellcheck disable=SC2086 # UP_ARGS is split into flags on purpose
  up "$DIR/run$run" ${UP_ARGS:-}
  C="$DIR/run$run/cluster.json"
  VICTIM=$(json "$C" "d['regions'][0]['name']")
  OTHERS=$(json "$C" "','.join(r['name'] for r in d['regions'][1:])")
  ROUTER=$(json "$C" "d['router']['url']")
  ROUTER_ADMIN=$(json "$C" "d['router'].get('admin_url') or d['router']['url']")
  TOKEN=$(json "$C" "d['admin_tokens']['store']")
  KEY=$(json "$C" "[t['api_key'] for t in d['tenants'] if t['home_region']=='$VICTIM'][0]")
  NODE_PID=$(json "$C" "d['regions'][0]['node']['pid']")
  STORE_PID=$(json "$C" "d['regions'][0]['store']['pid']")
  LEADER_ADMIN=$(json "$C" "d['regions'][$LEADER]['store']['admin_url']")
  LEADER_ID=$(json "$C" "d['regions'][$LEADER]['store']['id']")
  ENDPOINTS=$(json "$C" "','.join(r['store']['api_url'] for r in d['regions'])")
  export ONCE_TLS_CA=$(json "$C" "d['tls']['ca']") ONCE_TLS_CERT=$(json "$C" "d['tls']['operator']['cert']") \
    ONCE_TLS_KEY=$(json "$C" "d['tls']['operator']['key']")
  # The leader outside the killed region: the figure is the failover's, not
  # an election's (see BENCHMARKS.md for a leader in the killed region).
  curl -sf --cacert "$ONCE_TLS_CA" --cert "$ONCE_TLS_CERT" --key "$ONCE_TLS_KEY" -X POST \
    -H "Authorization: Bearer $TOKEN" "$LEADER_ADMIN/admin/elect" >/dev/null
  for _ in $(seq 1 100); do
    [[ "$("$ONCE" store status --json --endpoints "$ENDPOINTS")" == *"\"leader\":$LEADER_ID"* ]] && break; sleep 0.2
  done
  # Each tenant in its home's Raft group (decision 0063; the first region's
  # tenants live in the directory).
  STORE_GROUPS=$(json "$C" "','.join(d.get('store_groups', []))")
  SEEDED=$(env ${STORE_GROUPS:+ONCE_STORE_GROUPS=$STORE_GROUPS} "$ONCE" store place --endpoints "$ENDPOINTS" --prefix bulk \
    --count "$TENANTS" --home "$VICTIM" --standbys "$OTHERS" --concurrency 64)
  # The router's cache holds them all (it re-reads the table every 2 s).
  for _ in $(seq 1 300); do
    CACHED=$(curl -s "$ROUTER_ADMIN/metrics" | awk '/^router_placements /{print int($2)}')
    [[ -n $CACHED && $CACHED -ge $TENANTS ]] && break; sleep 0.2
  done
  TERM_BEFORE=$(max_term)
  python3 bench/failover_probe.py "$ROUTER" "$KEY" "$DIR/probe$run.jsonl" &
  PROBE_PID=$!
  sleep 2
  # The clock read and the SIGKILLs in one process, microseconds apart: a
  # request the probe sends between them cannot be served by the victims.
  KILLED_AT=$(python3 -c 'import os, sys, time
t = int(time.time() * 1000)
for pid in sys.argv[1:]: os.kill(int(pid), 9)
print(t)' "$NODE_PID" "$STORE_PID")
  # Wait for the first success of a request sent after the kill (30 s cap),
  # in one process that reads only what the probe appended since its last
  # look: a process started per look would take a third of a core from the
  # failover it measures.
  python3 - "$DIR/probe$run.jsonl" "$KILLED_AT" <<'PY' || true
import json, sys, time
path, killed = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 30
partial = ""
with open(path) as probe:
    while time.time() < deadline:
        lines = (partial + probe.read()).split("\n")
        partial = lines.pop()  # a line the probe is still writing
        for line in filter(None, lines):
            a = json.loads(line)
            if a["sent"] >= killed and 200 <= a["status"] < 300:
                sys.exit(0)
        time.sleep(0.05)
sys.exit(1)
PY
  sleep 1.5
  ELECTIONS=$(( $(max_term) - TERM_BEFORE ))
  kill "$PROBE_PID" 2>/dev/null || true; wait "$PROBE_PID" 2>/dev/null || true; PROBE_PID=
  python3 - "$DIR/probe$run.jsonl" "$KILLED_AT" "$DIR/run$run/logs/router.log" "$run" "$SEEDED" "$ELECTIONS" >>"$RESULTS" <<'PY'
import json, re, sys
probe, killed, log, run, seeded, elections = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
attempts = [json.loads(l) for l in open(probe) if l.strip()]
after = [a for a in attempts if a['sent'] >= killed]
first_ok = min((a['answered'] for a in after if 200 <= a['status'] < 300), default=None)
settled = sorted(a['answered'] - a['sent'] for a in after
                 if first_ok is not None and first_ok <= a['sent'] < first_ok + 1000 and 200 <= a['status'] < 300)
down_at = write_ms = moved = None
for line in open(log, errors='replace'):
    plain = re.sub(r'\x1b\[[0-9;]*m', '', line)
    if down_at is None and 'region down' in plain:
        m = re.search(r'at_ms"?\s*[=:]\s*"?(\d+)', plain)
        down_at = int(m.group(1)) if m else None
    if write_ms is None and 'bulk placement move applied' in plain:
        m = re.search(r'write_ms"?\s*[=:]\s*"?(\d+)', plain); write_ms = int(m.group(1)) if m else None
        m = re.search(r'moved"?\s*[=:]\s*"?(\d+)', plain); moved = int(m.group(1)) if m else None
print(json.dumps({"run": int(run), "seeded": json.loads(seeded), "directory_terms_moved": elections,
  "detect_ms": None if down_at is None else down_at - killed,
  "write_ms": write_ms, "moved": moved,
  "first_success_ms": None if first_ok is None else first_ok - killed,
  "then_p50_ms": settled[len(settled) // 2] if settled else None,
  "sent_after_kill": len(after), "errors_after_kill": sum(1 for a in after if not 200 <= a['status'] < 300)}))
PY
  tail -1 "$RESULTS" | sed 's/^/#   /'
  stop
done
python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for k in ("detect_ms", "write_ms", "first_success_ms", "then_p50_ms"):
    v = sorted(r[k] for r in rows if r[k] is not None)
    if v:
        print(f"# {k}: min {v[0]} median {statistics.median(v):g} max {v[-1]} (runs: {len(v)} of {len(rows)})")
print("# moved per run:", [r["moved"] for r in rows])
print("# the directory's terms moved per run (elections, won or not):", [r["directory_terms_moved"] for r in rows])
PY
