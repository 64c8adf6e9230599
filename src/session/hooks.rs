//! What the collect loop calls back into while a run goes on: late attach when a traced
//! process loads a library, and after every drain the tracer's chores, the overhead watch,
//! the `--max-overhead` budget and the `--aggregate auto` switch (above 200,000 calls a second,
//! or, under a budget, as its first step when the probes go over it).
//!
//! In: the tracer, the pending late phases, the overhead watch and the budget keeper. Out:
//! Some(reason) from [`trace_loop::Hooks::tick`] when the budget ends the run; whether the run
//! switched to in-kernel aggregation ([`RunHooks::switched`]).

use super::late::LateAttach;
use super::overhead::OverheadWatch;
use super::processes::ProcessLabels;
use super::trace_loop::{self, EndReason};
use super::{budget, duty};
use crate::aggregate::stacks::StackAggregator;
use crate::aggregate::Aggregator;
use crate::args::AggregateMode;
use crate::attach::Tracer;

/// Calls a second above which `--aggregate auto` aggregates in the kernel: per event, wprof
/// loses spans from ~650,000 a second on these machines and spends most of a CPU before that.
const AUTO_KERNEL_CALLS_PER_S: f64 = 200_000.0;

/// What `--aggregate auto` may do in this run.
pub(super) enum AutoSwitch {
    /// Not asked for.
    Off,
    /// It may switch to in-kernel aggregation.
    Allowed,
    /// It may not: these options need every call.
    Blocked(String),
}

impl AutoSwitch {
    /// `--aggregate auto` for a run with `mode`, given the options it has that need every
    /// call.
    pub fn new(mode: AggregateMode, per_call_options: &[&str]) -> AutoSwitch {
        if mode != AggregateMode::Auto {
            AutoSwitch::Off
        } else if per_call_options.is_empty() {
            AutoSwitch::Allowed
        } else {
            AutoSwitch::Blocked(per_call_options.join(", "))
        }
    }
}

/// What the collect loop calls back into.
pub(super) struct RunHooks<'a> {
    /// The run's tracer.
    pub tracer: &'a mut Tracer,
    /// Phases waiting for their library.
    pub late: Option<&'a mut LateAttach>,
    /// What the probes cost the traced processes.
    pub overhead: OverheadWatch,
    /// What `--aggregate auto` may still do.
    pub auto: AutoSwitch,
    /// Whether `--aggregate auto` switched to the kernel.
    pub switched: bool,
    /// What keeps the run within `--max-overhead`.
    pub keeper: budget::Keeper<'a>,
    /// The `--serve` endpoint's publisher.
    pub serve: Option<super::serve::Publisher>,
    /// Tells the CPU samples taken in uprobe handling (the probes' time in situ).
    pub probe_time: super::probe_time::ProbeTime,
    /// The probes' price measured again during the run (None: not corrected, or in-kernel
    /// aggregation, which would swallow the calibration's calls).
    pub recalibration: Option<super::recalibrate::InRun<'a>>,
}

impl RunHooks<'_> {
    /// `--aggregate auto`: switches once the last second's call rate passes the threshold;
    /// whether it switched now.
    fn maybe_switch(&mut self) -> bool {
        let rate = self.overhead.calls_per_s;
        self.auto_pending()
            && rate >= AUTO_KERNEL_CALLS_PER_S
            && self.switch_to_kernel(&format!("{rate:.0} calls/s"))
    }

    /// `--aggregate auto` under `--max-overhead`, over the budget at `pct`: aggregating in the
    /// kernel comes before any phase moves to sampling, since it keeps every phase exact and
    /// takes wprof's reading of each call out of the cost. Whether it switched now (the next
    /// measurement then tells whether that was enough).
    fn switch_for_budget(&mut self, pct: f64) -> bool {
        if !self.auto_pending() {
            return false;
        }
        let why = format!(
            "probes and their reading took {pct:.1}% of {} CPU time, {}",
            self.overhead.whose_cpu(),
            self.overhead.above_phrase()
        );
        self.switch_to_kernel(&why)
    }

    /// Tells the overhead watch the duty cycle's live fraction, and the sampler's with it.
    fn follow_duty(&mut self) {
        self.overhead.sampler_runs(self.keeper.sampler_fraction());
        self.overhead.probes_live(self.keeper.live_fraction());
    }

    /// Whether `--aggregate auto` has yet to switch or say why it cannot (after either, or
    /// without it, `auto` is `Off`).
    fn auto_pending(&self) -> bool {
        !matches!(self.auto, AutoSwitch::Off)
    }

    /// Switches to in-kernel aggregation if `--aggregate auto` still may, saying `why`;
    /// whether it did.
    fn switch_to_kernel(&mut self, why: &str) -> bool {
        match std::mem::replace(&mut self.auto, AutoSwitch::Off) {
            AutoSwitch::Allowed => match self.tracer.aggregate_in_kernel() {
                Ok(()) => {
                    self.switched = true;
                    eprintln!(
                        "wprof: {why}: aggregating in the kernel from now on \
                         (--aggregate auto; the calls so far are kept)"
                    );
                    true
                }
                Err(e) => {
                    eprintln!("wprof: warning: could not aggregate in the kernel: {e:#}");
                    false
                }
            },
            AutoSwitch::Blocked(opts) => {
                eprintln!(
                    "wprof: {why}: staying per event (--aggregate auto) because {opts} needs \
                     every call"
                );
                false
            }
            AutoSwitch::Off => false,
        }
    }
}

