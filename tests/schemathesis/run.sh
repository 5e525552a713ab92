#!/usr/bin/env bash
# The API document against the server it describes. schemathesis reads
# /openapi.json from a real `once node` (SQLite, `once provider-sim` as the
# provider), authenticates with a real API key, generates requests from the
# document (examples, coverage, fuzzing, then stateful sequences that follow
# the document's links from POST /payments to GET /payments/{id} with real
# ids) and runs every check on every answer. Exits non-zero on any failure.
#
#   tests/schemathesis/run.sh                      # what .ci/run runs
#   SCHEMATHESIS_SEED=7 SCHEMATHESIS_MAX_EXAMPLES=1000 tests/schemathesis/run.sh
#   ONCE=/path/to/once tests/schemathesis/run.sh   # another build, not rebuilt
#
# Every check runs (`--checks all`) and none is excluded or relaxed: where the
# contract could look like a check's exception, the document says so instead
# (a reused Idempotency-Key with another body, or a reused merchantReference,
# is a documented 409, which positive_data_acceptance allows; a decline is a
# documented 402, and no generated accountId starts with `acc_nofunds`, the
# simulator's declining prefix). A failure means the document and the server
# disagree: fix the document where it is looser than the server, the server
# where it answers something the document does not state.
#
# The node allows private webhook targets (decision 0103): the document's URL
# pattern admits any IPv4 literal and DNS name, and cannot express "public
# addresses only" in a pattern both JSON Schema and the server's regex accept;
# a production node refuses those URLs with a documented 422.
#
# The seed and the number of examples are fixed so a run is reproducible and
# takes a few minutes on two cores; schemathesis keeps no example database
# between runs. The JUnit report lands in <target>/schemathesis-report/.
set -euo pipefail
cd "$(dirname "$0")/../.."

SEED=${SCHEMATHESIS_SEED:-20261101}
MAX_EXAMPLES=${SCHEMATHESIS_MAX_EXAMPLES:-500}
# schemathesis and every package it pulls in, pinned (requirements.txt): an
# unpinned hypothesis once broke CI overnight.
requirements=tests/schemathesis/requirements.txt

target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

# schemathesis in a virtualenv of its own, installed again whenever the pins
# change (the stamp holds the pins it was built from).
venv=${SCHEMATHESIS_VENV:-$target/schemathesis-venv}
if ! cmp -s "$requirements" "$venv/installed-requirements.txt"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements"
  cp "$requirements" "$venv/installed-requirements.txt"
fi

# The binary the tests use (failpoints are inert unless a test arms one).
# .ci/run passes the one `cargo test --workspace` built; run alone, this
# builds it (feature unification differs, so that is a build of its own).
if [ -z "${ONCE:-}" ]; then
  cargo build --quiet --features failpoints --bin once
  ONCE=$target/debug/once
fi

work=$(mktemp -d)
cleanup() {
  status=$?
  if [ -f "$work/pids" ]; then
    while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$work/pids"
  fi
  if [ "$status" -ne 0 ] && [ -f "$work/node.log" ]; then
    echo "--- the node's last log lines" >&2
    tail -n 40 "$work/node.log" >&2
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# `once ROLE ARGS...` in the background on port 0; prints its public URL
# once it says `listening on`. Its pid goes to $work/pids for the cleanup.
start() {
  local role=$1
  shift
  "$ONCE" "$role" "$@" >"$work/$role.out" 2>"$work/$role.log" &
  local pid=$!
  echo "$pid" >>"$work/pids"
  for _ in $(seq 1 600); do
    local url
    url=$(sed -n 's/^listening on \(http:[^ ]*\)$/\1/p' "$work/$role.out")
    if [ -n "$url" ]; then
      echo "$url"
      return
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "once $role did not start" >&2
  cat "$work/$role.log" >&2
  return 1
}

provider=$(start provider-sim --listen 127.0.0.1:0)
key="sk_test_schemathesis_$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
node=$(ONCE_API_KEYS="schemathesis:fuzzer:$key" start node \
  --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --database-url "$work/node.db" --provider-url "$provider" \
  --webhook-allow-private-targets)
echo "node at $node, provider simulator at $provider"

# One worker: with two, hypothesis parses lambda sources from two threads at
# once, and CPython 3.11's ast.parse is not safe for that ("SystemError: AST
# constructor recursion depth mismatch" failed a CI run).
"$venv/bin/st" run "$node/openapi.json" \
  --checks all \
  --phases examples,coverage,fuzzing,stateful \
  --header "Authorization: Bearer $key" \
  --seed "$SEED" \
  --max-examples "$MAX_EXAMPLES" \
  --generation-database none \
  --workers 1 \
  --no-color \
  --report junit --report-dir "$target/schemathesis-report"
