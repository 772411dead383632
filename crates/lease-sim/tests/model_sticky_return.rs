//! A model of *sticky return* as it is about to be built: revision 3 of the
//! Ranked script (docs/protocol.md, rule 15). A worker that misses one
//! registration comes back to its own position instead of the tail, a
//! worker whose reply was lost is granted from the next interval, and a
//! crashed worker's tasks reach the survivors no later than today.
//!
//! **A model, not the implementation.** `ranked.lua`, the simulator's store
//! and the `Worker` get the design after this file checks it. It keeps
//! exactly what the exclusivity argument ("Why it is exclusive", rule 13)
//! uses and nothing else:
//!
//! - Time is counted in whole intervals. A registration of worker `w` in `k`
//!   executes in `k`; its reply is processed in `k` or lost. A grant from a
//!   reply in `k` lives through the rest of `k` and all of `k + 1` (rule 6:
//!   it ends by `(k+2)L`; a kept part, rule 14, ends earlier), or, if it is
//!   *short* (below), through the rest of `k` only. So in interval `j` the
//!   grants from `j` and the full grants from `j - 1` are live, and
//!   exclusivity is: in every interval, the live grants of two workers
//!   share no task. That is conservative: a grant from `j` that really
//!   starts after one from `j - 1` ended still counts as overlapping it.
//! - Sets, scores and closed positions are rule 15's, revision 3 (below),
//!   with the jump-hash mapping of task sets (rule 13) over 256 tasks.
//! - Graceful leaves as revision 3 builds them (`leave.lua`, below); the
//!   worker keeps serving what it holds.
//! - Member names as rule 18 has them: the set member is the name, and the
//!   member record lets another incarnation hold the name only two
//!   intervals after the holder's last registration (before that its
//!   registration is counted under the name and grants nothing).
//! - Lost writes: a failover in one interval `f` loses the set writes of
//!   any subset of the registrations executed in `f` (the entry in set `f`
//!   and the reservation in set `f + 1`), while their replies were
//!   processed. It comes either at the end of `f`, every other write of `f`
//!   kept as it executed (a replica replays a script's effects, not the
//!   script: a leave's `ZADD XX` lands only on a member that is there), or
//!   right after the lost registrations, every later write of `f`
//!   executing on a primary that never had them (a leave after its own
//!   lost registration finds what was there before it). Every closed set
//!   is read after the failover, so it exists in one version. The member
//!   record is not lost: a record lost alone is rule 18's lost-writes
//!   limit, outside this model.
//! - No clock steps: those are checked on the real code by `exhaustive.rs`,
//!   and will be again once this is built.
//!
//! The design (`BUILT`; `TODAY` is rules 13, 15 and 16 as built, side by
//! side):
//! 1. **Entries and reservations.** Each member's entry in a set is
//!    *Registered*, *Reserved* or *Left* (4). A registration in `k` writes
//!    its member into set `k` with the score it carries (over a Reserved or
//!    Left entry, which becomes Registered; a Registered score never
//!    changes) and reserves it in set `k + 1` with the same score unless it
//!    is there (`ZADD NX`). A member that misses `k + 1` is still in closed
//!    `k + 1`: nobody fills its hole, nobody moves. One interval of grace:
//!    a reservation writes nothing further.
//! 2. **Positions.** Only Registered and Reserved entries are counted: a
//!    closed set's size is their number, and a Left member has no position.
//!    In a set's order a Reserved entry sorts right after a Registered one
//!    with the same score. The first counted member whose score carries an
//!    integer `p` below the size keeps `p` (a *keeper*); the others fill
//!    the free positions in order.
//! 3. **The grant from a reply in `k`**: the first factor is the member's
//!    pair in closed `k - 1`; the second is the pair the worker's previous
//!    processed reply implied if that reply was from `k - 1`, and otherwise
//!    the member's pair in closed `k - 2` *if it is a keeper there* (the
//!    returnee's grant). *Inheritance* adds `T(first) ∩ T(q, m)` for each
//!    of at most 8 candidates `q` (the member's position in closed `k - 1`,
//!    then `[n', m)`, never the second factor's position; `n'` and `m` the
//!    sizes of closed `k - 1` and `k - 2`) whose keeper in closed `k - 2`
//!    is not in set `k - 1` at all (a Left entry is in it). The grant is
//!    *short*, live in `k` only,
//!    if the member's entry in closed `k - 1` is Reserved: it did not
//!    register in `k - 1`, so if this registration's write is lost no
//!    reservation keeps it in set `k`, and inheritance at `k + 1` takes its
//!    position.
//! 4. **Leaves** (`leave.lua`). A leave executing in `x` (anonymous; under
//!    a name it removes nothing) decides from the member's entry in set
//!    `x`. Registered, or Reserved while the worker processed a reply from
//!    a registration in `x` (the request carries the interval of its newest
//!    processed reply: a failover may have lost that registration's
//!    writes): the entry becomes Left, present but not counted, and the
//!    member's reservation in set `x + 1`, if any, is removed. Reserved
//!    otherwise: the entry is removed (its grants end with `x`). Left, or
//!    no entry: nothing. A registration that executes after the leave (a
//!    slow one, its reply ignored) writes the member in again as above.
//!    There is no leave record.
//!
//! Why that is exclusive, which the searches check. In `j` the live grants
//! are from `j - 1` (full) and from `j`; each is inside its holder's
//! position in closed `j - 2` (the first factor of one from `j - 1`, the
//! second of one from `j`), which is distinct per holder (a Left member has
//! none, so no grant from `j - 1`), or, from `j`, inside an inherited
//! position `q` of closed `j - 2`. Its keeper `h` is in no entry of set
//! `j - 1`, not even a Left one, so `h` has no grant from `j` (no first
//! factor), and a grant from `j - 1` needs a processed registration in
//! `j - 1` that left no entry there: its write was lost, and nothing else
//! kept `h` in set `j - 1`. Either `h` has no kept registration in `j - 2`
//! (a registration's two writes are lost together): then its entry in
//! closed `j - 2` is Reserved, and its grant from `j - 1` is short, not
//! live in `j`. Or a leave removed its reservation from `j - 2`: a leave in
//! `j - 2`, or in `j - 1` before registering, ends `h`'s processed
//! registrations; a leave in `j - 1` after its processed registration
//! there finds the registration (a failover at the end of `j - 1` comes
//! after it, and replays its Left entry onto the reservation) or, after a
//! failover before it, the reservation, and knows it processed a reply
//! from `j - 1`: either way the entry becomes Left, and `h` stays in set
//! `j - 1`. A leave that ignored the reply's interval would remove the
//! reservation (`Broken::LeaveWithoutReplyInterval`, the design before
//! Left entries, which the search with a failover before the leave
//! catches), and one that removed the registration instead of leaving a
//! Left entry (`Broken::LeaveAlsoFromOpenSet`) takes `h` out after any
//! registration and leave.
//!
//! The checks (today's rules and revision 3 alike: 0 overlapping runs in
//! every search):
//! - an exhaustive search over every fate of every worker in every interval
//!   of 3 workers: 4 varied intervals from the first registration (531,441
//!   runs), and after three settled intervals with every graceful leave of
//!   worker 0 besides, anonymous and under member names (1,318,761 runs
//!   each); with `LEASE_SEARCH_DEEP=1` 5 intervals (14,348,907 and twice
//!   35,783,694 runs);
//! - after three settled intervals, 3 varied intervals (4 deep) of every
//!   fate and leave, with a failover in one of them that loses the writes
//!   of any nonempty subset of its registrations, at the end of the
//!   interval and right after the lost registrations, anonymous and named:
//!   four searches of 393,336 runs (15,496,353 deep);
//! - 4,000 random runs of 4 to 8 workers, half of them under member names,
//!   half with such a failover (990 at the end, 1,010 before later writes);
//! - eight negative controls, each a deliberately broken rule that some
//!   search must catch. `LEASE_CONTROL_COUNTS=1` counts every control's
//!   violating runs in every search (default depth; `end` and `before` the
//!   lost-writes searches by placement, `·n` named):
//!
//!   | control                   | first  | leaves | named     | end    | end·n   | before | before·n |
//!   |---------------------------|--------|--------|-----------|--------|---------|--------|----------|
//!   | InheritFromRegistered     | 1,152  | 56,250 | 0         | 15,674 | 0       | 15,674 | 0        |
//!   | OneClosedSet              | 57,744 | 24,924 | 10,764    | 0      | 0       | 0      | 0        |
//!   | SecondFactorFromMemory    | 0      | 11,196 | 972       | 0      | 0       | 0      | 0        |
//!   | LeaveAlsoFromOpenSet      | 0      | 19,467 | 0         | 5,325  | 0       | 5,325  | 0        |
//!   | LeaveWithoutReplyInterval | 0      | 0      | 0         | 0      | 0       | 1,971  | 0        |
//!   | FullGrantFromReservation  | 0      | 0      | 0         | 14,544 | 5,808   | 14,544 | 5,376    |
//!   | GrantWhileMemberInUse     | 0      | 0      | 1,318,761 | 0      | 393,336 | 0      | 393,336  |
//!   | TakeOverAfterOneInterval  | 0      | 0      | 319,059   | 0      | 67,446  | 0      | 69,606   |
//!
//!   `LeaveWithoutReplyInterval` overlaps in 52,731 of the 15,496,353 runs
//!   of the deep `before` search;
//! - a leave after a failover that lost its registration, the run that
//!   broke the design before Left entries, checked by hand;
//! - the scenario figures that motivate the design (a missed registration,
//!   a lost reply, a crash, a graceful leave), today's rules against it in
//!   the same model. They count coverage in whole intervals: a task
//!   is covered in `j` if a full grant from `j - 1` holds it, so a short
//!   grant from `j`, which covers the rest of `j` after its reply, counts
//!   nothing there.

