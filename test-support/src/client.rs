//! The payments API as a client sees it: a request built the way clients
//! send it, and an answer read down to the bytes a replay must repeat.

/// `POST {url}/payments` with `api_key`, a JSON `body` and, if given, an
/// `Idempotency-Key`.
pub fn post(
    client: &reqwest::Client,
    url: &str,
    api_key: &str,
    key: Option<&str>,
    body: &str,
) -> reqwest::RequestBuilder {
    let mut request = client
        .post(format!("{url}/payments"))
        .header("authorization", format!("Bearer {api_key}"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request
}

/// What `http` gets for `GET url` within 5 s: the status, or why there was
/// none (refused, no TLS session, a reset) — for the trust tests, where
/// "no answer at all" is the expected outcome.
pub async fn status_of(http: &reqwest::Client, url: &str) -> Result<u16, String> {
    http.get(url)
        .timeout(std::time::Duration::from_secs(5))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("{e:?}"))
}

/// Sends `request` and reads its body as JSON (both must work; the status
/// is not looked at).
pub async fn json_of<T: serde::de::DeserializeOwned>(request: reqwest::RequestBuilder) -> T {
    request
        .send()
        .await
        .expect("request reaches the server")
        .json()
        .await
        .expect("a JSON body")
}

/// Sends `request` (it must reach the server) and reads the [`Answer`].
pub async fn send(request: reqwest::RequestBuilder) -> Answer {
    Answer::of(request.send().await.expect("request reaches the node")).await
}

/// Status, the headers the contract speaks of, and the exact body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// `Idempotent-Replayed: true`.
    pub replayed: bool,
    pub retry_after: Option<String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub async fn of(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = response.bytes().await.unwrap().to_vec();
        Self {
            status,
            replayed,
            retry_after,
            body,
        }
    }

    /// The body as JSON; panics, showing it, if it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The body's `errorCode` (empty when there is none).
    pub fn error_code(&self) -> String {
        self.json()["errorCode"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// `provider_payment_<id>`, the key the node charges an answer's payment
/// under (its `id`, or a duplicate's `paymentId`).
pub fn provider_key_of(answer: &Answer) -> String {
    let json = answer.json();
    let id = json["id"]
        .as_str()
        .or_else(|| json["paymentId"].as_str())
        .map(str::to_owned);
    format!("provider_payment_{}", id.expect("answer names its payment"))
}
