//! The in-process TCP proxy between the workers and Redis.
//!
//! Every worker gets a [`Link`]: a listener on `127.0.0.1:0` whose accepted
//! connections are forwarded to the Redis server, with per-link controls:
//!
//! - **latency** with jitter, added to every chunk in each direction (order
//!   is kept, as TCP keeps it);
//! - **blackhole**: nothing is delivered in either direction until it is
//!   lifted; then the held bytes arrive late, or the link's connections are
//!   reset instead (as a TCP connection that gave up would be);
//! - **reset after the request**: the next registration (`EVALSHA`/`EVAL`)
//!   is delivered to Redis, and when the reply comes back the connection is
//!   reset instead (a lost reply: Redis executed the request);
//! - the Redis-side address of each connection, for `CLIENT KILL`.
//!
//! The proxy runs on a small runtime of its own, so that stalling a
//! worker's thread never stalls anyone else's traffic. Everything stays on
//! loopback.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The proxy: one runtime serving every link, all to one upstream.
#[derive(Debug)]
pub(crate) struct Proxy {
    runtime: Runtime,
    upstream: SocketAddr,
}

impl Proxy {
    /// A proxy to `upstream` (the Redis server).
    pub(crate) fn new(upstream: SocketAddr) -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("chaos-proxy")
            .enable_all()
            .build()?;
        Ok(Self { runtime, upstream })
    }

    /// A new link (a listener on a free loopback port); `seed` drives its
    /// jitter.
    pub(crate) fn link(&self, seed: u64) -> io::Result<Link> {
        let listener = self.runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let ctl = Arc::new(LinkCtl::new(seed));
        let upstream = self.upstream;
        let accepting = ctl.clone();
        let accept = self.runtime.spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((client, _)) => {
                        tokio::spawn(serve(client, upstream, accepting.clone()));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        });
        Ok(Link { addr, ctl, accept })
    }
}

/// Latency added to each direction of a link: `one_way` plus a uniform
/// jitter in `[-jitter, +jitter]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Latency {
    pub(crate) one_way: Duration,
    pub(crate) jitter: Duration,
}

/// One worker's link (see the module documentation). Dropping it stops
/// accepting and resets its connections.
#[derive(Debug)]
pub(crate) struct Link {
    addr: SocketAddr,
    ctl: Arc<LinkCtl>,
    accept: JoinHandle<()>,
}

impl Link {
    /// The URL the worker connects to.
    pub(crate) fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Sets or clears the added latency.
    pub(crate) fn set_latency(&self, latency: Option<Latency>) {
        self.ctl.state().latency = latency;
    }

    /// Holds every byte in both directions until `until` (or until
    /// [`Link::lift_blackhole`]).
    pub(crate) fn blackhole(&self, until: Instant) {
        self.ctl.state().blackhole_until = Some(until);
    }

    /// Lets held bytes through again.
    pub(crate) fn lift_blackhole(&self) {
        self.ctl.state().blackhole_until = None;
    }

    /// Arms a reset after the next registration reaches Redis.
    pub(crate) fn arm_reset(&self) {
        self.ctl.state().reset_armed = true;
    }

    /// Disarms a reset that did not happen; `true` if it was still armed.
    pub(crate) fn disarm_reset(&self) -> bool {
        std::mem::take(&mut self.ctl.state().reset_armed)
    }

    /// Resets every connection of the link now; returns how many.
    pub(crate) fn reset_all(&self) -> usize {
        self.ctl.reset_all()
    }

    /// The Redis-side client addresses (`ip:port` as `CLIENT LIST` shows
    /// them) of the link's connections.
    pub(crate) fn upstream_addrs(&self) -> Vec<SocketAddr> {
        let mut addrs: Vec<SocketAddr> = self
            .ctl
            .state()
            .conns
            .values()
            .map(|c| c.upstream_local)
            .collect();
        addrs.sort();
        addrs
    }

    /// Connections accepted so far, and connections reset by a fault.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.ctl.accepted.load(Ordering::Relaxed),
            self.ctl.resets.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.accept.abort();
        self.ctl.reset_all();
    }
}

#[derive(Debug)]
struct Conn {
    upstream_local: SocketAddr,
    kill: CancellationToken,
}

#[derive(Debug)]
struct LinkState {
    latency: Option<Latency>,
    blackhole_until: Option<Instant>,
    reset_armed: bool,
    conns: HashMap<u64, Conn>,
    rng: ChaCha8Rng,
}

