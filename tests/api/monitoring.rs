//! `deploy/monitoring` against what the roles really export. `once up` runs
//! every role as a real process (three raft-store members, three nodes, a
//! router), and one more `once node` runs with tight edge limits; each one's
//! `/metrics` on its admin listener is scraped, and every metric name that
//! the Grafana dashboard, the Prometheus rules and their unit tests use must
//! be one of those, or a recording rule of the rules file.
//!
//! Exported names come from the `# TYPE` lines, and the test checks that
//! every sample line it sees is one of the names derived from them (a
//! counter's `_total`, a histogram's `_bucket`/`_sum`/`_count`), so the
//! derivation cannot drift from the exporter. prometheus-client (0.24) leaves
//! a labelled family out of the text, `# TYPE` line included, until its first
//! sample, so the test first makes every family the dashboard and the rules
//! use appear, for real: a payment, its replay and a mismatch (which also
//! checks the label values the rules filter on); its event consumed; a region
//! cut off from the router, so a forward fails and the router fails the
//! region over; and, on a node of its own with one connection per listener
//! and a 1 s header timeout, a refused and a timed-out connection. A metric
//! that only a rarer event would show cannot pass unseen: it fails the test
//! until the test makes that event happen.
//!
//! Also checked here: the PrometheusRule has the same groups as the plain
//! rules file, every alert has a severity, a summary, a description and a
//! runbook that is a section of `deploy/README.md`, and a unit test that
//! fires it and one that does not; the dashboard is provisioning-ready (a
//! uid, every query on the `${datasource}` variable). The PromQL itself is
//! checked by promtool in `.ci/run` (`deploy/monitoring/check.sh`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::helpers::{NodeProcess, eventually, payment_body, post, send};
use crate::up::Up;
use once_test_support::ports::port_outside_ephemeral_range;

fn monitoring_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn yaml(path: &Path) -> Value {
    serde_norway::from_str(&read(path))
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
}

// --- PromQL: the metric names an expression selects ---------------------

/// Aggregation operators: followed by `by`/`without` or `(`, never names.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Keywords and literals (matched case-insensitively, as PromQL does).
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "offset", "bool", "atan2", "inf", "nan",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// PromQL's functions. An identifier followed by `(` must be one of these:
/// a misspelt function fails the test rather than pass as a metric.
const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "absent_over_time",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "cos",
    "cosh",
    "count_over_time",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "deg",
    "delta",
    "deriv",
    "double_exponential_smoothing",
    "end",
    "exp",
    "floor",
    "histogram_avg",
    "histogram_count",
    "histogram_fraction",
    "histogram_quantile",
    "histogram_stddev",
    "histogram_stdvar",
    "histogram_sum",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "info",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "mad_over_time",
    "max_over_time",
    "min_over_time",
    "minute",
    "month",
    "pi",
    "predict_linear",
    "present_over_time",
    "quantile_over_time",
    "rad",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sin",
    "sinh",
    "sort",
    "sort_by_label",
    "sort_by_label_desc",
    "sort_desc",
    "sqrt",
    "start",
    "stddev_over_time",
    "stdvar_over_time",
    "sum_over_time",
    "tan",
    "tanh",
    "time",
    "timestamp",
    "vector",
    "year",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index just past the string literal that opens at `start`.
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    panic!(
        "unterminated string in {}",
        chars.iter().collect::<String>()
    )
}

/// The index just past the `close` that ends the group opening at `start`
/// (label matchers, a range, a label list), string literals skipped.
fn skip_group(chars: &[char], start: usize, close: char) -> usize {
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => i = skip_string(chars, i),
            c if c == close => return i + 1,
            _ => i += 1,
        }
    }
    panic!(
        "no {close:?} closes {}",
        chars[start..].iter().collect::<String>()
    )
}

