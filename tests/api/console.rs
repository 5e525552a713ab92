//! The operator console in a real browser against a real `once up` (three
//! regions, every role a process): headless Chromium driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`, installed by `.ci/run`).
//!
//! It checks what an operator relies on: the page asks for the admin token
//! and refuses a wrong one; opened with the URL `once up` prints, it shows
//! the three regions healthy, the store's members and the tenants; a charge
//! whose answer never came while the provider then went out of service
//! shows up as a stuck record, and resolving it from the page works end to
//! end (the audit trail names the operator, and the client's retry replays
//! the stored answer); a chaos drill's report is listed with its verdict
//! and its faults by nemesis; a region killed with SIGKILL shows as down
//! within seconds, and once restarted and awaiting failback it is failed
//! back from the page (the failback trail names the operator; the region is
//! healthy again with its tenants home); and the browser logged no error
//! throughout. Screenshots of each step are kept in
//! `target/test-artifacts/console/` (or `$ONCE_TEST_ARTIFACTS/console/`).
//!
//! Without Chromium or chromedriver the test is skipped locally and fails
//! under CI (`CI` set), like the PostgreSQL ones.

use std::path::PathBuf;
use std::time::Duration;

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::helpers::{eventually, payment_body, post, send};
use crate::up::Up;
use once_test_support::ports::port_outside_ephemeral_range;
use once_test_support::process::{self, Process};

fn artifacts() -> PathBuf {
    let root = std::env::var_os("ONCE_TEST_ARTIFACTS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts"),
        PathBuf::from,
    );
    let dir = root.join("console");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.expect("screenshot");
    std::fs::write(artifacts().join(format!("{name}.png")), png).unwrap();
}

/// `CHROMIUM` or Debian's path.
fn chromium_binary() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// `CHROMEDRIVER` or `chromedriver` on the `PATH`.
fn chromedriver_program() -> String {
    std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into())
}

/// Whether the browser and its WebDriver are here: skipped locally without
/// them, a failure under CI (which installs both).
fn browser_available() -> bool {
    let driver = chromedriver_program();
    let driver_found = if driver.contains('/') {
        std::path::Path::new(&driver).is_file()
    } else {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(&driver).is_file()))
    };
    once_test_support::services::present_or_skipped(
        chromium_binary().is_file() && driver_found,
        "CI must install chromium and chromium-driver so the console's browser test runs",
        "no chromium or chromedriver: skipping the console's browser test \
         (apt-get install chromium chromium-driver)",
    )
}

/// chromedriver on a free port.
async fn chromedriver() -> (Process, String) {
    let port = port_outside_ephemeral_range(&["127.0.0.1"]);
    let mut command = process::command(chromedriver_program());
    command.arg(format!("--port={port}"));
    let (driver, ()) = Process::start(command, "chromedriver", Duration::from_secs(30), |line| {
        line.contains("started successfully").then_some(())
    })
    .await;
    (driver, format!("http://127.0.0.1:{port}"))
}

async fn browser(webdriver: &str) -> Client {
    let capabilities = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium_binary(),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1400,2000"],
        },
        "goog:loggingPrefs": { "browser": "ALL" },
    });
    let Value::Object(capabilities) = capabilities else {
        unreachable!()
    };
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(webdriver)
        .await
        .expect("a WebDriver session in headless Chromium")
}

/// chromedriver's log of the page's console (`goog:loggingPrefs`): not in
/// the W3C protocol, so sent as its own command.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"type": "browser"}).to_string()),
        )
    }
}

/// Every entry the page logged, drained.
async fn browser_log(browser: &Client) -> Vec<Value> {
    let log = browser.issue_cmd(BrowserLog).await.expect("browser log");
    log.as_array().cloned().unwrap_or_default()
}

/// Waits until `css` matches an element, and returns its text.
async fn text_of(browser: &Client, css: &str, limit: Duration) -> String {
    eventually(limit, || async {
        let element = browser.find(Locator::Css(css)).await.ok()?;
        element.text().await.ok()
    })
    .await
}

async fn attribute(browser: &Client, css: &str, name: &str) -> Option<String> {
    let element = browser.find(Locator::Css(css)).await.ok()?;
    element.attr(name).await.ok()?
}

async fn count(browser: &Client, css: &str) -> usize {
    browser
        .find_all(Locator::Css(css))
        .await
        .map_or(0, |all| all.len())
}

