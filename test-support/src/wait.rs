//! Waiting for a state, never for a time: each wait polls what it waits for
//! every 50 ms and fails the test once its deadline has passed. A probe
//! already running at the deadline is let finish (and may still succeed).

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

const POLL: Duration = Duration::from_millis(50);

/// Polls `probe` until it returns `Some`, failing after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll("condition not reached", limit, probe).await
}

/// Polls `condition` until it holds, failing after `limit` with `what`.
pub async fn until<F, Fut>(what: &str, limit: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let never = format!("never: {what}");
    let probe = || {
        let holds = condition();
        async move { holds.await.then_some(()) }
    };
    poll(never, limit, probe).await
}

/// Waits until `GET url` answers 2xx (a `/readyz`, say).
pub async fn http_ready(client: &reqwest::Client, url: &str, limit: Duration) {
    let probe = || async {
        let answer = client.get(url).send().await.ok()?;
        answer.status().is_success().then_some(())
    };
    poll(format!("{url} ready"), limit, probe).await
}

async fn poll<T, F, Fut>(what: impl Display, limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within {limit:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}