use lease_core::ownership::Mapping;

/// Tasks `0..TASKS`, as a bit set.
const TASKS: usize = 256;
/// Largest group the task table covers, and the most workers and members
/// of a run.
const MAX_N: usize = 8;
/// The most inheritance candidates one reply looks at (the script's bound:
/// each is a lookup in closed `k - 2` and in set `k - 1`).
const MAX_CANDIDATES: usize = 8;

type Tasks = [u64; TASKS / 64];
const NONE: Tasks = [0; TASKS / 64];

fn union(a: Tasks, b: Tasks) -> Tasks {
    std::array::from_fn(|i| a[i] | b[i])
}

fn intersect(a: Tasks, b: Tasks) -> Tasks {
    std::array::from_fn(|i| a[i] & b[i])
}

fn count(a: &Tasks) -> u32 {
    a.iter().map(|w| w.count_ones()).sum()
}

/// `T(i, n)` under the jump-hash mapping, for `n <= MAX_N`.
struct TaskTable(Vec<Vec<Tasks>>);

impl TaskTable {
    fn new() -> Self {
        let mut by_n = vec![Vec::new()];
        for n in 1..=MAX_N {
            let mut sets = vec![NONE; n];
            for id in 0..TASKS {
                let i = Mapping::Consistent.owner(id as u64, n as u32) as usize;
                sets[i][id / 64] |= 1 << (id % 64);
            }
            by_n.push(sets);
        }
        Self(by_n)
    }

    fn of(&self, (i, n): (u32, u32)) -> Tasks {
        self.0[n as usize][i as usize]
    }
}

/// A member's score in a set (rule 3): carried positions first, then
/// returnees by the position they sent, then newcomers.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Score {
    Carried(u32),
    Returnee(u32),
    Newcomer,
}

/// What a member's entry in a set comes from. The order is the set's: of
/// two counted entries with one score, the Registered one comes first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    /// Its registration in the set's interval.
    Registered,
    /// Its registration in the interval before (`ZADD NX`).
    Reserved,
    /// Its leave in the set's interval, after it registered there (or
    /// processed a reply from there): present (inheritance does not take
    /// its position of the closed set before) but not counted (no
    /// position, not in the closed set's size). The script's score -1.
    Left,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Entry {
    score: Score,
    kind: Kind,
}

/// What happens to one worker in one interval.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fate {
    /// Registers; the reply is processed.
    Register,
    /// Registers (it executes); the reply never arrives.
    ReplyLost,
    /// Nothing reaches Redis this interval (lost requests, a pause, a crash
    /// when it lasts to the end).
    Miss,
    /// Registers (the reply is processed), then leaves gracefully (rule 16)
    /// in the same interval; it keeps serving what it holds.
    RegisterThenLeave,
    /// Leaves gracefully before registering in this interval.
    Leave,
    /// Leaves, and then a slow registration sent before the cancel executes
    /// and adds the member again (and reserves the next set); the reply is
    /// ignored (rule 16).
    LeaveThenSlowRegistration,
}

impl Fate {
    fn leaves(self) -> bool {
        matches!(
            self,
            Self::RegisterThenLeave | Self::Leave | Self::LeaveThenSlowRegistration
        )
    }

    /// Whether a registration executes: what a failover can lose.
    fn registers(self) -> bool {
        !matches!(self, Self::Miss | Self::Leave)
    }
}

/// What the search draws for a worker that stays.
const FATES: [Fate; 3] = [Fate::Register, Fate::ReplyLost, Fate::Miss];
/// What it draws for a worker that may leave.
const FATES_WITH_LEAVES: [Fate; 6] = [
    Fate::Register,
    Fate::ReplyLost,
    Fate::Miss,
    Fate::RegisterThenLeave,
    Fate::Leave,
    Fate::LeaveThenSlowRegistration,
];

/// A deliberately broken rule: some search must find the overlap it allows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Broken {
    /// Inherit every candidate position of closed `k - 2` but one's own,
    /// also those whose holder registered in `k - 1`.
    InheritFromRegistered,
    /// Grant `T(p(k-1))` alone when there is no second factor.
    OneClosedSet,
    /// Take the second factor from the last position the worker knows,
    /// with the size of closed `k - 2`, without the server saying the
    /// member kept it there.
    SecondFactorFromMemory,
    /// A leave removes a Registered entry (and its reservation) instead of
    /// making it Left, so a worker that registered and left is absent from
    /// the set of its grant, and inheritance takes its position while the
    /// grant is live.
    LeaveAlsoFromOpenSet,
    /// A leave decides from the member's entry alone, not from the interval
    /// of the worker's newest processed reply (the design before Left
    /// entries had it): after a failover that lost its registration, the
    /// leave finds the reservation from the interval before and removes it,
    /// and inheritance takes the position of its live grant.
    LeaveWithoutReplyInterval,
    /// A grant whose first factor is a Reserved entry is live in `k + 1`
    /// too, though nothing keeps its member in set `k` after a lost write.
    FullGrantFromReservation,
    /// Under a member name, grant from a registration that another
    /// incarnation's record refused (rule 18, status 3).
    GrantWhileMemberInUse,
    /// Under a member name, let another incarnation take the name over one
    /// interval after the holder's last registration instead of two.
    TakeOverAfterOneInterval,
}

const CONTROLS: [Broken; 8] = [
    Broken::InheritFromRegistered,
    Broken::OneClosedSet,
    Broken::SecondFactorFromMemory,
    Broken::LeaveAlsoFromOpenSet,
    Broken::LeaveWithoutReplyInterval,
    Broken::FullGrantFromReservation,
    Broken::GrantWhileMemberInUse,
    Broken::TakeOverAfterOneInterval,
];

#[derive(Clone, Copy, Debug)]
struct Rules {
    /// Revision 3 (sticky return), or the rules as built today.
    built: bool,
    broken: Option<Broken>,
}

const TODAY: Rules = Rules {
    built: false,
    broken: None,
};
const BUILT: Rules = Rules {
    built: true,
    broken: None,
};

/// A set's entries by member (members are `0..MAX_N`). Fixed arrays, here
/// and in `Closed`, `World` and the member record, keep a world cheap to
/// clone, which the searches do at every node.
#[derive(Clone, Copy, Default)]
struct Set([Option<Entry>; MAX_N]);

impl Set {
    fn get(&self, m: usize) -> Option<Entry> {
        self.0[m]
    }

    /// Whether `m` has an entry, a Left one included.
    fn contains(&self, m: usize) -> bool {
        self.0[m].is_some()
    }

    /// The counted entries (`ZCOUNT 0 +inf`): Registered and Reserved.
    fn counted(&self) -> impl Iterator<Item = (usize, Entry)> + '_ {
        (0..MAX_N)
            .filter_map(|m| Some((m, self.0[m]?)))
            .filter(|(_, e)| e.kind != Kind::Left)
    }
}