/// Every metric name a PromQL expression selects: identifiers that are not
/// functions, aggregations, keywords, label names (in `{…}` or after
/// `by`/`on`/…), durations, strings or Grafana variables (`$region`,
/// `${datasource}`, `$__rate_interval`). An unknown function is an error.
pub(crate) fn promql_metric_names(expr: &str) -> Result<Vec<String>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let next_non_space = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        (i, chars.get(i).copied())
    };
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i);
        } else if c == '{' {
            i = skip_group(&chars, i, '}');
        } else if c == '[' {
            i = skip_group(&chars, i, ']');
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '$' {
            i += 1;
            if chars.get(i) == Some(&'{') {
                i = skip_group(&chars, i, '}');
            } else {
                while i < chars.len() && is_ident(chars[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number or a duration: 0.99, 1e3, 0x1f, 5m, 1h30m.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let (at, next) = next_non_space(i);
            let label_list = LABEL_LISTS.contains(&word.as_str());
            let operator = KEYWORDS.contains(&word.to_ascii_lowercase().as_str())
                || AGGREGATIONS.contains(&word.as_str());
            match next {
                Some('(') if label_list => i = skip_group(&chars, at, ')'),
                _ if label_list || operator => {}
                Some('(') if !FUNCTIONS.contains(&word.as_str()) => {
                    return Err(format!("unknown function {word}() in {expr}"));
                }
                Some('(') => {}
                _ => names.push(word),
            }
        } else {
            i += 1;
        }
    }
    Ok(names)
}

/// The PromQL inside a Grafana Prometheus variable query:
/// `label_values(SELECTOR, LABEL)` → SELECTOR, `label_values(LABEL)` →
/// nothing, `query_result(EXPR)` → EXPR.
fn variable_promql(query: &str) -> Result<Option<String>, String> {
    let inner = |prefix: &str| {
        query
            .trim()
            .strip_prefix(prefix)
            .and_then(|q| q.strip_suffix(')'))
            .map(str::to_owned)
    };
    if let Some(args) = inner("label_values(") {
        // The last comma outside braces, brackets and strings splits it.
        let chars: Vec<char> = args.chars().collect();
        let mut split = None;
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '"' | '\'' | '`' => i = skip_string(&chars, i),
                '{' => i = skip_group(&chars, i, '}'),
                '[' => i = skip_group(&chars, i, ']'),
                '(' => i = skip_group(&chars, i, ')'),
                ',' => {
                    split = Some(i);
                    i += 1;
                }
                _ => i += 1,
            }
        }
        Ok(split.map(|at| chars[..at].iter().collect()))
    } else if let Some(expr) = inner("query_result(") {
        Ok(Some(expr))
    } else {
        Err(format!(
            "a variable query this test cannot read: {query} (label_values or query_result)"
        ))
    }
}

