//! The stream of one worker: the receiving end of the driver's values.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use lease_core::{Assignment, diag};

/// The channel from the driver to its stream: unbounded (the driver never
/// waits for the loop body), with the stream's waker.
#[derive(Debug, Default)]
struct Channel {
    queue: VecDeque<Assignment>,
    waker: Option<Waker>,
    /// The driver ended: the stream ends once the queue is empty.
    closed: bool,
    /// The stream was dropped: the driver stops.
    dropped: bool,
}

pub(crate) fn channel(name: Arc<str>) -> (Sender, Assignments) {
    let shared = Arc::new(Mutex::new(Channel::default()));
    let stream = Assignments {
        rx: Receiver(shared.clone()),
        name,
        done: false,
        _guard: (),
    };
    (Sender(shared), stream)
}

fn lock(shared: &Mutex<Channel>) -> MutexGuard<'_, Channel> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
pub(crate) struct Sender(Arc<Mutex<Channel>>);

impl Sender {
    /// Queues `assignment`; `false` if the stream was dropped.
    pub(crate) fn send(&self, assignment: Assignment) -> bool {
        let waker = {
            let mut c = lock(&self.0);
            if c.dropped {
                return false;
            }
            c.queue.push_back(assignment);
            c.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let waker = {
            let mut c = lock(&self.0);
            c.closed = true;
            c.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The stream of one worker: the receiving end of a [`Driver`](crate::Driver)'s
/// [`Assignment`]s, holding `G` (the worker's task handle, so that dropping
/// the stream stops the worker) for as long as it lives. With the feature
/// `stream` it is a `futures::Stream` (and `FusedStream`); each adapter's
/// `Discover` is one.
///
/// It starts with an idle value, then yields a value each time the set of
/// tasks the worker may work on changes (and an idle value when
/// registrations are refused), never coalescing a release away (see
/// [`Assignment`]). It logs `pair handed to the loop` for each value, and
/// ends after cancellation, having yielded the idle value if anything was
/// held.
#[derive(Debug)]
pub struct Assignments<G = ()> {
    rx: Receiver,
    name: Arc<str>,
    done: bool,
    _guard: G,
}

impl Assignments {
    /// The stream, holding `guard` until it is dropped.
    pub fn with_guard<G>(self, guard: G) -> Assignments<G> {
        Assignments {
            rx: self.rx,
            name: self.name,
            done: self.done,
            _guard: guard,
        }
    }
}

impl<G> Assignments<G> {
    /// The group name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream has ended.
    pub fn is_terminated(&self) -> bool {
        self.done
    }

    /// The next value, as `Stream::poll_next`.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Assignment>> {
        if self.done {
            return Poll::Ready(None);
        }
        let mut c = lock(&self.rx.0);
        if let Some(assignment) = c.queue.pop_front() {
            drop(c);
            let pair = assignment.lease().and_then(lease_core::Lease::newest_pair);
            diag::pair_handed_to_the_loop(&self.name, pair);
            return Poll::Ready(Some(assignment));
        }
        if c.closed {
            self.done = true;
            return Poll::Ready(None);
        }
        match &mut c.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(feature = "stream")]
impl<G: Unpin> futures_core::Stream for Assignments<G> {
    type Item = Assignment;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Assignment>> {
        Assignments::poll_next(self.get_mut(), cx)
    }
}

#[cfg(feature = "stream")]
impl<G: Unpin> futures_core::FusedStream for Assignments<G> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

/// The stream's end of the channel: marks it dropped, so the driver stops.
#[derive(Debug)]
struct Receiver(Arc<Mutex<Channel>>);

impl Drop for Receiver {
    fn drop(&mut self) {
        lock(&self.0).dropped = true;
    }
}
