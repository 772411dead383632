//! A cancellation token that needs no runtime: an atomic flag and an
//! `event-listener` event (smol's own notification primitive).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use event_listener::Event;

/// Cancels workers started with it ([`crate::Options::with_cancel`]): they
/// stand down (the stream yields the idle value once if a lease is held, then
/// ends). Clones share the token; cancelling is for good. Works on any
/// executor.
///
/// ```
/// use lease_smol::CancelToken;
///
/// let stop = CancelToken::new();
/// let seen = stop.clone();
/// assert!(!seen.is_cancelled());
/// stop.cancel();
/// smol::block_on(seen.cancelled()); // already cancelled: returns at once
/// ```
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    cancelled: AtomicBool,
    event: Event,
}

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels the token and wakes everyone waiting on it.
    pub fn cancel(&self) {
        if !self.0.cancelled.swap(true, Ordering::SeqCst) {
            self.0.event.notify(usize::MAX);
        }
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::SeqCst)
    }

    /// Completes once the token is cancelled.
    pub async fn cancelled(&self) {
        while !self.is_cancelled() {
            let listener = self.0.event.listen();
            if self.is_cancelled() {
                return;
            }
            listener.await;
        }
    }
}
