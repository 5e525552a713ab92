#!/usr/bin/env bash
# Claim throughput and latency of a three-member raft-store on this machine
# (members on 127.0.0.1–3, data on disk, every commit fsynced), at several
# concurrencies, then the same against a three-member etcd. Both speak
# mutual TLS on every link, as deployed; STORE_TLS=off runs both in
# plaintext. Usage: bench/raft-store.sh [REQUESTS]   (default 20000)
#
# Simulated WAN latency figure: bench/raft-store.sh wan [REQUESTS] [RTT_MS]
# (default 500 claims, 70 ms): the members run with --wan-latency RTT_MS
# (each its own region, so every Raft RPC waits one RTT), and one client,
# RTT_MS from every member but its local one, claims one key at a time —
# once beside the leader, once beside a follower.
#
# Replication under load across regions: bench/raft-store.sh wan-load
# [REQUESTS] [RTT_MS] (default 5000 claims, 70 ms): the same members, and a
# client beside each of them (no client-side latency: it asks whichever
# member leads), at 1, 16, 64 and 256 callers; each claim's commit waits one
# replication round trip at least.
# STORE_ARGS adds flags to every member, e.g. STORE_ARGS="--pipeline-from-rtt 0ms".
# Needs a release build: cargo build --release --bin once
set -euo pipefail
cd "$(dirname "$0")/.."
ONCE="${ONCE:-${CARGO_TARGET_DIR:-target}/release/once}"
MODE=throughput
if [[ "${1:-}" == wan || "${1:-}" == wan-load ]]; then MODE=$1; shift; fi
case $MODE in wan) DEFAULT_REQUESTS=500 ;; wan-load) DEFAULT_REQUESTS=5000 ;; *) DEFAULT_REQUESTS=20000 ;; esac
REQUESTS="${1:-$DEFAULT_REQUESTS}"
RTT_MS="${2:-70}"
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$DIR"; }
trap cleanup EXIT

WAN_FLAGS=()
[[ $MODE == wan* ]] && WAN_FLAGS=(--wan-latency "$RTT_MS")
source bench/store-cluster.sh
# shellcheck disable=SC2086 # STORE_ARGS is split into flags on purpose
store_cluster_start "${WAN_FLAGS[@]}" ${STORE_ARGS:-}
ENDPOINTS=$STORE_ENDPOINTS

if [[ $MODE == wan ]]; then
  echo "# $(nproc) cores, members with --wan-latency $RTT_MS, one sequential client, $REQUESTS claims per run, binary $ONCE"
  for local in leader follower; do
    "$ONCE" store bench --endpoints "$ENDPOINTS" --requests "$REQUESTS" \
      --wan-latency "$RTT_MS" --local-member "$local"
  done
  exit 0
fi
if [[ $MODE == wan-load ]]; then
  echo "# $(nproc) cores, members with --wan-latency $RTT_MS, the client beside them, $REQUESTS claims per run, binary $ONCE"
  for c in 1 16 64 256; do
    "$ONCE" store bench --endpoints "$ENDPOINTS" --concurrency "$c" --requests "$REQUESTS" | python3 -c "
import json, sys
r = json.loads(sys.stdin.read())
r['p50_rtts'], r['p99_rtts'] = round(r['p50_ms'] / $RTT_MS, 2), round(r['p99_ms'] / $RTT_MS, 2)
print(json.dumps(r))"
  done
  exit 0
fi

echo "# $(nproc) cores, $REQUESTS claims per run, binary $ONCE, TLS $STORE_TLS"
for c in 1 16 64 256; do
  "$ONCE" store bench --endpoints "$ENDPOINTS" --concurrency "$c" --requests "$REQUESTS"
done

# raft-store stops before etcd starts: they never share the cores.
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
PIDS=()
command -v etcd >/dev/null || { echo "# etcd not installed: comparison skipped"; exit 0; }
# etcd with the members' certificates (IP SANs 127.0.0.N, server and
# client use), clients and peers authenticated by the same CA.
SCHEME=https
[[ $STORE_TLS == off ]] && SCHEME=http
etcd_tls() { # id
  [[ $STORE_TLS == off ]] && return 0
  local t="$DIR/tls$1"
  echo --cert-file "$t/cert.pem" --key-file "$t/key.pem" --trusted-ca-file "$t/ca.pem" --client-cert-auth \
    --peer-cert-file "$t/cert.pem" --peer-key-file "$t/key.pem" --peer-trusted-ca-file "$t/ca.pem" --peer-client-cert-auth
}
CLUSTER="e1=$SCHEME://127.0.0.1:22380,e2=$SCHEME://127.0.0.2:22380,e3=$SCHEME://127.0.0.3:22380"
for i in 1 2 3; do
  # shellcheck disable=SC2046
  etcd --name "e$i" --data-dir "$DIR/e$i" $(etcd_tls "$i") \
    --listen-client-urls "$SCHEME://127.0.0.$i:22379" --advertise-client-urls "$SCHEME://127.0.0.$i:22379" \
    --listen-peer-urls "$SCHEME://127.0.0.$i:22380" --initial-advertise-peer-urls "$SCHEME://127.0.0.$i:22380" \
    --initial-cluster "$CLUSTER" --initial-cluster-state new --initial-cluster-token once-bench \
    --log-level error >"$DIR/etcd$i" 2>&1 &
  PIDS+=($!)
done
CURL_TLS=()
[[ $STORE_TLS == off ]] || CURL_TLS=(--cacert "$DIR/operator/ca.pem" --cert "$DIR/operator/cert.pem" --key "$DIR/operator/key.pem")
healthy() { [[ "$(curl -s "${CURL_TLS[@]}" "$SCHEME://127.0.0.1:22379/health")" == *'"health":"true"'* ]]; }
for _ in $(seq 1 100); do healthy && break; sleep 0.1; done
healthy || { echo "etcd not healthy"; cat "$DIR/etcd1"; exit 1; }
echo "# etcd $(etcd --version | head -1 | awk '{print $3}') ($SCHEME): txn create-if-absent of scoped key + business key"
for c in 1 16 64 256; do
  "$ONCE" store bench --etcd "$SCHEME://127.0.0.1:22379" --concurrency "$c" --requests "$REQUESTS"
done
