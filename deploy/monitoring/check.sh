#!/usr/bin/env bash
# Checks deploy/monitoring with promtool (run by .ci/run; needs promtool and
# python3):
#   - the rules file is valid and its unit tests pass;
#   - prometheus-rule.yaml is what generate.sh makes of it;
#   - every PromQL query of the Grafana dashboard parses (each becomes a
#     recording rule of a scratch file that promtool checks, with the
#     dashboard's variables replaced by values of the same kind).
# That every metric they name is one the roles export is
# tests/api/monitoring.rs (real processes).
set -euo pipefail
cd "$(dirname "$0")"

promtool check rules rules/once.rules.yml
promtool test rules rules/once.rules.test.yml
./generate.sh --check

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 - grafana/once.json >"$scratch/dashboard.rules.yml" <<'PY'
import json, sys

def walk(node, found):
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            found.append(node["expr"])
        for value in node.values():
            walk(value, found)
    elif isinstance(node, list):
        for value in node:
            walk(value, found)

dashboard = json.load(open(sys.argv[1]))
queries = []
walk(dashboard, queries)
for var in dashboard["templating"]["list"]:
    if var["type"] == "query":
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        # label_values(SELECTOR, LABEL): the selector is PromQL.
        if query.startswith("label_values("):
            query = query[len("label_values("):].rsplit(",", 1)[0]
        queries.append(query)
replace = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$region": ".*", "$instance": ".*"}
print("groups:\n  - name: dashboard\n    rules:")
for i, query in enumerate(queries):
    for variable, value in replace.items():
        query = query.replace(variable, value)
    assert "$" not in query, f"a dashboard variable this check does not know: {query}"
    print(f"      - record: dashboard:query_{i}\n        expr: {json.dumps(query)}")
print(f"{len(queries)} dashboard queries", file=sys.stderr)
PY
promtool check rules "$scratch/dashboard.rules.yml"
