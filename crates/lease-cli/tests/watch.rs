//! `lease watch` (and the task-set view of `lease inspect`) on a real group
//! of five `lease run` workers: each member's share of the buckets, as the
//! view derives it from the closed sets in Redis, is within 0.01 of the
//! share the worker's own lease file says it holds; and in a
//! pseudo-terminal (`script`) the view is redrawn in place.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lease_testkit::{RedisServer, test_interval, unique_name};
use rustix::process::{Pid, Signal, kill_process};

const LEASE: &str = env!("CARGO_BIN_EXE_lease");
const BUCKETS: usize = 1024;

fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn interval() -> String {
    test_interval().as_millis().to_string()
}

fn start(url: &str, name: &str, file: &Path) -> Child {
    Command::new(LEASE)
        .args([
            "run",
            "--redis",
            url,
            "--name",
            name,
            "--interval",
            &interval(),
        ])
        .args(["--buckets", &BUCKETS.to_string(), "--lease-file"])
        .arg(file)
        .args(["--", "sleep", "600"])
        .env_remove("REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("lease run starts")
}

/// The worker's own share, from its lease file.
fn own_share(file: &Path) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    v["held"].as_bool().filter(|h| *h)?;
    Some(v["buckets"].as_array()?.len() as f64 / BUCKETS as f64)
}

fn watch_args<'a>(url: &'a str, name: &'a str, interval: &'a str) -> Vec<&'a str> {
    vec![
        "watch",
        "--redis",
        url,
        "--name",
        name,
        "--interval",
        interval,
        "--buckets",
        "1024",
    ]
}

#[test]
fn watch_shows_each_workers_share_as_its_own_lease_says_and_redraws_in_a_terminal() {
    let server = RedisServer::start().unwrap();
    let name = unique_name("watch");
    let dir: PathBuf = std::env::temp_dir().join(unique_name("lease-watch"));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<PathBuf> = (0..5).map(|i| dir.join(format!("w{i}.json"))).collect();
    let mut runs: Vec<Child> = files
        .iter()
        .map(|f| start(server.url(), &name, f))
        .collect();
    let l = interval();

    // Settled: every file holds tasks and the shares add up to the whole.
    let mut last = String::new();
    let matched = wait_for(test_interval() * 30 + Duration::from_secs(10), || {
        let mut own: Vec<f64> = files.iter().map(|f| own_share(f)).collect::<Option<_>>()?;
        if (own.iter().sum::<f64>() - 1.0).abs() > 1e-9 {
            return None;
        }
        let out = Command::new(LEASE)
            .args(watch_args(server.url(), &name, &l))
            .args(["--json", "--count", "1"])
            .env_remove("REDIS_URL")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        last = view.to_string();
        let tasks = &view["tasks"];
        let mut seen: Vec<f64> = tasks["members"]
            .as_array()?
            .iter()
            .filter(|m| m["k1"][1] == 5)
            .filter_map(|m| m["share"].as_f64())
            .collect();
        // The files again: the group did not change while watch read it.
        let again: Vec<f64> = files.iter().map(|f| own_share(f)).collect::<Option<_>>()?;
        if again != own || seen.len() != 5 || tasks["nobody"].as_f64()? != 0.0 {
            return None;
        }
        own.sort_by(f64::total_cmp);
        seen.sort_by(f64::total_cmp);
        own.iter()
            .zip(&seen)
            .all(|(a, b)| (a - b).abs() <= 0.01)
            .then_some((own, seen))
    });
    let (own, seen) =
        matched.unwrap_or_else(|| panic!("watch never agreed with the workers; last view: {last}"));
    println!("own shares {own:?}, watch's {seen:?}");

    // In a pseudo-terminal: three reads, each clearing the screen first,
    // each with the five members and the share held by nobody.
    let command = format!(
        "{LEASE} {} --count 3 --every 150",
        watch_args(server.url(), &name, &l).join(" ")
    );
    let out = Command::new("script")
        .args(["-qefc", &command, "/dev/null"])
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert_eq!(screen.matches("\x1b[H\x1b[2J").count(), 3, "{screen}");
    let frame = screen.rsplit("\x1b[H\x1b[2J").next().unwrap();
    println!("{frame}");
    assert!(frame.contains("held by nobody: 0.000"), "{frame}");
    assert!(frame.matches(", 5)  ").count() >= 5, "{frame}");

    for run in &runs {
        kill_process(Pid::from_child(run), Signal::TERM).unwrap();
    }
    for run in &mut runs {
        let _ = run.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
