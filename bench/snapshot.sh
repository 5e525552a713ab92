#!/usr/bin/env bash
# A raft-store snapshot at scale: N finished payment records applied to a
# state machine on disk, then a snapshot built and installed on a fresh
# state machine, each phase in its own process; prints time, sizes and
# each phase's peak resident memory (VmHWM) as JSON lines.
#
#   bash bench/snapshot.sh [records…]                   (default 1000000)
#   BASE=/path/to/examples/snapshot bash bench/snapshot.sh 1000000
#       also builds and installs with another build's example binary (the
#       same example compiled at an earlier commit), on the same state
#
# Needs about 5 KB of disk per record under $TMPDIR (state, snapshot file,
# installed copy). Raw lines also go to bench/out/snapshot.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a NS <<< "${*:-1000000}"
BIN=${EXAMPLE:-}
if [ -z "$BIN" ]; then
  cargo build --release -q -p once-raft-store --example snapshot
  BIN=${CARGO_TARGET_DIR:-target}/release/examples/snapshot
fi
mkdir -p bench/out
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/snapshot.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
tag() { sed "s/^{/{\"build\":\"$1\",/"; }
for n in "${NS[@]}"; do
  rm -rf "${WORK:?}"/*
  "$BIN" fill "$WORK/state" "$n" | tag this
  "$BIN" build "$WORK/state" | tag this
  "$BIN" install "$WORK/state" "$WORK/copy" | tag this
  if [ -n "${BASE:-}" ]; then
    rm -rf "$WORK/copy"
    "$BASE" build "$WORK/state" | tag base
    "$BASE" install "$WORK/state" "$WORK/copy" | tag base
  fi
done | tee -a bench/out/snapshot.jsonl
