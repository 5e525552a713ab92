//! One HTTP attempt: the request as it goes out (the same on every attempt
//! but for the `traceparent` span), the answer as it comes back, and the
//! observer told about it.

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use once_domain::IdempotencyKey;
use reqwest::Method;
use reqwest::header::{self, HeaderMap};
use serde::Deserialize;
use url::Url;

use crate::client::Client;
use crate::error::AttemptError;
use crate::observer::Attempt;
use crate::trace::TraceParent;

/// `X-Once-Region`: the region whose node answered, added by the router.
pub const REGION_HEADER: &str = "x-once-region";
/// `Idempotent-Replayed: true` on a stored answer.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// A logical call's request, fixed before its first attempt.
#[derive(Debug)]
pub(crate) struct Request {
    pub operation: &'static str,
    pub method: Method,
    pub url: Url,
    pub idempotency_key: Option<IdempotencyKey>,
    /// Serialized once: every attempt sends these bytes.
    pub body: Option<Bytes>,
    pub trace: TraceParent,
    /// An end earlier than the client's deadline per call, if the caller
    /// set one.
    pub until: Option<tokio::time::Instant>,
}

/// A whole answer: status line, the headers the client reads, body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: Bytes,
    pub region: Option<String>,
    pub replayed: bool,
    pub retry_after: Option<Duration>,
}

/// What an error body (or a `202`, or a payment) says, read leniently: a
/// proxy's HTML page or an empty `431` still has to be reported.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Said {
    pub error_code: Option<String>,
    pub message: Option<String>,
    pub payment_id: Option<String>,
    pub id: Option<String>,
}

impl Answer {
    pub fn said(&self) -> Said {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }

    /// The error's message, or the start of whatever body came.
    pub fn message(&self) -> String {
        self.said().message.unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&self.body);
            text.chars().take(200).collect()
        })
    }
}

/// Sends one attempt, bounded by `timeout` from connect to the body's last
/// byte, and tells the observer what happened.
pub(crate) async fn send(
    client: &Client,
    request: &Request,
    number: u32,
    timeout: Duration,
) -> Result<Answer, AttemptError> {
    let config = client.config();
    let traceparent = request.trace.for_attempt();
    let mut builder = client
        .http()
        .request(request.method.clone(), request.url.clone())
        .bearer_auth(&config.api_key)
        .header("traceparent", &traceparent)
        .header(header::ACCEPT, "application/json");
    if let Some(key) = &request.idempotency_key {
        builder = builder
            .header("idempotency-key", key.as_str())
            .header("api-version", &config.api_version);
    }
    if let Some(body) = &request.body {
        builder = builder
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.clone());
    }
    let sent_at = SystemTime::now();
    let started = Instant::now();
    let result = match tokio::time::timeout(timeout, exchange(builder)).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) if e.is_timeout() => Err(AttemptError::Timeout(timeout)),
        Ok(Err(e)) => Err(AttemptError::Transport(error_chain(&e))),
        Err(_) => Err(AttemptError::Timeout(timeout)),
    };
    if let Some(observer) = &config.observer {
        let said = result.as_ref().map(Answer::said).unwrap_or_default();
        observer.attempt(&Attempt {
            operation: request.operation,
            idempotency_key: request.idempotency_key.clone(),
            number,
            traceparent,
            sent_at,
            answered_at: SystemTime::now(),
            elapsed: started.elapsed(),
            status: result.as_ref().ok().map(|a| a.status),
            error_code: said.error_code,
            payment_id: said.payment_id.or(said.id),
            transport_error: result.as_ref().err().map(ToString::to_string),
            region: result.as_ref().ok().and_then(|a| a.region.clone()),
            replayed: result.as_ref().is_ok_and(|a| a.replayed),
            retry_after: result.as_ref().ok().and_then(|a| a.retry_after),
            body: result.as_ref().ok().map(|a| a.body.clone()),
        });
    }
    result
}

async fn exchange(builder: reqwest::RequestBuilder) -> Result<Answer, reqwest::Error> {
    let response = builder.send().await?;
    let status = response.status().as_u16();
    let headers = response.headers();
    let region = text(headers, REGION_HEADER).map(str::to_owned);
    let replayed = text(headers, REPLAYED_HEADER) == Some("true");
    let retry_after = text(headers, header::RETRY_AFTER.as_str())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    // A status line without its whole body is no answer: a `201` cut off
    // mid-body is retried, and the retry replays the stored bytes.
    let body = response.bytes().await?;
    Ok(Answer {
        status,
        body,
        region,
        replayed,
        retry_after,
    })
}

fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// reqwest's own message is "error sending request"; the cause (refused,
/// reset, closed) is further down the chain.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