#[test]
fn promql_names_are_read_past_functions_labels_strings_and_variables() {
    let names = |expr: &str| promql_metric_names(expr).unwrap();
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le, consumer) (rate(events_consume_lag_seconds_bucket{cluster=~"$region", instance=~"$instance"}[$__rate_interval])))"#
        ),
        ["events_consume_lag_seconds_bucket"]
    );
    assert_eq!(
        names(
            "a:b:rate5m > 0\nand on (cluster) # a comment naming not_a_metric\nmax by (cluster) (c_total offset 10m) > 900"
        ),
        ["a:b:rate5m", "c_total"]
    );
    assert_eq!(
        names(
            r#"sum(x{outcome=~"processed|duplicate", le="+Inf"}) by (le) / ignoring(le) group_left y unless z @ start() or vector(1) > bool Inf"#
        ),
        ["x", "y", "z"]
    );
    assert_eq!(
        names("count(raft_leader_id == 0) or vector(0)"),
        ["raft_leader_id"]
    );
    assert_eq!(
        names(r#"label_replace(up_total, "dst", "$1", "src", "(.*)") * 1e3"#),
        ["up_total"]
    );
    assert!(
        promql_metric_names("rat(x[5m])").is_err(),
        "a misspelt function"
    );
    assert_eq!(
        variable_promql(r#"label_values(edge_connections_open{cluster=~"$region"}, instance)"#)
            .unwrap()
            .as_deref(),
        Some(r#"edge_connections_open{cluster=~"$region"}"#)
    );
    assert_eq!(variable_promql("label_values(cluster)").unwrap(), None);
}

// --- What deploy/monitoring references ---------------------------------

/// A metric name used somewhere in deploy/monitoring, and where.
#[derive(Debug)]
struct Use {
    name: String,
    place: String,
    /// Input series of a rule unit test must be real metrics, never a
    /// recording rule's output.
    exported_only: bool,
}

#[derive(Debug, Default)]
struct References {
    uses: Vec<Use>,
    /// Names the rules record.
    recorded: BTreeSet<String>,
    /// Alert name → its rule.
    alerts: BTreeMap<String, Value>,
    /// Alert name → (a test expects it to fire, a test expects it not to).
    tested: BTreeMap<String, (bool, bool)>,
    /// The `groups` of the plain rules file, and the PrometheusRule's.
    groups: Option<Value>,
    operator_groups: Option<Value>,
    dashboards: usize,
}

impl References {
    fn add_expr(&mut self, expr: &str, place: &str, exported_only: bool) {
        let names = promql_metric_names(expr).unwrap_or_else(|e| panic!("{place}: {e}"));
        assert!(!names.is_empty(), "{place}: no metric in {expr}");
        for name in names {
            self.uses.push(Use {
                name,
                place: place.to_owned(),
                exported_only,
            });
        }
    }

    /// Reads every file under `dir`; a file of a kind this test does not
    /// know fails it, so nothing in deploy/monitoring goes unchecked.
    fn read(dir: &Path) -> Self {
        let mut refs = Self::default();
        let mut files = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    files.push(path);
                }
            }
        }
        files.sort();
        for path in files {
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            let name = path.file_name().unwrap().to_str().unwrap();
            if name.ends_with(".rules.test.yml") {
                refs.read_rule_tests(&path, &rel);
            } else if name.ends_with(".rules.yml") {
                refs.read_rules(&path, &rel);
            } else if name == "prometheus-rule.yaml" {
                let rule = yaml(&path);
                assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1", "{rel}");
                assert_eq!(rule["kind"], "PrometheusRule", "{rel}");
                refs.operator_groups = Some(rule["spec"]["groups"].clone());
            } else if rel.starts_with("grafana/provisioning/") && name.ends_with(".yaml") {
                // Data source and dashboard providers: no metric in them.
                let provisioning = yaml(&path);
                assert_eq!(provisioning["apiVersion"], 1, "{rel}");
            } else if rel.starts_with("grafana/") && name.ends_with(".json") {
                refs.read_dashboard(&path, &rel);
            } else if name.ends_with(".md") || name.ends_with(".sh") {
                // Prose and the scripts (they name files, not metrics).
            } else {
                panic!("deploy/monitoring/{rel}: a file this test does not know how to check");
            }
        }
        refs
    }

    fn read_rules(&mut self, path: &Path, rel: &str) {
        let rules = yaml(path);
        let groups = rules["groups"].as_array().expect("groups");
        for group in groups {
            for rule in group["rules"].as_array().expect("rules") {
                let expr = rule["expr"].as_str().expect("expr");
                if let Some(record) = rule["record"].as_str() {
                    self.recorded.insert(record.to_owned());
                    self.add_expr(expr, &format!("{rel}: record {record}"), false);
                } else {
                    let alert = rule["alert"].as_str().expect("alert or record");
                    self.add_expr(expr, &format!("{rel}: alert {alert}"), false);
                    let previous = self.alerts.insert(alert.to_owned(), rule.clone());
                    assert!(previous.is_none(), "alert {alert} twice");
                }
            }
        }
        assert!(self.groups.is_none(), "one plain rules file");
        self.groups = Some(rules["groups"].clone());
    }

    fn read_rule_tests(&mut self, path: &Path, rel: &str) {
        let tests = yaml(path);
        for test in tests["tests"].as_array().expect("tests") {
            let place = format!("{rel}: test {}", test["name"]);
            for series in test["input_series"].as_array().expect("input_series") {
                let selector = series["series"].as_str().expect("series");
                let name = selector.split('{').next().unwrap().trim();
                self.add_expr(name, &place, true);
            }
            for case in test["alert_rule_test"].as_array().into_iter().flatten() {
                let alert = case["alertname"].as_str().expect("alertname").to_owned();
                let fires = case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
                let seen = self.tested.entry(alert).or_default();
                if fires {
                    seen.0 = true;
                } else {
                    seen.1 = true;
                }
            }
        }
    }

    fn read_dashboard(&mut self, path: &Path, rel: &str) {
        let dashboard: Value =
            serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{rel} is not JSON: {e}"));
        self.dashboards += 1;
        check_provisioning_ready(&dashboard, rel);
        fn walk(refs: &mut References, node: &Value, place: &str) {
            match node {
                Value::Object(map) => {
                    let place = match map.get("title").and_then(Value::as_str) {
                        Some(title) => format!("{place} › {title}"),
                        None => place.to_owned(),
                    };
                    if let Some(expr) = map.get("expr").and_then(Value::as_str) {
                        refs.add_expr(expr, &place, false);
                    }
                    for value in map.values() {
                        walk(refs, value, &place);
                    }
                }
                Value::Array(values) => values.iter().for_each(|v| walk(refs, v, place)),
                _ => {}
            }
        }
        walk(self, &dashboard["panels"], rel);
        walk(
            self,
            &dashboard["annotations"],
            &format!("{rel} annotations"),
        );
        for variable in dashboard["templating"]["list"].as_array().unwrap() {
            if variable["type"] != "query" {
                continue;
            }
            let place = format!("{rel} variable {}", variable["name"]);
            let query = variable["query"]["query"]
                .as_str()
                .or(variable["query"].as_str())
                .expect("a query variable's query");
            let definition = variable["definition"].as_str().unwrap_or(query);
            assert_eq!(definition, query, "{place}: definition and query differ");
            let promql = variable_promql(query).unwrap_or_else(|e| panic!("{place}: {e}"));
            if let Some(promql) = promql {
                self.add_expr(&promql, &place, false);
            }
        }
    }
}

