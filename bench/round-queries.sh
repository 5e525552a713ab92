#!/usr/bin/env bash
# What one round of the email sender costs as its table grows: the query with
# the status bound as a parameter (before) and spelled out (after, the
# partial index; see db/src/round_query.rs), on PostgreSQL under its generic
# plan (what a prepared statement runs with after five executions) and on
# SQLite (python's sqlite3, the same engine the node links). N sent emails
# and 10 pending ones.
#
#   bash bench/round-queries.sh [N…]        (default: 10000 200000 1000000)
#
# Needs PostgreSQL at $PG (default postgres://postgres@127.0.0.1:5432) and
# psql; creates and drops a database of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
PG=${PG:-postgres://postgres@127.0.0.1:5432}
SIZES=("${@:-10000 200000 1000000}")
read -r -a SIZES <<< "${SIZES[*]}"
DB=round_queries_$$
WORK=$(mktemp -d)
trap 'psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"; rm -rf "$WORK"' EXIT
BEFORE="SELECT seq, dedupe_key, recipient, subject, body FROM email_notifications WHERE status = \$1 ORDER BY seq LIMIT 64"
AFTER="SELECT seq, dedupe_key, recipient, subject, body FROM email_notifications WHERE status = 'PENDING' ORDER BY seq LIMIT 64"
FILL="INSERT INTO email_notifications (dedupe_key, payment_id, tenant_id, recipient, subject, body, status, created_at)"

echo "| database | sent emails | before: ms per round | after: ms per round |"
echo "|---|---:|---:|---:|"
for n in "${SIZES[@]}"; do
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
  for f in migrations/postgres/*.sql; do psql "$PG/$DB" -q -f "$f"; done
  psql "$PG/$DB" -q <<SQL
$FILL SELECT 'k' || g, 'p' || g, 't', 'r', 's', 'b', CASE WHEN g > $n THEN 'PENDING' ELSE 'SENT' END, 0
  FROM generate_series(1, $n + 10) g;
ANALYZE email_notifications;
SQL
  # Mean execution time over 20 runs of each, from EXPLAIN ANALYZE.
  ms() { # sql-of-the-prepared-statement execute-args
    psql "$PG/$DB" -qAt <<SQL | awk '/Execution Time/ {s += $3; n++} END {printf "%.3f", s / n}'
SET plan_cache_mode = force_generic_plan;
PREPARE round(text) AS $1;
$(for _ in $(seq 20); do echo "EXPLAIN ANALYZE EXECUTE round$2;"; done)
SQL
  }
  echo "| PostgreSQL | $n | $(ms "$BEFORE" "('PENDING')") | $(ms "${AFTER/\$1/}" "('unused')") |"
  python3 - "$WORK/s.db" "$n" "$BEFORE" "$AFTER" migrations/sqlite/*.sql <<'PY'
import sqlite3, sys, time, os
path, n, before, after, migrations = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
if os.path.exists(path):
    os.remove(path)
db = sqlite3.connect(path)
for m in migrations:
    db.executescript(open(m).read())
db.executemany(
    "INSERT INTO email_notifications (dedupe_key, payment_id, tenant_id, recipient, subject, body, status, created_at) "
    "VALUES (?, ?, 't', 'r', 's', 'b', ?, 0)",
    (("k%d" % g, "p%d" % g, "PENDING" if g > n else "SENT") for g in range(1, n + 11)))
db.commit()
def ms(sql, args):
    runs = 20
    start = time.perf_counter()
    for _ in range(runs):
        assert len(db.execute(sql, args).fetchall()) == 10
    return (time.perf_counter() - start) * 1000 / runs
print("| SQLite | %d | %.3f | %.3f |" % (n, ms(before.replace("$1", "?"), ("PENDING",)), ms(after, ())))
PY
done
