//! The last resort of `--max-overhead`: when the phases that stay probed (roots, parents,
//! `measure = "probe"`) cost more than the budget on their own, their probes are live only a
//! fraction of each second instead of being taken off for good. Every call inside a live
//! window is measured exactly; counts are then those of the windows, which the run says.
//!
//! In: the share the probes cost, the fraction they are live now and the budget. Out: the
//! live fraction that fits ([`fraction_for`]) and a [`DutyCycle`] saying when to pause and
//! resume the probes.

use std::time::{Duration, Instant};

/// One cycle: live for `fraction` of it, paused for the rest. Each pause and resume costs the
/// target a little (breakpoints written into its pages, ~0.1-0.3 s of grace period before a
/// link is gone): two seconds keep that small against a live window of a few hundred ms.
pub const CYCLE: Duration = Duration::from_secs(2);

/// Below this the windows would be too short to hold a call of a slow phase: the run ends
/// instead (the budget's old behaviour).
pub const MIN_FRACTION: f64 = 0.02;

/// Headroom: aim below the budget, since the share is measured over whole seconds.
const AIM: f64 = 0.8;

/// The live fraction that brings `pct` (measured with the probes live a `current` fraction
/// of the time) within `budget_pct`; None below [`MIN_FRACTION`].
pub fn fraction_for(pct: f64, current: f64, budget_pct: f64) -> Option<f64> {
    if pct <= 0.0 {
        return Some(current);
    }
    let f = (current * budget_pct / pct * AIM).min(current * AIM);
    (f >= MIN_FRACTION).then_some(f)
}

/// Until the probed threads' progress says what a live window costs them
/// (`super::progress`), a cycle prices the probes at this many times the figure: the traps
/// cost db_bench's writes ~2.4× what the calibration priced (30% of their pace lost against
/// 12.7%), and the first cycle, 2 s at the fraction it starts with, was most of a run's
/// excess over its budget.
pub const UNMEASURED: f64 = 2.0;

/// What the figure is held to when deciding whether the probes are over `budget_pct`: the
/// budget itself once the program's own slowdown has been read (`measured`), else the budget
/// over [`UNMEASURED`]. A figure within the budget but above half of it may still cost the
/// program more than the budget (db_bench: a root priced at 7.2-7.5% of a 7.5% budget kept
/// every probe live for 2.2-2.8 s and ran at 0.86× its paused pace), so it starts a cycle,
/// whose paused windows measure the slowdown.
pub fn decision_budget(budget_pct: f64, measured: bool) -> f64 {
    if measured {
        budget_pct
    } else {
        budget_pct / UNMEASURED
    }
}

/// The most a cycle goes live once the program's slowdown is known: its paused windows are
/// what the slowdown is measured against.
pub const MAX_FRACTION: f64 = 0.9;

/// How far ahead a cycle pays back what the run has spent over its budget so far: the
/// fraction for the next this-many seconds brings the whole run's cost within the budget. The
/// start spends most of it (everything probed until the first check, then a cycle priced
/// from a prior until the first reading): db_bench's probes were live ~1 s of its first 2.3 s
/// at 25-40% slower writes, on a 10 s run under a 10% budget.
pub const PAYBACK: Duration = Duration::from_secs(10);

/// The most the probes may be live over the next [`PAYBACK`] for the run so far and that to
/// fit `budget_pct` (with the usual headroom), when a live window costs `live_pct` and the
/// probes were live `live_share` of the `run` so far (all of it before the cycle); within
/// [`MIN_FRACTION`] and [`MAX_FRACTION`].
pub fn paying_fraction(live_pct: f64, live_share: f64, run: Duration, budget_pct: f64) -> f64 {
    if live_pct <= 0.0 {
        return MAX_FRACTION;
    }
    let (run, ahead) = (run.as_secs_f64(), PAYBACK.as_secs_f64());
    let spent = live_share * run * live_pct;
    let allowed = budget_pct * AIM * (run + ahead) - spent;
    (allowed / (ahead * live_pct)).clamp(MIN_FRACTION, MAX_FRACTION)
}

/// A fraction is raised only to more than this many times itself (a reading's noise does not
/// move it back and forth).
const RAISE_OVER: f64 = 1.25;

/// The live fraction that fits `budget_pct` when a live window costs `live_pct` of the probed
/// threads' CPU time (the program's own slowdown, or more), at most `cap`, when that is well
/// above `current`: the fraction a first cycle started from an unmeasured price may come back
/// up to.
pub fn raised_fraction(live_pct: f64, current: f64, budget_pct: f64, cap: f64) -> Option<f64> {
    let f = if live_pct > 0.0 {
        (budget_pct / live_pct * AIM).min(MAX_FRACTION)
    } else {
        MAX_FRACTION
    }
    .min(cap);
    (f > current * RAISE_OVER).then_some(f)
}

