//! The regional PostgreSQL over TLS, verified (`sslmode=verify-full`):
//! against a throwaway server of the test's own that refuses plaintext and
//! presents a certificate from a CA the test made. A node whose URL names
//! that CA and the certificate's host name connects, migrates and serves a
//! payment over an encrypted session; a wrong CA or a name the certificate
//! does not carry is refused before any query; plaintext is refused by the
//! server.

use once_test_support::postgres_server::{self, PgServer};
use once_test_support::web_pki::WebCa;
use sqlx::Connection;

use crate::helpers::{ACME_KEY, NodeProcess, ONCE, payment_body, post, send};

/// Whether the session at `url` is encrypted, by the server's own account;
/// `Err` with the connection error when it cannot connect.
async fn encrypted(url: &str) -> Result<bool, String> {
    let mut connection = sqlx::PgConnection::connect(url)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let (ssl,): (bool,) =
        sqlx::query_as("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&mut connection)
            .await
            .unwrap();
    Ok(ssl)
}

/// `once migrate --database-url url`: success, or its standard error.
fn migrate(url: &str) -> Result<(), String> {
    let output = std::process::Command::new(ONCE)
        .args(["migrate", "--database-url", url])
        .output()
        .unwrap();
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_is_verified_against_the_ca_and_the_host_name() {
    if !postgres_server::available() {
        return;
    }
    let ca = WebCa::new("once test CA");
    let other_ca = WebCa::new("someone else's CA");
    // For `localhost` only (not `127.0.0.1`).
    let server = PgServer::start_tls_only(&ca.server(&["localhost"]));
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    let other_ca_file = dir.path().join("other-ca.pem");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    std::fs::write(&other_ca_file, &other_ca.cert_pem).unwrap();
    let url = |host: &str, query: &str| {
        format!(
            "postgres://postgres@{host}:{}/postgres?{query}",
            server.port
        )
    };
    let verified = url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", ca_file.display()),
    );

    // The right CA and the certificate's name: encrypted, and `once
    // migrate` (sqlx, as every role connects) gets through.
    assert_eq!(encrypted(&verified).await, Ok(true));
    migrate(&verified).unwrap();

    // A CA that did not sign the server's certificate: refused.
    let wrong_ca = url(
        "localhost",
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            other_ca_file.display()
        ),
    );
    let refused = encrypted(&wrong_ca).await.unwrap_err();
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");
    assert!(migrate(&wrong_ca).is_err());

    // The right CA, but a host name the certificate does not carry.
    let by_address = url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", ca_file.display()),
    );
    let refused = encrypted(&by_address).await.unwrap_err();
    assert!(refused.contains("not valid for name"), "{refused}");

    // Plaintext: the server refuses it.
    let plaintext = encrypted(&url("localhost", "sslmode=disable")).await;
    assert!(plaintext.is_err(), "{plaintext:?}");

    // A node on the verified URL serves a payment.
    let node = NodeProcess::start_in("test", &verified, &[], &[], &[]).await;
    let body = payment_body("acc_1", "9.99", "order-tls");
    let answer = send(post(
        &reqwest::Client::new(),
        &node.url,
        ACME_KEY,
        Some("k-tls"),
        &body,
    ))
    .await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let mut connection = sqlx::PgConnection::connect(&verified).await.unwrap();
    let (payments,): (i64,) = sqlx::query_as("SELECT count(*) FROM payments")
        .fetch_one(&mut connection)
        .await
        .unwrap();
    assert_eq!(payments, 1);
    node.terminate().await;
}