/// What `grafana-server` needs to load the dashboard from a provisioning
/// folder as it is, on any Prometheus data source.
fn check_provisioning_ready(dashboard: &Value, rel: &str) {
    assert!(
        dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "{rel}: a fixed uid, so links and provisioning updates keep it"
    );
    assert!(dashboard["id"].is_null(), "{rel}: no database id");
    assert!(
        dashboard.get("__inputs").is_none(),
        "{rel}: an export for import (__inputs), not for provisioning"
    );
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("{rel}: no `{name}` variable"))
    };
    assert_eq!(variable("datasource")["type"], "datasource");
    assert_eq!(variable("datasource")["query"], "prometheus");
    for name in ["region", "instance"] {
        assert_eq!(variable(name)["type"], "query", "{rel}: {name}");
    }
    let ours = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});
    let mut ids = BTreeSet::new();
    let mut queries = 0;
    fn panels(list: &Value) -> Vec<&Value> {
        list.as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| std::iter::once(p).chain(panels(&p["panels"])))
            .collect()
    }
    for panel in panels(&dashboard["panels"]) {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(
            ids.insert(panel["id"].as_u64().expect("panel id")),
            "{rel}: panel id of {title} is not unique"
        );
        assert!(
            panel["gridPos"].is_object(),
            "{rel}: {title} has no gridPos"
        );
        if matches!(panel["type"].as_str(), Some("row" | "text")) {
            continue;
        }
        assert_eq!(panel["datasource"], ours, "{rel}: {title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{rel}: {title} queries nothing");
        for target in targets {
            assert_eq!(target["datasource"], ours, "{rel}: {title}");
            queries += 1;
        }
    }
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        assert_eq!(variable["datasource"], ours, "{rel}: {}", variable["name"]);
    }
    assert!(queries > 0, "{rel}: no query");
}