/// A member's place in a closed set.
#[derive(Clone, Copy, Debug)]
struct Place {
    position: u32,
    /// It kept the position its score carries (not a filler).
    keeper: bool,
    /// Its entry is a reservation: it did not register in that interval.
    reserved: bool,
}

/// A closed set's positions (rule 15, revision 3) and size, both of its
/// counted entries: a Left member has no place.
#[derive(Clone, Copy)]
struct Closed {
    size: u32,
    /// By member.
    place: [Option<Place>; MAX_N],
    /// The member at each position below `size`.
    holder: [usize; MAX_N],
}

impl Closed {
    fn of(set: &Set) -> Self {
        let size = set.counted().count() as u32;
        let mut order: Vec<(Score, Kind, usize)> =
            set.counted().map(|(m, e)| (e.score, e.kind, m)).collect();
        order.sort();
        let mut holder = [None; MAX_N];
        let mut place = [None; MAX_N];
        let at = |position, keeper, kind| Place {
            position,
            keeper,
            reserved: kind == Kind::Reserved,
        };
        for &(score, kind, m) in &order {
            if let Score::Carried(p) = score
                && p < size
                && holder[p as usize].is_none()
            {
                holder[p as usize] = Some(m);
                place[m] = Some(at(p, true, kind));
            }
        }
        let free: Vec<u32> = (0..size)
            .filter(|&p| holder[p as usize].is_none())
            .collect();
        let mut free = free.into_iter();
        for &(_, kind, m) in &order {
            if place[m].is_none() {
                let p = free.next().expect("one free position per filler");
                holder[p as usize] = Some(m);
                place[m] = Some(at(p, false, kind));
            }
        }
        let holder = holder.map(|h| h.unwrap_or(usize::MAX));
        Self {
            size,
            place,
            holder,
        }
    }

    fn place(&self, m: usize) -> Option<Place> {
        self.place[m]
    }

    fn pair(&self, m: usize) -> Option<(u32, u32)> {
        self.place(m).map(|p| (p.position, self.size))
    }

    /// The member at `q` if it keeps `q` (the first with a score carrying
    /// it), not a filler.
    fn keeper_of(&self, q: u32) -> Option<usize> {
        let m = self.holder[..self.size as usize].get(q as usize).copied()?;
        self.place(m)?.keeper.then_some(m)
    }
}

#[derive(Clone, Copy, Default)]
struct WorkerState {
    /// The last position a reply named (a returnee sends it).
    last_known: Option<u32>,
    /// The interval of the last processed reply and the pair it implied.
    previous: Option<(usize, Option<(u32, u32)>)>,
}

/// A grant from a reply in `from`: live through the rest of `from` and,
/// unless short, all of `from + 1`.
#[derive(Clone, Copy)]
struct Grant {
    from: usize,
    worker: usize,
    tasks: Tasks,
    short: bool,
}

/// A failover in `interval` that loses the set writes of every
/// registration executed in it by a worker in `workers` (a bit set).
#[derive(Clone, Copy, Debug)]
struct Loss {
    interval: usize,
    workers: u32,
    failover: Failover,
}

/// Where in its interval the failover comes; either way every closed set
/// is read after it. The two differ where a later write of the interval
/// depends on a lost one: a leave after its own lost registration, and
/// under a member name another incarnation's registration after a lost
/// one (it writes what the lost one had written, and that is kept).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Failover {
    /// After every write of the interval: the new primary has the others
    /// as they executed (a replica replays a script's effects), so a leave
    /// that removed a lost reservation removes nothing there, and its
    /// Left entry (`ZADD XX`) lands on the member's reservation from the
    /// interval before, if any.
    AtTheEnd,
    /// Right after each lost registration: every later write of the
    /// interval executes on a primary that never had it, so a leave that
    /// follows its own lost registration finds the member's reservation
    /// from the interval before (or nothing) in the open set, and only the
    /// interval of the worker's newest processed reply tells it that the
    /// member registered there
    /// (`a_leave_after_a_failover_that_lost_its_registration_stays_exclusive`).
    BeforeLaterWrites,
}

/// One write to a set, as a replica replays it: the entry it left, or a
/// removal.
#[derive(Clone, Copy)]
struct Write {
    set: usize,
    member: usize,
    entry: Option<Entry>,
    /// `ZADD XX` (a leave's Left entry): it changes a member that is there
    /// and adds none.
    only_present: bool,
    /// A lost registration's write.
    lost: bool,
}

/// The writes of the interval that fails over, and the two sets it writes
/// as they were before it.
#[derive(Clone)]
struct Log {
    before: [Set; 2],
    writes: Vec<Write>,
}

/// One run of the model.
#[derive(Clone)]
struct World<'t> {
    rules: Rules,
    table: &'t TaskTable,
    sets: Vec<Set>,
    closed: Vec<Option<Closed>>,
    workers: Vec<WorkerState>,
    /// Each worker's set member: itself, or a member name it shares with
    /// other incarnations (rule 18).
    member: Vec<usize>,
    /// Under member names, the member record: name -> (the incarnation
    /// holding it, the last interval it registered in as holder).
    record: Option<[Option<(usize, usize)>; MAX_N]>,
    /// Workers that left; they register no more.
    gone: Vec<bool>,
    /// Every grant, in the order given.
    grants: Vec<Grant>,
    /// The failover of this run, if any.
    loss: Option<Loss>,
    /// Kept while the failover's interval runs.
    log: Option<Log>,
}

impl<'t> World<'t> {
    /// Anonymous workers: each its own member.
    fn new(rules: Rules, table: &'t TaskTable, workers: usize, intervals: usize) -> Self {
        let members: Vec<usize> = (0..workers).collect();
        Self::with_members(rules, table, &members, false, intervals)
    }

    /// Worker `w` registers as member `members[w]`; with `named`, under a
    /// member name and its record.
    fn with_members(
        rules: Rules,
        table: &'t TaskTable,
        members: &[usize],
        named: bool,
        intervals: usize,
    ) -> Self {
        let workers = members.len();
        Self {
            rules,
            table,
            // A reservation from the last interval writes one set further.
            sets: vec![Set::default(); intervals + 2],
            closed: (0..intervals + 2).map(|_| None).collect(),
            workers: vec![WorkerState::default(); workers],
            member: members.to_vec(),
            record: named.then_some([None; MAX_N]),
            gone: vec![false; workers],
            grants: Vec::new(),
            loss: None,
            log: None,
        }
    }

    /// Closes `k` once: it is final once `k + 1` begins (the last write into
    /// it is a registration or a leave in `k`, and a failover at the end of
    /// `k` comes before anyone reads it).
    fn close(&mut self, k: usize) {
        if self.closed[k].is_none() {
            self.closed[k] = Some(Closed::of(&self.sets[k]));
        }
    }

    fn closed(&self, k: usize) -> &Closed {
        self.closed[k].as_ref().expect("closed before it is read")
    }

    /// Interval `k` (from 2: sets 0 and 1 stay empty, so the first
    /// registrations are newcomers' and nothing is granted before 4).
    fn interval(&mut self, k: usize, fates: impl Iterator<Item = (usize, Fate)>) {
        let fails_over = self.loss.is_some_and(|l| l.interval == k);
        if fails_over {
            self.log = Some(Log {
                before: [self.sets[k], self.sets[k + 1]],
                writes: Vec::new(),
            });
        }
        for (w, fate) in fates {
            if self.gone[w] {
                continue;
            }
            match fate {
                Fate::Miss => {}
                Fate::Register => self.register(k, w, true),
                Fate::ReplyLost => self.register(k, w, false),
                Fate::RegisterThenLeave => {
                    self.register(k, w, true);
                    self.leave(k, w);
                }
                Fate::Leave => self.leave(k, w),
                Fate::LeaveThenSlowRegistration => {
                    self.leave(k, w);
                    self.register(k, w, false);
                }
            }
        }
        if fails_over {
            self.fail_over(k);
        }
    }

    /// The new primary has the sets as they were before `k`, with every
    /// write of `k` but the lost ones replayed in order. A leave that
    /// removed a lost reservation removes nothing there, as on a replica
    /// that never had it, and its Left entry (`ZADD XX`) lands on the
    /// member's entry from before `k`, or on nothing.
    fn fail_over(&mut self, k: usize) {
        let Log {
            before: [open, next],
            writes,
        } = self.log.take().expect("logged since the interval began");
        self.sets[k] = open;
        self.sets[k + 1] = next;
        for write in writes.into_iter().filter(|w| !w.lost) {
            self.apply(write);
        }
    }

