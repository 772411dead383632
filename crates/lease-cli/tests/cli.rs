//! `lease inspect` and `lease run` against real redis-server processes,
//! `lease sim` on the simulator, and `lease check` on history files.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lease_testkit::{RedisServer, TlsRedis, test_interval, unique_name};
use rustix::process::{Pid, Signal, kill_process};

const LEASE: &str = env!("CARGO_BIN_EXE_lease");

fn lease(args: &[&str]) -> Output {
    Command::new(LEASE)
        .args(args)
        .env_remove("REDIS_URL")
        .output()
        .expect("lease runs")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(unique_name("lease-cli-test"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn interval_ms() -> String {
    test_interval().as_millis().to_string()
}

/// Waits until `f` returns something, for at most `limit`.
fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The child's exit, within `limit`.
fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    wait_for(limit, || child.try_wait().unwrap())
}

fn sigterm(child: &Child) {
    kill_process(Pid::from_child(child), Signal::TERM).unwrap();
}

/// Starts `lease run` with a shell command.
fn start_run(url: &str, name: &str, script: &str, dir: &Path) -> Child {
    start_run_every(url, name, &interval_ms(), script, dir)
}

/// Starts `lease run` with a shell command, at interval `interval` (ms).
fn start_run_every(url: &str, name: &str, interval: &str, script: &str, dir: &Path) -> Child {
    Command::new(LEASE)
        .args([
            "run",
            "--redis",
            url,
            "--name",
            name,
            "--interval",
            interval,
            "--handover",
            "whole-pairs",
            "--drain-timeout",
            "3000",
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease run starts")
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .filter(|s| s.ends_with('\n'))
}

#[test]
fn run_hands_the_command_its_pair_and_stops_it_with_sigterm_on_cancel() {
    let server = RedisServer::start().unwrap();
    let dir = temp_dir();
    let name = unique_name("run");
    // The command of the issue, plus a trap that records the SIGTERM.
    let script = r#"trap 'echo term > "$DIR/term"; exit 0' TERM
echo $LEASE_I $LEASE_N $LEASE_TOKEN $LEASE_NAME > "$DIR/env"
sleep 100"#;
    let mut run = start_run(server.url(), &name, script, &dir);
    let limit = test_interval() * 12 + Duration::from_secs(5);
    let env = wait_for(limit, || read(&dir.join("env"))).expect("the command started");
    let fields: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(fields[..2], ["0", "1"], "{env}");
    let token: u64 = fields[2].parse().expect("a numeric fencing token");
    assert!(token > 0);
    assert_eq!(fields[3], name);

    // inspect sees the same group, in force.
    let out = lease(&[
        "inspect",
        "--redis",
        server.url(),
        "--name",
        &name,
        "--interval",
        &interval_ms(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for what in [
        "server time",
        "mode         ranked",
        "k-1",
        "k-2",
        "k-3",
        "1 members",
        &format!(
            "rules        interval {} ms, mode ranked, mapping modulo",
            interval_ms()
        ),
    ] {
        assert!(stdout.contains(what), "{what:?} missing from\n{stdout}");
    }
    assert!(stdout.contains("agree: holds (0, 1) during k"), "{stdout}");

    // Cancel: the command gets SIGTERM, lease run exits 0.
    sigterm(&run);
    let status = wait_exit(&mut run, Duration::from_secs(10)).expect("lease run exits");
    let mut stderr = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status:?}\n{stderr}");
    assert_eq!(
        read(&dir.join("term")).as_deref(),
        Some("term\n"),
        "{stderr}"
    );
    assert!(stderr.contains("SIGTERM: standing down"), "{stderr}");
    assert!(stderr.contains("stopped the command"), "{stderr}");
}

/// Rule 18 on the command line: two `lease run --member web-0` in one
/// group. The second is refused (`member in use`, naming the member) and
/// never runs its command while the first does; once the first has been
/// killed (SIGKILL: no leave), the second takes over its member's pair.
#[test]
fn of_two_runs_with_one_member_name_only_one_runs_its_command() {
    let server = RedisServer::start().unwrap();
    let dir = temp_dir();
    let name = unique_name("member");
    let l = test_interval();
    let start = |tag: &str| {
        let script =
            format!(r#"echo "$(date +%s%N) start {tag} $LEASE_I" >> "$DIR/log"; exec sleep 100"#);
        Command::new(LEASE)
            .args([
                "run",
                "--redis",
                server.url(),
                "--name",
                &name,
                "--interval",
                &l.as_millis().to_string(),
                "--handover",
                "whole-pairs",
                "--member",
                "web-0",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .env("DIR", &dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("lease run starts")
    };
    let log = || read(&dir.join("log")).unwrap_or_default();
    let mut first = start("first");
    wait_for(l * 12 + Duration::from_secs(5), || {
        log().contains("start first").then_some(())
    })
    .expect("the first command started");
    let mut second = start("second");
    std::thread::sleep(l * 8);
    assert!(
        !log().contains("start second"),
        "both ran at once:\n{}",
        log()
    );
    kill_process(Pid::from_child(&first), Signal::KILL).unwrap();
    let _ = first.wait();
    wait_for(l * 12 + Duration::from_secs(5), || {
        log().contains("start second").then_some(())
    })
    .expect("the second takes over once the first is gone");
    sigterm(&second);
    let _ = wait_exit(&mut second, Duration::from_secs(10));
    let mut stderr = String::new();
    std::io::Read::read_to_string(second.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("member web-0 is held by another process"),
        "{stderr}"
    );
    assert!(log().contains("start second 0"), "{}", log());
    // Bad names are refused before anything connects.
    let out = Command::new(LEASE)
        .args([
            "run",
            "--redis",
            server.url(),
            "--name",
            &name,
            "--interval",
            "1000",
            "--member",
            "web 0",
            "--",
            "true",
        ])
        .output()
        .expect("lease runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("member name"));
}

/// The split brain rule 12 prevents: two `lease run --name split` with different
/// intervals. The second is refused (the group's recorded rules differ) and
/// never runs its command while the first does; once the first has stood
/// down and its record has expired, the second takes over.
#[test]
fn runs_with_different_intervals_never_run_their_commands_at_once() {
    let server = RedisServer::start().unwrap();
    let dir = temp_dir();
    let name = unique_name("split");
    // Each command logs when it starts and, on SIGTERM, when it stops.
    let script = r#"trap 'echo "$(date +%s%N) stop $TAG" >> "$DIR/log"; exit 0' TERM
echo "$(date +%s%N) start $TAG" >> "$DIR/log"
sleep 100"#;
    let l = test_interval();
    let tagged = |tag: &str, interval: Duration| {
        let script = script.replace("$TAG", tag);
        let ms = interval.as_millis().to_string();
        start_run_every(server.url(), &name, &ms, &script, &dir)
    };
    let mut first = tagged("first", l);
    let log = || read(&dir.join("log")).unwrap_or_default();
    wait_for(l * 12 + Duration::from_secs(5), || {
        log().contains("start first").then_some(())
    })
    .expect("the first command started");
    let mut second = tagged("second", l * 2);
    // Long enough for the second to be refused and, without the rules
    // check, to have been granted (0, 1) on its own.
    std::thread::sleep(l * 10);
    assert!(
        !log().contains("start second"),
        "both ran at once:\n{}",
        log()
    );
    sigterm(&first);
    let status = wait_exit(&mut first, Duration::from_secs(10)).expect("the first exits");
    assert!(status.success());
    wait_for(l * 20 + Duration::from_secs(5), || {
        log().contains("start second").then_some(())
    })
    .expect("the second takes over once the first has left");
    sigterm(&second);
    let _ = wait_exit(&mut second, Duration::from_secs(10));
    let mut stderr = String::new();
    std::io::Read::read_to_string(second.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("refused: the group runs interval"),
        "{stderr}"
    );
    // The log, in time order: the second starts only after the first stopped.
    let lines = log();
    let events: Vec<(u128, &str)> = lines
        .lines()
        .map(|l| {
            let (t, what) = l.split_once(' ').expect("a timestamped line");
            (t.parse().expect("nanoseconds"), what)
        })
        .collect();
    let stop_first = events
        .iter()
        .find(|e| e.1 == "stop first")
        .expect("first stopped")
        .0;
    let start_second = events
        .iter()
        .find(|e| e.1 == "start second")
        .expect("second started")
        .0;
    assert!(stop_first < start_second, "{lines}");
}

#[test]
fn two_runs_split_the_group_and_the_survivor_takes_it_all() {
    let server = RedisServer::start().unwrap();
    let (dir_a, dir_b) = (temp_dir(), temp_dir());
    let name = unique_name("split");
    let script = r#"echo $LEASE_I $LEASE_N >> "$DIR/pairs"; exec sleep 100"#;
    let mut a = start_run(server.url(), &name, script, &dir_a);
    let mut b = start_run(server.url(), &name, script, &dir_b);
    let last =
        |dir: &Path| read(&dir.join("pairs")).and_then(|s| s.lines().last().map(str::to_owned));
    let limit = test_interval() * 20 + Duration::from_secs(5);
    let both = wait_for(limit, || {
        let (x, y) = (last(&dir_a)?, last(&dir_b)?);
        (x.ends_with(" 2") && y.ends_with(" 2")).then_some((x, y))
    })
    .expect("both run on n = 2");
    assert_ne!(both.0, both.1, "distinct slots");

    // b stands down; a takes the whole group.
    sigterm(&b);
    assert!(
        wait_exit(&mut b, Duration::from_secs(10))
            .unwrap()
            .success()
    );
    let alone = wait_for(limit, || last(&dir_a).filter(|l| l == "0 1"));
    assert!(alone.is_some(), "{:?}", read(&dir_a.join("pairs")));
    sigterm(&a);
    assert!(
        wait_exit(&mut a, Duration::from_secs(10))
            .unwrap()
            .success()
    );
}

#[test]
fn inspect_reads_arrival_counters_and_hides_the_password() {
    let server = RedisServer::start_with_args(&["--requirepass", "s3cret"]).unwrap();
    let url = server.url().to_owned();
    assert!(
        url.contains("s3cret"),
        "the testkit puts the password in the URL"
    );
    let name = unique_name("arrival");
    // An Arrival group of 2, settled: counters of k-2 and k-1 are 2.
    let l: u64 = 60_000;
    let inspect = || {
        let time = server.command(&["TIME"]).unwrap();
        let (sec, usec): (u64, u64) = redis::from_redis_value(time).unwrap();
        let k = (sec * 1000 + usec / 1000) / l;
        for (d, v) in [(0, "1"), (1, "2"), (2, "2")] {
            let key = format!("{{{name}}}:{}", k - d);
            server.command(&["SET", &key, v, "PX", "30000"]).unwrap();
        }
        lease(&[
            "inspect",
            "--redis",
            &url,
            "--name",
            &name,
            "--interval",
            &l.to_string(),
        ])
    };
    let out = inspect();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("s3cret") && !stderr.contains("s3cret"));
    assert!(stdout.contains(":***@"), "{stdout}");
    assert!(stdout.contains("arrival (from the key types)"), "{stdout}");
    assert!(stdout.contains("counter = 1 so far"), "{stdout}");
    assert!(stdout.contains("counts agree (2 and 2)"), "{stdout}");

    // A wrong password: the server answered, so it is not "unreachable".
    let wrong = url.replace("s3cret", "wrong-pw");
    let out = lease(&["inspect", "--redis", &wrong, "--name", &name]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("refused the connection"), "{stderr}");
    assert!(!stderr.contains("wrong-pw"), "{stderr}");

    // A group nobody registered in.
    let out = lease(&["inspect", "--redis", &url, "--name", "nobody-here"]);
    assert!(out.status.success());
    assert!(text(&out).0.contains("No keys"), "{}", text(&out).0);
}

/// The lines of the section of `stdout` that starts with the line
/// starting with `label` (up to the next empty line), each with its runs
/// of spaces made one.
fn section(stdout: &str, label: &str) -> Vec<String> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with(label))
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// `lease inspect` on a Ranked group's sets laid out by hand (revision 3,
/// rules 15, 16 and 19), under modulo. The story: a, b, c, d, g at
/// positions 0..5 in k-3; g leaves gracefully in k-2 (a left entry); in
/// k-1, d leaves gracefully, b misses its registration (its reservation
/// from k-2 holds 1), and e returns, sending position 5 (a returnee's
/// score, 2^32 + 5 + 0.5: a filler). So closed k-1 counts a, b, c, e:
/// size 4, where its ZCARD is 5; a, b (through its reservation) and c keep
/// 0, 1, 2, and e fills the free position 3, where its rank is 4. In the
/// open k, a and b have registered (their positions in k-1), c and e are
/// still reserved by their registrations in k-1.
#[test]
fn inspect_shows_positions_kinds_and_counted_sizes_of_ranked_sets() {
    let server = RedisServer::start().unwrap();
    let name = unique_name("ranked");
    let l: u64 = 60_000;
    let returnee = "4294967301.5"; // 2^32 + 5 + 0.5
    let returnee_reserved = "4294967301.75";
    let sets: [(u64, &[(&str, &str)]); 4] = [
        (
            0,
            &[
                ("0", "m:a"),
                ("1", "m:b"),
                ("2.25", "m:c"),
                (returnee_reserved, "m:e"),
            ],
        ),
        (
            1,
            &[
                ("0", "m:a"),
                ("1.25", "m:b"),
                ("2", "m:c"),
                ("-1", "m:d"),
                (returnee, "m:e"),
            ],
        ),
        (
            2,
            &[
                ("0", "m:a"),
                ("1", "m:b"),
                ("2", "m:c"),
                ("3", "m:d"),
                ("-1", "m:g"),
            ],
        ),
        (
            3,
            &[
                ("0", "m:a"),
                ("1", "m:b"),
                ("2", "m:c"),
                ("3", "m:d"),
                ("4", "m:g"),
            ],
        ),
    ];
    // Retried if the interval ends between the layout and the read.
    let stdout = (0..3)
        .find_map(|_| {
            let time = server.command(&["TIME"]).unwrap();
            let (sec, usec): (u64, u64) = redis::from_redis_value(time).unwrap();
            let k = (sec * 1000 + usec / 1000) / l;
            let rules = format!("{{{name}}}:rules");
            server
                .command(&["SET", &rules, "3:60000:ranked:modulo", "PX", "300000"])
                .unwrap();
            for (d, entries) in sets {
                let key = format!("{{{name}}}:{}", k - d);
                server.command(&["DEL", &key]).unwrap();
                let mut zadd = vec!["ZADD", &key];
                for (score, member) in entries {
                    zadd.extend([*score, *member]);
                }
                server.command(&zadd).unwrap();
                server.command(&["PEXPIRE", &key, "300000"]).unwrap();
            }
            let out = lease(&[
                "inspect",
                "--redis",
                server.url(),
                "--name",
                &name,
                "--interval",
                &l.to_string(),
            ]);
            let (stdout, stderr) = text(&out);
            assert!(out.status.success(), "{stdout}\n{stderr}");
            stdout
                .contains(&format!("now in k = {k} "))
                .then_some(stdout)
        })
        .expect("three reads in one interval");
    let has = |label: &str, lines: &[&str]| {
        let got = section(&stdout, label);
        for line in lines {
            assert!(
                got.iter().any(|g| g == line),
                "{line:?} not in {label}:\n{stdout}"
            );
        }
    };
    assert!(stdout.contains("mode         ranked"), "{stdout}");
    has(
        "k ",
        &[
            "4 members so far, by position:",
            "position member score kind implies",
            "0 m:a 0 registered (0, 4) so far",
            "1 m:b 1 registered (1, 4) so far",
            "2 m:c 2.25 reserved (2, 4) so far",
            "3 m:e 4294967301.75 reserved (3, 4) so far",
        ],
    );
    has(
        "k-1 ",
        &[
            "4 members, by position, and 1 left (not counted):",
            "0 m:a 0 registered (0, 4)",
            "1 m:b 1.25 reserved (1, 4)",
            "2 m:c 2 registered (2, 4)",
            "3 m:e 4294967301.5 registered (3, 4)",
            "- m:d -1 left",
        ],
    );
    has(
        "k-2 ",
        &[
            "4 members, by position, and 1 left (not counted):",
            "3 m:d 3 registered (3, 4)",
            "- m:g -1 left",
        ],
    );
    has(
        "k-3 ",
        &["5 members, by position:", "4 m:g 4 registered (4, 5)"],
    );
    // Whole pairs (modulo): the same pair in k-1 and k-2, by position.
    has(
        "in force ",
        &[
            "m:a agree: holds (0, 4) during k",
            "m:b agree: holds (1, 4) during k, short: its entry in k-1 is only a reservation, \
             so a grant from k ends with k (rule 19)",
            "m:c agree: holds (2, 4) during k",
            "m:e new in k-1 (3, 4): holds nothing yet",
            "m:d left k-1 gracefully: holds nothing",
        ],
    );
    // The task-set view: positions in k-3, k-2, k-1; nobody holds
    // position 3's quarter (e is new, d left).
    let tasks: Vec<String> = section(&stdout, "tasks ");
    let row = |member: &str| {
        tasks
            .iter()
            .find(|t| t.starts_with(&format!("{member} ")))
            .unwrap_or_else(|| panic!("{member} not in the task view:\n{stdout}"))
            .clone()
    };
    assert_eq!(row("m:a"), "m:a (0, 5) (0, 4) (0, 4) T(0,4) 0.250 0.000");
    assert!(
        row("m:b").starts_with("m:b (1, 5) (1, 4) (1, 4) T(1,4) 0.250 0.000 short: "),
        "{stdout}"
    );
    assert_eq!(row("m:e"), "m:e - - (3, 4) nothing 0.000 0.000");
    assert_eq!(row("m:d"), "m:d (3, 5) (3, 4) - nothing 0.000 0.000");
    assert!(
        tasks.iter().all(|t| !t.starts_with("m:g ")),
        "g left before k-2: {stdout}"
    );
    assert!(
        tasks
            .iter()
            .any(|t| t.starts_with("held by nobody: 0.250 ")),
        "{stdout}"
    );
}

#[test]
fn bad_urls_bad_names_and_unreachable_servers_have_their_own_exit_codes() {
    // Bad URL: 2.
    for url in ["not-a-url", "http://h/", "ftp://u:pw@127.0.0.1/"] {
        let out = lease(&["inspect", "--redis", url, "--name", "g"]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{url}: {stderr}");
        assert!(stderr.starts_with("lease: invalid options: "), "{stderr}");
        assert!(!stderr.contains("pw@"), "{stderr}");
    }
    // Bad name: 2, before connecting anywhere.
    for name in ["bad{name}", "", "two words"] {
        let out = lease(&[
            "run",
            "--redis",
            "redis://127.0.0.1:1/",
            "--name",
            name,
            "--interval",
            "300",
            "--",
            "true",
        ]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name:?}: {stderr}");
        assert!(stderr.contains("group name"), "{stderr}");
    }
    // Unreachable: 3, without the password.
    let url = "redis://user:hunter2@127.0.0.1:1/";
    for args in [
        vec!["inspect", "--redis", url, "--name", "g"],
        vec![
            "run",
            "--redis",
            url,
            "--name",
            "g",
            "--interval",
            "300",
            "--",
            "true",
        ],
    ] {
        let out = lease(&args);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(stderr.contains("Redis unreachable"), "{stderr}");
        assert!(stderr.contains("redis://user:***@127.0.0.1:1/"), "{stderr}");
        assert!(!stdout.contains("hunter2") && !stderr.contains("hunter2"));
    }
    // Usage: a missing command, an unknown flag.
    let out = lease(&[
        "run",
        "--redis",
        "redis://h/",
        "--name",
        "g",
        "--interval",
        "300",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = lease(&["inspect", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_explains_each_subcommand() {
    let out = lease(&["--help"]);
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    assert!(
        stdout.contains("inspect")
            && stdout.contains("run")
            && stdout.contains("sim")
            && stdout.contains("Exit codes")
    );
    let out = lease(&["inspect", "--help"]);
    let (stdout, _) = text(&out);
    for flag in [
        "--redis",
        "--name",
        "--prefix",
        "--interval",
        "--mode",
        "REDIS_URL",
    ] {
        assert!(stdout.contains(flag), "{flag} missing from inspect --help");
    }
    let out = lease(&["run", "--help"]);
    let (stdout, _) = text(&out);
    for what in [
        "--interval",
        "--gap",
        "--mode",
        "--drain-timeout",
        "--handover",
        "--buckets",
        "LEASE_FILE",
        "LEASE_I",
        "LEASE_TOKEN",
        "SIGTERM",
        "keeps running",
    ] {
        assert!(stdout.contains(what), "{what} missing from run --help");
    }
    let out = lease(&["sim", "--help"]);
    let (stdout, _) = text(&out);
    for flag in [
        "--seed",
        "--workers",
        "--intervals",
        "--faults",
        "--mode",
        "--clock-jumps",
        "--lost-writes",
        "--history",
        "--drain-budget-ms",
        "--spread",
        "--no-graceful-leave",
    ] {
        assert!(stdout.contains(flag), "{flag} missing from sim --help");
    }
}

#[test]
fn sim_plays_a_checked_run_and_writes_its_history() {
    let history = temp_dir().join("sim.jsonl");
    let out = lease(&[
        "sim",
        "--seed",
        "3",
        "--workers",
        "4",
        "--intervals",
        "60",
        "--faults",
        "--history",
        history.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("run: seed=3 mode=ranked handover=task-sets workers=4 intervals=60 "),
        "{stdout}"
    );
    let last = lines.last().copied().unwrap_or_default();
    assert!(
        last.starts_with("checker: ok violations=0 fencing=0 anomalies=0 "),
        "{last}"
    );
    // The history on disk is judged the same by the library.
    let file = std::fs::File::open(&history).unwrap();
    let records = lease_history::read_history(std::io::BufReader::new(file)).unwrap();
    assert!(records.iter().filter(|r| r.event() == "own").count() >= 4);
    let summary = lease_history::check(&records, None);
    assert!(summary.is_ok(), "{summary}");

    let out = lease(&["sim", "--gap", "0.7"]);
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
    assert!(text(&out).1.contains("invalid options"));
}

/// `--drain-budget-ms`, `--spread`, `--graceful-leave` and `--members` reach the run
/// (the verdict line differs from the same seed's at the defaults) at the
/// ends of their ranges, and a value outside a range exits 2 with the
/// options error's message.
#[test]
fn sim_takes_the_drain_budget_spread_and_graceful_leave_over_their_ranges() {
    let base = [
        "sim",
        "--seed",
        "3",
        "--workers",
        "4",
        "--intervals",
        "60",
        "--faults",
    ];
    let last_line = |extra: &[&str]| {
        let out = lease(&[&base[..], &["--handover", "task-sets"], extra].concat());
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{extra:?}: {stdout}\n{stderr}");
        (
            stdout.lines().next().unwrap_or_default().to_owned(),
            stdout.lines().last().unwrap_or_default().to_owned(),
        )
    };
    let (_, default) = last_line(&[]);
    for extra in [
        &["--drain-budget-ms", "0"][..],
        &["--drain-budget-ms", "1000"][..],
        &["--spread", "0"][..],
        &["--spread", "max"][..],
        &["--no-graceful-leave"][..],
        &["--members"][..],
    ] {
        let (first, last) = last_line(extra);
        assert!(last.starts_with("checker: ok "), "{extra:?}: {last}");
        assert_ne!(last, default, "{extra:?} changed nothing");
        let shown = match extra {
            ["--no-graceful-leave"] => "graceful_leave=false".to_owned(),
            ["--members"] => "members=true".to_owned(),
            [flag, value] => format!("{}={value}", flag[2..].replace('-', "_")),
            _ => unreachable!(),
        };
        assert!(first.contains(&shown), "{shown} not in {first}");
    }
    // The drain budget is at most L = 1 s; the widest spread at g = 0.15 is
    // 0.45.
    for (extra, message) in [
        (
            &["--drain-budget-ms", "1001"][..],
            "invalid options: the drain budget is 1.001s; it must be at most the interval",
        ),
        (
            &["--spread", "0.5"][..],
            "invalid options: the spread is 0.5; it must be between 0 and 0.44",
        ),
        (
            &["--spread", "-0.01"][..],
            "invalid options: the spread is -0.01; it must be between 0",
        ),
    ] {
        let out = lease(&[&base[..], extra].concat());
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(message), "{extra:?}: {stderr}");
    }
}

/// Negative control through the binary: outside the guarantee (a failover
/// losing acknowledged writes in two consecutive intervals, in the
/// original's counting mode) the checker finds the overlaps in some runs and
/// those runs fail with its verdict (docs/protocol.md, "Limits": 3 runs in
/// 200, seed 7 the first).
#[test]
fn sim_outside_the_guarantee_fails_with_the_checkers_verdict() {
    let failing: Vec<(u64, String)> = (1..=10u64)
        .filter_map(|seed| {
            let seed_text = seed.to_string();
            let out = lease(&[
                "sim",
                "--seed",
                &seed_text,
                "--workers",
                "5",
                "--intervals",
                "300",
                "--mode",
                "arrival",
                "--lost-writes",
            ]);
            let (stdout, _) = text(&out);
            let last = stdout.lines().last().unwrap_or_default().to_owned();
            match out.status.code() {
                Some(0) => {
                    assert!(last.starts_with("checker: ok "), "seed {seed}: {last}");
                    None
                }
                code => {
                    assert_eq!(code, Some(1), "seed {seed}: {stdout}");
                    Some((seed, last))
                }
            }
        })
        .collect();
    assert!(!failing.is_empty(), "no run of 10 found a violation");
    for (seed, last) in &failing {
        assert!(
            last.starts_with("checker: VIOLATION "),
            "seed {seed}: {last}"
        );
    }
}

/// `lease inspect` and `lease run` over `rediss://` to a `redis-server`
/// with `--tls-port` and a CA the test made: trusted through
/// `SSL_CERT_FILE` (as other tools read it) or `--ca-cert`; a CA that did
/// not sign the server's certificate is refused (exit 1, not "unreachable").
#[test]
fn inspect_and_run_speak_tls_trusting_ssl_cert_file_or_ca_cert() {
    let server = TlsRedis::start().unwrap();
    let url = server.url();
    let ca = server.ca_path();
    let name = unique_name("tls");
    let inspect = |env: Option<&Path>, flag: Option<&Path>| {
        let mut cmd = Command::new(LEASE);
        cmd.args(["inspect", "--redis", url, "--name", &name])
            .env_remove("REDIS_URL")
            .env_remove("SSL_CERT_FILE");
        if let Some(file) = env {
            cmd.env("SSL_CERT_FILE", file);
        }
        if let Some(file) = flag {
            cmd.arg("--ca-cert").arg(file);
        }
        cmd.output().expect("lease runs")
    };
    for (env, flag) in [(Some(ca.as_path()), None), (None, Some(ca.as_path()))] {
        let out = inspect(env, flag);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{env:?} {flag:?}: {stdout}\n{stderr}");
        assert!(stdout.contains("server time"), "{stdout}");
    }
    // The flag wins over the variable: a wrong CA in either is refused.
    let other = server.other_ca_path();
    for (env, flag) in [
        (Some(other.as_path()), None),
        (Some(ca.as_path()), Some(other.as_path())),
    ] {
        let out = inspect(env, flag);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{env:?} {flag:?}: {stderr}");
        assert!(stderr.contains("refused the connection"), "{stderr}");
        assert!(stderr.contains("UnknownIssuer"), "{stderr}");
    }

    // A short `lease run`: the command gets its pair over TLS.
    let dir = temp_dir();
    let script = r#"trap 'exit 0' TERM
echo $LEASE_I $LEASE_N > "$DIR/env"
sleep 100"#;
    let mut run = Command::new(LEASE)
        .args(["run", "--redis", url, "--name", &name, "--interval"])
        .arg(interval_ms())
        .args(["--handover", "whole-pairs", "--drain-timeout", "3000"])
        .args(["--", "sh", "-c", script])
        .env("DIR", &dir)
        .env("SSL_CERT_FILE", &ca)
        .env_remove("REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lease run starts");
    let limit = test_interval() * 12 + Duration::from_secs(5);
    let env = wait_for(limit, || read(&dir.join("env")));
    sigterm(&run);
    let status = wait_exit(&mut run, Duration::from_secs(10)).expect("lease run exits");
    let mut stderr = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(env.as_deref(), Some("0 1\n"), "{stderr}");
    assert!(status.success(), "{status:?}\n{stderr}");
}

/// Writes `lines` as a history file named `name` in a fresh directory.
fn history_file(name: &str, lines: &[&str]) -> PathBuf {
    let path = temp_dir().join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// `lease check` on what `lease sim --history` wrote: exit 0, and its last
/// line is the very verdict `lease sim` printed (the simulator closes every
/// lease still held at the run's end with a line at that instant, so the
/// file spans the same run). With `--svg` it draws the timeline.
#[test]
fn check_passes_a_clean_simulator_history_with_the_same_verdict() {
    for handover in ["whole-pairs", "task-sets"] {
        let dir = temp_dir();
        let history = dir.join("sim.jsonl");
        let svg = dir.join("sim.svg");
        let sim = lease(&[
            "sim",
            "--seed",
            "3",
            "--workers",
            "4",
            "--intervals",
            "60",
            "--faults",
            "--handover",
            handover,
            "--history",
            history.to_str().unwrap(),
        ]);
        let (sim_out, sim_err) = text(&sim);
        assert!(sim.status.success(), "{sim_out}\n{sim_err}");
        let out = lease(&[
            "check",
            history.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
        ]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        let last = stdout.lines().last().unwrap_or_default();
        assert_eq!(Some(last), sim_out.lines().last(), "{handover}");
        assert!(last.starts_with("checker: ok "), "{last}");
        // Every lease was held to its interval's end (the clock lines and
        // renewal intervals are in the file).
        assert!(!last.contains(" ends_checked=0 "), "{last}");
        let picture = std::fs::read_to_string(&svg).unwrap();
        assert!(picture.starts_with("<svg"), "{handover}");
        assert!(picture.contains("checker: ok"), "{handover}");
    }
}

/// A history as lease-chaos writes one against a real Redis: the host's
/// monotonic clock, release reasons, faults with a worker and a detail, a
/// crashed worker's task set ended part by part on its behalf, a field this
/// reader does not know (ignored), no clock lines. It is clean.
#[test]
fn check_passes_a_clean_chaos_style_history() {
    let path = history_file(
        "chaos.jsonl",
        &[
            r#"{"worker":"w0","event":"join","at_us":1000}"#,
            r#"{"worker":"w1","event":"join","at_us":1200}"#,
            r#"{"worker":"w0","event":"own","i":0,"n":2,"token":1700000012,"mapping":"consistent","held":[[0,2,0,2,1700000012]],"at_us":2301000}"#,
            r#"{"worker":"w1","event":"own","i":1,"n":2,"token":1700000012,"mapping":"consistent","held":[[1,2,1,2,1700000012]],"at_us":2302500}"#,
            r#"{"event":"fault","kind":"partition","worker":"w1","detail":"1500ms","duration_us":1500000,"at_us":4000000}"#,
            r#"{"worker":"w1","event":"release","i":1,"n":2,"reason":"expired","at_us":5150000}"#,
            r#"{"worker":"w0","event":"own","i":0,"n":1,"token":1700000016,"mapping":"consistent","held":[[0,2,0,2,1700000012],[0,1,0,1,1700000016]],"at_us":6305000}"#,
            r#"{"worker":"w0","event":"own","i":0,"n":1,"token":1700000016,"mapping":"consistent","held":[[0,1,0,1,1700000016]],"at_us":6850000}"#,
            r#"{"event":"fault","kind":"crash","worker":"w0","at_us":7000000}"#,
            r#"{"worker":"w0","event":"release","i":0,"n":1,"renewed":[1700000016],"at_us":7000000}"#,
            r#"{"worker":"w0","event":"leave","how":"crash","at_us":7000000}"#,
        ],
    );
    let out = lease(&["check", path.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("checker: ok violations=0 fencing=0 anomalies=0 interval_ends=0 "),
        "{last}"
    );
    assert!(
        last.contains(" task_violations=0 task_fencing=0 "),
        "{last}"
    );
}

/// The crafted histories of the checker's blind spots, as files: each
/// exits 1 with the finding named before the verdict.
#[test]
fn check_catches_the_crafted_histories() {
    let cases: [(&str, &[&str], &str); 4] = [
        // A graceful leaver serves its old part after the cancel; w2 takes
        // tasks of it in that gap.
        (
            "leave-gap",
            &[
                r#"{"worker":"w0","event":"own","i":0,"n":3,"token":12,"mapping":"consistent","held":[[0,2,0,2,10],[0,3,0,2,12]],"at_us":0}"#,
                r#"{"worker":"w0","event":"leave","how":"cancel","at_us":1000}"#,
                r#"{"worker":"w2","event":"own","i":2,"n":3,"token":12,"mapping":"consistent","held":[[2,3,2,3,12]],"at_us":1200}"#,
                r#"{"worker":"w0","event":"own","i":0,"n":3,"token":12,"mapping":"consistent","held":[[0,3,0,2,12]],"at_us":2000}"#,
                r#"{"worker":"w2","event":"release","i":2,"n":3,"at_us":2000}"#,
                r#"{"worker":"w0","event":"release","i":0,"n":3,"at_us":3000}"#,
            ],
            "task violation: task overlap at 1200 us",
        ),
        // A part with token 10 after B's 9, hidden behind A's part at 12.
        (
            "fencing-per-part",
            &[
                r#"{"worker":"B","event":"own","i":2,"n":3,"token":9,"mapping":"consistent","held":[[2,3,2,3,9]],"at_us":0}"#,
                r#"{"worker":"B","event":"release","i":2,"n":3,"at_us":1000}"#,
                r#"{"worker":"A","event":"own","i":2,"n":3,"token":12,"mapping":"consistent","held":[[2,3,0,2,10],[2,3,2,3,12]],"at_us":1000}"#,
                r#"{"worker":"A","event":"release","i":2,"n":3,"at_us":2000}"#,
            ],
            "task fencing: task ",
        ),
        // A lease handed to the loop after it had ended.
        (
            "release-before-own",
            &[
                r#"{"worker":"w0","event":"own","i":0,"n":1,"token":11,"at_us":1000}"#,
                r#"{"worker":"w0","event":"release","i":0,"n":1,"at_us":900}"#,
                r#"{"worker":"w1","event":"own","i":0,"n":1,"token":13,"at_us":2000}"#,
                r#"{"worker":"w1","event":"release","i":0,"n":1,"at_us":3000}"#,
            ],
            "anomaly: release written after the own at 1000 us",
        ),
        // Renewed in 12, held past 14 L.
        (
            "interval-end",
            &[
                r#"{"event":"clock","interval_us":1000000,"server_us":10000000,"at_us":0}"#,
                r#"{"worker":"w0","event":"own","i":0,"n":1,"token":11,"at_us":2000000}"#,
                r#"{"worker":"w0","event":"release","i":0,"n":1,"renewed":12,"at_us":4000001}"#,
            ],
            "interval end: held 1 us past (12 + 2)L",
        ),
    ];
    for (name, lines, finding) in cases {
        let path = history_file(&format!("{name}.jsonl"), lines);
        let out = lease(&["check", path.to_str().unwrap()]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {stdout}\n{stderr}");
        assert!(stdout.contains(finding), "{name}: {stdout}");
        let last = stdout.lines().last().unwrap_or_default();
        assert!(last.starts_with("checker: VIOLATION "), "{name}: {last}");
    }
}

/// A file that cannot be read, or a line that is not a record: exit 2, with
/// the file, the line's number and what was wrong.
#[test]
fn check_reports_an_unreadable_history_with_its_line() {
    let missing = temp_dir().join("missing.jsonl");
    let out = lease(&["check", missing.to_str().unwrap()]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot read") && stderr.contains("missing.jsonl"),
        "{stderr}"
    );

    let path = history_file(
        "bad.jsonl",
        &[
            r#"{"worker":"w0","event":"own","i":0,"n":1,"token":1,"at_us":0}"#,
            "",
            r#"{"worker":"w0","event":"release","i":0,"at_us":5}"#,
        ],
    );
    let out = lease(&["check", path.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("bad.jsonl: history line 3: invalid record"),
        "{stderr}"
    );
    assert!(stderr.contains("missing field `n`"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
}
