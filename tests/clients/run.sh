#!/usr/bin/env bash
# Clients in other languages, generated from the API document a real node
# serves, used against a real `once up` through its router. Fails when the
# document does not generate (a generator stops on it, or the TypeScript
# example no longer type-checks against it) or when either example gets an
# answer the contract does not state.
#
#   tests/clients/run.sh                       # what .ci/run runs
#   ONCE=/path/to/once tests/clients/run.sh    # another build, not rebuilt
#
# Steps: `once up` (3 regions) on a temporary data dir, the router on a free
# port; the document from region 1's node (`/openapi.json`, over the mutual
# TLS every node of `once up` takes, with the operator certificate
# cluster.json names); then
# - Python: `openapi-python-client` (pinned with everything it pulls in,
#   tests/clients/requirements.txt, in a virtualenv under the target dir)
#   generates `once_client`; examples/python/pay.py runs with it;
# - TypeScript: `npm ci` from examples/typescript's committed lock file
#   (openapi-typescript, openapi-fetch, typescript), `openapi-typescript`
#   generates the types, `tsc` compiles examples/typescript/src/pay.ts
#   against them, node runs it.
# Generated code lands under <target>/clients/, never in the source tree.
#
# Each example first meets a slow provider (the simulator holds the charge
# 1.5 s) with a 0.3 s request timeout: its first attempt times out, and its
# retries with the same key (409 IDEMPOTENCY_REQUEST_IN_PROGRESS, waiting
# Retry-After) end in the replay of the one payment. The provider's ledger
# must then hold exactly one charge per example.
set -euo pipefail
cd "$(dirname "$0")/../.."

requirements=tests/clients/requirements.txt
target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
out=$target/clients

# The generator in a virtualenv of its own, installed again whenever the
# pins change (the stamp holds the pins it was built from).
venv=${CLIENTS_VENV:-$target/clients-venv}
if ! cmp -s "$requirements" "$venv/installed-requirements.txt"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements"
  cp "$requirements" "$venv/installed-requirements.txt"
fi

if [ -z "${ONCE:-}" ]; then
  cargo build --quiet --features failpoints --bin once
  ONCE=$target/debug/once
fi

work=$(mktemp -d)
up_pid=
cleanup() {
  status=$?
  if [ -n "$up_pid" ]; then
    kill -TERM "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ]; then
    echo "--- once up's output" >&2
    tail -n 20 "$work/up.out" "$work/up.err" >&2 2>/dev/null || true
    for log in "$work"/data/logs/*; do
      [ -f "$log" ] && { echo "--- $log" >&2; tail -n 15 "$log" >&2; }
    done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# A port free now, below the ephemeral range (where the children's own
# port-0 listeners and outgoing connections land).
router_port=$(python3 - <<'EOF'
import random, socket
with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    low = max(int(f.read().split()[0]), 10001)
for _ in range(1000):
    port = random.randrange(10000, low)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(port)
        break
EOF
)

"$ONCE" up --regions 3 --listen "127.0.0.1:$router_port" --dir "$work/data" >"$work/up.out" 2>"$work/up.err" &
up_pid=$!
for _ in $(seq 1 1200); do
  grep -q '^once is up:' "$work/up.out" && break
  kill -0 "$up_pid" 2>/dev/null || { echo "once up exited" >&2; exit 1; }
  sleep 0.1
done
grep -q '^once is up:' "$work/up.out" || { echo "once up did not come up" >&2; exit 1; }

cluster=$work/data/cluster.json
field() { python3 -c "import json, sys; c = json.load(open(sys.argv[1])); print($1)" "$cluster"; }
router=$(field 'c["router"]["url"]')
node=$(field 'c["regions"][0]["node"]["url"]')
provider=$(field 'c["provider"]["url"]')
api_key=$(field 'c["tenants"][0]["api_key"]')
echo "once up: router $router, document from $node"

rm -rf "$out"
mkdir -p "$out"
document=$out/openapi.json
curl --fail --silent --show-error \
  --cacert "$(field 'c["tls"]["ca"]')" \
  --cert "$(field 'c["tls"]["operator"]["cert"]')" \
  --key "$(field 'c["tls"]["operator"]["key"]')" \
  "$node/openapi.json" -o "$document"

# The simulator holds the next charge 1.5 s; the example's 0.3 s timeout
# gives up on it first.
slow_charge() {
  curl --fail --silent --show-error -X POST "$provider/faults" \
    -H 'content-type: application/json' -d '{"mode":"latency","count":1,"ms":1500}'
}
charges() {
  curl --fail --silent --show-error "$provider/charges" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))'
}
# The example's output must show the timed-out attempt retried into the
# replay of the one payment.
run_example() {
  local name=$1
  shift
  local before
  before=$(charges)
  slow_charge
  ONCE_URL=$router ONCE_API_KEY=$api_key ONCE_TIMEOUT_SECONDS=0.3 "$@" | tee "$out/$name.out"
  grep -q '^create: attempt 1: timed out' "$out/$name.out" ||
    { echo "$name: the first attempt was meant to time out" >&2; exit 1; }
  grep -q '^create: attempt [2-8]: 201 (replayed)$' "$out/$name.out" ||
    { echo "$name: the retries were meant to end in the replay" >&2; exit 1; }
  local after
  after=$(charges)
  [ "$after" -eq $((before + 1)) ] ||
    { echo "$name: $((after - before)) charges at the provider, expected 1" >&2; exit 1; }
}

echo "== Python (openapi-python-client)"
# A warning is a part of the document the generator skipped, an error one
# it could not read: fail on either. It formats with ruff, found on PATH.
PATH="$venv/bin:$PATH" "$venv/bin/openapi-python-client" generate \
  --path "$document" --output-path "$out/python/once_client" --meta none \
  2>&1 | tee "$out/python-generate.log"
if grep -q 'encountered while generating' "$out/python-generate.log"; then
  echo "openapi-python-client did not take the whole document" >&2
  exit 1
fi
run_example python env PYTHONPATH="$out/python" "$venv/bin/python" examples/python/pay.py

echo "== TypeScript (openapi-typescript + openapi-fetch)"
ts=$out/typescript
mkdir -p "$ts"
cp examples/typescript/package.json examples/typescript/package-lock.json examples/typescript/tsconfig.json "$ts/"
cp -r examples/typescript/src "$ts/src"
(
  cd "$ts"
  npm ci --no-audit --no-fund --loglevel=error
  ./node_modules/.bin/openapi-typescript "$document" --output generated/schema.d.ts
  ./node_modules/.bin/tsc -p .
)
run_example typescript node "$ts/dist/src/pay.js"

echo "clients generated from $document: Python and TypeScript examples passed"