    fn apply(&mut self, write: Write) {
        let slot = &mut self.sets[write.set].0[write.member];
        if slot.is_some() || !write.only_present {
            *slot = write.entry;
        }
    }

    /// Writes (and, in the failover's interval, logs) one change.
    fn write(&mut self, write: Write) {
        let Write { lost, .. } = write;
        let gone_at_once = self
            .loss
            .is_some_and(|l| l.failover == Failover::BeforeLaterWrites);
        if !(lost && gone_at_once) {
            self.apply(write);
        }
        if let Some(log) = &mut self.log {
            log.writes.push(write);
        }
    }

    /// A graceful leave executing in `k`. Under a member name it removes
    /// nothing (rule 18: the set member is the name, which a new
    /// incarnation may carry on). Today it removes the member from set `k`.
    fn leave(&mut self, k: usize, w: usize) {
        self.gone[w] = true;
        if self.record.is_some() {
            return;
        }
        let m = self.member[w];
        if !self.rules.built {
            self.remove(k, m);
            return;
        }
        // Revision 3 decides from the member's entry in set `k`. Registered,
        // or Reserved while the worker processed a reply from `k` (a
        // failover lost that registration's writes): it may hold a grant
        // from `k`, live in `k + 1`, inside its position of closed `k - 1`,
        // so set `k` keeps it present, or inheritance at `k + 1` would take
        // that position; Left, it is not counted in closed `k`, and out of
        // set `k + 1` its position of closed `k` is nobody's. Reserved
        // otherwise: its grants end with `k`, and out of set `k` it is
        // inherited one interval sooner.
        let replied = self.workers[w].previous.is_some_and(|(pk, _)| pk == k)
            && self.rules.broken != Some(Broken::LeaveWithoutReplyInterval);
        match self.sets[k].get(m) {
            Some(e) if e.kind == Kind::Registered || e.kind == Kind::Reserved && replied => {
                if self.rules.broken == Some(Broken::LeaveAlsoFromOpenSet) {
                    self.remove(k, m);
                } else {
                    let entry = Entry {
                        kind: Kind::Left,
                        ..e
                    };
                    self.write(Write {
                        set: k,
                        member: m,
                        entry: Some(entry),
                        only_present: true,
                        lost: false,
                    });
                }
                self.remove(k + 1, m);
            }
            Some(e) if e.kind == Kind::Reserved => self.remove(k, m),
            // Left, or no entry: a repeat changes nothing more.
            _ => {}
        }
    }

    /// `ZREM`: only a removal that removes something is a write.
    fn remove(&mut self, set: usize, member: usize) {
        if self.sets[set].contains(member) {
            self.write(Write {
                set,
                member,
                entry: None,
                only_present: false,
                lost: false,
            });
        }
    }

    /// Whether `w` holds its member name in `k` (rule 18), recording it if
    /// so; always true for anonymous workers.
    fn holds_name(&mut self, k: usize, w: usize) -> bool {
        let wait = if self.rules.broken == Some(Broken::TakeOverAfterOneInterval) {
            1
        } else {
            2
        };
        let m = self.member[w];
        let Some(record) = &mut self.record else {
            return true;
        };
        match record[m] {
            Some((holder, j)) if holder != w && j + wait > k => false,
            Some((holder, j)) if holder == w => {
                record[m] = Some((w, j.max(k)));
                true
            }
            _ => {
                record[m] = Some((w, k));
                true
            }
        }
    }

    fn register(&mut self, k: usize, w: usize, processed: bool) {
        self.close(k - 1);
        self.close(k - 2);
        let holds = self.holds_name(k, w);
        let m = self.member[w];
        let state = self.workers[w];
        let place = self.closed(k - 1).place(m);
        let score = match place {
            Some(p) => Score::Carried(p.position),
            None => state.last_known.map_or(Score::Newcomer, Score::Returnee),
        };
        self.write_registration(k, w, score);
        if !processed {
            return;
        }
        let grants = holds || self.rules.broken == Some(Broken::GrantWhileMemberInUse);
        if let Some(place) = place.filter(|_| grants)
            && let Some(grant) = self.grant(k, w, place, state)
        {
            self.grants.push(grant);
        }
        let size = self.closed(k - 1).size;
        let state = &mut self.workers[w];
        if let Some(p) = place {
            state.last_known = Some(p.position);
        }
        state.previous = Some((k, place.map(|p| (p.position, size))));
    }

    /// A registration's writes: its entry in set `k`, over nothing, a
    /// reservation or a Left entry (a Registered score never changes), and
    /// in revision 3 its reservation in set `k + 1` (`ZADD NX`).
    fn write_registration(&mut self, k: usize, w: usize, score: Score) {
        let m = self.member[w];
        let lost = self
            .loss
            .is_some_and(|l| l.interval == k && l.workers >> w & 1 == 1);
        let write = |world: &mut Self, set, kind| {
            world.write(Write {
                set,
                member: m,
                entry: Some(Entry { score, kind }),
                only_present: false,
                lost,
            });
        };
        if self.sets[k]
            .get(m)
            .is_none_or(|e| e.kind != Kind::Registered)
        {
            write(self, k, Kind::Registered);
        }
        if self.rules.built && !self.sets[k + 1].contains(m) {
            write(self, k + 1, Kind::Reserved);
        }
    }

    /// What a processed reply from `k` grants worker `w`, whose member has
    /// `place` in closed `k - 1` (the first factor).
    fn grant(&self, k: usize, w: usize, place: Place, state: WorkerState) -> Option<Grant> {
        let m = self.member[w];
        let before = self.closed(k - 2);
        let first = (place.position, self.closed(k - 1).size);
        let from_previous = match state.previous {
            Some((pk, pair)) if pk + 1 == k => pair,
            _ => None,
        };
        // The returnee's grant: only a keeper's position, which the script
        // reads from the member's own score.
        let from_server = before
            .place(m)
            .filter(|p| self.rules.built && p.keeper)
            .map(|p| (p.position, before.size));
        if let (Some(a), Some(b)) = (from_previous, from_server) {
            assert_eq!(a, b, "two ways of learning p(k-2) disagree");
        }
        let mut second = from_previous.or(from_server);
        if self.rules.broken == Some(Broken::SecondFactorFromMemory) && second.is_none() {
            second = state
                .last_known
                .filter(|&p| p < before.size)
                .map(|p| (p, before.size));
        }
        let own = self.table.of(first);
        let mut tasks = match second {
            Some(pair) => intersect(own, self.table.of(pair)),
            None if self.rules.broken == Some(Broken::OneClosedSet) => own,
            None => NONE,
        };
        if self.rules.built {
            for q in self.inherited(k, m, first.0, second.map(|(p, _)| p)) {
                tasks = union(tasks, intersect(own, self.table.of((q, before.size))));
            }
        }
        // A member Reserved in closed `k - 1` did not register in `k - 1`,
        // so if this registration's write is lost it is in no set of `k`,
        // and inheritance at `k + 1` takes its position: the grant must
        // end with `k`.
        let short = self.rules.built
            && place.reserved
            && self.rules.broken != Some(Broken::FullGrantFromReservation);
        (count(&tasks) > 0).then_some(Grant {
            from: k,
            worker: w,
            tasks,
            short,
        })
    }

    /// The positions of closed `k - 2` that a grant from `k` to member `m`
    /// at position `i` of closed `k - 1` inherits. Under jump hash `T(i, n')`
    /// meets `T(q, m)` only for `q = i` or `q` in `[n', m)`, so those are
    /// the candidates. A position is inherited if its keeper is in no entry
    /// of set `k - 1`, a Left one included: then it has no grant live in
    /// `k` (the module's argument: after a lost write in `k - 1` its grant
    /// from `k - 1` is short).
    fn inherited(&self, k: usize, m: usize, i: u32, own: Option<u32>) -> Vec<u32> {
        let (now, before) = (self.closed(k - 1), self.closed(k - 2));
        std::iter::once(i)
            .chain(now.size..before.size)
            .filter(|&q| Some(q) != own)
            .take(MAX_CANDIDATES)
            .filter(|&q| q < before.size)
            .filter(|&q| match self.rules.broken {
                Some(Broken::InheritFromRegistered) => before.holder[q as usize] != m,
                _ => before
                    .keeper_of(q)
                    .is_some_and(|h| !self.sets[k - 1].contains(h)),
            })
            .collect()
    }

