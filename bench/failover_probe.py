"""Failover probe for bench/failover.sh: a NEW payment (fresh Idempotency-Key)
for one tenant every 20 ms through the router, each on its own thread with
a 2 s timeout, one JSON line per attempt: sent/answered epoch ms, status.
Usage: failover_probe.py ROUTER_URL API_KEY OUT.jsonl (runs until killed)."""
import json, ssl, sys, threading, time, urllib.error, urllib.request, uuid

router, key, out = sys.argv[1].rstrip('/'), sys.argv[2], sys.argv[3]
lock = threading.Lock()
sink = open(out, 'a', buffering=1)
context = ssl._create_unverified_context()


def attempt(n):
    ref = f"probe-{uuid.uuid4().hex}"
    body = json.dumps({"accountId": "acc_probe", "amount": "1.00", "currency": "EUR",
                       "merchantReference": ref}).encode()
    req = urllib.request.Request(f"{router}/payments", data=body, method="POST", headers={
        "Authorization": f"Bearer {key}", "Idempotency-Key": ref,
        "Content-Type": "application/json"})
    sent = int(time.time() * 1000)
    try:
        with urllib.request.urlopen(req, timeout=2, context=context) as r:
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    except Exception:
        status = 0
    answered = int(time.time() * 1000)
    with lock:
        sink.write(json.dumps({"n": n, "sent": sent, "answered": answered, "status": status}) + "\n")


n = 0
next_at = time.time()
while True:
    threading.Thread(target=attempt, args=(n,), daemon=True).start()
    n += 1
    next_at += 0.02
    time.sleep(max(0, next_at - time.time()))