/// The anchors GitHub gives the headings of a Markdown file (outside code
/// blocks, where `#` starts a shell comment).
fn heading_anchors(markdown: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim().to_lowercase();
        anchors.insert(
            heading
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect(),
        );
    }
    anchors
}

/// Everything about deploy/monitoring that needs no running process.
fn check_files(refs: &References) {
    assert_eq!(refs.dashboards, 1, "the Grafana dashboard is read");
    assert!(!refs.alerts.is_empty(), "the alerts are read");
    assert_eq!(
        refs.operator_groups, refs.groups,
        "prometheus-rule.yaml holds the rules file's groups (deploy/monitoring/generate.sh)"
    );
    let readme = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/README.md"));
    let anchors = heading_anchors(&readme);
    for (name, rule) in &refs.alerts {
        let severity = rule["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("warning" | "critical")),
            "{name}: severity {severity:?}"
        );
        for annotation in ["summary", "description"] {
            assert!(
                rule["annotations"][annotation]
                    .as_str()
                    .is_some_and(|s| !s.trim().is_empty()),
                "{name}: no {annotation}"
            );
        }
        let runbook = rule["annotations"]["runbook"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no runbook annotation"));
        let anchor = runbook
            .strip_prefix("deploy/README.md#")
            .unwrap_or_else(|| {
                panic!("{name}: runbook {runbook} is not a deploy/README.md section")
            });
        assert!(
            anchors.contains(anchor),
            "{name}: deploy/README.md has no section #{anchor}"
        );
        assert_eq!(
            refs.tested.get(name),
            Some(&(true, true)),
            "{name}: once.rules.test.yml needs a case that fires it and one that does not"
        );
    }
    for name in refs.tested.keys() {
        assert!(refs.alerts.contains_key(name), "a test of no alert: {name}");
    }
}

#[test]
fn the_rules_the_operator_rule_and_the_dashboard_are_consistent() {
    check_files(&References::read(&monitoring_dir()));
}

// --- What the roles export -----------------------------------------------

/// The sample names a Prometheus text declares in its `# TYPE` lines.
fn declared_samples(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (name, kind) = (words.next().unwrap(), words.next().unwrap());
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "gauge" | "unknown" => &[""],
            "histogram" => &["_bucket", "_sum", "_count"],
            "summary" => &["", "_sum", "_count"],
            "info" => &["_info"],
            other => panic!("a metric type this test does not know: {other} ({name})"),
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    names
}

/// The names of the sample lines of a Prometheus text.
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            l.split(['{', ' '])
                .next()
                .expect("a sample line")
                .to_owned()
        })
        .collect()
}