    /// The grants live in `j`: every grant from `j`, and the full ones from
    /// `j - 1`.
    fn live(&self, j: usize) -> impl Iterator<Item = &Grant> {
        let live = move |g: &&Grant| g.from == j || g.from + 1 == j && !g.short;
        self.grants.iter().filter(live)
    }

    /// Two workers with live grants that share a task in interval `j`.
    fn overlap(&self, j: usize) -> Option<(usize, usize)> {
        let live: Vec<&Grant> = self.live(j).collect();
        for (x, a) in live.iter().enumerate() {
            for b in &live[x + 1..] {
                if a.worker != b.worker && count(&intersect(a.tasks, b.tasks)) > 0 {
                    return Some((a.worker, b.worker));
                }
            }
        }
        None
    }

    /// Each task's holder through interval `j`: the worker whose full grant
    /// from `j - 1` has it (live for the whole of `j`). A short grant from
    /// `j` covers the rest of `j` after its reply, and counts nothing here.
    fn holders(&self, j: usize) -> Vec<Option<usize>> {
        let mut holder = vec![None; TASKS];
        let full = |g: &&Grant| g.from + 1 == j && !g.short;
        for g in self.grants.iter().filter(full) {
            for (t, h) in holder.iter_mut().enumerate() {
                if g.tasks[t / 64] >> (t % 64) & 1 == 1 {
                    *h = Some(g.worker);
                }
            }
        }
        holder
    }
}

/// Runs `fates[k - 2][w]` for intervals `2..intervals`, with the failover
/// `loss` if any; the first overlapping interval, if any.
/// Worker `w` registers as `members[w]`, under member names if `named`.
fn run(
    rules: Rules,
    table: &TaskTable,
    (members, named): (&[usize], bool),
    fates: &[Vec<Fate>],
    loss: Option<Loss>,
) -> Option<usize> {
    let intervals = fates.len() + 2;
    let mut world = World::with_members(rules, table, members, named, intervals);
    world.loss = loss;
    for (i, row) in fates.iter().enumerate() {
        let k = i + 2;
        world.interval(k, row.iter().copied().enumerate());
        if world.overlap(k).is_some() {
            return Some(k);
        }
    }
    None
}

/// The shape of one search: `settled` intervals in which all three workers
/// register, then `varied` intervals of every fate; with `leaves`, worker 0
/// may also leave (once: it is gone afterwards); with `named`, workers 0
/// and 2 are two incarnations of one member name (a restart, or two live
/// processes with one name) and worker 1 has a name of its own; with
/// `lost_writes`, one varied interval but the last may fail over there,
/// losing the writes of any nonempty subset of the registrations executed
/// in it (a loss in the last interval is read by no one in the run).
#[derive(Clone, Copy, Debug)]
struct Shape {
    settled: usize,
    varied: usize,
    leaves: bool,
    named: bool,
    lost_writes: Option<Failover>,
}

const WORKERS: usize = 3;

/// Worker 0's fates in a varied interval.
fn first_fates(shape: Shape, gone: bool) -> &'static [Fate] {
    match (gone, shape.leaves) {
        (true, _) => &[Fate::Miss],
        (false, true) => &FATES_WITH_LEAVES,
        (false, false) => &FATES,
    }
}

/// Every fate of the three workers in a varied interval.
fn fates_of(shape: Shape, gone: bool) -> impl Iterator<Item = [Fate; WORKERS]> {
    first_fates(shape, gone).iter().flat_map(|&f0| {
        FATES
            .iter()
            .flat_map(move |&f1| FATES.map(|f2| [f0, f1, f2]))
    })
}

/// The workers whose writes the failover at varied interval `depth` loses,
/// as bit sets: none (no failover), then, if this run may still fail over
/// here, every nonempty subset of those that register.
fn losses(
    shape: Shape,
    depth: usize,
    may_lose: bool,
    fates: [Fate; WORKERS],
) -> impl Iterator<Item = u32> {
    let registering: u32 = (0..WORKERS)
        .filter(|&w| fates[w].registers())
        .map(|w| 1 << w)
        .sum();
    let here = shape.lost_writes.is_some() && may_lose && depth + 1 < shape.varied;
    (0..1 << WORKERS).filter(move |&s| s == 0 || (here && s & !registering == 0))
}

/// `below[depth][gone][may_lose]`: the runs below a node at `depth`.
fn run_counts(shape: Shape) -> Vec<[[u64; 2]; 2]> {
    let mut below = vec![[[1; 2]; 2]; shape.varied + 1];
    for depth in (0..shape.varied).rev() {
        for gone in [false, true] {
            for may_lose in [false, true] {
                let mut n = 0;
                for fates in fates_of(shape, gone) {
                    let gone = gone || fates[0].leaves();
                    for lost in losses(shape, depth, may_lose, fates) {
                        n += below[depth + 1][gone as usize][(may_lose && lost == 0) as usize];
                    }
                }
                below[depth][gone as usize][may_lose as usize] = n;
            }
        }
    }
    below
}

/// Every run of `shape`: the runs and the violating runs (with
/// `first_only`, it stops at the first violating run). A depth-first walk,
/// one interval per level: each run shares its prefix with its siblings,
/// and every extension of a prefix that overlaps is a violating run.
fn search(rules: Rules, table: &TaskTable, shape: Shape, first_only: bool) -> (u64, u64) {
    let intervals = shape.settled + shape.varied + 2;
    let mut world = if shape.named {
        World::with_members(rules, table, &[0, 1, 0], true, intervals)
    } else {
        World::new(rules, table, WORKERS, intervals)
    };
    let below = run_counts(shape);
    for k in 2..2 + shape.settled {
        world.interval(k, (0..WORKERS).map(|w| (w, Fate::Register)));
        if world.overlap(k).is_some() {
            // Every run shares the start: all of them violate.
            let runs = below[0][0][1];
            return (runs, runs);
        }
    }
    let mut walk = Walk {
        shape,
        below,
        first_only,
        runs: 0,
        violating: 0,
    };
    walk.visit(&world, 0, false, true);
    (walk.runs, walk.violating)
}

struct Walk {
    shape: Shape,
    below: Vec<[[u64; 2]; 2]>,
    first_only: bool,
    runs: u64,
    violating: u64,
}

impl Walk {
    /// Visits every fate (and failover) of the varied interval `depth` and
    /// below; false once `first_only` found a violating run.
    fn visit(&mut self, world: &World, depth: usize, gone: bool, may_lose: bool) -> bool {
        if depth == self.shape.varied {
            self.runs += 1;
            return true;
        }
        let k = 2 + self.shape.settled + depth;
        for fates in fates_of(self.shape, gone) {
            let gone = gone || fates[0].leaves();
            for lost in losses(self.shape, depth, may_lose, fates) {
                let mut next = world.clone();
                if let Some(failover) = self.shape.lost_writes.filter(|_| lost != 0) {
                    next.loss = Some(Loss {
                        interval: k,
                        workers: lost,
                        failover,
                    });
                }
                next.interval(k, fates.into_iter().enumerate());
                let may_lose = may_lose && lost == 0;
                if next.overlap(k).is_some() {
                    let runs = self.below[depth + 1][gone as usize][may_lose as usize];
                    self.runs += runs;
                    self.violating += runs;
                    if self.first_only {
                        return false;
                    }
                } else if !self.visit(&next, depth + 1, gone, may_lose) {
                    return false;
                }
            }
        }
        true
    }
}

fn deep() -> bool {
    std::env::var_os("LEASE_SEARCH_DEEP").is_some_and(|v| v == "1")
}

/// Four intervals in full (five with `LEASE_SEARCH_DEEP=1`, about thirty
/// times longer): from the first registration (joins at any interval,
/// grants from 4 at the earliest), and after three settled intervals
/// (misses, lost replies and crashes of holders, returns, short grants,
/// the inheritance two intervals after a crash, and every graceful leave
/// of worker 0), anonymous and under member names.
fn searches() -> [Shape; 3] {
    let varied = if deep() { 5 } else { 4 };
    let shape = |settled, leaves, named| Shape {
        settled,
        varied,
        leaves,
        named,
        lost_writes: None,
    };
    [
        shape(0, false, false),
        shape(3, true, false),
        shape(3, true, true),
    ]
}

