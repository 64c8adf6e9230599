//! The probes' price measured again while the run goes on: every [`EVERY`], [`ROUNDS`]
//! rounds on the calibration target kept from before the run, and the spans that follow are
//! corrected with the lower median of every measurement so far (BPF's per-phase costs, the
//! aggregator's own part).
//!
//! Why: this host now and then runs every trap ~30% slower for a quarter of a second or
//! more, and a single calibration before the run that landed in such a spell priced all of
//! it: on db_bench a write corrected to 1.7 µs where RocksDB's own mean was 5.0 (benchmarks
//! §40). Measured through the run, the price follows the host, and a spell weighs what it
//! lasted.
//!
//! In: the run's costs (with their calibration target), the tracer, the collector and where
//! the run's records go meanwhile. Out: the measurements, in [`RunCosts::during`].

use std::time::{Duration, Instant};

use super::costs::RunCosts;
use crate::aggregate::stacks::StackAggregator;
use crate::aggregate::Aggregator;
use crate::attach::Tracer;
use crate::collect::Collector;
use crate::probe_cost::Forward;
use crate::resolve::ResolvedPhase;

/// How often the price is measured again.
pub const EVERY: Duration = Duration::from_secs(1);

/// Rounds of each measurement (~3 ms of calls a round and class): with the thread's CPU
/// clock and the median, a few are enough, and the target loses little CPU to them.
pub const ROUNDS: usize = 5;

/// The measurements during a run.
pub(super) struct InRun<'a> {
    costs: &'a mut RunCosts,
    phases: &'a [ResolvedPhase],
    /// When the probes went live.
    started: Instant,
    last: Instant,
}

impl<'a> InRun<'a> {
    /// Measurements for a run that corrects with `costs` (None when it has no calibration
    /// target to ask).
    pub fn new(costs: &'a mut RunCosts, phases: &'a [ResolvedPhase]) -> Option<InRun<'a>> {
        costs.can_measure_during().then(|| InRun {
            costs,
            phases,
            started: Instant::now(),
            last: Instant::now(),
        })
    }

    /// Measures when due, the run's records read meanwhile into `agg` and `stacks`. A failure
    /// is a warning and ends the measurements: the run keeps the last price.
    pub fn poll(
        &mut self,
        tracer: &mut Tracer,
        collector: &mut Collector,
        agg: &mut Aggregator,
        stacks: &mut StackAggregator,
    ) {
        if self.last.elapsed() < EVERY {
            return;
        }
        let forward = Forward {
            events: &mut |e| agg.add(e),
            stacks: &mut |s| stacks.add(s),
        };
        let at_s = self.started.elapsed().as_secs_f64();
        let measured =
            (self.costs).measure_during(tracer, collector, self.phases, ROUNDS, at_s, forward);
        match measured {
            Some(Ok(())) => {
                if let Some(own) = self.costs.own_ns() {
                    agg.correct_probe_time(own);
                }
            }
            Some(Err(e)) => {
                eprintln!(
                    "wprof: warning: measuring the probe cost again during the run failed \
                     ({e:#}); the rest of the run keeps the last price"
                );
                self.costs.stop_measuring();
            }
            None => {}
        }
        self.last = Instant::now();
    }
}
