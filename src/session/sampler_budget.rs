//! The CPU sampler under `--max-overhead`. A sample is not free: on these VMs the timer
//! interrupt and the perf overflow take ~15 µs of the interrupted code's time (bare metal:
//! ~1-2 µs), so 1,999 samples a second took 3.4% of a busy CPU, most of a 5% budget, and the
//! budget did not count it. Now what one sample costs is measured before attaching; unless
//! `--cpu-sample` sets the rate, the rate is chosen so the sampler takes at most a quarter of
//! the budget; and the probes get what it leaves.
//!
//! In: the run's plan (its rate and budget) and the tracer. Out: a [`SamplerPlan`].

use crate::attach::Tracer;

use super::config::TraceConfig;

/// The largest share of the budget the sampler may take when wprof picks its rate.
const SAMPLER_SHARE: f64 = 0.25;

/// The lowest rate wprof picks: below it a sampled phase of 1% of its parent would get too
/// few samples for its share to mean anything over a minute.
const MIN_HZ: u64 = 99;

/// The sampler of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct SamplerPlan {
    /// CPU samples a second per CPU (None: no sampling).
    pub hz: Option<u64>,
    /// Share of the traced processes' CPU time the sampler takes, % (0 when not measured).
    pub pct: f64,
    /// What one sample costs the thread it interrupts, ns (0 when not measured).
    pub sample_ns: f64,
}

/// The rate and cost of the run's sampler: measured and fitted to the budget when the run
/// has both a sampler and `--max-overhead`, as planned otherwise.
pub(super) fn plan(tracer: &mut Tracer, c: &TraceConfig) -> SamplerPlan {
    let planned = SamplerPlan {
        hz: c.cpu_sample_hz,
        pct: 0.0,
        sample_ns: 0.0,
    };
    let (Some(hz), Some(budget)) = (c.cpu_sample_hz, c.max_overhead) else {
        return planned;
    };
    let sample_ns = match tracer.sample_cost_ns() {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!(
                "wprof: warning: could not measure what a CPU sample costs ({e:#}); \
                 --max-overhead does not count the sampler"
            );
            return planned;
        }
    };
    let (hz, pct) = if c.cpu_sample_fixed {
        (hz, share_pct(hz, sample_ns))
    } else {
        fitted(budget, sample_ns, hz)
    };
    if !c.quiet {
        eprintln!(
            "wprof: CPU sampling at {hz} Hz for the phases measured by sampling: a sample costs \
             {:.1} µs here, {pct:.2}% of the traced processes' CPU time, counted in \
             --max-overhead {budget}%{}",
            sample_ns / 1e3,
            if c.cpu_sample_fixed {
                ""
            } else {
                " (at most a quarter of it; --cpu-sample HZ sets the rate)"
            }
        );
        if pct > budget * 0.5 {
            eprintln!(
                "wprof: warning: the sampler alone takes {pct:.1}% of the {budget}% budget: \
                 a lower --cpu-sample leaves the probes more"
            );
        }
    }
    SamplerPlan {
        hz: Some(hz),
        pct,
        sample_ns,
    }
}

/// The rate (at most `max_hz`) that fits `budget_pct` at `sample_ns` a sample, and the share
/// of the traced processes' CPU time it takes, %.
pub(super) fn fitted(budget_pct: f64, sample_ns: f64, max_hz: u64) -> (u64, f64) {
    let hz = fit_rate(budget_pct, sample_ns, max_hz);
    (hz, share_pct(hz, sample_ns))
}

/// The rate whose samples take at most [`SAMPLER_SHARE`] of `budget_pct`, between
/// [`MIN_HZ`] and `max_hz`.
fn fit_rate(budget_pct: f64, sample_ns: f64, max_hz: u64) -> u64 {
    if sample_ns <= 0.0 {
        return max_hz;
    }
    let hz = (budget_pct / 100.0 * SAMPLER_SHARE / (sample_ns * 1e-9)).floor();
    (hz as u64).clamp(MIN_HZ.min(max_hz), max_hz)
}

/// The share of a traced process's CPU time `hz` samples a second take at `sample_ns` each,
/// %: every CPU second of theirs is interrupted `hz` times.
fn share_pct(hz: u64, sample_ns: f64) -> f64 {
    hz as f64 * sample_ns * 1e-9 * 100.0
}

/// What the probes may take of `budget_pct` beside a sampler taking `sampler_pct`: the rest,
/// but never less than a tenth of the budget (a `--cpu-sample` rate the budget cannot afford
/// is warned about, not obeyed by detaching everything).
pub(super) fn probes_budget(budget_pct: f64, sampler_pct: f64) -> f64 {
    (budget_pct - sampler_pct).max(budget_pct * 0.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_keeps_the_sampler_within_a_quarter_of_the_budget() {
        // 15 µs a sample (these VMs) under 5%: 1.25% / 15 µs = 833 Hz.
        assert_eq!(fit_rate(5.0, 15_000.0, 1999), 833);
        assert!(share_pct(833, 15_000.0) <= 5.0 * SAMPLER_SHARE);
        // Bare metal's ~1.5 µs: the phases' own rate.
        assert_eq!(fit_rate(5.0, 1_500.0, 1999), 1999);
        // Never below MIN_HZ, nor above what was planned.
        assert_eq!(fit_rate(0.1, 50_000.0, 1999), MIN_HZ);
        assert_eq!(fit_rate(0.1, 50_000.0, 49), 49);
        assert_eq!(fit_rate(5.0, 0.0, 1999), 1999);
    }

    #[test]
    fn the_probes_get_what_the_sampler_leaves() {
        assert!((probes_budget(5.0, 1.25) - 3.75).abs() < 1e-9);
        assert!((probes_budget(5.0, 9.0) - 0.5).abs() < 1e-9);
        assert!((share_pct(1999, 15_000.0) - 2.9985).abs() < 1e-9);
    }
}