/// Leaves `key` `UNKNOWN_REQUIRES_RECOVERY`: the provider records the
/// charge but never answers, and is out of service before anyone can ask
/// it again. Returns the client's answer (202, pending).
async fn leave_unknown(provider: &str, router: &str, api_key: &str, key: &str, body: &str) -> u16 {
    let http = reqwest::Client::new();
    let armed = http
        .post(format!("{provider}/faults"))
        .json(&json!({"mode": "timeout_after_charge", "count": 1}))
        .send()
        .await
        .unwrap();
    assert!(armed.status().is_success());
    let in_flight = tokio::spawn(send(post(&http, router, api_key, Some(key), body)));
    eventually(Duration::from_secs(20), || async {
        let armed: Vec<Value> = http
            .get(format!("{provider}/faults"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        armed.is_empty().then_some(())
    })
    .await;
    let out = http
        .post(format!("{provider}/outage"))
        .send()
        .await
        .unwrap();
    assert!(out.status().is_success());
    in_flight.await.unwrap().status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_shows_the_cluster_resolves_a_record_reads_a_chaos_report_and_fails_a_region_back()
 {
    if !browser_available() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", port_outside_ephemeral_range(&["127.0.0.1"]));
    let up = Up::start(root.path(), &listen).await;
    let cluster = up.cluster.clone();
    let console = cluster["router"]["console_url"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = cluster["admin_tokens"]["router"]
        .as_str()
        .unwrap()
        .to_owned();
    let router = cluster["router"]["url"].as_str().unwrap().to_owned();
    let provider = cluster["provider"]["url"].as_str().unwrap().to_owned();
    let (mut driver, webdriver) = chromedriver().await;
    let browser = browser(&webdriver).await;
    let wait = Duration::from_secs(20);

    // Without a token the page asks for one, and a wrong one is refused.
    browser.goto(&console).await.unwrap();
    let login = browser
        .wait()
        .for_element(Locator::Id("login"))
        .await
        .unwrap();
    assert!(login.is_displayed().await.unwrap());
    browser
        .find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys("not-the-admin-token-at-all")
        .await
        .unwrap();
    browser
        .find(Locator::Css("#login button"))
        .await
        .unwrap()
        .click()
        .await
        .ok();
    let problem = text_of(&browser, "#problem:not([hidden])", wait).await;
    assert!(problem.contains("not accepted"), "{problem}");

    // The URL `once up` prints: the token in the fragment, taken out of the
    // address bar once read.
    browser
        .goto(&format!("{console}#token={token}"))
        .await
        .unwrap();
    eventually(wait, || async {
        (count(&browser, "#regions tr[data-phase='healthy']").await == 3).then_some(())
    })
    .await;
    assert!(
        !login.is_displayed().await.unwrap(),
        "the login form is gone"
    );
    assert!(
        !browser
            .find(Locator::Id("problem"))
            .await
            .unwrap()
            .is_displayed()
            .await
            .unwrap()
    );
    let url = browser.current_url().await.unwrap();
    assert!(!url.as_str().contains(&token), "{url}");
    assert_eq!(count(&browser, "#members tbody tr").await, 3);
    assert_eq!(count(&browser, "#members tr[data-state='Leader']").await, 1);
    let ids: Vec<&str> = cluster["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    eventually(wait, || async {
        let tenants = text_of(&browser, "#tenants tbody", wait).await;
        ids.iter().all(|id| tenants.contains(id)).then_some(())
    })
    .await;
    screenshot(&browser, "1-healthy").await;

    // A stuck record, resolved from the page.
    let refused_resolves = std::sync::atomic::AtomicUsize::new(0);
    let tenant = &cluster["tenants"][0];
    let api_key = tenant["api_key"].as_str().unwrap();
    let body = payment_body("acc_1", "12.00", "order-console");
    let pending = leave_unknown(&provider, &router, api_key, "k-console", &body).await;
    assert_eq!(pending, 202);
    let row = "#records tr[data-key='k-console'][data-status='UNKNOWN_REQUIRES_RECOVERY']";
    text_of(&browser, row, wait).await;
    screenshot(&browser, "2-stuck-record").await;
    eventually(Duration::from_secs(30), || async {
        browser
            .find(Locator::Css(&format!(
                "{row} button[data-outcome='charged']"
            )))
            .await
            .ok()?
            .click()
            .await
            .ok()?;
        let actor = browser.find(Locator::Id("resolve-actor")).await.ok()?;
        actor.clear().await.ok()?;
        actor.send_keys("alice").await.ok()?;
        browser
            .find(Locator::Id("resolve-reason"))
            .await
            .ok()?
            .send_keys("the provider's dashboard shows the charge")
            .await
            .ok()?;
        browser
            .find(Locator::Id("resolve-confirm"))
            .await
            .ok()?
            .click()
            .await
            .ok()?;
        // A recovery pass may hold the record for a moment (409): the
        // operator tries again, as the page says.
        // The page clears the last attempt's outcome when it sends this one.
        let outcome = eventually(Duration::from_secs(10), || async {
            attribute(&browser, "#resolve-result", "data-outcome").await
        })
        .await;
        if outcome != "resolved" {
            let said = text_of(&browser, "#resolve-result", wait).await;
            eprintln!("the resolve was {outcome}: {said}");
            if said.contains("IDEMPOTENCY_REQUEST_IN_PROGRESS") {
                refused_resolves.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        (outcome == "resolved").then_some(())
    })
    .await;
    let trail = text_of(&browser, "#resolutions li[data-key='k-console']", wait).await;
    assert!(
        trail.contains("alice") && trail.contains("charged"),
        "{trail}"
    );
    eventually(wait, || async {
        (count(&browser, "#records tr[data-key='k-console']").await == 0).then_some(())
    })
    .await;
    let form = browser.find(Locator::Id("resolve")).await.unwrap();
    assert!(
        !form.is_displayed().await.unwrap(),
        "the resolve form closes"
    );
    screenshot(&browser, "3-resolved").await;
    let http = reqwest::Client::new();
    http.delete(format!("{provider}/outage"))
        .send()
        .await
        .unwrap();
    // The verdict is the stored answer: the client's retry replays it.
    let retry = send(post(&http, &router, api_key, Some("k-console"), &body)).await;
    assert_eq!(
        retry.status,
        201,
        "{}",
        String::from_utf8_lossy(&retry.body)
    );
    assert!(retry.replayed);

    // A chaos drill's report (written next to cluster.json, where the
    // console reads drills), listed as it is: its verdict and its faults by
    // nemesis, not "unreadable".
    let chaos = tokio::process::Command::new(crate::helpers::ONCE)
        .args(["drill", "chaos", "--nemesis", "pause", "--duration", "2"])
        .args([
            "--rate", "4", "--seed", "7", "--lease", "2s", "--grace", "20",
        ])
        .arg("--cluster")
        .arg(up.dir.join("cluster.json"))
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let chaos_dir = std::fs::read_dir(&up.dir)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("chaos-"))
        .unwrap_or_else(|| {
            panic!(
                "the chaos drill wrote its report: {}",
                String::from_utf8_lossy(&chaos.stderr)
            )
        });
    let chaos_name = chaos_dir.file_name().to_string_lossy().into_owned();
    let chaos_report: Value =
        serde_json::from_slice(&std::fs::read(chaos_dir.path().join("report.json")).unwrap())
            .unwrap();
    let listed = format!(".drill[data-name='{chaos_name}'][data-kind='chaos']");
    let shown = text_of(&browser, &format!("{listed} h3"), wait).await;
    assert!(
        shown.contains(chaos_report["verdict"].as_str().unwrap())
            && shown.contains(&format!("seed {}", chaos_report["seed"])),
        "{shown}"
    );
    assert_eq!(
        attribute(&browser, &listed, "data-passed").await.as_deref(),
        Some(if chaos.status.success() {
            "true"
        } else {
            "false"
        }),
        "the page's verdict is the run's exit status"
    );
    let nemeses = text_of(&browser, &format!("{listed} table.nemeses tbody"), wait).await;
    assert!(nemeses.contains("pause"), "{nemeses}");
    screenshot(&browser, "4-chaos-report").await;

    // A region killed outright shows as down within seconds.
    let victim = cluster["regions"][2].clone();
    let region = victim["name"].as_str().unwrap();
    let killed_at = std::time::Instant::now();
    for role in ["node", "store"] {
        let pid = victim[role]["pid"].as_i64().unwrap() as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    }
    let phase = eventually(wait, || async {
        let phase = attribute(
            &browser,
            &format!("#regions tr[data-region='{region}']"),
            "data-phase",
        )
        .await?;
        ["down", "failed-over"]
            .contains(&phase.as_str())
            .then_some(phase)
    })
    .await;
    eprintln!(
        "console shows {region} {phase} {} ms after SIGKILL",
        killed_at.elapsed().as_millis()
    );
    eventually(wait, || async {
        (count(&browser, "#members tr[data-state='unreachable']").await == 1).then_some(())
    })
    .await;
    screenshot(&browser, "5-region-down").await;

    // Restarted, it awaits failback; the operator fails it back from the
    // page, naming themselves and why.
    let control = once_drill::control::Control::new(
        &serde_json::from_value(cluster["control"].clone()).unwrap(),
    )
    .unwrap();
    control.restart_region(region).await.unwrap();
    let button = format!("#regions tr[data-region='{region}'] button[data-region='{region}']");
    eventually(Duration::from_secs(90), || async {
        (attribute(
            &browser,
            &format!("#regions tr[data-region='{region}']"),
            "data-phase",
        )
        .await?
            == "awaiting-failback")
            .then_some(())
    })
    .await;
    screenshot(&browser, "6-awaiting-failback").await;
    // Without a name it is refused, and nothing moves or is audited.
    let refused = reqwest::Client::new()
        .post(format!(
            "{}/console/api/failback",
            cluster["router"]["admin_url"].as_str().unwrap()
        ))
        .bearer_auth(&token)
        .json(&json!({"region": region, "actor": "  ", "reason": "why not"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let said: Value = refused.json().await.unwrap();
    assert_eq!(said["errorCode"], "VALIDATION_FAILED", "{said}");
    assert!(
        said["message"].as_str().unwrap().contains("actor"),
        "{said}"
    );
    let state: Value = reqwest::Client::new()
        .get(format!(
            "{}/console/api/state",
            cluster["router"]["admin_url"].as_str().unwrap()
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        state["failbacks"],
        json!([]),
        "a refused action is not audited"
    );
    let phase = state["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == region)
        .map(|r| r["phase"].clone());
    assert_eq!(phase, Some(json!("awaiting-failback")), "nothing moved");
    browser
        .find(Locator::Css(&button))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let actor = browser.find(Locator::Id("failback-actor")).await.unwrap();
    actor.clear().await.unwrap();
    actor.send_keys("bob").await.unwrap();
    browser
        .find(Locator::Id("failback-reason"))
        .await
        .unwrap()
        .send_keys("healthy for a while after the restart")
        .await
        .unwrap();
    browser
        .find(Locator::Id("failback-confirm"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let outcome = eventually(wait, || async {
        attribute(&browser, "#failback-result", "data-outcome").await
    })
    .await;
    assert_eq!(
        outcome,
        "failed-back",
        "{}",
        text_of(&browser, "#failback-result", wait).await
    );
    let trail = text_of(
        &browser,
        &format!("#failbacks li[data-region='{region}']"),
        wait,
    )
    .await;
    assert!(
        trail.contains("bob")
            && trail.contains("healthy for a while")
            && trail.contains("failed back"),
        "{trail}"
    );
    eventually(wait, || async {
        let phase = attribute(
            &browser,
            &format!("#regions tr[data-region='{region}']"),
            "data-phase",
        )
        .await?;
        (phase == "healthy").then_some(())
    })
    .await;
    assert_eq!(
        count(&browser, &button).await,
        0,
        "no failback offered once home"
    );
    screenshot(&browser, "7-failed-back").await;

    let errors: Vec<Value> = browser_log(&browser)
        .await
        .into_iter()
        .filter(|entry| entry["level"] == "SEVERE")
        .collect();
    // The refused token answered 401 on purpose, and a resolve a recovery
    // pass held answered 409 (the operator tried again); nothing else may
    // fail.
    let mut held = refused_resolves.into_inner();
    let unexpected: Vec<&Value> = errors
        .iter()
        .filter(|e| {
            let message = e["message"].as_str().unwrap_or_default();
            if held > 0 && message.contains("/console/api/resolve") && message.contains("409") {
                held -= 1;
                return false;
            }
            !message.contains("401")
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "browser console errors: {unexpected:?}"
    );

    browser.close().await.unwrap();
    driver.kill().await;
    let status = up.stop().await;
    assert!(status.success(), "{status:?}");
}