/// [`fraction_for`] at [`UNMEASURED`] times `pct` until the program's own slowdown has been
/// read (`measured`), never giving up on the doubling alone: where `pct` itself would fit,
/// [`MIN_FRACTION`] until the reading says more.
pub fn fraction_priced(pct: f64, current: f64, budget_pct: f64, measured: bool) -> Option<f64> {
    if measured {
        return fraction_for(pct, current, budget_pct);
    }
    fraction_for(pct * UNMEASURED, current, budget_pct)
        .or_else(|| fraction_for(pct, current, budget_pct).map(|_| MIN_FRACTION))
}

/// When the probes were live under a duty cycle, in ns since the Unix epoch (CLOCK_REALTIME,
/// so that a program's own timestamped log, pgbench's `-l` say, can be split by them).
#[derive(Debug, Clone, Default)]
pub struct LiveWindows {
    closed: Vec<[u64; 2]>,
    open: Option<u64>,
}

impl LiveWindows {
    /// The probes went live at `at` (a no-op while a window is open).
    pub fn open(&mut self, at: u64) {
        self.open.get_or_insert(at);
    }

    /// The probes start coming off at `at`: the open window ends there.
    pub fn close(&mut self, at: u64) {
        if let Some(start) = self.open.take() {
            self.closed.push([start, at.max(start)]);
        }
    }

    /// Every window, the open one closed at `at` (the run's end).
    pub fn finish(mut self, at: u64) -> Vec<[u64; 2]> {
        self.close(at);
        self.closed
    }
}

/// Now, in ns since the Unix epoch.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The duty cycle's state.
#[derive(Debug, Clone)]
pub struct DutyCycle {
    /// Share of each cycle the probes are live.
    pub fraction: f64,
    live: bool,
    since: Instant,
    live_total: Duration,
    started: Instant,
}

/// The most a cycle may be live to pay back the run so far ([`DutyCycle::payback`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Payback {
    /// The live fraction, for the next [`PAYBACK`].
    pub fraction: f64,
    /// The share of the run so far the probes were live, which it was figured from.
    pub share: f64,
}

/// What the cycle asks for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// Take the probes off.
    Pause,
    /// Put them back.
    Resume,
}

impl DutyCycle {
    /// Starts a cycle with the probes live now.
    pub fn start(fraction: f64) -> DutyCycle {
        let now = Instant::now();
        DutyCycle {
            fraction,
            live: true,
            since: now,
            live_total: Duration::ZERO,
            started: now,
        }
    }

    /// Whether the probes should switch now; call often (every drain).
    pub fn poll(&mut self) -> Option<Switch> {
        let window = if self.live {
            CYCLE.mul_f64(self.fraction)
        } else {
            CYCLE.mul_f64(1.0 - self.fraction)
        };
        if self.since.elapsed() < window {
            return None;
        }
        let now = Instant::now();
        if self.live {
            self.live_total += now - self.since;
        }
        self.live = !self.live;
        self.since = now;
        Some(if self.live {
            Switch::Resume
        } else {
            Switch::Pause
        })
    }

    /// Whether the probes are live now (not in a pause).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// What paying back the run so far allows ([`paying_fraction`]) when a live window costs
    /// `live_pct` under `budget_pct`, the cycle having begun `before` into the run (all of
    /// it live).
    pub fn payback(&self, before: Duration, live_pct: f64, budget_pct: f64) -> Payback {
        let share = self.live_share(before);
        let run = self.started.elapsed() + before;
        Payback {
            fraction: paying_fraction(live_pct, share, run, budget_pct),
            share,
        }
    }

