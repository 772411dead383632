//! The demo's script, in intervals, shared by the simulator and the real
//! Redis runs.

/// What happens at one step of the demo.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum What {
    /// Start this many workers (`w0`, `w1`, ...).
    Start(usize),
    /// One more worker starts, with this number (the next one).
    Join(usize),
    /// The worker's process dies: no stand-down, its stream is dropped.
    Crash(usize),
    /// The worker's process freezes for this many intervals.
    Stall(usize, f64),
    /// Redis restarts without persistence, down for this many intervals.
    RestartRedis(f64),
    /// The worker is cancelled: it stands down and ends.
    Cancel(usize),
    /// The demo ends.
    End,
}

/// One step: at `at` intervals since the start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Step {
    pub(crate) at: f64,
    pub(crate) what: What,
}

/// The script: four workers settle, a fifth joins, one crashes, one stalls
/// for longer than its lease, Redis restarts, one is cancelled.
pub(crate) const SCRIPT: [Step; 7] = [
    Step {
        at: 0.0,
        what: What::Start(4),
    },
    Step {
        at: 7.0,
        what: What::Join(4),
    },
    Step {
        at: 13.0,
        what: What::Crash(1),
    },
    Step {
        at: 19.0,
        what: What::Stall(2, 3.0),
    },
    Step {
        at: 26.0,
        what: What::RestartRedis(0.3),
    },
    Step {
        at: 32.0,
        what: What::Cancel(3),
    },
    Step {
        at: 38.0,
        what: What::End,
    },
];

/// The length of the demo in intervals.
pub(crate) fn length() -> f64 {
    SCRIPT.iter().map(|s| s.at).fold(0.0, f64::max)
}

impl What {
    /// What the step is, in words, for the event log.
    pub(crate) fn describe(self) -> String {
        match self {
            What::Start(n) => {
                let names: Vec<String> = (0..n).map(|i| format!("w{i}")).collect();
                format!("{} start", names.join(" "))
            }
            What::Join(w) => format!("w{w} joins (a newcomer lands at the tail)"),
            What::Crash(w) => {
                format!("w{w} crashes: no stand-down, its slot is unowned until a re-count")
            }
            What::Stall(w, l) => {
                format!("w{w} stalls for {l} intervals: frozen, its lease runs out")
            }
            What::RestartRedis(_) => "Redis restarts and loses every key".to_owned(),
            What::Cancel(w) => format!("w{w} is cancelled: it stands down, then ends"),
            What::End => "the demo ends".to_owned(),
        }
    }
}
