#!/usr/bin/env bash
# Multi-region figures of `once up` on this machine (issue: multi-region):
#  1. POST /payments latency for a tenant in its home region, through the
#     router, with a simulated WAN round trip of RTT_MS between regions
#     (`once up --wan-latency RTT_MS`), stated as a multiple of the RTT.
#     `homes`: every region's tenant as once up starts (a Raft group per home
#     region, nothing moved), each through a router in its home region.
#     `wan`: the first region's tenant after its directory's leader is moved
#     there by hand (`POST /admin/elect`; with groups it already is).
#  2. Failover time with default settings: `once drill failover --mode kill`
#     on a cluster without simulated latency (SIGKILL of the home region's
#     node and store member → first success of its tenants elsewhere).
# Usage: bench/regions.sh [RTT_MS (default 70)] [SECONDS per run (default 20)]
# CLIENTS="1 16 64" picks the concurrencies of part 1 (default: those three);
# PHASES="homes wan provider failover" picks the parts (default: all; `homes`
# is every region's tenant as `once up` starts, no leader moved, at
# HOME_CLIENTS (default "1 64"), answer-first only; `provider`
# is part 1's single client with a 100 ms provider). Part 1 runs once per
# FINISH_MODES entry (default "answer-first finish-first", side by side).
# Needs a release build: cargo build --release --bin once
set -euo pipefail
cd "$(dirname "$0")/.."
ONCE="${ONCE:-${CARGO_TARGET_DIR:-target}/release/once}"
RTT_MS="${1:-70}"
SECONDS_PER_RUN="${2:-20}"
CLIENTS="${CLIENTS:-1 16 64}"
PHASES="${PHASES:-homes wan provider failover}"
HOME_CLIENTS="${HOME_CLIENTS:-1 64}"
FINISH_MODES="${FINISH_MODES:-answer-first finish-first}"
has_phase() { [[ " $PHASES " == *" $1 "* ]]; }
DIR=${KEEP_DIR:-$(mktemp -d)}
UP_PID=
cleanup() { [[ -n $UP_PID ]] && kill -TERM "$UP_PID" 2>/dev/null && wait "$UP_PID" 2>/dev/null; [[ -n ${KEEP_DIR:-} ]] || rm -rf "$DIR"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Starts `once up` in $1 with extra flags; waits (deadline 120 s) until it is up.
up() {
  local dir=$1; shift
  RUST_LOG=error "$ONCE" up --dir "$dir" --listen "127.0.0.1:$(free_port)" "$@" >"$dir.out" 2>&1 &
  UP_PID=$!
  for _ in $(seq 1 600); do grep -q '^once is up' "$dir.out" 2>/dev/null && return 0; sleep 0.2; done
  cat "$dir.out"; exit 1
}
stop() { kill -TERM "$UP_PID"; wait "$UP_PID" || true; UP_PID=; }
json() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)"; }

# Starts a second router in region $1, logging to $2: `once up`'s router's own
# command line and environment (read from /proc), with its region, its
# listeners and its store endpoints (that region's member first) changed, so a
# tenant homed there meets a router at home, as with a router per region. A
# python process supervises it as `once up` does (the router stops when its
# stdin closes). Prints "SUPERVISOR_PID URL ADMIN_URL".
router_in() {
local info="$2.info"
python3 - "$(json "$C" "d['router']['pid']")" "$1" "$2" \
  "$(json "$C" "' '.join(r['name']+'='+r['store']['api_url'] for r in d['regions'])")" "$info" <<'PY' &
import os, socket, subprocess, sys
pid, region, log, info = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
members = dict(m.split('=', 1) for m in sys.argv[4].split())
args = [a.decode() for a in open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\0')[:-1]]
env = dict(kv.decode().split('=', 1) for kv in open(f'/proc/{pid}/environ', 'rb').read().split(b'\0') if b'=' in kv)
def free():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close(); return port
def set_flag(name, value):
    args[args.index(name) + 1] = value
listen, admin = f'127.0.0.1:{free()}', f'127.0.0.1:{free()}'
set_flag('--region', region)
set_flag('--listen', listen)
set_flag('--admin-listen', admin)
set_flag('--store-endpoints', ','.join([members[region]] + [u for r, u in members.items() if r != region]))
child = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=open(log, 'w'), stderr=subprocess.STDOUT)
with open(info + '.tmp', 'w') as f:
    f.write(f'{os.getpid()} http://{listen} http://{admin}\n')
os.rename(info + '.tmp', info)
child.wait()
PY
for _ in $(seq 1 100); do [[ -s $info ]] && break; sleep 0.1; done
cat "$info"
}

