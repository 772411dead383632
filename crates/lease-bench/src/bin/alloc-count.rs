//! Heap allocations per registration in steady state (DESIGN section 7,
//! target 0), counted by a `#[global_allocator]` wrapper around the system
//! allocator.
//!
//! A [`Worker`](lease_core::Worker) of a settled group of 5 (slot 2) is
//! driven by hand ([`lease_bench::steady`]): after a warm-up, every
//! registration is `handle_timeout` (the timer fires), `poll_transmit`,
//! `handle_reply` (the renewal), `poll_event` (nothing), `poll_timeout`.
//! Only those calls are counted; building the synthetic reply is not.
//!
//! Usage: `alloc-count [REGISTRATIONS]` (default 100,000).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_bench::steady::{EXEC, RTT, Steady};
use lease_bench::{Table, header};
use lease_core::Mode;

/// Counts allocations (`alloc`, `alloc_zeroed`, `realloc`) and their bytes,
/// then defers to the system allocator.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// The only `unsafe` in the workspace (which forbids it elsewhere): implementing
// `GlobalAlloc` is an unsafe trait by definition. Every method only counts
// and forwards its arguments unchanged to `System`, which upholds the
// contract the caller already promised.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and bytes of one kind of call, summed.
#[derive(Default, Clone, Copy)]
struct Count {
    allocs: u64,
    bytes: u64,
}

fn counted<T>(into: &mut Count, f: impl FnOnce() -> T) -> T {
    let (a, b) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let out = f();
    into.allocs += ALLOCS.load(Ordering::Relaxed) - a;
    into.bytes += BYTES.load(Ordering::Relaxed) - b;
    out
}

const CALLS: [&str; 5] = [
    "handle_timeout",
    "poll_transmit",
    "handle_reply",
    "poll_event",
    "poll_timeout",
];

fn measure(mode: Mode, registrations: u64) -> [Count; 5] {
    let mut s = Steady::new(mode, Duration::from_millis(100), 2, 5);
    for _ in 0..1_000 {
        s.register();
    }
    let mut c = [Count::default(); 5];
    let mut reply = Vec::with_capacity(8);
    let mut events = 0;
    for _ in 0..registrations {
        // The timer fires: first the one due next, until a transmit is ready.
        let sent = loop {
            let at = counted(&mut c[4], || s.worker.poll_timeout()).expect("a timer");
            counted(&mut c[0], || s.worker.handle_timeout(at));
            if let Some(sent) = counted(&mut c[1], || s.take(at)) {
                break sent;
            }
        };
        s.reply_into(&sent, sent.at + EXEC, &mut reply);
        counted(&mut c[2], || {
            s.worker.handle_reply(sent.at + RTT, sent.id, &reply)
        })
        .expect("a well-formed reply");
        events += counted(&mut c[3], || s.drain());
    }
    assert_eq!(events, 0, "{mode}: steady state emits no events");
    c
}

fn main() {
    let registrations: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    // The counter itself works: one allocation of 16 bytes is seen.
    let mut check = Count::default();
    std::hint::black_box(counted(&mut check, || Vec::<u8>::with_capacity(16)));
    assert_eq!((check.allocs, check.bytes), (1, 16), "the allocator counts");
    header(
        "Core: heap allocations per registration in steady state",
        "scripts/bench-core.sh",
    );
    let mut table = Table::new(&[
        "mode",
        "registrations",
        "allocations per registration",
        "bytes per registration",
        "by call (allocations in total)",
    ]);
    for mode in [Mode::Ranked, Mode::Arrival] {
        let c = measure(mode, registrations);
        let allocs: u64 = c.iter().map(|x| x.allocs).sum();
        let bytes: u64 = c.iter().map(|x| x.bytes).sum();
        let by_call = CALLS
            .iter()
            .zip(&c)
            .map(|(name, x)| format!("{name} {}", x.allocs))
            .collect::<Vec<_>>()
            .join(", ");
        table.row([
            mode.to_string(),
            registrations.to_string(),
            format!("{:.3}", allocs as f64 / registrations as f64),
            format!("{:.1}", bytes as f64 / registrations as f64),
            by_call,
        ]);
    }
    table.print();
    println!(
        "After a warm-up of 1,000 registrations; interval 100 ms, slot 2 of 5, replies after {} µs.\n",
        RTT.as_micros()
    );
}
