//! An HTTP email sink: stands in for the email service in the event-path
//! tests (test support, not shipped in the node library).
//! It records every request it receives and delivers at most one email per
//! `Idempotency-Key` — the dedupe a real email API does on its idempotency
//! token, and the one the sender worker's at-least-once sending relies on.
//!
//! `POST /` with an `Idempotency-Key` and an [`Email`] body: `201` when the
//! email is delivered, `200 {"duplicate": true}` when the token was seen
//! before (nothing delivered), `400` without a token. `GET /` lists what it
//! received and delivered.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde::Serialize;
use tokio::net::TcpListener;

use once_node::events::email_sender::Email;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Received {
    pub token: String,
    pub email: Email,
    /// False when an earlier request had the same token.
    pub delivered: bool,
}

#[derive(Debug, Default)]
struct Inbox {
    received: Vec<Received>,
}

/// A running sink. Dropping it does not stop the server; [`EmailSink::stop`]
/// does.
#[derive(Debug)]
pub struct EmailSink {
    pub url: String,
    inbox: Arc<Mutex<Inbox>>,
    task: tokio::task::JoinHandle<()>,
}

impl EmailSink {
    /// Binds `addr` (port 0 for a free one) and serves in the background.
    pub async fn start(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let url = format!("http://{}/", listener.local_addr()?);
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let app = Router::new()
            .route("/", post(receive).get(list))
            .with_state(inbox.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, inbox, task })
    }

    /// Every request received, in order, duplicates included.
    pub fn received(&self) -> Vec<Received> {
        self.inbox.lock().expect("sink lock").received.clone()
    }

    /// Emails delivered: one per distinct token.
    pub fn delivered(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.delivered)
            .collect()
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

async fn receive(
    State(inbox): State<Arc<Mutex<Inbox>>>,
    headers: HeaderMap,
    Json(email): Json<Email>,
) -> (StatusCode, Json<serde_json::Value>) {
    let Some(token) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.is_empty())
    else {
        return (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": "Idempotency-Key required" })),
        );
    };
    let mut inbox = inbox.lock().expect("sink lock");
    let duplicate = inbox.received.iter().any(|r| r.token == token);
    inbox.received.push(Received {
        token: token.to_owned(),
        email,
        delivered: !duplicate,
    });
    if duplicate {
        (
            StatusCode::OK,
            Json(serde_json::json!({ "duplicate": true })),
        )
    } else {
        (
            StatusCode::CREATED,
            Json(serde_json::json!({ "duplicate": false })),
        )
    }
}

async fn list(State(inbox): State<Arc<Mutex<Inbox>>>) -> Json<Vec<Received>> {
    Json(inbox.lock().expect("sink lock").received.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use once_node::events::email_sender::{EmailSender, HttpEmailSender};

    #[tokio::test]
    async fn the_sink_delivers_one_email_per_token() {
        let sink = EmailSink::start("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let sender = HttpEmailSender::new(&sink.url);
        let email = Email {
            to: "a".into(),
            subject: "s".into(),
            body: "b".into(),
        };
        sender.send("receipt_payment_1", &email).await.unwrap();
        sender.send("receipt_payment_1", &email).await.unwrap();
        sender.send("receipt_payment_2", &email).await.unwrap();
        assert_eq!(sink.received().len(), 3);
        let delivered: Vec<String> = sink.delivered().into_iter().map(|r| r.token).collect();
        assert_eq!(delivered, ["receipt_payment_1", "receipt_payment_2"]);
        sink.stop();
    }
}