#[derive(Debug)]
struct LinkCtl {
    state: Mutex<LinkState>,
    next_conn: AtomicU64,
    accepted: AtomicU64,
    resets: AtomicU64,
}

impl LinkCtl {
    fn new(seed: u64) -> Self {
        Self {
            state: Mutex::new(LinkState {
                latency: None,
                blackhole_until: None,
                reset_armed: false,
                conns: HashMap::new(),
                rng: ChaCha8Rng::seed_from_u64(seed),
            }),
            next_conn: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            resets: AtomicU64::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The delay for one chunk in one direction.
    fn delay(&self) -> Duration {
        let mut state = self.state();
        let Some(latency) = state.latency else {
            return Duration::ZERO;
        };
        let jitter = latency.jitter.as_secs_f64();
        let offset = if jitter > 0.0 {
            state.rng.random_range(-jitter..=jitter)
        } else {
            0.0
        };
        Duration::from_secs_f64((latency.one_way.as_secs_f64() + offset).max(0.0))
    }

    /// Waits while the link is blackholed.
    async fn wait_blackhole(&self) {
        loop {
            let until = self.state().blackhole_until;
            match until {
                Some(until) if until > Instant::now() => {
                    // Re-checked after the sleep: the blackhole may have been
                    // lifted early or extended.
                    let nap = until
                        .saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(5));
                    tokio::time::sleep(nap).await;
                }
                _ => return,
            }
        }
    }

    /// Takes the armed reset if `chunk` carries a registration.
    fn take_reset(&self, chunk: &[u8]) -> bool {
        let mut state = self.state();
        if state.reset_armed && chunk.windows(4).any(|w| w == b"EVAL") {
            state.reset_armed = false;
            true
        } else {
            false
        }
    }

    fn register(&self, upstream_local: SocketAddr, kill: CancellationToken) -> u64 {
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.state().conns.insert(
            id,
            Conn {
                upstream_local,
                kill,
            },
        );
        id
    }

    fn deregister(&self, id: u64) {
        self.state().conns.remove(&id);
    }

    fn reset_all(&self) -> usize {
        let state = self.state();
        for conn in state.conns.values() {
            conn.kill.cancel();
        }
        let n = state.conns.len();
        self.resets.fetch_add(n as u64, Ordering::Relaxed);
        n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// Worker to Redis.
    Up,
    /// Redis to worker.
    Down,
}

/// Forwards one accepted connection until either side closes or the link
/// kills it. Both sockets linger 0, so closing them resets the connection.
async fn serve(client: TcpStream, upstream: SocketAddr, ctl: Arc<LinkCtl>) {
    let _ = client.set_nodelay(true);
    let _ = client.set_zero_linger();
    let server =
        match tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(upstream)).await {
            Ok(Ok(s)) => s,
            _ => return, // Redis is down: the client's connection is reset
        };
    let _ = server.set_nodelay(true);
    let _ = server.set_zero_linger();
    let Ok(upstream_local) = server.local_addr() else {
        return;
    };
    let kill = CancellationToken::new();
    let id = ctl.register(upstream_local, kill.clone());
    let doomed = AtomicBool::new(false);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, &ctl, &doomed, &kill, Dir::Up);
    let down = pump(server_read, client_write, &ctl, &doomed, &kill, Dir::Down);
    tokio::select! {
        () = kill.cancelled() => {}
        () = up => {}
        () = down => {}
    }
    ctl.deregister(id);
}

