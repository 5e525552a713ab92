//! Reading a Prometheus text page (`{url}/metrics`), as the tests check
//! what a role counted.

/// A metric's value, the sample whose name (labels included) is exactly
/// `name`; 0 when absent.
pub async fn metric(client: &reqwest::Client, url: &str, name: &str) -> f64 {
    scrape(client, url)
        .await
        .lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0.0)
}

/// The sum of a metric's samples whose line contains `filter` (a label, say).
pub async fn metric_sum(client: &reqwest::Client, url: &str, name: &str, filter: &str) -> f64 {
    scrape(client, url)
        .await
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The whole page.
pub async fn scrape(client: &reqwest::Client, url: &str) -> String {
    client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
