//! Reading a request body: within a size limit (`413`) and within the body
//! read timeout (`408`), counted from the end of the headers and never
//! reset by progress, so a body trickled a byte at a time ends on time too.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::LengthLimitError;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::error::ApiError;

/// The body did not arrive before its deadline.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

pin_project! {
    /// A request body that fails with [`BodyTimedOut`] once its deadline
    /// passes. The server wraps every request body in one. The timer is
    /// made only when the body first has to wait: a body that arrived with
    /// its headers (most do) costs no timer at all.
    pub struct DeadlineBody<B> {
        #[pin]
        inner: B,
        deadline: Instant,
        timer: Option<Pin<Box<Sleep>>>,
        timeout: Duration,
    }
}

impl<B> DeadlineBody<B> {
    pub fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner,
            deadline: Instant::now() + timeout,
            timer: None,
            timeout,
        }
    }
}

impl<B> HttpBody for DeadlineBody<B>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {
                let deadline = *this.deadline;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimedOut(*this.timeout).into()))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The whole body, at most `limit` bytes. A declared `Content-Length` over
/// the limit is refused before a byte is read.
pub async fn read(body: Body, headers: &HeaderMap, limit: usize) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        if let Some(BodyTimedOut(timeout)) = find::<BodyTimedOut>(&e) {
            ApiError::BodyTimeout { timeout: *timeout }
        } else if find::<LengthLimitError>(&e).is_some() {
            ApiError::PayloadTooLarge { limit }
        } else {
            ApiError::MalformedJson(format!("could not read the request body: {e}"))
        }
    })
}

/// The first error of type `T` in `error`'s source chain.
fn find<T: std::error::Error + 'static>(error: &axum::Error) -> Option<&T> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        source = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    /// A body that yields one byte, then never another.
    fn trickle() -> Body {
        let first =
            futures::stream::once(async { Ok::<_, std::io::Error>(Bytes::from_static(b"{")) });
        Body::from_stream(first.chain(futures::stream::pending()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickled_body_ends_at_its_deadline_and_oversized_ones_are_413() {
        let body = Body::new(DeadlineBody::new(trickle(), Duration::from_secs(10)));
        let error = read(body, &HeaderMap::new(), 1024).await.unwrap_err();
        assert!(matches!(error, ApiError::BodyTimeout { .. }), "{error:?}");

        let body = Body::new(DeadlineBody::new(
            Body::from("x".repeat(2000)),
            Duration::from_secs(10),
        ));
        let error = read(body, &HeaderMap::new(), 1024).await.unwrap_err();
        assert!(
            matches!(error, ApiError::PayloadTooLarge { limit: 1024 }),
            "{error:?}"
        );

        let body = Body::new(DeadlineBody::new(Body::from("{}"), Duration::from_secs(10)));
        assert_eq!(read(body, &HeaderMap::new(), 1024).await.unwrap(), "{}");
    }
}
