//! [`ResponseStream`]: progress events, then the complete response (or the error).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use tokio::sync::mpsc;

use super::error::ModelError;
use super::types::{ModelResponse, StreamEvent};

type Driver = Pin<Box<dyn Future<Output = Result<ModelResponse, ModelError>> + Send + 'static>>;

/// The answer to one request, as it streams. Yields [`StreamEvent`]s; the last item is
/// `Ok(StreamEvent::Completed(response))` or `Err(error)`. Nothing runs until it is polled
/// (no task is spawned), and dropping it drops the connection at once.
pub struct ResponseStream {
    rx: mpsc::UnboundedReceiver<StreamEvent>,
    driver: Option<Driver>,
    result: Option<Result<ModelResponse, ModelError>>,
}

impl std::fmt::Debug for ResponseStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseStream")
            .field("running", &self.driver.is_some())
            .finish()
    }
}

impl ResponseStream {
    /// A stream driven by `make(sender)`: events sent on the sender are yielded in order, then
    /// the future's result.
    pub fn new<F, Fut>(make: F) -> Self
    where
        F: FnOnce(mpsc::UnboundedSender<StreamEvent>) -> Fut,
        Fut: Future<Output = Result<ModelResponse, ModelError>> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        ResponseStream {
            rx,
            driver: Some(Box::pin(make(tx))),
            result: None,
        }
    }

    /// A stream of fixed events followed by a fixed result.
    pub fn ready(events: Vec<StreamEvent>, result: Result<ModelResponse, ModelError>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        for event in events {
            let _ = tx.send(event);
        }
        ResponseStream {
            rx,
            driver: None,
            result: Some(result),
        }
    }

    /// The next event; `None` after the final item.
    pub async fn next_event(&mut self) -> Option<Result<StreamEvent, ModelError>> {
        futures_util::StreamExt::next(self).await
    }

    /// Drives the stream to its end and returns the complete response.
    pub async fn response(mut self) -> Result<ModelResponse, ModelError> {
        let mut last = None;
        while let Some(item) = self.next_event().await {
            match item {
                Ok(StreamEvent::Completed(response)) => last = Some(response),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        last.ok_or_else(|| ModelError {
            provider: "model".into(),
            agent: String::new(),
            turn: 0,
            attempts: 0,
            gave_up: super::error::GaveUp::NotRetryable,
            kind: super::error::FailureKind::Truncated {
                expected: "a complete response",
            },
        })
    }
}

impl Stream for ResponseStream {
    type Item = Result<StreamEvent, ModelError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Poll::Ready(Some(event)) = this.rx.poll_recv(cx) {
                return Poll::Ready(Some(Ok(event)));
            }
            if let Some(driver) = this.driver.as_mut() {
                match driver.as_mut().poll(cx) {
                    Poll::Ready(result) => {
                        // Dropping the driver drops its sender: the channel drains, then ends.
                        this.driver = None;
                        this.result = Some(result);
                        continue;
                    }
                    Poll::Pending => return Poll::Pending,
                }
            }
            return Poll::Ready(match this.result.take() {
                Some(Ok(response)) => Some(Ok(StreamEvent::Completed(response))),
                Some(Err(e)) => Some(Err(e)),
                None => None,
            });
        }
    }
}