/// After three settled intervals, three varied ones (four with
/// `LEASE_SEARCH_DEEP=1`, about forty times longer) with every fate, every
/// leave of worker 0, and a failover in one of them that loses the writes
/// of any subset of the registrations in it: anonymous and under member
/// names, the failover at the end of the interval, then right after the
/// lost registrations (before a leave that follows one).
fn lost_write_searches() -> [Shape; 4] {
    let varied = if deep() { 4 } else { 3 };
    let shape = |named, failover| Shape {
        settled: 3,
        varied,
        leaves: true,
        named,
        lost_writes: Some(failover),
    };
    [
        shape(false, Failover::AtTheEnd),
        shape(true, Failover::AtTheEnd),
        shape(false, Failover::BeforeLaterWrites),
        shape(true, Failover::BeforeLaterWrites),
    ]
}

#[test]
fn the_searches_count_every_run() {
    // Independent of `run_counts`: 27 fates of three workers per interval
    // from the first registration; after the settled start, 9 of workers 1
    // and 2 times worker 0's sequences with leaves, `n(r) = 3 n(r-1) + 3`
    // (a leave ends them).
    let [first, leaves, named] = searches();
    let sequences = |r| (0..r).fold(1u64, |n, _| 3 * n + 3);
    let varied = first.varied as u32;
    assert_eq!(run_counts(first)[0][0][1], 27u64.pow(varied));
    let with_leaves = sequences(varied) * 9u64.pow(varied);
    assert_eq!(run_counts(leaves)[0][0][1], with_leaves);
    assert_eq!(run_counts(named)[0][0][1], with_leaves);
    // With a failover, the runs that have none are the runs of the same
    // shape without it.
    let lost = lost_write_searches()[0];
    let no_loss = Shape {
        lost_writes: None,
        ..lost
    };
    assert_eq!(run_counts(lost)[0][0][0], run_counts(no_loss)[0][0][1]);
    assert!(run_counts(lost)[0][0][1] > run_counts(no_loss)[0][0][1]);
}

/// Every run of every shape, under today's rules and sticky return: the
/// expected number of runs, none overlapping.
fn assert_exclusive_in_every_run(shapes: impl IntoIterator<Item = Shape> + Clone) {
    let table = TaskTable::new();
    for rules in [TODAY, BUILT] {
        for shape in shapes.clone() {
            let (runs, violating) = search(rules, &table, shape, false);
            println!("{rules:?} {shape:?}: {violating} of {runs} runs overlap");
            assert_eq!(runs, run_counts(shape)[0][0][1]);
            assert_eq!(
                violating, 0,
                "{rules:?}: {violating} of {runs} runs overlap"
            );
        }
    }
}

#[test]
fn sticky_return_is_exclusive_in_every_fate_of_three_workers() {
    assert_exclusive_in_every_run(searches());
}

#[test]
fn sticky_return_is_exclusive_after_a_failover_that_loses_writes() {
    assert_exclusive_in_every_run(lost_write_searches());
}

/// With `LEASE_CONTROL_COUNTS=1` every control runs every search in full
/// and prints its violating runs (about 30 s); otherwise each stops at the
/// first search that catches it.
#[test]
fn each_broken_rule_is_caught_by_the_search() {
    let table = TaskTable::new();
    let counts = std::env::var_os("LEASE_CONTROL_COUNTS").is_some_and(|v| v == "1");
    let [first, leaves, named] = searches();
    let lost = lost_write_searches();
    for broken in CONTROLS {
        let rules = Rules {
            broken: Some(broken),
            ..BUILT
        };
        // Most likely first; a rule of member names shows only under names,
        // a full grant from a reservation only after lost writes, and a
        // leave without the reply's interval only after a failover before
        // the leave (below).
        let shapes = match broken {
            _ if counts => [first, leaves, named].into_iter().chain(lost).collect(),
            Broken::GrantWhileMemberInUse | Broken::TakeOverAfterOneInterval => {
                vec![named, lost[1], lost[3]]
            }
            Broken::FullGrantFromReservation => lost.to_vec(),
            Broken::LeaveWithoutReplyInterval => vec![lost[2]],
            _ => [leaves, first, named].into_iter().chain(lost).collect(),
        };
        let mut caught = false;
        for shape in shapes {
            let (runs, violating) = search(rules, &table, shape, !counts);
            if counts {
                println!("{broken:?} {shape:?}: {violating} of {runs} runs overlap");
            } else if violating > 0 {
                println!("{broken:?}: caught by {shape:?}");
            }
            caught |= violating > 0;
            if caught && !counts {
                break;
            }
        }
        assert!(caught, "{broken:?}: no run overlaps");
    }
}

/// A grant from a Reserved entry live in `k + 1` overlaps only where its
/// member is in no entry of set `k` though its registration in `k` was
/// processed: after a lost write, never otherwise (a leave after a
/// registration in `k` keeps the member in set `k` as a Left entry, and
/// under a name removes nothing). So the plain searches cannot catch
/// `Broken::FullGrantFromReservation`, and the lost-writes searches must.
#[test]
fn a_full_grant_from_a_reservation_is_caught_only_after_lost_writes() {
    let table = TaskTable::new();
    let rules = Rules {
        broken: Some(Broken::FullGrantFromReservation),
        ..BUILT
    };
    for shape in searches() {
        assert_eq!(search(rules, &table, shape, true).1, 0, "{shape:?}");
    }
    let [lost, ..] = lost_write_searches();
    assert!(search(rules, &table, lost, true).1 > 0);
}

/// A worker registers in `f` (its reply processed, so its grant from `f`
/// lives through `f + 1`), the failover loses that registration, and then
/// its leave executes on the new primary. It finds the member's
/// reservation from `f - 1` in set `f`, not its registration, but the
/// worker processed a reply from `f`, so the leave makes the entry Left:
/// present, and nobody inherits the position of the live grant at `f + 1`.
/// The design before Left entries decided from the entry alone, removed
/// the reservation, and overlapped (`Broken::LeaveWithoutReplyInterval`,
/// which only a failover before the leave shows: at the end of the
/// interval the leave saw the registration).
#[test]
fn a_leave_after_a_failover_that_lost_its_registration_stays_exclusive() {
    let table = TaskTable::new();
    // By hand: three workers settled at 0, 1, 2 of 3 from 2 (every grant
    // `T(i, 3)`); in 5 worker 0 registers (lost, its reply processed: its
    // grant from 5 is `T(0, 3) ∩ T(0, 3)`, full, live in 6) and leaves.
    // Set 5 then holds worker 0 Reserved (from 4), workers 1 and 2
    // Registered with scores 1 and 2; set 6 holds workers 1 and 2
    // Reserved, and nothing of worker 0 (its reservation was lost).
    // - Built: the leave finds Reserved, but the worker's newest processed
    //   reply is from 5, so worker 0 becomes Left in set 5 (nothing to take
    //   out of set 6). Closed 5 counts workers 1 and 2 only, size 2: worker
    //   1 keeps 1, worker 2 (score 2, out of range) fills 0. In 6 worker 2
    //   is at 0 of 2 with second factor 2 of 3 (its previous reply); its
    //   candidates are 0 (its position in closed 5) and `[2, 3)` = 2, its
    //   own second factor, left out; candidate 0's keeper in closed 4 is
    //   worker 0, present (Left) in set 5: not inherited. Its grant is
    //   `T(0, 2) ∩ T(2, 3)`, inside `T(2, 3)`, disjoint from worker 0's
    //   `T(0, 3)`. Worker 1's is `T(1, 2) ∩ T(1, 3)` (its candidate 1 is
    //   its own second factor, candidate 2's keeper is worker 2, in set
    //   5), inside `T(1, 3)`. Worker 0's grant ends with 6.
    // - At the end of the interval the leave saw the registration
    //   (Registered), wrote Left and took out the reservation; replayed
    //   without the lost writes, Left lands on the reservation from 4 (the
    //   removal finds nothing): the same sets.
    // - The old leave (`LeaveWithoutReplyInterval`), failover before it:
    //   Reserved and no reply considered, so it removes worker 0 from set 5.
    //   Closed 5 is as above, but candidate 0's keeper (worker 0) is in no
    //   entry of set 5: worker 2 inherits `T(0, 2) ∩ T(0, 3)` = `T(0, 3)`
    //   (jump hash: `T(0, 3)` is inside `T(0, 2)`) while worker 0's grant
    //   from 5, `T(0, 3)`, is live in 6.
    let mut fates = vec![vec![Fate::Register; 3]; 5];
    fates[3][0] = Fate::RegisterThenLeave;
    let loss = |failover| Loss {
        interval: 5,
        workers: 1,
        failover,
    };
    let members = (&[0, 1, 2][..], false);
    let at_the_end = Some(loss(Failover::AtTheEnd));
    let before_the_leave = Some(loss(Failover::BeforeLaterWrites));
    let old = Rules {
        broken: Some(Broken::LeaveWithoutReplyInterval),
        ..BUILT
    };
    for loss in [at_the_end, before_the_leave] {
        assert_eq!(run(TODAY, &table, members, &fates, loss), None);
        assert_eq!(run(BUILT, &table, members, &fates, loss), None);
    }
    assert_eq!(run(old, &table, members, &fates, at_the_end), None);
    assert_eq!(run(old, &table, members, &fates, before_the_leave), Some(6));
    // The searches (the built design's are above): the old leave overlaps
    // only in anonymous runs with a failover before a leave.
    let [at_end, at_end_named, before, before_named] = lost_write_searches();
    let without_leaves = Shape {
        leaves: false,
        ..before
    };
    let shapes = searches()
        .into_iter()
        .chain([at_end, at_end_named, before_named, without_leaves]);
    for shape in shapes {
        assert_eq!(search(old, &table, shape, true).1, 0, "{shape:?}");
    }
    let (runs, violating) = search(old, &table, before, false);
    println!("{old:?} {before:?}: {violating} of {runs} runs overlap");
    assert!(violating > 0);
}

