//! A stand-in for the payments API on port 0 that answers from a script and
//! records every request it received, byte for byte.
//!
//! Each request takes the next [`Step`]; the last step repeats. Besides
//! answers it can fail the way a real deployment fails: close the
//! connection after reading the request, never answer, or send a status
//! line and cut the body off.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What the fake does with one request.
#[derive(Debug, Clone)]
pub enum Step {
    Answer {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// Reads the request, then closes the connection without a byte.
    Drop,
    /// Reads the request and never answers.
    Hang,
    /// `status` and a `Content-Length` the body never reaches.
    CutBody { status: u16 },
}

impl Step {
    pub fn answer(status: u16, body: impl Into<String>) -> Self {
        Self::Answer {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        if let Self::Answer { headers, .. } = &mut self {
            headers.push((name, value.into()));
        }
        self
    }

    /// An error answer in the API's shape.
    pub fn error(status: u16, code: &str) -> Self {
        Self::answer(
            status,
            format!(r#"{{"errorCode":"{code}","message":"fake {code}"}}"#),
        )
    }
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub method: String,
    pub path: String,
    pub idempotency_key: Option<String>,
    pub traceparent: Option<String>,
    pub api_version: Option<String>,
    pub authorization: Option<String>,
    pub body: Bytes,
}

impl Received {
    /// The trace id inside this request's `traceparent`.
    pub fn trace_id(&self) -> &str {
        self.traceparent
            .as_deref()
            .and_then(|t| t.split('-').nth(1))
            .expect("a traceparent")
    }
}

#[derive(Debug, Default)]
struct Script {
    steps: VecDeque<Step>,
    received: Vec<Received>,
}

/// A running fake; stops with the test's runtime.
#[derive(Debug, Clone)]
pub struct FakeApi {
    pub url: String,
    script: Arc<Mutex<Script>>,
}

impl FakeApi {
    pub async fn start(steps: impl IntoIterator<Item = Step>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let fake = Self {
            url,
            script: Arc::new(Mutex::new(Script::default())),
        };
        fake.then(steps);
        let script = fake.script.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let script = script.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| serve(script.clone(), request));
                    // A connection the script drops ends in an error here.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        fake
    }

    /// Replaces what is left of the script.
    pub fn then(&self, steps: impl IntoIterator<Item = Step>) {
        self.script.lock().unwrap().steps = steps.into_iter().collect();
    }

    pub fn received(&self) -> Vec<Received> {
        self.script.lock().unwrap().received.clone()
    }
}

/// Dropping the connection: hyper closes it when the service fails.
#[derive(Debug)]
struct DropConnection;

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("scripted connection drop")
    }
}

impl std::error::Error for DropConnection {}

async fn serve(
    script: Arc<Mutex<Script>>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, DropConnection> {
    let at = Instant::now();
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let mut received = Received {
        at,
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
        idempotency_key: header("idempotency-key"),
        traceparent: header("traceparent"),
        api_version: header("api-version"),
        authorization: header("authorization"),
        body: Bytes::new(),
    };
    received.body = request
        .into_body()
        .collect()
        .await
        .map_err(|_| DropConnection)?
        .to_bytes();
    let step = {
        let mut script = script.lock().unwrap();
        script.received.push(received);
        if script.steps.len() > 1 {
            script.steps.pop_front()
        } else {
            script.steps.front().cloned()
        }
        .expect("the fake has a script")
    };
    match step {
        Step::Answer {
            status,
            headers,
            body,
        } => {
            let mut response = Response::builder()
                .status(status)
                .header("content-type", "application/json");
            for (name, value) in headers {
                response = response.header(name, value);
            }
            Ok(response.body(Full::new(Bytes::from(body))).unwrap())
        }
        Step::Drop => Err(DropConnection),
        Step::Hang => std::future::pending().await,
        Step::CutBody { status } => Ok(Response::builder()
            .status(status)
            .header("content-length", "1024")
            .body(Full::new(Bytes::from_static(b"{\"object\":")))
            .unwrap()),
    }
}

/// A payment body as a node renders it (schema 2).
pub fn payment(id: &str, reference: &str) -> String {
    format!(
        r#"{{"object":"payment","id":"{id}","status":"succeeded","accountId":"acc_1","amount":{{"value":"10.00","currency":"EUR","minorUnits":1000}},"merchantReference":"{reference}","channel":"web","region":"eu","createdAt":"2026-11-29T20:06:36.803Z"}}"#
    )
}