/// One direction: a reader stamps each chunk with its delivery instant, a
/// writer delivers chunks in order at their instants, outside blackholes.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    ctl: &LinkCtl,
    doomed: &AtomicBool,
    kill: &CancellationToken,
    dir: Dir,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut last = Instant::now();
        loop {
            let mut buf = vec![0u8; 16 * 1024];
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    buf.truncate(n);
                    let at = (Instant::now() + ctl.delay()).max(last);
                    last = at;
                    if tx.send((at, buf)).is_err() {
                        return;
                    }
                }
            }
        }
    };
    let write = async {
        while let Some((at, buf)) = rx.recv().await {
            tokio::time::sleep_until(at.into()).await;
            ctl.wait_blackhole().await;
            match dir {
                Dir::Up => {
                    let reset = ctl.take_reset(&buf);
                    if to.write_all(&buf).await.is_err() {
                        return;
                    }
                    if reset {
                        doomed.store(true, Ordering::SeqCst);
                    }
                }
                Dir::Down => {
                    if doomed.load(Ordering::SeqCst) {
                        // The request reached Redis and was executed; its
                        // reply is lost with the connection.
                        ctl.resets.fetch_add(1, Ordering::Relaxed);
                        kill.cancel();
                        return;
                    }
                    if to.write_all(&buf).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::pin!(read, write);
    tokio::select! {
        () = &mut write => {}
        // The reader saw the end: deliver what is still queued, then stop.
        () = &mut read => write.await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream as StdStream;

    /// A blocking echo server on a free port; returns its address.
    fn echo_server() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if stream.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    fn connect(link: &Link) -> StdStream {
        let s = StdStream::connect(link.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    }

    fn round_trip(s: &mut StdStream, msg: &[u8]) -> io::Result<Vec<u8>> {
        s.write_all(msg)?;
        let mut buf = vec![0u8; msg.len()];
        s.read_exact(&mut buf)?;
        Ok(buf)
    }

    #[test]
    fn forwards_and_reports_the_upstream_address() {
        let proxy = Proxy::new(echo_server()).unwrap();
        let link = proxy.link(1).unwrap();
        let mut s = connect(&link);
        assert_eq!(round_trip(&mut s, b"hello").unwrap(), b"hello");
        assert_eq!(link.upstream_addrs().len(), 1);
        assert!(link.url().starts_with("redis://127.0.0.1:"));
        assert_eq!(link.counts(), (1, 0));
    }

    #[test]
    fn latency_delays_both_directions() {
        let proxy = Proxy::new(echo_server()).unwrap();
        let link = proxy.link(2).unwrap();
        let mut s = connect(&link);
        round_trip(&mut s, b"warm").unwrap();
        link.set_latency(Some(Latency {
            one_way: Duration::from_millis(40),
            jitter: Duration::from_millis(10),
        }));
        let t = Instant::now();
        assert_eq!(round_trip(&mut s, b"slow").unwrap(), b"slow");
        let rtt = t.elapsed();
        assert!(rtt >= Duration::from_millis(60), "{rtt:?}");
        link.set_latency(None);
        let t = Instant::now();
        round_trip(&mut s, b"fast").unwrap();
        assert!(t.elapsed() < Duration::from_millis(40), "{:?}", t.elapsed());
    }

    #[test]
    fn blackhole_holds_bytes_until_lifted() {
        let proxy = Proxy::new(echo_server()).unwrap();
        let link = proxy.link(3).unwrap();
        let mut s = connect(&link);
        round_trip(&mut s, b"warm").unwrap();
        link.blackhole(Instant::now() + Duration::from_secs(30));
        s.write_all(b"held").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(150)))
            .unwrap();
        let mut buf = [0u8; 4];
        assert!(s.read_exact(&mut buf).is_err(), "nothing gets through");
        link.lift_blackhole();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"held", "delivered late");
    }

    #[test]
    fn armed_reset_delivers_the_request_and_loses_the_reply() {
        let proxy = Proxy::new(echo_server()).unwrap();
        let link = proxy.link(4).unwrap();
        let mut s = connect(&link);
        link.arm_reset();
        // Not a registration: passes.
        assert_eq!(round_trip(&mut s, b"PING").unwrap(), b"PING");
        let err = round_trip(&mut s, b"EVALSHA abc").unwrap_err();
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
            ),
            "{err}"
        );
        assert!(!link.disarm_reset(), "the reset was used");
        assert_eq!(link.counts().1, 1);
        // A new connection works.
        let mut s = connect(&link);
        assert_eq!(round_trip(&mut s, b"again").unwrap(), b"again");
    }

    #[test]
    fn reset_all_resets_every_connection() {
        let proxy = Proxy::new(echo_server()).unwrap();
        let link = proxy.link(5).unwrap();
        let mut a = connect(&link);
        let mut b = connect(&link);
        round_trip(&mut a, b"a").unwrap();
        round_trip(&mut b, b"b").unwrap();
        assert_eq!(link.reset_all(), 2);
        assert!(round_trip(&mut a, b"a").is_err());
        assert!(round_trip(&mut b, b"b").is_err());
    }
}
