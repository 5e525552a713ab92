//! The server's limits, each shown to take effect on a real socket: load
//! shedding at the in-flight limit, the whole-request deadline, a panicking
//! handler, the body read deadline, and the header and idle timeouts that
//! close connections. Limits are short so the tests are quick; every wait
//! is for a condition (an answer, a closed socket), bounded by a timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use once_edge::{EdgeMetrics, Server, ServerLimits};
use once_test_support::raw::{closed_within, exchange};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

fn limits() -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_millis(500),
        body_read_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_millis(500),
        request_deadline: Duration::from_secs(2),
        max_in_flight: 1,
        ..ServerLimits::default()
    }
}

async fn serve(router: Router) -> SocketAddr {
    serve_with(router, limits()).await
}

async fn serve_with(router: Router, limits: ServerLimits) -> SocketAddr {
    let server = Server::bind(
        "test",
        "127.0.0.1:0".parse().unwrap(),
        limits,
        EdgeMetrics::default(),
    )
    .await
    .unwrap();
    let addr = server.local_addr();
    tokio::spawn(server.serve(router, std::future::pending(), Duration::from_secs(1)));
    addr
}

fn get_close(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
}

#[tokio::test]
async fn beyond_the_in_flight_limit_requests_are_shed_with_retry_after() {
    // `/hold` takes the listener's only slot until a permit is added.
    let entered = Arc::new(Semaphore::new(0));
    let release = Arc::new(Semaphore::new(0));
    let (e, r) = (entered.clone(), release.clone());
    let router = Router::new().route(
        "/hold",
        get(move || {
            let (e, r) = (e.clone(), r.clone());
            async move {
                e.add_permits(1);
                let _ = r.acquire().await.unwrap();
                "released"
            }
        }),
    );
    let addr = serve(router).await;
    let hold = get_close("/hold");
    let first = tokio::spawn(async move { exchange(addr, &hold).await });
    let _ = entered.acquire().await.unwrap();
    let shed = exchange(addr, &get_close("/hold")).await;
    assert!(shed.starts_with("HTTP/1.1 503"), "{shed}");
    assert!(shed.contains("SERVICE_OVERLOADED"), "{shed}");
    assert!(
        shed.to_ascii_lowercase().contains("retry-after: 1"),
        "{shed}"
    );
    release.add_permits(1);
    assert!(first.await.unwrap().starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_request_past_its_deadline_is_a_503_and_a_panic_is_a_500() {
    let router = Router::new()
        .route("/forever", get(std::future::pending::<&'static str>))
        .route("/panic", get(panicking));
    let addr = serve(router).await;
    let late = exchange(addr, &get_close("/forever")).await;
    assert!(late.starts_with("HTTP/1.1 503"), "{late}");
    assert!(late.to_ascii_lowercase().contains("retry-after"), "{late}");
    let panicked = exchange(addr, &get_close("/panic")).await;
    assert!(panicked.starts_with("HTTP/1.1 500"), "{panicked}");
    assert!(panicked.contains("INTERNAL_ERROR"), "{panicked}");
    // The slot of each was given back: the server still answers.
    let again = exchange(addr, &get_close("/panic")).await;
    assert!(again.starts_with("HTTP/1.1 500"), "{again}");
}

async fn panicking() -> &'static str {
    panic!("a handler bug")
}

async fn echo_length(headers: HeaderMap, body: axum::body::Body) -> Response {
    match once_edge::body::read(body, &headers, 1024).await {
        Ok(bytes) => bytes.len().to_string().into_response(),
        Err(refused) => refused.into_response(),
    }
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_a_408() {
    let addr = serve(Router::new().route("/echo", post(echo_length))).await;
    let answer = exchange(
        addr,
        "POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 10\r\n\r\n12",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
}

#[tokio::test]
async fn silent_and_half_sent_connections_are_closed_by_the_header_timeout() {
    // Idle connections may stay 30 s: only the header timeout can close these.
    let limits = ServerLimits {
        idle_timeout: Duration::from_secs(30),
        ..limits()
    };
    let addr = serve_with(Router::new().route("/", get(|| async { "ok" })), limits).await;
    // Never a byte: the header timeout, counted from accept.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await);
    // A second request's head started on a kept-alive connection and never
    // finished: closed within the header timeout and one look of the watchdog.
    let mut buf = [0u8; 512];
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let n = slow.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    slow.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
    assert!(closed_within(&mut slow, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_by_the_idle_timeout() {
    // Headers may take 30 s: only the idle timeout can close this one.
    let limits = ServerLimits {
        header_read_timeout: Duration::from_secs(30),
        ..limits()
    };
    let addr = serve_with(Router::new().route("/", get(|| async { "ok" })), limits).await;
    let mut buf = [0u8; 512];
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let n = idle.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(closed_within(&mut idle, Duration::from_secs(5)).await);
}

/// `GET path` over a plain socket from a thread of its own, whatever the
/// test's runtime is doing: the status line, or the error.
fn get_blocking(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer.lines().next().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "current_thread")]
async fn a_listener_on_its_own_thread_answers_while_the_roles_runtime_is_stuck() {
    use once_edge::server::serve_together;
    use std::sync::mpsc;

    // The public handler holds the role's only runtime thread until the
    // test lets go: everything else on that runtime waits behind it.
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let released = Arc::new(std::sync::Mutex::new(released));
    let public = Router::new().route(
        "/stuck",
        get(move || {
            let (entered_tx, released) = (entered_tx.clone(), released.clone());
            async move {
                entered_tx.send(()).unwrap();
                let _ = released
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(30));
                "done"
            }
        }),
    );
    let admin = Router::new().route("/healthz", get(|| async { "ok" }));
    let bind = |name| {
        Server::bind(
            name,
            "127.0.0.1:0".parse().unwrap(),
            ServerLimits::default(),
            EdgeMetrics::default(),
        )
    };
    let public_server = bind("public").await.unwrap();
    let own = once_edge::OwnRuntime::start("admin").unwrap();
    let admin_server = bind("admin")
        .await
        .unwrap()
        .on_runtime(own.handle().clone());
    let (public_addr, admin_addr) = (public_server.local_addr(), admin_server.local_addr());
    let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(serve_together(
        vec![(public_server, public), (admin_server, admin)],
        async move {
            let _ = stopping.await;
        },
        Duration::from_secs(1),
    ));

    let probe = std::thread::spawn(move || {
        let stuck = std::thread::spawn(move || get_blocking(public_addr, "/stuck"));
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("the public handler runs");
        // The role's runtime is held now; the admin listener answers anyway.
        let health = get_blocking(admin_addr, "/healthz");
        release.send(()).unwrap();
        (health, stuck.join().unwrap())
    });
    let (health, stuck) = tokio::task::spawn_blocking(move || probe.join().unwrap())
        .await
        .unwrap();
    assert_eq!(health.unwrap(), "HTTP/1.1 200 OK");
    assert_eq!(stuck.unwrap(), "HTTP/1.1 200 OK");
    stop.send(()).unwrap();
    serving.await.unwrap();
}
