//! Prints the checker's verdict and every violation (overlaps, fencing,
//! interval ends, per task) and anomaly it keeps for a history file:
//! `cargo run -p lease-history --example explain -- run.jsonl [END_US]`.
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(path), end) = (args.next(), args.next()) else {
        eprintln!("usage: explain HISTORY.jsonl [END_US]");
        return ExitCode::from(2);
    };
    let end_us = end.and_then(|e| e.parse().ok());
    let records = match std::fs::File::open(&path)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            lease_history::read_history(std::io::BufReader::new(f)).map_err(|e| e.to_string())
        }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let c = lease_history::Checker::new(&records, end_us);
    for v in c.violations() {
        println!("{v}");
    }
    for v in c.fencing_violations() {
        println!("{v}");
    }
    for v in c.interval_end_violations() {
        println!("{v}");
    }
    if let Some(t) = c.tasks() {
        for v in &t.violations {
            println!("{v}");
        }
        for v in &t.fencing {
            println!("{v}");
        }
    }
    for a in c.anomalies() {
        println!("{a}");
    }
    println!("{}", c.summary());
    if c.summary().is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
