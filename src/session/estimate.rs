//! `wprof probes --estimate SECS --pid PID`: what a profile's probes would cost a running
//! process, measured by attaching them for a few seconds, and what `--max-overhead` would do
//! about it (the same plan a run makes: `budget::plan_moves`, then the duty cycle).
//!
//! In: the resolved phases, a pid, a number of seconds and the budget. Out: an
//! [`Estimate`] (what each phase's probes cost, what the budget would move).

use std::time::{Duration, Instant};

use anyhow::Result;

use super::budget::{self, PhaseLoad, Plan};
use super::{duty, overhead, sampler_budget};
use crate::aggregate::Aggregator;
use crate::attach::{process_alive, Tracer, TracerOptions};
use crate::collect::Collector;
use crate::error::WprofError;
use crate::probe_cost;
use crate::resolve::ResolvedPhase;

/// What the probes cost over the estimate's window.
#[derive(Debug, Clone)]
pub struct Estimate {
    /// Seconds the probes were attached.
    pub secs: f64,
    /// The CPU time a second of the process's threads that ran probed code (all of its
    /// threads when none did), ns.
    pub cpu_ns_per_s: f64,
    /// Per probed phase: calls a second, cost a call, whether the budget may move it.
    pub loads: Vec<PhaseLoad>,
    /// The budget planned for, %.
    pub budget_pct: f64,
    /// The CPU sampler a run under that budget would start: its rate and its share of the
    /// process's CPU time, % (None: not measured). The probes get the rest of the budget.
    pub sampler: Option<(u64, f64)>,
    /// What the probes may take, %: the budget less the sampler's share.
    pub probes_budget_pct: f64,
    /// What the figure is held to before a run has read the program's own pace, %
    /// ([`duty::decision_budget`]): the plan moves phases until it fits this.
    pub decision_pct: f64,
    /// What `--max-overhead budget_pct` would move.
    pub plan: Plan,
    /// The share of each cycle what stays probed would be live, when moving is not enough
    /// (None: it is; Some(None): not even 2% of the time would fit, the run would detach).
    pub duty: Option<Option<f64>>,
}

impl Estimate {
    /// The probes' share of the process's CPU time with every phase probed, %.
    pub fn all_pct(&self) -> f64 {
        let cost: f64 = self.loads.iter().map(PhaseLoad::cost_ns_per_s).sum();
        if self.cpu_ns_per_s > 0.0 {
            cost / self.cpu_ns_per_s * 100.0
        } else {
            0.0
        }
    }
}

/// Attaches `phases` to `pid` for `secs` and measures. Probe costs are the per-class
/// estimates (`record` and `attach` calibrate on the host; an estimate stays cheap).
pub fn estimate(
    phases: &[ResolvedPhase],
    pid: u32,
    secs: u64,
    budget_pct: Option<f64>,
) -> Result<Estimate> {
    if !process_alive(pid) {
        return Err(WprofError::NoProcess(format!("no running process with pid {pid}")).into());
    }
    let mut tracer = Tracer::load(TracerOptions {
        ring_bytes: 1 << 22,
        ..TracerOptions::MINIMAL
    })?;
    let mut collector = Collector::new(&mut tracer)?;
    // The sampler a run would start for the phases it moves (see sampler_budget).
    let sampler = budget_pct.and_then(|b| {
        let ns = tracer.sample_cost_ns().ok()?;
        Some(sampler_budget::fitted(
            b,
            ns,
            super::config::SAMPLED_PHASES_HZ,
        ))
    });
    let mut agg = Aggregator::new();
    tracer.attach(phases, &[pid], false)?;
    let n = phases.iter().map(|p| p.id as usize + 1).max().unwrap_or(0);
    let cpu_before = overhead::process_cpu_ns(pid).unwrap_or(0);
    let mut threads = super::probed_threads::ProbedThreads::new(&[pid]);
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    while Instant::now() < until && process_alive(pid) {
        std::thread::sleep(Duration::from_millis(20));
        collector.drain(|e| agg.add(e), |_| {});
    }
    let elapsed = started.elapsed().as_secs_f64();
    let hits = overhead::phase_hits(&mut tracer, n);
    let cpu = overhead::process_cpu_ns(pid).unwrap_or(cpu_before);
    // As a run's budget does: against the threads that ran probed code, when any did.
    threads.learn(tracer.threads_in_phases());
    let (used, _) = threads.cpu_against(cpu.saturating_sub(cpu_before));
    tracer.detach();
    collector.drain(|e| agg.add(e), |_| {});
    let cpu_ns_per_s = used as f64 / elapsed;
    let rates = |id: u32| {
        let calls = hits.get(id as usize).copied().unwrap_or(0) as f64 / 2.0 / elapsed;
        let pair = phases
            .iter()
            .find(|p| p.id == id)
            .map_or(0.0, probe_cost::pair_ns);
        (calls, pair)
    };
    let edges = agg.phase_edges();
    let budget_pct = budget_pct.unwrap_or(overhead::WARN_PCT);
    let probes_budget_pct =
        sampler_budget::probes_budget(budget_pct, sampler.map_or(0.0, |(_, pct)| pct));
    let loads = budget::loads(phases, &edges, &[], &rates);
    // As a run's first decision: the figure against half the budget, the program's own
    // slowdown being unread.
    let decision = duty::decision_budget(probes_budget_pct, false);
    let plan = budget::plan_moves(phases, &edges, &[], &rates, cpu_ns_per_s, decision);
    // The fraction a run's first cycle would start from, before the program's own slowdown
    // is read.
    let duty = (!plan.fits)
        .then(|| duty::fraction_priced(plan.projected_pct, 1.0, probes_budget_pct, false));
    Ok(Estimate {
        secs: elapsed,
        cpu_ns_per_s,
        loads,
        budget_pct,
        sampler,
        probes_budget_pct,
        decision_pct: decision,
        plan,
        duty,
    })
}
