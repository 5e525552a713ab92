#!/usr/bin/env bash
# A chaos run as RELIABILITY.md records it: a fresh `once up` (three regions,
# embedded storage) in a temporary directory, `once drill chaos` against it
# with every nemesis, then the report copied out and the cluster stopped.
# Usage: tools/chaos.sh SECONDS SEED [OUT (default reliability/chaos-SEED)] [RATE (default 20)]
# UP_ARGS adds flags to `once up`, e.g. UP_ARGS="--wan-latency 70" (regions a
# simulated 70 ms round trip apart, the store's WAN timing).
# Needs a release build: cargo build --release --bin once
set -euo pipefail
cd "$(dirname "$0")/.."
ONCE="${ONCE:-${CARGO_TARGET_DIR:-target}/release/once}"
SECONDS_TOTAL="${1:?seconds}"
SEED="${2:?seed}"
OUT="${3:-reliability/chaos-$SEED}"
RATE="${4:-20}"
DIR=$(mktemp -d)
UP_PID=
MONITOR_PID=
cleanup() { [[ -n $MONITOR_PID ]] && kill "$MONITOR_PID" 2>/dev/null; [[ -n $UP_PID ]] && kill -TERM "$UP_PID" 2>/dev/null && wait "$UP_PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# UP_LOG sets the processes' log filter, e.g. UP_LOG=warn,openraft=info to see elections.
# KEEP_LOGS=1 keeps every process's log with the report even when the run passes.
# shellcheck disable=SC2086 # UP_ARGS is split into flags on purpose
RUST_LOG="${UP_LOG:-warn,openraft=error}" "$ONCE" up --dir "$DIR/up" --listen "127.0.0.1:$(free_port)" ${UP_ARGS:-} >"$DIR/up.out" 2>&1 &
UP_PID=$!
for _ in $(seq 1 600); do grep -q '^once is up' "$DIR/up.out" 2>/dev/null && break; sleep 0.2; done
grep -q '^once is up' "$DIR/up.out" || { cat "$DIR/up.out"; exit 1; }

# Every store member's role, term and commit index once a second, kept with
# every report: what an election storm looks like from outside.
python3 - "$DIR/up/cluster.json" >"$DIR/members.log" 2>&1 <<'PY' &
import json, ssl, sys, time, urllib.request
cluster = json.load(open(sys.argv[1]))
token = cluster["admin_tokens"]["store"]
# The members speak mutual TLS only: present once up's operator certificate.
tls = cluster.get("tls")
context = None
if tls:
    context = ssl.create_default_context(cafile=tls["ca"])
    context.check_hostname = False  # the identity, not the host name, is what counts
    context.load_cert_chain(tls["operator"]["cert"], tls["operator"]["key"])
while True:
    row = [time.strftime("%H:%M:%S"), open("/proc/loadavg").read().split()[0]]
    for region in cluster["regions"]:
        store = region["store"]
        try:
            req = urllib.request.Request(store["admin_url"] + "/api/status",
                                         headers={"Authorization": "Bearer " + token})
            s = json.load(urllib.request.urlopen(req, timeout=1, context=context))
            row.append(f"{s['id']}:{s['state']}/leader {s['leader']}/term {s['term']}/commit {s['committed_index']}")
        except Exception:
            row.append(f"{store['id']}:unreachable")
    print(" | ".join(row), flush=True)
    time.sleep(1)
PY
MONITOR_PID=$!

echo "# $(nproc) cores; once up --regions 3 ${UP_ARGS:-}; once drill chaos --duration $SECONDS_TOTAL --seed $SEED --rate $RATE; binary $ONCE"
status=0
RUST_LOG=warn "$ONCE" drill chaos --cluster "$DIR/up/cluster.json" --duration "$SECONDS_TOTAL" \
  --seed "$SEED" --rate "$RATE" --out "$DIR/report" || status=$?
mkdir -p "$OUT"
# The evidence (every attempt, payment and record) stays out: it is large.
cp "$DIR/report/report.md" "$DIR/report/report.json" "$DIR/report/"*.svg "$OUT/" 2>/dev/null || true
# The members' status over the run, always; a failed run also keeps every
# process's log (warnings and errors) to investigate.
cp "$DIR/members.log" "$OUT/" 2>/dev/null || true
if [[ $status -ne 0 || -n ${KEEP_LOGS:-} ]]; then cp -r "$DIR/up/logs" "$OUT/logs"; fi
python3 - "$OUT/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"seed {r['seed']}: {r['duration_seconds']} s, {len(r['faults'])} faults, "
      f"{r['operations']} operations, {r['attempts']} attempts")
for n, c in r['by_nemesis'].items():
    print(f"  {n}: {c['injected']} injected, {c['took_effect']} seen taking effect")
l = r['linearizability']
print(f"linearizability: {l['keys']} keys, {l['attempts']} attempts ({l['indeterminate']} indeterminate), "
      f"{len(l['violations'])} violations, {len(l.get('undecided', []))} undecided")
print("checks: " + ", ".join(f"{c['name']}={'pass' if c['passed'] else 'FAIL'}" for c in r['checks']))
print("invariants held" if r['invariants_held'] else "VIOLATIONS FOUND")
PY
exit $status