    /// Share of the time since the cycle began that the probes were live, with the time
    /// before it (`before`, all live) counted in.
    pub fn live_share(&self, before: Duration) -> f64 {
        let mut live = self.live_total + before;
        if self.live {
            live += self.since.elapsed();
        }
        let all = self.started.elapsed() + before;
        if all.is_zero() {
            1.0
        } else {
            (live.as_secs_f64() / all.as_secs_f64()).min(1.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_over_half_the_budget_starts_a_cycle_until_the_pace_is_read() {
        // db_bench's root priced at 7.3% of a 7.5% budget: over half of it, unread.
        let (figure, budget) = (7.3, 7.5);
        assert!(figure > decision_budget(budget, false));
        assert!(figure <= decision_budget(budget, true));
        // The cycle it starts prices the figure twice: 7.5 / 14.6 × 0.8 live.
        let f = fraction_priced(figure, 1.0, budget, false).unwrap();
        assert!(
            (f - budget / (figure * UNMEASURED) * 0.8).abs() < 1e-9,
            "{f}"
        );
    }

    #[test]
    fn the_fraction_brings_the_share_under_the_budget_with_headroom() {
        // 40% with the probes always live, budget 10%: live 20% of the time (10/40 × 0.8).
        assert!((fraction_for(40.0, 1.0, 10.0).unwrap() - 0.2).abs() < 1e-9);
        // Still 15% at 20% live: 20% × 10/15 × 0.8.
        assert!((fraction_for(15.0, 0.2, 10.0).unwrap() - 0.2 * 10.0 / 15.0 * 0.8).abs() < 1e-9);
        // Never raises it, and gives up below the minimum.
        assert!(fraction_for(11.0, 0.5, 10.0).unwrap() <= 0.4);
        assert_eq!(fraction_for(1000.0, 0.1, 1.0), None);
    }

    #[test]
    fn an_unmeasured_price_counts_twice_but_never_alone_ends_the_run() {
        // 40% with the probes always live, budget 10%: 10% live before the reading (10/80 ×
        // 0.8), 20% after it.
        assert!((fraction_priced(40.0, 1.0, 10.0, false).unwrap() - 0.1).abs() < 1e-9);
        assert!((fraction_priced(40.0, 1.0, 10.0, true).unwrap() - 0.2).abs() < 1e-9);
        // 2.5% live would fit the figure; twice it would not: the minimum, not a detach.
        assert_eq!(fraction_priced(320.0, 1.0, 10.0, false), Some(MIN_FRACTION));
        assert_eq!(fraction_priced(1000.0, 1.0, 10.0, false), None);
    }

    #[test]
    fn a_measured_slowdown_raises_a_fraction_only_well_above_it() {
        // Live windows lose 20%, budget 7.5%: 30% live fits (7.5/20 × 0.8).
        assert!((raised_fraction(20.0, 0.1, 7.5, 1.0).unwrap() - 0.3).abs() < 1e-9);
        // Not for a little more than the fraction it has, nor past 90%, nor past the cap.
        assert_eq!(raised_fraction(20.0, 0.25, 7.5, 1.0), None);
        assert_eq!(raised_fraction(0.0, 0.2, 7.5, 1.0), Some(MAX_FRACTION));
        assert_eq!(raised_fraction(1.0, 0.8, 7.5, 1.0), None);
        assert_eq!(raised_fraction(20.0, 0.1, 7.5, 0.12), None);
        assert_eq!(raised_fraction(20.0, 0.1, 7.5, 0.2), Some(0.2));
    }

    #[test]
    fn the_next_ten_seconds_pay_back_what_the_start_spent() {
        // 35% slower while live, a 9.3% budget: 21% live fits a window (9.3/35 × 0.8).
        let steady = 9.3 / 35.0 * 0.8;
        // Nothing spent yet: the steady fraction.
        let f = paying_fraction(35.0, 0.0, Duration::ZERO, 9.3);
        assert!((f - steady).abs() < 1e-9, "{f}");
        // Live half of the first 2.3 s: ~1.5 s of the next 10 s, not the steady 2.1 s.
        let f = paying_fraction(35.0, 0.5, Duration::from_millis(2300), 9.3);
        let want = (9.3 * 0.8 * 12.3 - 0.5 * 2.3 * 35.0) / (10.0 * 35.0);
        assert!((f - want).abs() < 1e-9 && f < steady, "{f} against {want}");
        // A run that has kept to the budget so far keeps to the steady fraction; one that
        // spent far more is held to the minimum.
        let kept = paying_fraction(35.0, steady, Duration::from_secs(600), 9.3);
        assert!((kept - steady).abs() < 1e-9, "{kept}");
        assert_eq!(
            paying_fraction(35.0, 1.0, Duration::from_secs(5), 9.3),
            MIN_FRACTION
        );
        assert_eq!(
            paying_fraction(0.0, 1.0, Duration::from_secs(5), 9.3),
            MAX_FRACTION
        );
    }

    #[test]
    fn live_windows_close_at_each_pause_and_at_the_end() {
        let mut w = LiveWindows::default();
        w.open(100);
        w.open(150); // already open: the first start stands
        w.close(300);
        w.close(350); // nothing open
        w.open(500);
        assert_eq!(w.clone().finish(900), vec![[100, 300], [500, 900]]);
        let mut w = LiveWindows::default();
        w.open(100);
        w.close(400);
        assert_eq!(w.finish(900), vec![[100, 400]]);
        assert!(LiveWindows::default().finish(10).is_empty());
    }

    #[test]
    fn the_cycle_pauses_after_its_live_window_and_resumes_after_the_rest() {
        let mut d = DutyCycle::start(0.5);
        assert_eq!(d.poll(), None);
        d.since -= CYCLE.mul_f64(0.6);
        assert_eq!(d.poll(), Some(Switch::Pause));
        assert_eq!(d.poll(), None);
        d.since -= CYCLE.mul_f64(0.6);
        assert_eq!(d.poll(), Some(Switch::Resume));
        assert!(d.live_share(Duration::ZERO) > 0.0);
    }
}
