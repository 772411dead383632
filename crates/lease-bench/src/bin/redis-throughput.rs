//! Real Redis on loopback: registrations per second through the adapter's
//! request path against `redis-benchmark` running the same script with the
//! same arguments and the same client count, on the same server and machine.
//!
//! The registration is a real one: a [`Worker`] (interval one day, so the
//! interval number stays put for the run) probes the server and produces the
//! `EVALSHA` it would send for the current interval. Our side then sends
//! that command in a closed loop from `C` clients, each with its own
//! connection and one request in flight (as `redis-benchmark -c C` does),
//! built as `lease-redis` builds it and parsed with [`Reply::parse`];
//! `redis-benchmark -c C -n N EVALSHA ...` runs the identical command. A
//! third figure sends from one multiplexed connection with `C` requests in
//! flight (how `lease-redis` drives many groups).
//!
//! Usage: `redis-throughput [--clients C] [--requests N]` (default 50, 200,000).

use lease_bench::Classic as _;
use std::process::Command;
use std::time::{Duration, Instant};

use lease_bench::{Table, header, load_average};
use lease_core::{Identity, Mode, Options, Reply, Script, Worker};
use lease_testkit::RedisServer;
use redis::Value;
use redis::aio::MultiplexedConnection;

/// The keys and arguments of a real registration for the current interval.
async fn registration(conn: &mut MultiplexedConnection, mode: Mode) -> (Vec<String>, Vec<String>) {
    let options: Options = Options::new("tput", Duration::from_secs(86_400)).classic(mode);
    let now = Instant::now();
    let mut w = Worker::new(&options, Identity::seeded(0x7e57, 0), now).expect("valid");
    w.handle_timeout(now);
    for _ in 0..4 {
        let t = w.poll_transmit().expect("a registration is due");
        let (id, keys, args) = (t.id, t.keys.map(str::to_owned).to_vec(), t.args.to_vec());
        if args[2] != "1" {
            return (keys, args);
        }
        // The newcomer's clock probe: answered, it aims at the current interval.
        let value: Value = redis::cmd("EVAL")
            .arg(Script::for_mode(mode).source())
            .arg(2)
            .arg(&keys)
            .arg(&args)
            .query_async(conn)
            .await
            .expect("EVAL");
        let _ = w.handle_reply(Instant::now(), id, &integers(&value));
    }
    panic!("no registration for the current interval");
}

fn integers(value: &Value) -> Vec<i64> {
    match value {
        Value::Array(items) => items
            .iter()
            .map(|v| if let Value::Int(i) = v { *i } else { i64::MIN })
            .collect(),
        _ => Vec::new(),
    }
}

/// One registration as `lease-redis` sends it, parsed as the core does.
async fn register(conn: &mut MultiplexedConnection, mode: Mode, keys: &[String], args: &[String]) {
    let value: Value = redis::cmd("EVALSHA")
        .arg(Script::for_mode(mode).sha1())
        .arg(2)
        .arg(keys)
        .arg(args)
        .query_async(conn)
        .await
        .expect("EVALSHA");
    Reply::parse(mode, 86_400_000, &integers(&value)).expect("a counted reply");
}

/// Registrations per second: `clients` tasks, each sending `per_client`
/// registrations one at a time, on its own connection or all on `shared`.
async fn ours(
    client: &redis::Client,
    shared: Option<&MultiplexedConnection>,
    mode: Mode,
    reg: &(Vec<String>, Vec<String>),
    clients: usize,
    per_client: usize,
) -> f64 {
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        conns.push(match shared {
            Some(c) => c.clone(),
            None => client
                .get_multiplexed_async_connection()
                .await
                .expect("connect"),
        });
    }
    let start = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let (keys, args) = reg.clone();
            tokio::spawn(async move {
                for _ in 0..per_client {
                    register(&mut conn, mode, &keys, &args).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("client task");
    }
    (clients * per_client) as f64 / start.elapsed().as_secs_f64()
}

/// `redis-benchmark`'s requests per second for the same command.
fn redis_benchmark(
    port: u16,
    mode: Mode,
    reg: &(Vec<String>, Vec<String>),
    clients: usize,
    requests: usize,
) -> f64 {
    let bin = std::env::var("REDIS_BENCHMARK_BIN").unwrap_or_else(|_| "redis-benchmark".to_owned());
    let out = Command::new(bin)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args([
            "-c",
            &clients.to_string(),
            "-n",
            &requests.to_string(),
            "-q",
        ])
        .args(["EVALSHA", Script::for_mode(mode).sha1(), "2"])
        .args(&reg.0)
        .args(&reg.1)
        .output()
        .expect("redis-benchmark runs");
    let text = String::from_utf8_lossy(&out.stdout);
    // "EVALSHA ...: 45045.04 requests per second, p50=0.559 msec"
    text.split(['\r', '\n'])
        .filter_map(|l| {
            l.split_once(": ")?
                .1
                .split(" requests per second")
                .next()?
                .trim()
                .parse()
                .ok()
        })
        .next_back()
        .unwrap_or_else(|| panic!("no rate in redis-benchmark's output: {text}"))
}

fn main() {
    let mut clients = 50usize;
    let mut requests = 200_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().and_then(|s| s.parse::<usize>().ok());
        match (a.as_str(), v) {
            ("--clients", Some(v)) => clients = v,
            ("--requests", Some(v)) => requests = v,
            _ => {
                eprintln!("usage: redis-throughput [--clients C] [--requests N]");
                std::process::exit(2);
            }
        }
    }
    header(
        &format!(
            "Real Redis: registrations per second against redis-benchmark ({clients} clients, {requests} requests)"
        ),
        "scripts/bench-redis.sh throughput",
    );
    let rt = lease_bench::redis::runtime(2);
    let mut table = Table::new(&[
        "mode",
        "redis-benchmark (C connections)",
        "lease path (C connections)",
        "ratio",
        "lease path (1 multiplexed connection, C in flight)",
        "ratio",
        "machine load average (start, end)",
    ]);
    let per_client = requests / clients;
    for mode in [Mode::Ranked, Mode::Arrival] {
        let server = RedisServer::start().expect("redis-server starts");
        let client = redis::Client::open(server.url()).expect("url");
        let load_before = load_average();
        let (reg, many, one) = rt.block_on(async {
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("connect");
            let reg = registration(&mut conn, mode).await;
            // Warm up the server and the connections.
            ours(&client, None, mode, &reg, clients, per_client / 10).await;
            let many = ours(&client, None, mode, &reg, clients, per_client).await;
            let one = ours(&client, Some(&conn), mode, &reg, clients, per_client).await;
            (reg, many, one)
        });
        // The ceiling: the better of two redis-benchmark runs.
        let theirs = redis_benchmark(server.port(), mode, &reg, clients, requests).max(
            redis_benchmark(server.port(), mode, &reg, clients, requests),
        );
        table.row([
            mode.to_string(),
            format!("{theirs:.0}/s"),
            format!("{many:.0}/s"),
            format!("{:.2}", many / theirs),
            format!("{one:.0}/s"),
            format!("{:.2}", one / theirs),
            format!("{load_before:.1}, {:.1}", load_average()),
        ]);
    }
    table.print();
    println!(
        "The same EVALSHA (keys and arguments of one real registration) on both sides; tokio with 2 worker threads.\n"
    );
}
