//! A TCP proxy in front of one Redis server that can lose one reply: the
//! next registration (`EVALSHA`) passes through and Redis executes it, but
//! its reply is swallowed and the client's connection closed, as when a
//! connection drops with a command in flight. It then watches for the same
//! command again (a re-send). Plain threads and `std::net`, so it runs
//! beside any runtime.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// One command: its arguments.
type Frame = Vec<Vec<u8>>;

#[derive(Default)]
struct State {
    armed: AtomicBool,
    /// The registration whose reply was lost.
    lost: Mutex<Option<Frame>>,
    /// How many times it was sent again afterwards.
    resent: AtomicUsize,
    connections: AtomicUsize,
}

/// The proxy; its threads end with the process.
pub(crate) struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
}

impl Proxy {
    /// Listens on a free port of `127.0.0.1`, forwarding to `upstream`.
    pub(crate) fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address");
        let state = Arc::new(State::default());
        let shared = state.clone();
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                shared.connections.fetch_add(1, Ordering::SeqCst);
                forward(client, server, shared.clone());
            }
        });
        Self { addr, state }
    }

    /// `redis://` URL of the proxy.
    pub(crate) fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Loses the reply of the next registration and closes its connection.
    pub(crate) fn lose_next_reply(&self) {
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// Whether a registration was executed and its reply lost.
    pub(crate) fn lost(&self) -> bool {
        self.state.lost.lock().unwrap().is_some()
    }

    /// How many times the registration whose reply was lost was sent again.
    pub(crate) fn resent(&self) -> usize {
        self.state.resent.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }
}

fn forward(client: TcpStream, server: TcpStream, state: Arc<State>) {
    let swallow = Arc::new(AtomicBool::new(false));
    let (mut from_client, mut to_server) =
        (client.try_clone().unwrap(), server.try_clone().unwrap());
    let flag = swallow.clone();
    thread::spawn(move || {
        let mut pending = Vec::new();
        let mut buf = [0; 16 * 1024];
        while let Ok(read @ 1..) = from_client.read(&mut buf) {
            pending.extend_from_slice(&buf[..read]);
            while let Some((frame, used)) = parse(&pending) {
                pending.drain(..used);
                inspect(&state, &flag, frame);
            }
            if to_server.write_all(&buf[..read]).is_err() {
                break;
            }
        }
        let _ = to_server.shutdown(Shutdown::Both);
    });
    let (mut from_server, mut to_client) = (server, client);
    thread::spawn(move || {
        let mut buf = [0; 16 * 1024];
        while let Ok(read @ 1..) = from_server.read(&mut buf) {
            if swallow.load(Ordering::SeqCst) {
                break; // the reply is lost with the connection
            }
            if to_client.write_all(&buf[..read]).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(Shutdown::Both);
        let _ = from_server.shutdown(Shutdown::Both);
    });
}

/// Arms the loss on the next `EVALSHA`, and counts re-sends of the lost one.
fn inspect(state: &State, swallow: &AtomicBool, frame: Frame) {
    let mut lost = state.lost.lock().unwrap();
    if lost.as_ref() == Some(&frame) {
        state.resent.fetch_add(1, Ordering::SeqCst);
    } else if frame[0].eq_ignore_ascii_case(b"EVALSHA") && state.armed.swap(false, Ordering::SeqCst)
    {
        swallow.store(true, Ordering::SeqCst);
        *lost = Some(frame);
    }
}

/// One complete RESP array of bulk strings at the start of `bytes`, and its
/// length.
fn parse(bytes: &[u8]) -> Option<(Frame, usize)> {
    let line = |at: usize| -> Option<(&[u8], usize)> {
        let end = at + bytes.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((&bytes[at + 1..end], end + 2))
    };
    let number = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<usize>().ok();
    let (count, mut at) = line(0)?;
    let mut frame = Vec::new();
    for _ in 0..number(count)? {
        let (len, start) = line(at)?;
        let end = start + number(len)?;
        frame.push(bytes.get(start..end)?.to_vec());
        at = end + 2;
    }
    (bytes.len() >= at).then_some((frame, at))
}
