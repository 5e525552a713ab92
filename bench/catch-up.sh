#!/usr/bin/env bash
# A wiped raft-store member catching up by a streamed snapshot: three
# members on 127.0.0.1–3 (mutual TLS, data on disk), N claims through the
# client API, a snapshot built on every member, then member 3 removed,
# SIGKILLed, wiped, restarted empty and added back as a learner. Prints the
# load, the time from add-learner to member 3 holding every applied entry,
# and every member's peak resident memory (VmHWM) with its data on disk.
#
#   bash bench/catch-up.sh [N]         (default 1000000; about 5 KB of disk per claim)
#   ONCE=/path/to/once bash bench/catch-up.sh
# Needs a release build: cargo build --release --bin once
set -euo pipefail
cd "$(dirname "$0")/.."
ONCE="${ONCE:-${CARGO_TARGET_DIR:-target}/release/once}"
N="${1:-1000000}"
DIR=$(mktemp -d "${TMPDIR:-/var/tmp}/catch-up.XXXXXX")
declare -A PID
cleanup() { for p in "${PID[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$DIR"; }
trap cleanup EXIT

export ONCE_ADMIN_TOKEN="catch-up-bench-admin-token-$$-0123456789"
source bench/store-cluster.sh
store_certs
start() { store_start "$@"; PID[$1]=$STORE_PID; }
for i in 1 2 3; do start "$i" --peers "$STORE_PEERS"; done
store_operator_env
ENDPOINTS=$STORE_ENDPOINTS
ADMIN="127.0.0.1:27201,127.0.0.2:27201,127.0.0.3:27201"
status() { "$ONCE" store status --json --endpoints "$1"; }
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.readline()).get(sys.argv[1]))' "$1"; }
store_wait_for_leader
peak_mib() { awk '/VmHWM/ {printf "%d", $2 / 1024}' "/proc/$1/status"; }
disk_mib() { du -sm "$1" | cut -f1; }

echo "# $(nproc) cores, $N claims, binary $ONCE"
"$ONCE" store bench --endpoints "$ENDPOINTS" --concurrency 256 --requests "$N"
for i in 1 2 3; do "$ONCE" store snapshot --endpoint "127.0.0.$i:27201"; done
for i in 1 2 3; do
  for _ in $(seq 1 600); do
    [[ "$(status "127.0.0.$i:27101" | field snapshot_index)" != None ]] && break; sleep 0.5
  done
done
for i in 1 2 3; do
  echo "{\"member\":$i,\"phase\":\"loaded\",\"peak_rss_mib\":$(peak_mib "${PID[$i]}"),\"disk_mib\":$(disk_mib "$DIR/m$i")}"
done

# Member 3 leaves, loses everything, and comes back empty.
"$ONCE" store change-membership --endpoints "$ADMIN" --voters 1,2
kill -9 "${PID[3]}"; wait "${PID[3]}" 2>/dev/null || true
rm -rf "$DIR/m3"
start 3
target=$(status "127.0.0.1:27101,127.0.0.2:27101" | python3 -c 'import json,sys; print(max(json.loads(l).get("applied_index") or 0 for l in sys.stdin))')
for _ in $(seq 1 100); do status 127.0.0.3:27101 >/dev/null 2>&1 && break; sleep 0.1; done
t0=$(date +%s.%N)
"$ONCE" store add-learner --endpoints "$ADMIN" --id 3 --raft-addr 127.0.0.3:27001
for _ in $(seq 1 6000); do
  applied=$(status 127.0.0.3:27101 | field applied_index)
  [[ "$applied" != None && "$applied" -ge "$target" ]] && break
  sleep 0.1
done
t1=$(date +%s.%N)
line=$(status 127.0.0.3:27101)
[[ "$(field applied_index <<< "$line")" -ge "$target" ]] || { echo "member 3 did not catch up: $line"; exit 1; }
[[ "$(field snapshot_index <<< "$line")" != None ]] || { echo "member 3 caught up without a snapshot: $line"; exit 1; }
echo "{\"phase\":\"caught up\",\"claims\":$N,\"applied_index\":$target,\"seconds\":$(python3 -c "print(round($t1 - $t0, 1))")}"
for i in 1 2 3; do
  echo "{\"member\":$i,\"phase\":\"after catch-up\",\"peak_rss_mib\":$(peak_mib "${PID[$i]}"),\"disk_mib\":$(disk_mib "$DIR/m$i")}"
done
"$ONCE" store change-membership --endpoints "$ADMIN" --voters 1,2,3