async fn scrape(client: &reqwest::Client, admin_url: &str) -> String {
    let response = client
        .get(format!("{admin_url}/metrics"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("scraping {admin_url}: {e}"));
    assert_eq!(response.status(), 200, "{admin_url}/metrics");
    response.text().await.unwrap()
}

/// A sample line of `name` whose labels include every one of `labels`.
fn has_sample(text: &str, name: &str, labels: &[&str]) -> bool {
    text.lines().any(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('{') && labels.iter().all(|x| rest.contains(x)))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_rules_use_is_one_the_roles_export() {
    let refs = References::read(&monitoring_dir());
    check_files(&refs);

    let root = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", port_outside_ephemeral_range(&["127.0.0.1"]));
    let up = Up::start(root.path(), &listen).await;
    let cluster = up.cluster.clone();
    // Presents the operator's certificate to the store members.
    let client = crate::up::cluster_http(&cluster);

    // A payment, its replay and a mismatch through the router.
    let router = cluster["router"]["url"].as_str().unwrap();
    let tenant = &cluster["tenants"][0];
    let key = tenant["api_key"].as_str().unwrap();
    let body = payment_body("acc_1", "5.00", "order-monitoring");
    let first = send(post(&client, router, key, Some("k-monitoring"), &body)).await;
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let replay = send(post(&client, router, key, Some("k-monitoring"), &body)).await;
    assert!(replay.replayed);
    let other = payment_body("acc_1", "6.00", "order-monitoring");
    let mismatch = send(post(&client, router, key, Some("k-monitoring"), &other)).await;
    assert_eq!(mismatch.status, 409);

    // Every role's admin listener.
    let mut targets = vec![(
        "router".to_owned(),
        cluster["router"]["admin_url"].as_str().unwrap().to_owned(),
    )];
    for region in cluster["regions"].as_array().unwrap() {
        let name = region["name"].as_str().unwrap();
        for role in ["node", "store"] {
            targets.push((
                format!("{role} {name}"),
                region[role]["admin_url"].as_str().unwrap().to_owned(),
            ));
        }
    }
    let node_texts = || async {
        let mut texts = Vec::new();
        for (target, url) in &targets {
            if target.starts_with("node") {
                texts.push(scrape(&client, url).await);
            }
        }
        texts
    };
    // The ledger consumer settles the payment's event (in-process bus).
    eventually(Duration::from_secs(30), || async {
        node_texts()
            .await
            .iter()
            .any(|t| {
                has_sample(
                    t,
                    "events_consumed_total",
                    &[r#"consumer="ledger""#, r#"outcome="processed""#],
                )
            })
            .then_some(())
    })
    .await;

    // A region cut off from the router (its simulated partition switch): a
    // payment of a tenant homed there is not forwarded
    // (router_node_unreachable), the health checks fail and the router fails
    // the region over (router_region_failovers, router_placement_moves).
    let router_admin = cluster["router"]["admin_url"].as_str().unwrap();
    let admin_token = cluster["admin_tokens"]["router"].as_str().unwrap();
    let away = &cluster["tenants"][1];
    let away_region = away["home_region"].as_str().unwrap();
    assert_ne!(
        away_region, cluster["regions"][0]["name"],
        "the router's own region"
    );
    let set_cut = |regions: Vec<&str>| {
        let request = client
            .post(format!("{router_admin}/admin/partition"))
            .bearer_auth(admin_token)
            .json(&serde_json::json!({ "cut_regions": regions }));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200, "{:?}", response.text().await);
        }
    };
    set_cut(vec![away_region]).await;
    let cut_off = send(post(
        &client,
        router,
        away["api_key"].as_str().unwrap(),
        Some("k-monitoring-cut"),
        &payment_body("acc_1", "7.00", "order-monitoring-cut"),
    ))
    .await;
    assert_eq!(cut_off.status, 503, "not forwarded into the cut");
    let region = format!(r#"region="{away_region}""#);
    eventually(Duration::from_secs(30), || async {
        let text = scrape(&client, router_admin).await;
        (has_sample(&text, "router_region_failovers_total", &[&region])
            && has_sample(
                &text,
                "router_placement_moves_total",
                &[r#"trigger="automatic""#],
            ))
        .then_some(())
    })
    .await;
    set_cut(vec![]).await;

    // The edge's refused and closed connections, on a node of its own with
    // one connection per listener and a 1 s header timeout: a second
    // connection is refused at once, the first is closed when its headers
    // do not come.
    let data = tempfile::tempdir().unwrap();
    let edge_node = NodeProcess::start_in(
        "edge",
        &data.path().join("edge.db").display().to_string(),
        &[],
        &["--max-connections", "1", "--header-read-timeout", "1s"],
        &[],
    )
    .await;
    let public = edge_node.url.strip_prefix("http://").unwrap();
    let held = tokio::net::TcpStream::connect(public).await.unwrap();
    let refused = tokio::net::TcpStream::connect(public).await.unwrap();
    eventually(Duration::from_secs(30), || async {
        let text = scrape(&client, &edge_node.admin_url).await;
        (has_sample(
            &text,
            "edge_connections_refused_total",
            &[r#"listener="public""#],
        ) && has_sample(
            &text,
            "edge_connections_closed_total",
            &[r#"listener="public""#, r#"reason="header_timeout""#],
        ))
        .then_some(())
    })
    .await;
    drop((held, refused));
    targets.push(("node (edge limits)".to_owned(), edge_node.admin_url.clone()));

    let mut exported: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut node_text = String::new();
    let mut router_text = String::new();
    let mut store_text = String::new();
    for (target, url) in &targets {
        let text = scrape(&client, url).await;
        let declared = declared_samples(&text);
        let undeclared: Vec<_> = sample_names(&text)
            .into_iter()
            .filter(|n| !declared.contains(n))
            .collect();
        assert!(
            undeclared.is_empty(),
            "{target}: samples whose name no # TYPE line gives: {undeclared:?}"
        );
        for name in declared {
            exported.entry(name).or_default().insert(target.clone());
        }
        if target.starts_with("node") {
            node_text.push_str(&text);
        } else if target == "router" {
            router_text.push_str(&text);
        } else if target.starts_with("store") {
            store_text.push_str(&text);
        }
    }
    for role in ["router", "node", "store"] {
        assert!(
            exported
                .values()
                .any(|targets| targets.iter().any(|t| t.starts_with(role))),
            "no metric from any {role}"
        );
    }

    // The label values the rules and the dashboard filter on are the ones
    // the node and the router write.
    let payments = [r#"method="POST""#, r#"route="/payments""#];
    for outcome in ["executed", "replayed", "conflict"] {
        let outcome = format!(r#"outcome="{outcome}""#);
        assert!(
            has_sample(
                &node_text,
                "http_server_request_duration_seconds_count",
                &[payments[0], payments[1], outcome.as_str()]
            ),
            "no POST /payments answer with {outcome}"
        );
    }
    assert!(has_sample(
        &node_text,
        "http_server_request_duration_seconds_count",
        &[r#"status="409""#]
    ));
    // A member's /metrics reports every group it hosts, each labelled.
    let groups = cluster["store_groups"].as_array().unwrap();
    assert!(!groups.is_empty(), "once up runs groups");
    let labels = groups
        .iter()
        .map(|g| g.as_str().unwrap())
        .chain([once_raft_store::metrics::DIRECTORY_LABEL]);
    for group in labels {
        let group = format!(r#"group="{group}""#);
        for name in [
            "raft_leader_id",
            "raft_term",
            "raft_prevote_campaigns_total",
        ] {
            assert!(
                has_sample(&store_text, name, &[group.as_str()]),
                "no {name} sample with {group}"
            );
        }
    }
    let home = tenant["home_region"].as_str().unwrap();
    assert!(has_sample(
        &router_text,
        "router_requests_total",
        &[&format!(r#"region="{home}""#), r#"status="201""#]
    ));
    for name in [
        "idempotency_replay_count_total",
        "idempotency_conflict_different_request_count_total",
    ] {
        let count: f64 = node_text
            .lines()
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(|v| v.trim().parse::<f64>().unwrap())
            .sum();
        assert!(count >= 1.0, "{name} did not count the request");
    }

    // The check itself: every name used is exported, or recorded by a rule.
    let unknown: Vec<String> = refs
        .uses
        .iter()
        .filter(|u| {
            !exported.contains_key(&u.name) && (u.exported_only || !refs.recorded.contains(&u.name))
        })
        .map(|u| format!("{} ({})", u.name, u.place))
        .collect();
    assert!(
        unknown.is_empty(),
        "deploy/monitoring uses metrics no role exports:\n  {}\nexported: {:?}",
        unknown.join("\n  "),
        exported.keys().collect::<Vec<_>>()
    );
    // Recording rules are named level:metric:operations, never like a
    // metric a role could export.
    for record in &refs.recorded {
        assert!(record.contains(':'), "recording rule {record}");
        assert!(!exported.contains_key(record));
    }

    let status = up.stop().await;
    assert!(status.success(), "{status:?}");
    let status = edge_node.terminate().await;
    assert!(status.success(), "{status:?}");
}