impl trace_loop::Hooks for RunHooks<'_> {
    fn serve(&mut self, agg: &mut Aggregator, labels: &mut ProcessLabels) -> anyhow::Result<()> {
        match &mut self.serve {
            Some(p) => p.tick(
                agg,
                labels,
                self.tracer,
                self.overhead.last_pct,
                self.switched,
            ),
            None => Ok(()),
        }
    }

    fn recalibrate(
        &mut self,
        collector: &mut crate::collect::Collector,
        agg: &mut Aggregator,
        stacks: &mut StackAggregator,
    ) {
        if self.switched {
            // In-kernel aggregation from now: the calibration's calls would land in it.
            self.recalibration = None;
        }
        if let Some(r) = self.recalibration.as_mut() {
            r.poll(self.tracer, collector, agg, stacks);
        }
    }

    fn maps_changed(&mut self, pid: u32, at_ns: u64) {
        if let Some(l) = self.late.as_deref_mut() {
            l.maps_changed(pid, at_ns, self.tracer)
        }
    }

    fn tick(
        &mut self,
        agg: &mut Aggregator,
        stacks: &StackAggregator,
        traced: Vec<u32>,
    ) -> Option<EndReason> {
        self.tracer.sweep_exited_threads();
        let overhead = &mut self.overhead;
        self.keeper.poll(self.tracer, agg, |live, t| {
            overhead.probes_switched(live, t)
        });
        let samples = if self.overhead.due() && stacks.cpu.records > 0 {
            let (tracer, meter) = (&mut *self.tracer, &mut self.probe_time);
            let probed = self.overhead.probed_threads();
            Some(
                self.overhead
                    .excluding_own(|| meter.tally(tracer, stacks, &probed)),
            )
        } else {
            None
        };
        let ticks = self.overhead.ticks();
        let over = self
            .overhead
            .tick(self.tracer, traced.iter().copied(), samples);
        let measured = self.overhead.ticks() != ticks;
        // A switch to the kernel this tick (auto's rate, or the budget's first step) takes
        // wprof's reading of every call out of the figure just measured: the budget acts on
        // what the probes took alone now, if that is still over, rather than a measurement
        // later (a quarter second more of every phase probed, which cost db_bench ~4% of its
        // writes).
        let switched_now =
            self.maybe_switch() || over.is_some_and(|pct| self.switch_for_budget(pct));
        let over = if switched_now {
            self.overhead.reading_stopped();
            let probes = self.overhead.last_probes_pct;
            let still = self
                .overhead
                .decision_budget()
                .filter(|b| probes > *b)
                .map(|_| probes);
            if still.is_none() {
                self.overhead.rebase(self.tracer, &traced);
            }
            still
        } else {
            over
        };
        let Some(pct) = over else {
            if measured && self.keeper.room(&self.overhead) {
                self.follow_duty();
            }
            return None;
        };
        let moved = self.keeper.moved.len();
        let cycling = self.keeper.duty_cycling();
        let end = self.keeper.over(self.tracer, &self.overhead, pct, &*agg);
        if self.keeper.moved.len() != moved || switched_now {
            let gone = self.keeper.moved[moved..].iter().map(|m| m.id);
            self.overhead.forget_phases(gone);
            self.overhead.rebase(self.tracer, &traced);
        }
        if self.keeper.duty_cycling() {
            if !cycling {
                // The cycle begins live: its first window counts from now.
                self.overhead.probes_switched(true, self.tracer);
            }
            self.overhead.measure_every(duty::CYCLE);
            self.follow_duty();
        }
        end
    }
}
