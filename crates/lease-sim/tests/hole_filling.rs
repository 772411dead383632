//! Rule 15, hole-filling positions (Ranked): in a closed interval of size
//! `s`, members whose carried position is below `s` keep it; the others
//! take the free positions in order.

mod common;

use common::*;
use lease_core::Mode;
use lease_sim::{Action, Network};

/// After the worker at index 1 of 5 leaves, the survivors at 0, 2 and 3 keep
/// their indices and only the last one (4, now out of range) moves, into
/// the hole. Fails without rule 15: the carry shifted 2, 3 and 4 down by
/// one. Over several seeds, with a crash and a cancel.
#[test]
fn a_departure_moves_only_the_last_worker_into_the_hole() {
    for seed in 1..=6u64 {
        let (mut sim, ws) = group(seed, Mode::Ranked, 0.15, 5, Network::ideal(L));
        run_until_settled(&mut sim, &ws, L * 10).expect("settles");
        let before = indices(&sim, &ws);
        let gone = ws[before.iter().position(|&i| i == Some(1)).unwrap()];
        let action = if seed % 2 == 0 {
            Action::Crash(gone)
        } else {
            Action::Cancel(gone)
        };
        sim.act(action);
        let rest: Vec<_> = ws.iter().copied().filter(|&w| w != gone).collect();
        run_until_settled(&mut sim, &rest, L * 6).expect("settles on n = 4");
        for (&w, b) in ws.iter().zip(&before) {
            if w == gone {
                continue;
            }
            let now = sim.lease(w).and_then(|l| ij(&l)).map(|(i, _)| i);
            let want = if *b == Some(4) { Some(1) } else { *b };
            assert_eq!(now, want, "seed {seed}: {w} had {b:?}");
        }
        assert!(sim.check().is_ok(), "{}", sim.check());
    }
}

/// The negative control: positions computed without skipping the keepers'
/// (a filler takes its rank among the fillers, 0, which a keeper holds).
/// Two workers then hold one pair and the checker catches it.
#[test]
fn fillers_that_ignore_the_keepers_are_caught_by_the_checker() {
    let mut caught = 0;
    for seed in 1..=6u64 {
        let (mut sim, ws) = group(seed, Mode::Ranked, 0.15, 5, Network::ideal(L));
        run_until_settled(&mut sim, &ws, L * 10).expect("settles");
        sim.sabotage_positions(true);
        let before = indices(&sim, &ws);
        let gone = ws[before.iter().position(|&i| i == Some(1)).unwrap()];
        sim.act(Action::Cancel(gone));
        sim.run_for(L * 6);
        caught += usize::from(!sim.check().is_ok());
    }
    assert_eq!(caught, 6, "caught in only {caught}/6");
}