# Part 1 on a fresh `once up`, in one finish mode (decision 0054): answer-first
# (the raft mode's default) or finish-first (`--finish-before-answer`).
# (Not indented: its heredocs end at column 0.)
wan_phases() {
local mode=$1
export ONCE_FINISH_BEFORE_ANSWER=$([[ $mode == finish-first ]] && echo true || echo false)
echo "# $(nproc) cores; once up --regions 3 --wan-latency $RTT_MS; binary $ONCE; $mode"
up "$DIR/wan-$mode" --wan-latency "$RTT_MS"
C="$DIR/wan-$mode/cluster.json"
ROUTER=$(json "$C" "d['router']['url']")
HOME_REGION=$(json "$C" "d['regions'][0]['name']")
KEY=$(json "$C" "[t['api_key'] for t in d['tenants'] if t['home_region']=='$HOME_REGION'][0]")
STORE=$(json "$C" "d['regions'][0]['store']['admin_url']")
STORE_ID=$(json "$C" "d['regions'][0]['store']['id']")
ENDPOINTS=$(json "$C" "','.join(r['store']['api_url'] for r in d['regions'])")
# The members speak mutual TLS only: once up's operator certificate.
export ONCE_TLS_CA=$(json "$C" "d['tls']['ca']") ONCE_TLS_CERT=$(json "$C" "d['tls']['operator']['cert']") \
  ONCE_TLS_KEY=$(json "$C" "d['tls']['operator']['key']")
# As a newcomer starts it, before any leader is moved: the tenant of every
# region, each through a router in its home region (`once up`'s own for the
# first region, a second one for each other region: `router_in`). With a
# Raft group per home region (decision 0063) every group's leader is at its
# home; the store's groups as once up started them are printed first.
if has_phase homes && [[ $mode == answer-first ]]; then
echo "# as started: store groups [$(json "$C" "','.join(d.get('store_groups', []))")] besides the directory"
for region in $(json "$C" "' '.join(r['name'] for r in d['regions'])"); do
  key=$(json "$C" "[t['api_key'] for t in d['tenants'] if t['home_region']=='$region'][0]")
  url=$ROUTER; extra=
  if [[ $region != "$HOME_REGION" ]]; then
    read -r extra url admin < <(router_in "$region" "$DIR/router-$region.log")
    for _ in $(seq 1 150); do curl -sf "$admin/readyz" >/dev/null && break; sleep 0.2; done
  fi
  for c in $HOME_CLIENTS; do
    ONCE_BENCH_API_KEY="$key" "$ONCE" bench --url "$url" --concurrency "$c" --duration "$SECONDS_PER_RUN" \
      --label "tenant of $region rtt=${RTT_MS}ms $mode" > "$DIR/home-$region-$c.txt"
    python3 - "$DIR/home-$region-$c.txt" "$RTT_MS" "$region" "$c" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); rtt = float(sys.argv[2])
print(f"#   tenant homed in {sys.argv[3]}, {sys.argv[4]} clients: {r['throughput']:.0f} payments/s, p50 = {r['p50_ms']/rtt:.2f} x RTT, p99 = {r['p99_ms']/rtt:.2f} x RTT")
PY
  done
  [[ -n $extra ]] && kill -TERM "$extra" 2>/dev/null
done
fi
curl -sf --cacert "$ONCE_TLS_CA" --cert "$ONCE_TLS_CERT" --key "$ONCE_TLS_KEY" -X POST \
  -H "Authorization: Bearer $(json "$C" "d['admin_tokens']['store']")" "$STORE/admin/elect" >/dev/null
for _ in $(seq 1 100); do
  [[ "$("$ONCE" store status --json --endpoints "$ENDPOINTS")" == *"\"leader\":$STORE_ID"* ]] && break; sleep 0.2
done
echo "# leader: member $STORE_ID ($HOME_REGION); tenant homed in $HOME_REGION; router in $HOME_REGION"
has_phase wan && for c in $CLIENTS; do
  ONCE_BENCH_API_KEY="$KEY" "$ONCE" bench --url "$ROUTER" --concurrency "$c" --duration "$SECONDS_PER_RUN" \
    --label "home-region rtt=${RTT_MS}ms $mode" | tee "$DIR/bench-$c.txt"
  python3 - "$DIR/bench-$c.txt" "$RTT_MS" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); rtt = float(sys.argv[2])
print(f"#   {r['throughput']:.0f} payments/s, p50 = {r['p50_ms']/rtt:.2f} x RTT, p99 = {r['p99_ms']/rtt:.2f} x RTT")
PY
done
# The same single client with a provider that takes 100 ms per charge (a
# realistic provider; the simulator otherwise answers in ~1 ms): shows how
# much of the latency is raft-store's once a write no longer queues behind
# the previous write's commit notice.
if has_phase provider; then
PROVIDER=$(json "$C" "d['provider']['url']")
curl -sf -X POST "$PROVIDER/faults" -H 'Content-Type: application/json' \
  -d '{"mode":"latency","count":1000000,"ms":100}' >/dev/null
ONCE_BENCH_API_KEY="$KEY" "$ONCE" bench --url "$ROUTER" --concurrency 1 --duration "$SECONDS_PER_RUN" \
  --label "home-region rtt=${RTT_MS}ms provider=100ms $mode" | tee "$DIR/bench-provider.txt"
python3 - "$DIR/bench-provider.txt" "$RTT_MS" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); rtt = float(sys.argv[2])
print(f"#   p50 - 100 ms provider = {(r['p50_ms']-100)/rtt:.2f} x RTT, p99 - 100 ms = {(r['p99_ms']-100)/rtt:.2f} x RTT")
PY
fi
stop
}
if has_phase homes || has_phase wan || has_phase provider; then
  for mode in $FINISH_MODES; do wan_phases "$mode"; done
fi
unset ONCE_FINISH_BEFORE_ANSWER
has_phase failover || exit 0

echo "# failover with default settings (no simulated latency): drill, kill mode"
up "$DIR/local"
C="$DIR/local/cluster.json"
VICTIM=$(json "$C" "d['regions'][0]['name']")
"$ONCE" drill failover --cluster "$C" --region "$VICTIM" --mode kill --duration "$SECONDS_PER_RUN" --rate 20 \
  --out "$DIR/drill" >/dev/null 2>&1 || { cat "$DIR/drill/report.md"; exit 1; }
json "$DIR/drill/report.json" "'#   SIGKILL -> first failure seen by %s tenants: max %s ms; -> their first success again: max %s ms; invariants held: %s' % ('$VICTIM', d['measurements']['max_detection_ms'], d['measurements']['max_recovery_ms'], d['invariants_held'])"
stop