/// A small deterministic generator (SplitMix64), so the random runs need no
/// dependency and replay by seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Groups of 4 to 8 over 20 intervals (every other one under member
/// names): each worker joins at a random
/// interval, may end at another (a crash, or one of the three graceful
/// leaves), and otherwise misses or loses a reply with the given rate.
fn random_fates(rng: &mut SplitMix, workers: usize, fault: f64) -> Vec<Vec<Fate>> {
    let intervals = 20;
    let joins: Vec<usize> = (0..workers).map(|_| (rng.next() % 8) as usize).collect();
    let ends: Vec<(usize, Fate)> = (0..workers)
        .map(|_| {
            if rng.unit() < 0.4 {
                let at = (rng.next() % intervals as u64) as usize;
                let how = [
                    Fate::Miss,
                    Fate::RegisterThenLeave,
                    Fate::Leave,
                    Fate::LeaveThenSlowRegistration,
                ][(rng.next() % 4) as usize];
                (at, how)
            } else {
                (usize::MAX, Fate::Miss)
            }
        })
        .collect();
    (0..intervals)
        .map(|i| {
            (0..workers)
                .map(|w| {
                    let (end, how) = ends[w];
                    if i < joins[w] || i > end {
                        Fate::Miss
                    } else if i == end {
                        how
                    } else {
                        let u = rng.unit();
                        if u < fault / 2.0 {
                            Fate::Miss
                        } else if u < fault {
                            Fate::ReplyLost
                        } else {
                            Fate::Register
                        }
                    }
                })
                .collect()
        })
        .collect()
}

/// A failover in one of the 20 intervals that loses each worker's
/// registration there with probability 1/2, at the end of the interval or
/// (as likely) right after the lost registrations.
fn random_loss(rng: &mut SplitMix, workers: usize) -> Loss {
    let interval = 2 + (rng.next() % 20) as usize;
    let bits = rng.next();
    Loss {
        interval,
        workers: (bits & ((1 << workers) - 1)) as u32,
        failover: if bits >> 63 == 0 {
            Failover::AtTheEnd
        } else {
            Failover::BeforeLaterWrites
        },
    }
}

#[test]
fn random_groups_of_four_to_eight_stay_exclusive_anonymous_and_named() {
    let table = TaskTable::new();
    let mut rng = SplitMix(2026);
    let (mut failovers, mut before_later_writes) = (0, 0);
    for seed in 0..4000u64 {
        let workers = 4 + (seed % 5) as usize;
        let fault = [0.05, 0.2, 0.5][(seed % 3) as usize];
        let fates = random_fates(&mut rng, workers, fault);
        // Every other seed under member names, two to four incarnations
        // sharing each of two or three names.
        let named = seed % 2 == 1;
        let names = if named {
            2 + (seed / 2) as usize % 2
        } else {
            workers
        };
        let members: Vec<usize> = (0..workers).map(|w| w % names).collect();
        // Half of each kind with a failover that loses writes.
        let loss = ((seed / 2) % 2 == 1).then(|| random_loss(&mut rng, workers));
        failovers += loss.is_some() as u32;
        before_later_writes +=
            loss.is_some_and(|l| l.failover == Failover::BeforeLaterWrites) as u32;
        for rules in [TODAY, BUILT] {
            assert_eq!(
                run(rules, &table, (&members, named), &fates, loss),
                None,
                "seed {seed}, {rules:?}, members {members:?}, {loss:?}: {fates:?}"
            );
        }
    }
    assert_eq!((failovers, before_later_writes), (2000, 1010));
}

/// What a scenario costs under one set of rules, from interval 6 on (a
/// group registering from 2 holds from 5).
#[derive(Debug, PartialEq, Eq)]
struct Figures {
    /// Owner changes per task, summed (a task idle in between and back with
    /// its old owner did not move).
    moved: u32,
    /// (task, interval) pairs that no full grant from the interval before
    /// covered, summed: whole intervals, so a short grant, which covers
    /// the rest of its own interval after its reply, counts nothing.
    uncovered: u32,
    /// Each worker's position in the last closed set.
    last_positions: Vec<Option<u32>>,
}

fn figures(rules: Rules, table: &TaskTable, workers: usize, fates: &[Vec<Fate>]) -> Figures {
    let intervals = fates.len() + 2;
    let mut world = World::new(rules, table, workers, intervals);
    let mut owner: Vec<Option<usize>> = vec![None; TASKS];
    let (mut moved, mut uncovered) = (0, 0);
    for (i, row) in fates.iter().enumerate() {
        let k = i + 2;
        world.interval(k, row.iter().copied().enumerate());
        assert_eq!(world.overlap(k), None, "{rules:?} at {k}");
        if k >= 6 {
            for (t, h) in world.holders(k).into_iter().enumerate() {
                match h {
                    None => uncovered += 1,
                    Some(w) => {
                        if owner[t].is_some_and(|o| o != w) {
                            moved += 1;
                        }
                        owner[t] = Some(w);
                    }
                }
            }
        }
    }
    world.close(intervals - 1);
    let last = world.closed(intervals - 1);
    let last_positions = (0..workers).map(|w| last.pair(w).map(|(p, _)| p)).collect();
    Figures {
        moved,
        uncovered,
        last_positions,
    }
}

/// 5 workers registering from interval 2, but worker 1 has `fate` in the
/// intervals `when` picks.
fn worker_1_of_5(fate: Fate, when: impl Fn(usize) -> bool) -> Vec<Vec<Fate>> {
    (2..20)
        .map(|k| {
            (0..5)
                .map(|w| {
                    if w == 1 && when(k) {
                        fate
                    } else {
                        Fate::Register
                    }
                })
                .collect()
        })
        .collect()
}

