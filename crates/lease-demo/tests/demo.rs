//! The demo as a person runs it: the binary, its output, its files.

use std::path::PathBuf;
use std::process::{Command, Output};

use lease_history::read_history;

fn demo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lease-demo"))
        .args(args)
        .output()
        .expect("lease-demo runs")
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lease-demo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Checks a finished run: exit 0, the checker's verdict, a timeline with a
/// bar per holding, a history that parses.
fn check_run(out: &Output, svg: &PathBuf, history: &PathBuf) -> String {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("\nchecker: ok "), "{stdout}");
    let picture = std::fs::read_to_string(svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.trim_end().ends_with("</svg>"));
    let records = read_history(std::io::BufReader::new(
        std::fs::File::open(history).unwrap(),
    ))
    .unwrap();
    let owns = records.iter().filter(|r| r.event() == "own").count();
    assert!(owns >= 15, "{owns} grants");
    assert_eq!(picture.matches(r#"class="hold""#).count(), owns);
    stdout
}

#[test]
fn the_simulator_demo_prints_plain_lines_and_draws_the_run() {
    let (svg, history) = (temp("sim.svg"), temp("sim.jsonl"));
    // Not a terminal: runs as fast as possible and prints plain lines.
    let out = demo(&[
        "--svg",
        svg.to_str().unwrap(),
        "--history",
        history.to_str().unwrap(),
    ]);
    let stdout = check_run(&out, &svg, &history);
    for what in [
        "w0 w1 w2 w3 start",
        "w4 joins",
        "w1 crashes",
        "w2 stalls",
        "Redis restarts",
        "w3 is cancelled",
        "stands down from",
        "owns (0, 4)",
        "while frozen",
    ] {
        assert!(stdout.contains(what), "{what:?} missing from\n{stdout}");
    }
    assert!(!stdout.contains('\x1b'), "no escape codes off a terminal");
    // The same seed replays the same run.
    let again = demo(&["--svg", svg.to_str().unwrap()]);
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.contains("took"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        strip(&stdout.replace(&format!("History: {}\n", history.display()), "")),
        strip(&text(&again).0)
    );
}

#[test]
fn both_counting_modes_pass_the_checker() {
    let (svg, history) = (temp("arrival.svg"), temp("arrival.jsonl"));
    let out = demo(&[
        "--mode",
        "arrival",
        "--seed",
        "3",
        "--svg",
        svg.to_str().unwrap(),
        "--history",
        history.to_str().unwrap(),
    ]);
    check_run(&out, &svg, &history);
}

#[test]
fn help_explains_each_flag() {
    let out = demo(&["--help"]);
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    for flag in [
        "--speed",
        "--fast",
        "--plain",
        "--interval",
        "--mode",
        "--seed",
        "--svg",
        "--history",
        "--redis ",
        "--redis-server",
        "--name",
    ] {
        assert!(stdout.contains(flag), "{flag} missing from --help");
    }
}

#[test]
fn bad_options_exit_2_and_an_unreachable_redis_exits_3_without_its_password() {
    let out = demo(&["--speed", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = demo(&[
        "--name",
        "bad{name}",
        "--svg",
        temp("bad.svg").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
    assert!(text(&out).1.contains("group name"), "{:?}", text(&out));

    let out = demo(&["--redis", "redis://user:hunter2@127.0.0.1:1/"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stderr.contains("Redis unreachable"), "{stderr}");
    assert!(!stdout.contains("hunter2") && !stderr.contains("hunter2"));
    assert!(stderr.contains("redis://user:***@127.0.0.1:1/"), "{stderr}");

    let out = demo(&["--redis", "http://example.invalid/"]);
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
}

#[test]
fn the_same_script_runs_with_real_workers_on_a_private_redis_server() {
    let (svg, history) = (temp("real.svg"), temp("real.jsonl"));
    let interval = lease_testkit::test_interval().as_millis().to_string();
    let out = demo(&[
        "--redis-server",
        "--interval",
        &interval,
        "--svg",
        svg.to_str().unwrap(),
        "--history",
        history.to_str().unwrap(),
    ]);
    let stdout = check_run(&out, &svg, &history);
    assert!(stdout.contains("Redis restarts"), "{stdout}");
    assert!(!stdout.contains("skipped"), "{stdout}");
}

/// `--redis rediss://...`: the demo's check and its real workers connect
/// over TLS, trusting the CA named by `SSL_CERT_FILE`; with another CA the
/// demo stops before starting anything.
#[test]
fn the_same_script_runs_with_real_workers_over_tls() {
    let server = lease_testkit::TlsRedis::start().unwrap();
    let refused = Command::new(env!("CARGO_BIN_EXE_lease-demo"))
        .args(["--redis", server.url()])
        .env("SSL_CERT_FILE", server.other_ca_path())
        .output()
        .expect("lease-demo runs");
    let (_, stderr) = text(&refused);
    assert_eq!(refused.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("UnknownIssuer"), "{stderr}");

    let (svg, history) = (temp("tls.svg"), temp("tls.jsonl"));
    let interval = lease_testkit::test_interval().as_millis().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_lease-demo"))
        .args(["--redis", server.url(), "--interval", &interval, "--svg"])
        .arg(&svg)
        .arg("--history")
        .arg(&history)
        .env("SSL_CERT_FILE", server.ca_path())
        .output()
        .expect("lease-demo runs");
    let stdout = check_run(&out, &svg, &history);
    assert!(stdout.contains("rediss://127.0.0.1:"), "{stdout}");
}
