//! The `lease-chaos` binary end to end, against a real `redis-server` (which
//! it starts itself): a short run with every fault is clean, and a
//! deliberately wrong history (a stalled worker's release written at its
//! wake-up) is caught.

use std::path::PathBuf;
use std::process::{Command, Output};

use lease_history::{Record, read_history};

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("lease-chaos-test-{}-{name}", std::process::id()))
}

fn chaos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lease-chaos"))
        .args(args)
        .output()
        .expect("running lease-chaos")
}

fn last_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_short_run_with_every_fault_is_clean() {
    let history = temp("all.jsonl");
    let svg = temp("all.svg");
    let output = chaos(&[
        "--workers",
        "4",
        "--duration",
        "10",
        "--interval",
        "100",
        "--faults",
        "all",
        "--seed",
        "2",
        "--history",
        history.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = last_line(&output);
    assert!(
        output.status.success(),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(
        last.starts_with("chaos: ok adapter=redis mode=ranked workers=4"),
        "{last}"
    );
    for field in [
        "violations=0",
        "fencing=0",
        "double_writes=0",
        "stale_while_valid=0",
    ] {
        assert!(last.contains(field), "{field} missing: {last}");
    }

    let file = std::fs::File::open(&history).unwrap();
    let records = read_history(std::io::BufReader::new(file)).unwrap();
    let count = |event: &str| records.iter().filter(|r| r.event() == event).count();
    assert!(count("own") >= 4, "{records:?}");
    assert_eq!(count("join"), count("leave"), "every worker ended");
    assert!(count("fault") >= 1);
    assert!(records.iter().any(|r| matches!(
        r,
        Record::Fault {
            detail: Some(_),
            ..
        }
    )));
    // The history checks clean with the library checker too.
    assert!(lease_history::check(&records, None).is_ok());

    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.starts_with("<svg"),
        "{}",
        &picture[..100.min(picture.len())]
    );
    let _ = std::fs::remove_file(history);
    let _ = std::fs::remove_file(svg);
}

/// A short run of `adapter` with the faults that touch its connection.
fn adapter_runs(adapter: &str) {
    let history = temp(&format!("{adapter}.jsonl"));
    let output = chaos(&[
        "--adapter",
        adapter,
        "--workers",
        "3",
        "--duration",
        "6",
        "--interval",
        "100",
        "--faults",
        "restart,kill,reset,stall,crash",
        "--seed",
        "3",
        "--history",
        history.to_str().unwrap(),
    ]);
    let last = last_line(&output);
    assert!(
        output.status.success(),
        "{last}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        last.starts_with(&format!("chaos: ok adapter={adapter} ")),
        "{last}"
    );
    let _ = std::fs::remove_file(history);
}

#[test]
fn the_fred_adapter_runs_behind_the_same_flag() {
    adapter_runs("fred");
}

#[test]
fn the_smol_adapter_runs_behind_the_same_flag() {
    adapter_runs("smol");
}

/// Negative control: writing a stalled worker's release at the instant it
/// woke up, instead of its lease deadline, makes its holding overlap the
/// holders that took over; the checker must report it and the run fail.
#[test]
fn late_releases_of_stalled_workers_are_caught() {
    let history = temp("sabotage.jsonl");
    let output = chaos(&[
        "--workers",
        "3",
        "--duration",
        "8",
        "--interval",
        "100",
        "--faults",
        "stall",
        "--stall-intervals",
        "10",
        "--sabotage-release",
        "--history",
        history.to_str().unwrap(),
    ]);
    let last = last_line(&output);
    assert_eq!(output.status.code(), Some(1), "{last}");
    assert!(last.starts_with("chaos: VIOLATION"), "{last}");
    let _ = std::fs::remove_file(history);
}

#[test]
fn unknown_faults_are_usage_errors() {
    let output = chaos(&["--faults", "stall,meteor", "--history", "/dev/null"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("meteor") && stderr.contains("flushall"),
        "{stderr}"
    );
}
