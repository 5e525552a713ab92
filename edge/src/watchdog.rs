//! A connection's watchdog: what it knows of the connection (bytes read
//! and written, requests in flight, when the current head began), updated
//! with atomics and no wake-ups by the socket wrapper [`Watched`] and the
//! request handler, and when the connection must close and why. The
//! connection driver in [`crate::server`] sleeps until [`Activity::due`]
//! says to look again.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::limits::ServerLimits;
use crate::peers::PRESSED_IDLE;

#[derive(Debug, Clone, Copy)]
pub(crate) enum CloseReason {
    HeaderTimeout,
    IdleTimeout,
    /// Idle for [`PRESSED_IDLE`] while the listener was near its cap
    /// (`crate::peers`): idle connections are the first to go.
    ShedIdle,
    /// No TLS session within the header timeout: plain HTTP, no or a
    /// foreign client certificate, or too slow.
    TlsHandshake,
}

impl CloseReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::HeaderTimeout => "header_timeout",
            Self::IdleTimeout => "idle_timeout",
            Self::ShedIdle => "shed_idle",
            Self::TlsHandshake => "tls_handshake",
        }
    }
}

/// What the watchdog needs to know about a connection, updated by the IO
/// wrapper and the request handler with atomics and no wake-ups: the
/// watchdog looks again at least every `min(header, idle)` timeout, so a
/// head that starts on an idle kept-alive connection is timed out within
/// the header timeout plus that (exactly the header timeout for a
/// connection's first request, whose clock starts at accept), and an idle
/// connection within the idle timeout plus that. Times are milliseconds since
/// `born`.
pub(crate) struct Activity {
    born: Instant,
    in_flight: AtomicUsize,
    /// Last byte read or written, or last answer made.
    last: AtomicU64,
    /// 1 + when the current request's head began; 0 while none is being read.
    head_started: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            // The first request's header clock starts at accept.
            head_started: AtomicU64::new(1),
        }
    }

    fn now(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    pub(crate) fn at(&self, ms: u64) -> Instant {
        self.born + Duration::from_millis(ms)
    }

    pub(crate) fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_started.store(0, Ordering::Release);
    }

    pub(crate) fn request_finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.last.store(self.now(), Ordering::Release);
    }

    fn bytes_read(&self) {
        let now = self.now();
        self.last.store(now, Ordering::Release);
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let _ =
                self.head_started
                    .compare_exchange(0, now + 1, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    fn bytes_written(&self) {
        self.last.store(self.now(), Ordering::Release);
    }

    /// When to look again, or why the connection must close now. `pressed`:
    /// the listener is near its cap, and an idle connection goes after
    /// [`PRESSED_IDLE`] (the driver looks again as soon as that changes).
    pub(crate) fn due(&self, limits: &ServerLimits, pressed: bool) -> Result<Instant, CloseReason> {
        let now = self.now();
        let ms = |d: Duration| d.as_millis() as u64;
        let (idle_timeout, idle_reason) = if pressed && PRESSED_IDLE < limits.idle_timeout {
            (PRESSED_IDLE, CloseReason::ShedIdle)
        } else {
            (limits.idle_timeout, CloseReason::IdleTimeout)
        };
        // Nothing else wakes the watchdog early, so it looks again at least
        // this often: a head that starts, or a request that ends, is seen in
        // time for whichever of the two timeouts is shorter.
        let look_again = now + ms(limits.header_read_timeout.min(idle_timeout));
        if self.in_flight.load(Ordering::Acquire) > 0 {
            // The request's own deadlines apply; look again later.
            return Ok(self.at(look_again));
        }
        let head = self.head_started.load(Ordering::Acquire);
        if head > 0 {
            let due = head - 1 + ms(limits.header_read_timeout);
            return if now >= due {
                Err(CloseReason::HeaderTimeout)
            } else {
                Ok(self.at(due.min(look_again)))
            };
        }
        let due = self.last.load(Ordering::Acquire) + ms(idle_timeout);
        if now >= due {
            Err(idle_reason)
        } else {
            Ok(self.at(due.min(look_again)))
        }
    }
}

/// The socket, reporting reads and writes to the watchdog.
pub(crate) struct Watched {
    pub(crate) inner: TcpStream,
    pub(crate) activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.bytes_written();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.bytes_written();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
