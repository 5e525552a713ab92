//! A router's admin API as the tests drive it (with
//! [`ROUTER_ADMIN_TOKEN`]): its simulated partition switch and its view of
//! the regions' health.

use serde_json::{Value, json};

use crate::client::{json_of, send};
use crate::fixtures::ROUTER_ADMIN_TOKEN;

/// The admin listener of a router, in-process or a real `once router`.
#[derive(Debug, Clone)]
pub struct RouterAdmin {
    /// `http://host:port` of the admin listener.
    pub url: String,
    client: reqwest::Client,
}

impl RouterAdmin {
    pub fn new(url: String) -> Self {
        Self {
            url,
            client: reqwest::Client::new(),
        }
    }

    /// `POST /admin/partition {"cut_regions": regions}`, which must answer
    /// 200: the switch's state after.
    pub async fn cut(&self, regions: &[&str]) -> Value {
        let answer = send(
            self.client
                .post(format!("{}/admin/partition", self.url))
                .bearer_auth(ROUTER_ADMIN_TOKEN)
                .json(&json!({ "cut_regions": regions })),
        )
        .await;
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        answer.json()
    }

    /// Whether the router's health checks have `region` up.
    pub async fn region_up(&self, region: &str) -> bool {
        let view: Value = json_of(
            self.client
                .get(format!("{}/admin/placements", self.url))
                .bearer_auth(ROUTER_ADMIN_TOKEN),
        )
        .await;
        view["regions"]
            .as_array()
            .expect("regions")
            .iter()
            .any(|r| r["region"] == region && r["up"] == true)
    }
}
