//! Stand-in HTTP servers: an axum router on 127.0.0.1, port 0, serving in
//! the background for the rest of the test.

use std::net::SocketAddr;

/// Serves `app` and returns where.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("stand-in server") });
    addr
}
