//! The in-situ check's epochs (`--in-situ`): every [`CYCLE`], the probes of every phase that
//! is not a root come off for [`LIGHT`], so the roots' calls then run with only their own
//! probes (`aggregate::insitu` compares them with the rest).
//!
//! In: the clock. Out: the [`Step`]s of [`Epochs`]: when to take the descendants' probes off
//! and when to put them back.

use std::time::{Duration, Instant};

/// One full epoch and one light epoch.
pub const CYCLE: Duration = Duration::from_secs(2);

/// The light part of each cycle.
pub const LIGHT: Duration = Duration::from_millis(250);

/// Before the first light epoch: the tree's shape (which phases are roots) must be known.
const FIRST_AFTER: Duration = Duration::from_secs(1);

/// What the epochs ask for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Take the descendants' probes off, then begin a light epoch.
    GoLight,
    /// End the light epoch, then put them back.
    GoFull,
}

/// The epochs' clock.
#[derive(Debug, Clone)]
pub struct Epochs {
    light: bool,
    since: Instant,
    first: bool,
}

impl Epochs {
    /// Epochs from now (full first).
    pub fn start() -> Epochs {
        Epochs {
            light: false,
            since: Instant::now(),
            first: true,
        }
    }

    /// Whether to switch now; call often (every drain).
    pub fn poll(&mut self) -> Option<Step> {
        let full = if self.first {
            FIRST_AFTER
        } else {
            CYCLE - LIGHT
        };
        let due = if self.light { LIGHT } else { full };
        if self.since.elapsed() < due {
            return None;
        }
        self.first = false;
        self.light = !self.light;
        self.since = Instant::now();
        Some(if self.light {
            Step::GoLight
        } else {
            Step::GoFull
        })
    }

    /// The switch [`Epochs::poll`] asked for is done: the epoch's time counts from now.
    /// Taking probes off waits for the kernel's uprobe grace periods (0.1-0.3 s a release
    /// here, twice): counted from the poll, a 0.25 s light epoch was left with a few tens
    /// of milliseconds right after the releases.
    pub fn switched(&mut self) {
        self.since = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn light_epochs_follow_full_ones() {
        let mut e = Epochs::start();
        assert_eq!(e.poll(), None);
        e.since -= FIRST_AFTER;
        assert_eq!(e.poll(), Some(Step::GoLight));
        assert!(e.light);
        e.since -= LIGHT;
        assert_eq!(e.poll(), Some(Step::GoFull));
        e.since -= LIGHT;
        assert_eq!(
            e.poll(),
            None,
            "a full epoch is longer than the first light one"
        );
        e.since -= CYCLE;
        assert_eq!(e.poll(), Some(Step::GoLight));
    }

    #[test]
    fn an_epoch_counts_from_the_end_of_its_switch() {
        let mut e = Epochs::start();
        e.since -= FIRST_AFTER;
        assert_eq!(e.poll(), Some(Step::GoLight));
        // The releases took most of the light epoch's time.
        e.since -= LIGHT - Duration::from_millis(10);
        e.switched();
        assert_eq!(e.poll(), None, "the light epoch has just begun");
        e.since -= LIGHT;
        assert_eq!(e.poll(), Some(Step::GoFull));
    }
}
