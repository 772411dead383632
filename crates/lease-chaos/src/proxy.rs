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
//! - **lose the next reply**: the next registration (`EVALSHA`/`EVAL`) is
//!   delivered to Redis, and when the reply comes back the connection is
//!   reset instead (a lost reply: Redis executed the request); the proxy
//!   then counts how often the same command is sent again (a client's own
//!   re-send);
//! - the Redis-side address of each connection, for `CLIENT KILL`;
//! - its **upstream**, which can be switched to another server (a failover:
//!   new connections go there, and the link's connections are reset, as a
//!   client following the new primary would reconnect).
//!
//! Commands are recognised by decoding the client's bytes as RESP with
//! `redis-protocol` (the parser fred is built on), so a registration is
//! found however the client's writes are split into chunks.
//!
//! The proxy runs on a small runtime of its own, so that stalling a
//! worker's thread never stalls anyone else's traffic, and so that it can be
//! used beside any runtime, from inside one too (fred's tests use it from
//! tokio). Everything stays on loopback.

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

/// The proxy: one runtime serving every link; new links forward to its
/// upstream, each link to its own (the same unless switched).
#[derive(Debug)]
pub struct Proxy {
    runtime: Option<Runtime>,
    upstream: Mutex<SocketAddr>,
}

impl Proxy {
    /// A proxy to `upstream` (the Redis server).
    pub fn new(upstream: SocketAddr) -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("chaos-proxy")
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
            upstream: Mutex::new(upstream),
        })
    }

    /// Where new links forward to (links made earlier keep theirs; switch
    /// them with [`Link::set_upstream`]).
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self.upstream.lock().unwrap_or_else(|e| e.into_inner()) = upstream;
    }

    /// Where new links forward to.
    pub fn upstream(&self) -> SocketAddr {
        *self.upstream.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new link (a listener on a free loopback port); `seed` drives its
    /// jitter.
    pub fn link(&self, seed: u64) -> io::Result<Link> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let ctl = Arc::new(LinkCtl::new(seed, self.upstream()));
        let accepting = ctl.clone();
        let Some(runtime) = &self.runtime else {
            return Err(io::Error::other("the proxy has shut down"));
        };
        let accept = runtime.spawn(async move {
            let Ok(listener) = TcpListener::from_std(listener) else {
                return;
            };
            loop {
                match listener.accept().await {
                    Ok((client, _)) => {
                        tokio::spawn(serve(client, accepting.clone()));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        });
        Ok(Link { addr, ctl, accept })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Without blocking: a proxy may be dropped inside another runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Latency added to each direction of a link: `one_way` plus a uniform
/// jitter in `[-jitter, +jitter]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Latency {
    /// The delay each way.
    pub one_way: Duration,
    /// The most the delay varies, either way.
    pub jitter: Duration,
}

/// One worker's link (see the module documentation). Dropping it stops
/// accepting and resets its connections.
#[derive(Debug)]
pub struct Link {
    addr: SocketAddr,
    ctl: Arc<LinkCtl>,
    accept: JoinHandle<()>,
}

impl Link {
    /// The URL the worker connects to.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// The address the link listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets or clears the added latency.
    pub fn set_latency(&self, latency: Option<Latency>) {
        self.ctl.state().latency = latency;
    }

    /// Holds every byte in both directions until `until` (or until
    /// [`Link::lift_blackhole`]).
    pub fn blackhole(&self, until: Instant) {
        self.ctl.state().blackhole_until = Some(until);
    }

    /// Lets held bytes through again.
    pub fn lift_blackhole(&self) {
        self.ctl.state().blackhole_until = None;
    }

    /// Loses the reply of the next registration: it reaches Redis, and the
    /// connection is reset when the reply comes back.
    pub fn lose_next_reply(&self) {
        self.ctl.state().reset_armed = true;
    }

    /// Disarms a loss that did not happen; `true` if it was still armed.
    pub fn disarm(&self) -> bool {
        std::mem::take(&mut self.ctl.state().reset_armed)
    }

    /// Whether a registration was executed and its reply lost.
    pub fn lost_reply(&self) -> bool {
        self.ctl.state().lost.is_some()
    }

    /// How many times the registration whose reply was lost was sent again,
    /// the same command byte for byte, afterwards.
    pub fn resent(&self) -> u64 {
        self.ctl.state().resent
    }

    /// Resets every connection of the link now; returns how many.
    pub fn reset_all(&self) -> usize {
        self.ctl.reset_all()
    }

    /// Forwards new connections to `upstream` and resets the link's
    /// connections (to the old one); returns how many were reset.
    pub fn set_upstream(&self, upstream: SocketAddr) -> usize {
        self.ctl.state().upstream = upstream;
        self.ctl.reset_all()
    }

    /// Where the link forwards new connections to.
    pub fn upstream(&self) -> SocketAddr {
        self.ctl.state().upstream
    }

    /// The Redis-side client addresses (`ip:port` as `CLIENT LIST` shows
    /// them) of the link's connections.
    pub fn upstream_addrs(&self) -> Vec<SocketAddr> {
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
    pub fn counts(&self) -> (u64, u64) {
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
    upstream: SocketAddr,
    latency: Option<Latency>,
    blackhole_until: Option<Instant>,
    reset_armed: bool,
    /// The registration whose reply was lost (its arguments).
    lost: Option<Vec<Vec<u8>>>,
    /// How often it was sent again since.
    resent: u64,
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
    fn new(seed: u64, upstream: SocketAddr) -> Self {
        Self {
            state: Mutex::new(LinkState {
                upstream,
                latency: None,
                blackhole_until: None,
                reset_armed: false,
                lost: None,
                resent: 0,
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

    /// Looks at one command the client sent: counts a re-send of the lost
    /// registration, and takes the armed loss if this is a registration
    /// (`true`: its reply must be lost).
    fn inspect(&self, command: Vec<Vec<u8>>) -> bool {
        let mut state = self.state();
        if state.lost.as_ref() == Some(&command) {
            state.resent += 1;
            false
        } else if state.reset_armed && is_registration(&command) {
            state.reset_armed = false;
            state.lost = Some(command);
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
async fn serve(client: TcpStream, ctl: Arc<LinkCtl>) {
    let upstream = ctl.state().upstream;
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
    if ctl.state().upstream != upstream {
        // Switched while this one connected: it must not stay on the old one.
        ctl.deregister(id);
        return;
    }
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
        let mut commands = Commands::default();
        while let Some((at, buf)) = rx.recv().await {
            tokio::time::sleep_until(at.into()).await;
            ctl.wait_blackhole().await;
            match dir {
                Dir::Up => {
                    let mut reset = false;
                    for command in commands.feed(&buf) {
                        reset |= ctl.inspect(command);
                    }
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
        // The reader saw the end: deliver what is still queued, then the
        // end itself, which a blackhole holds like any other byte.
        () = &mut read => {
            write.await;
            ctl.wait_blackhole().await;
        }
    }
}

/// Whether a command is a registration (`EVALSHA` or `EVAL`).
fn is_registration(command: &[Vec<u8>]) -> bool {
    command.first().is_some_and(|name| {
        name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL")
    })
}

/// The commands of one connection's client-to-server byte stream, decoded
/// as RESP2 frames as the bytes arrive (a frame may span chunks).
#[derive(Debug, Default)]
struct Commands {
    pending: Vec<u8>,
    /// The stream is not RESP (a test's raw bytes): stop looking.
    opaque: bool,
}

impl Commands {
    /// The commands completed by `chunk`: each an array of bulk strings.
    fn feed(&mut self, chunk: &[u8]) -> Vec<Vec<Vec<u8>>> {
        use redis_protocol::resp2::decode::decode;
        use redis_protocol::resp2::types::OwnedFrame;
        let mut out = Vec::new();
        if self.opaque {
            return out;
        }
        self.pending.extend_from_slice(chunk);
        loop {
            match decode(&self.pending) {
                Ok(Some((frame, used))) => {
                    self.pending.drain(..used);
                    if let OwnedFrame::Array(items) = frame {
                        let args = items
                            .into_iter()
                            .filter_map(|item| match item {
                                OwnedFrame::BulkString(b) | OwnedFrame::SimpleString(b) => Some(b),
                                _ => None,
                            })
                            .collect();
                        out.push(args);
                    }
                }
                Ok(None) => return out,
                Err(_) => {
                    self.opaque = true;
                    self.pending = Vec::new();
                    return out;
                }
            }
        }
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
    fn switching_the_upstream_resets_the_link_and_reconnects_elsewhere() {
        let (first, second) = (echo_server(), echo_server());
        let proxy = Proxy::new(first).unwrap();
        let link = proxy.link(5).unwrap();
        let mut s = connect(&link);
        assert_eq!(round_trip(&mut s, b"one").unwrap(), b"one");
        let old = link.upstream_addrs();
        assert_eq!(link.set_upstream(second), 1);
        assert_eq!(link.upstream(), second);
        assert!(
            round_trip(&mut s, b"gone").is_err(),
            "the old connection is reset"
        );
        let mut s = connect(&link);
        assert_eq!(round_trip(&mut s, b"two").unwrap(), b"two");
        let new = link.upstream_addrs();
        assert_eq!(new.len(), 1);
        assert_ne!(new, old);
        // New links follow the proxy's upstream.
        proxy.set_upstream(second);
        assert_eq!(proxy.link(6).unwrap().upstream(), second);
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
        link.lose_next_reply();
        // Not a registration: passes.
        let ping = redis::cmd("PING").get_packed_command();
        assert_eq!(round_trip(&mut s, &ping).unwrap(), ping);
        let evalsha = redis::cmd("EVALSHA").arg("abc").arg(0).get_packed_command();
        let err = round_trip(&mut s, &evalsha).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
            ),
            "{err}"
        );
        assert!(!link.disarm(), "the reset was used");
        assert!(link.lost_reply());
        assert_eq!(link.counts().1, 1);
        // A new connection works, and sending the same command again is a
        // re-send; another command is not.
        let mut s = connect(&link);
        assert_eq!(round_trip(&mut s, &evalsha).unwrap(), evalsha);
        assert_eq!(round_trip(&mut s, &ping).unwrap(), ping);
        assert_eq!(link.resent(), 1);
    }

    #[test]
    fn commands_are_decoded_across_chunks() {
        let packed = redis::cmd("EVALSHA")
            .arg("abc")
            .arg(1)
            .arg("k")
            .get_packed_command();
        let mut commands = Commands::default();
        let (a, b) = packed.split_at(7);
        assert!(commands.feed(a).is_empty(), "incomplete");
        let mut both = b.to_vec();
        both.extend_from_slice(&redis::cmd("PING").get_packed_command());
        let got = commands.feed(&both);
        assert_eq!(got.len(), 2);
        assert!(is_registration(&got[0]));
        assert_eq!(got[0][3], b"k");
        assert!(!is_registration(&got[1]));
        // Raw bytes that are not RESP are let through, unexamined.
        let mut raw = Commands::default();
        assert!(raw.feed(b"EVALSHA abc\r\n").is_empty());
        assert!(raw.feed(&packed).is_empty());
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
