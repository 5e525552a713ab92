//! HTTP/1.1 written and read raw on a socket: for what a client library
//! would normalise before sending (paths) or never send (half a request),
//! and for watching the server close a connection.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a whole exchange may take.
const EXCHANGE_LIMIT: Duration = Duration::from_secs(10);

/// Sends `request` (one that ends with `Connection: close`) and reads the
/// whole answer, status line, headers and body.
pub async fn exchange(addr: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(EXCHANGE_LIMIT, stream.read_to_string(&mut answer))
        .await
        .unwrap_or_else(|_| panic!("an answer within {EXCHANGE_LIMIT:?}"))
        .unwrap();
    answer
}

/// Whether the server closes `stream` (a read of 0 bytes, or a reset)
/// within `limit`; what it sends before closing (a 408, a 431) is read
/// and passed over.
pub async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .is_ok()
}
