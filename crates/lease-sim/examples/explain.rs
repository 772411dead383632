//! Prints the checker's violations for a history file.
fn main() {
    let path = std::env::args().nth(1).expect("history path");
    let f = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let recs = lease_sim::history::read_history(f).unwrap();
    let c = lease_sim::checker::Checker::new(&recs, Some(300_000_000));
    for v in c.violations() {
        println!("{v:?}");
    }
    for v in c.fencing_violations() {
        println!("{v:?}");
    }
    for v in c.anomalies() {
        println!("{v:?}");
    }
}