/// One missed registration (worker 1 of 5, interval 12): today the last
/// worker fills its hole and the two swap for good (2/5 of the tasks
/// move, and both shares go uncovered); with sticky return nothing moves,
/// and only the absent worker's share is uncovered. In whole intervals
/// that is two, as today: its grant from 13 is short (it did not register
/// in 12), which covers the rest of 13 after its reply and nothing here.
#[test]
fn one_missed_registration_moves_nothing_with_sticky_return() {
    let table = TaskTable::new();
    let fates = worker_1_of_5(Fate::Miss, |k| k == 12);
    let today = figures(TODAY, &table, 5, &fates);
    let built = figures(BUILT, &table, 5, &fates);
    let share = count(&table.of((1, 5)));
    let last = count(&table.of((4, 5)));
    // Hand-checked. Today closed 12 is {0, 2, 3, 4} and worker 4 fills
    // position 1; in 13 worker 1 returns and fills 4. Worker 1's share has
    // no holder through 13 and 14 (no grant from 12 or 13: it is not in
    // the set of 12) and goes to worker 4 from 14; worker 4's old share is
    // held through 14 only where it meets its new position (its grant from
    // 13 is `T(1, 4) ∩ T(4, 5)`), not at all through 15, and goes to
    // worker 1 from 15.
    let kept = count(&intersect(table.of((4, 5)), table.of((1, 4))));
    assert_eq!(today.moved, share + last);
    assert_eq!(
        today.last_positions,
        [Some(0), Some(4), Some(2), Some(3), Some(1)]
    );
    assert_eq!(today.uncovered, 2 * share + (last - kept) + last);
    // Built, by hand. Worker 1's registration in 11 reserved it in set 12
    // with score 1, so closed 12 is all five, worker 1 Reserved and a
    // keeper at 1: nobody moves. The others' grants are `T(i, 5)` from
    // every reply (previous reply from the interval before; no candidate
    // to inherit: their own position is the second factor's, and
    // `[5, 5)` is empty). Worker 1: its grant from 11 is live through 12;
    // none from 12; from 13 its first factor is its Reserved entry in
    // closed 12 and its second its keeper position in closed 11 (the
    // server's: its previous reply is from 11), so it is granted `T(1, 5)`
    // short, live in 13 only; its registration in 13 makes it Registered
    // in closed 13, so its grant from 14 (previous reply from 13) is
    // `T(1, 5)`, full. Whole intervals without a holder of its share: 13
    // (no grant from 12) and 14 (only a short one from 13).
    assert_eq!(built.moved, 0);
    assert_eq!(
        built.last_positions,
        [Some(0), Some(1), Some(2), Some(3), Some(4)]
    );
    assert_eq!(built.uncovered, 2 * share);
}

/// A lost reply (worker 1 of 5, interval 12): nothing moves either way, but
/// today the worker needs two more replies to be granted (no holder
/// through 13 and 14); with the server naming its keeper position in
/// closed `k - 2` it is granted from 13.
#[test]
fn a_lost_reply_costs_one_interval_less_with_sticky_return() {
    let table = TaskTable::new();
    let fates = worker_1_of_5(Fate::ReplyLost, |k| k == 12);
    let today = figures(TODAY, &table, 5, &fates);
    let built = figures(BUILT, &table, 5, &fates);
    let share = count(&table.of((1, 5)));
    // Hand-checked. Its registration in 12 executed, so closed 12 has
    // worker 1 Registered at 1 either way, and nobody moves. Today its
    // reply from 13 has no second factor (its previous processed reply is
    // from 11), so its share has no holder through 13 and 14. Built: the
    // reply from 13 takes the second factor from the server, its keeper
    // position 1 of closed 11, and the first factor is Registered, so the
    // grant `T(1, 5)` from 13 is full and holds its share through 14.
    assert_eq!((today.moved, today.uncovered), (0, 2 * share));
    assert_eq!((built.moved, built.uncovered), (0, share));
}

/// A crash (worker 1 of 5 registers last in 11): the reservation keeps its
/// position through closed 12, and inheritance hands its share to the
/// worker that fills its hole from 14, as today: as many tasks wait, as
/// long.
#[test]
fn a_crash_costs_the_survivors_nothing_more_with_sticky_return() {
    let table = TaskTable::new();
    let fates = worker_1_of_5(Fate::Miss, |k| k >= 12);
    let today = figures(TODAY, &table, 5, &fates);
    let built = figures(BUILT, &table, 5, &fates);
    let share = count(&table.of((1, 5)));
    let last = count(&table.of((4, 5)));
    let kept = count(&intersect(table.of((4, 5)), table.of((1, 4))));
    // Hand-checked. Today: worker 1's share has no holder through 13 and
    // 14 and goes to worker 4 (which fills position 1 of closed 12) from
    // 14; worker 4's old share outside `T(1, 4)` goes to the others from
    // 14 and has no holder through 14.
    assert_eq!(today.uncovered, 2 * share + (last - kept));
    assert_eq!(today.moved, share + (last - kept));
    // Built, by hand. Closed 12 still has worker 1 (Reserved, keeper at 1,
    // size 5); set 13 does not (no registration in 12, so no
    // reservation), and in closed 13 (size 4) worker 4's score 4 is out
    // of range: it fills 1. Grants from 12 and 13 are `T(i, 5)` for the
    // survivors (nothing to inherit: `[5, 5)` is empty), so worker 1's
    // share has no holder through 13 and 14 (its last grant, from 11,
    // ends with 12). From 14: workers 0, 2 and 3 get `T(i, 4) ∩ T(i, 5)`
    // = `T(i, 5)` (candidate 4 of closed 12 is worker 4's, in set 13);
    // worker 4 gets `T(1, 4) ∩ T(4, 5)` and inherits candidate 1 (worker
    // 1 keeps it in closed 12 and is not in set 13): `T(1, 4) ∩ T(1, 5)`
    // = `T(1, 5)`. So through 15 worker 1's share is held, and worker 4's
    // old share outside `T(1, 4)` is not (one interval later than today);
    // from 15 everyone holds `T(i, 4)`. The same tasks move, to the same
    // workers.
    assert_eq!(built.uncovered, today.uncovered);
    assert_eq!(built.moved, today.moved);
    assert_eq!(
        built.last_positions,
        [Some(0), None, Some(2), Some(3), Some(1)]
    );
    assert_eq!(built.last_positions, today.last_positions);
}

/// A graceful leave (worker 1 of 5 registers and leaves in 12): its Left
/// entry in set 12 keeps its position of closed 11 from being inherited
/// while its grant from 12 lives, and is not counted, so closed 12 is the
/// survivors' alone, as today's leave (which removes it) makes it. The
/// grants are today's: the same tasks move, as soon, and as many wait.
#[test]
fn a_graceful_leave_hands_over_as_today_with_sticky_return() {
    let table = TaskTable::new();
    let fates = worker_1_of_5(Fate::RegisterThenLeave, |k| k == 12);
    let today = figures(TODAY, &table, 5, &fates);
    let built = figures(BUILT, &table, 5, &fates);
    let share = count(&table.of((1, 5)));
    let last = count(&table.of((4, 5)));
    let kept = count(&intersect(table.of((4, 5)), table.of((1, 4))));
    // By hand. Worker 1's grant from 12, `T(1, 5)`, is full and holds its
    // share through 13. Closed 12 is {0, 2, 3, 4} either way (today
    // without worker 1, built with it Left), size 4: worker 4's score 4 is
    // out of range, so it fills 1. Grants from 13: `T(i, 4) ∩ T(i, 5)` =
    // `T(i, 5)` for workers 0, 2 and 3, and `T(1, 4) ∩ T(4, 5)` for worker
    // 4; built, nothing is inherited (worker 1, keeper of 1 in closed 11,
    // is in set 12 as a Left entry; candidate 4 is worker 4's own second
    // factor). So through 14 worker 1's share has no holder, nor does
    // worker 4's old share outside `T(1, 4)`. From 14 everyone's grant is
    // `T(i, 4)` (built: no candidate, `[4, 4)` is empty, and each own
    // position is its second factor), which covers every task from 15:
    // worker 1's share goes to worker 4 (`T(1, 5)` is inside `T(1, 4)`),
    // worker 4's old share outside `T(1, 4)` to the others.
    assert_eq!(today.uncovered, share + (last - kept));
    assert_eq!(today.moved, share + (last - kept));
    assert_eq!(
        today.last_positions,
        [Some(0), None, Some(2), Some(3), Some(1)]
    );
    assert_eq!(built, today);
    // As soon: every task has the same holder in every interval. (The
    // leave before Left entries kept worker 1 counted in closed 12, so
    // worker 4 took its share from 14 by inheritance and shed its own
    // only from 15: the same sums, one interval later.)
    let holders = |rules| {
        let mut world = World::new(rules, &table, 5, fates.len() + 2);
        let mut by_interval = Vec::new();
        for (i, row) in fates.iter().enumerate() {
            world.interval(i + 2, row.iter().copied().enumerate());
            by_interval.push(world.holders(i + 2));
        }
        by_interval
    };
    assert!(holders(TODAY) == holders(BUILT));
}
