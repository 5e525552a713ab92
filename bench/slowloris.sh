#!/usr/bin/env bash
# What an attacker's idle, half-sent and never-finished requests cost a node:
# its resident memory with N connections holding half a header (slowloris),
# then N requests announcing a body they never send, and how long until the
# server has closed every one of them. The regression tests
# (tests/api/edge.rs) assert bounds; this prints the figures.
#
#   bash bench/slowloris.sh [connections]      (default 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
KEY=sk_bench_0000000000000001
PORT=18095
cargo build --release -q
BIN=${CARGO_TARGET_DIR:-target}/release/once
WORK=$(mktemp -d)
trap 'kill $NODE 2>/dev/null || true; rm -rf "$WORK"' EXIT
ONCE_API_KEYS="bench:bench:$KEY" RUST_LOG=error $BIN node --listen 127.0.0.1:$PORT --admin-listen 127.0.0.1:0 \
  --database-url "$WORK/node.db" --header-read-timeout 10s --body-read-timeout 10s > "$WORK/node.out" 2>&1 &
NODE=$!
for _ in $(seq 1 100); do grep -q "^listening" "$WORK/node.out" && break; sleep 0.1; done
python3 - "$NODE" "$PORT" "$N" "$KEY" <<'PY'
import socket, sys, time, select
pid, port, n, key = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"): return int(line.split()[1]) / 1024
def attack(name, payload):
    base = rss(); socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port)); s.sendall(payload); socks.append(s)
    time.sleep(1)
    during = rss(); start = time.time(); open_ = set(socks)
    poller = select.poll(); by_fd = {}
    for s in socks: poller.register(s, select.POLLIN | select.POLLHUP | select.POLLERR); by_fd[s.fileno()] = s
    while open_ and time.time() - start < 60:
        for fd, _ in poller.poll(1000):
            s = by_fd[fd]
            try:
                closed = not s.recv(4096)
            except OSError:
                closed = True
            if closed:
                open_.discard(s); poller.unregister(fd)
    print(f"| {name} | {n} | {base:.1f} | {during:.1f} | {(during-base)*1024/n:.1f} | {time.time()-start:.1f} | {len(open_)} |")
    for s in socks: s.close()
print("| attack | connections | node RSS before MiB | during MiB | KiB per connection | s until all closed (after 1 s) | still open after 60 s |")
print("|---|---|---|---|---|---|---|")
attack("half a header (slowloris)", b"POST /payments HTTP/1.1\r\nHost: once\r\nAuthorization: Bea")
attack("a body announced, never sent", f"POST /payments HTTP/1.1\r\nHost: once\r\nAuthorization: Bearer {key}\r\nIdempotency-Key: k\r\nContent-Length: 100\r\n\r\n{{".encode())
PY
