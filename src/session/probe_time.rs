//! The probes' time measured where they run, while the run goes on: the share of the traced
//! threads' CPU samples taken while the kernel handled a uprobe (the breakpoint trap, the
//! single-step after it, the uretprobe trampoline, the BPF programs they run). The
//! calibration prices a hit on empty functions in a process of its own; in PostgreSQL the
//! samples found 1.2-3.3× that (benchmarks §23). What a trap costs the code after it (caches,
//! TLB) no sample taken inside the handler sees.
//!
//! In: the CPU samples counted per thread and kernel stack id
//! ([`StackAggregator::cpu_by_kernel_stack`]), the stacks in BPF's `STACK_TRACES`. Out: a
//! [`SampleTally`] of samples so far, all and in uprobe handling, for `overhead` to compare
//! with what the calibration counted; an [`InSituFactor`] for that comparison.

use std::collections::{HashMap, HashSet};

use crate::aggregate::stacks::{in_uprobe_handling, StackAggregator};
use crate::attach::Tracer;
use crate::collect::read_stacks;
use crate::symbolize::StackSymbolizer;

/// CPU samples of the traced threads so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct SampleTally {
    /// Every sample.
    pub samples: u64,
    /// Those taken while the kernel handled a uprobe.
    pub in_probes: u64,
}

/// Tells samples taken in uprobe handling from the others by their kernel stack.
pub(super) struct ProbeTime {
    symbolizer: StackSymbolizer,
    /// Per kernel stack id: whether it is the kernel handling a uprobe. BPF keeps a stack
    /// under one id for the whole run (`get_stackid` without `BPF_F_REUSE_STACKID`), so each
    /// id is named once.
    in_probes: HashMap<i32, bool>,
}

impl ProbeTime {
    /// A meter with nothing classified yet; for a run that samples (`sampling`) the kernel's
    /// symbols are read now (~0.1 s of CPU), not in the middle of a measured window.
    pub fn new(sampling: bool) -> ProbeTime {
        let mut symbolizer = StackSymbolizer::new();
        if sampling {
            symbolizer.kernel_frames(&[KERNEL_TEXT]);
        }
        ProbeTime {
            symbolizer,
            in_probes: HashMap::new(),
        }
    }

    /// The samples so far of the `probed` threads (all threads when it is empty), all and in
    /// uprobe handling; stacks not seen before are read from BPF and named first. A sample
    /// with no kernel stack (taken in user mode) is the program's.
    pub fn tally(
        &mut self,
        tracer: &mut Tracer,
        stacks: &StackAggregator,
        probed: &HashSet<u64>,
    ) -> SampleTally {
        let by_stack: Vec<(i32, u64)> = stacks
            .cpu_by_kernel_stack
            .iter()
            .filter(|((thread, _), _)| probed.is_empty() || probed.contains(thread))
            .map(|(&(_, id), &n)| (id, n))
            .collect();
        let new: Vec<u32> = by_stack
            .iter()
            .map(|(id, _)| id)
            .filter(|id| !self.in_probes.contains_key(id))
            .filter_map(|&id| u32::try_from(id).ok())
            .collect();
        if !new.is_empty() {
            let read = read_stacks(tracer, new.iter().copied()).unwrap_or_default();
            for id in new {
                // A stack the map no longer holds cannot be named: the program's.
                let frames = read.get(&id).map(Vec::as_slice).unwrap_or(&[]);
                let named = self.symbolizer.kernel_frames(frames);
                self.in_probes.insert(id as i32, in_uprobe_handling(&named));
            }
        }
        let mut t = SampleTally::default();
        for (id, n) in by_stack {
            t.samples += n;
            if self.in_probes.get(&id).copied().unwrap_or(false) {
                t.in_probes += n;
            }
        }
        t
    }
}

/// Where x86-64 kernel text starts without KASLR: naming any kernel address makes blazesym
/// read kallsyms, which is all [`ProbeTime::new`] wants of it.
const KERNEL_TEXT: u64 = 0xffff_ffff_8100_0000;

/// Samples needed before a tally is read: at ~10% in uprobe handling, ±3 points.
const MIN_SAMPLES: u64 = 100;

/// The largest correction taken: beyond it the samples are likelier wrong than the
/// calibration.
const MAX_FACTOR: f64 = 20.0;

/// How far the calibration's price of the probes falls short of what the samples saw them
/// take, over the windows since the last reading of at least [`MIN_SAMPLES`] samples. Never
/// below 1: a budget had better count too much than too little.
#[derive(Debug, Clone)]
pub(super) struct InSituFactor {
    /// The samples' time ÷ the calibration's, ≥ 1 (1 until samples say otherwise).
    pub factor: f64,
    /// The share of the traced processes' CPU time the samples put in uprobe handling at the
    /// last reading, %, and the samples it came from.
    pub last: Option<(f64, u64)>,
    seen: SampleTally,
    pending: SampleTally,
    /// Calibrated probe time, CPU time, and CPU time × the share of it sampled, ns, since
    /// the last reading.
    pending_probe_ns: f64,
    pending_cpu_ns: f64,
    pending_sampled_cpu_ns: f64,
}

impl Default for InSituFactor {
    fn default() -> Self {
        InSituFactor {
            factor: 1.0,
            last: None,
            seen: SampleTally::default(),
            pending: SampleTally::default(),
            pending_probe_ns: 0.0,
            pending_cpu_ns: 0.0,
            pending_sampled_cpu_ns: 0.0,
        }
    }
}

impl InSituFactor {
    /// One measurement window: the samples so far (`now`), the probe time the calibration
    /// priced and the traced processes' CPU time in the window (ns), and the share of the
    /// window the sampler ran (a duty cycle pauses it with the probes, so its samples are of
    /// the live part only).
    pub fn add(&mut self, now: SampleTally, probe_ns: f64, cpu_ns: f64, sampler_fraction: f64) {
        self.pending.samples += now.samples.saturating_sub(self.seen.samples);
        self.pending.in_probes += now.in_probes.saturating_sub(self.seen.in_probes);
        self.seen = now;
        self.pending_probe_ns += probe_ns;
        self.pending_cpu_ns += cpu_ns;
        self.pending_sampled_cpu_ns += cpu_ns * sampler_fraction.clamp(0.0, 1.0);
        if self.pending.samples < MIN_SAMPLES || self.pending_cpu_ns <= 0.0 {
            return;
        }
        // The samples see the sampled part of the CPU time; the probes run only then.
        let in_probes = self.pending.in_probes as f64 / self.pending.samples as f64;
        let sampled_ns = in_probes * self.pending_sampled_cpu_ns;
        self.last = Some((
            sampled_ns / self.pending_cpu_ns * 100.0,
            self.pending.samples,
        ));
        if self.pending_probe_ns > 0.0 {
            self.factor = (sampled_ns / self.pending_probe_ns).clamp(1.0, MAX_FACTOR);
        }
        self.restart();
    }

    /// Takes `now` as the samples so far without counting them: the threads they were
    /// tallied over changed, so their difference from the last tally is no window's.
    pub fn rebase(&mut self, now: SampleTally) {
        self.seen = now;
    }

    /// The last reading, for the run's record.
    pub fn reading(&self) -> Option<crate::model::InSituProbeTime> {
        self.last
            .map(|(share_pct, samples)| crate::model::InSituProbeTime {
                samples,
                share_pct,
                factor: self.factor,
            })
    }

    /// Drops the windows since the last reading (the probes changed: phases moved); the
    /// factor found stays until the next reading.
    pub fn restart(&mut self) {
        self.pending = SampleTally::default();
        self.pending_probe_ns = 0.0;
        self.pending_cpu_ns = 0.0;
        self.pending_sampled_cpu_ns = 0.0;
    }

    /// ", ×F the calibration's price in situ (P% in uprobe handling by N CPU samples)" once
    /// the samples said the probes cost more than calibrated; else nothing.
    pub fn phrase(&self) -> String {
        match self.last {
            Some((pct, n)) if self.factor > 1.0 => format!(
                ", ×{:.2} the calibration's price: {pct:.1}% in uprobe handling by {n} CPU samples",
                self.factor
            ),
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(samples: u64, in_probes: u64) -> SampleTally {
        SampleTally { samples, in_probes }
    }

    #[test]
    fn the_factor_is_the_sampled_probe_time_over_the_calibrated_one() {
        let mut f = InSituFactor::default();
        // 1 s of CPU, 20% of 200 samples in uprobe handling = 200 ms; calibrated 50 ms.
        f.add(tally(200, 40), 50e6, 1e9, 1.0);
        assert!((f.factor - 4.0).abs() < 1e-9, "{}", f.factor);
        assert_eq!(f.last, Some((20.0, 200)));
        assert!(f.phrase().contains("×4.00"));
    }

    #[test]
    fn too_few_samples_wait_for_more_windows() {
        let mut f = InSituFactor::default();
        f.add(tally(60, 30), 50e6, 1e9, 1.0);
        assert_eq!(f.factor, 1.0);
        assert!(f.phrase().is_empty());
        // 120 samples over both windows, 36 in probes: 30% of 2 s = 600 ms against 100 ms.
        f.add(tally(120, 36), 50e6, 1e9, 1.0);
        assert!((f.factor - 6.0).abs() < 1e-9, "{}", f.factor);
    }

    #[test]
    fn a_paused_sampler_sees_only_the_live_part() {
        let mut f = InSituFactor::default();
        // Live 25% of the window: 20% of the samples is 5% of the window's CPU time.
        f.add(tally(400, 80), 25e6, 1e9, 0.25);
        assert!((f.factor - 2.0).abs() < 1e-9, "{}", f.factor);
        assert_eq!(f.last.map(|l| l.0), Some(5.0));
    }

    #[test]
    fn samples_before_a_rebase_are_no_window_of_their_own() {
        let mut f = InSituFactor::default();
        // A thread joined the tally with 1,000 earlier samples, half in probes: not counted.
        f.rebase(tally(1000, 500));
        // 200 new samples, 20 in probes: 10% of 1 s = 100 ms against 50 ms calibrated.
        f.add(tally(1200, 520), 50e6, 1e9, 1.0);
        assert!((f.factor - 2.0).abs() < 1e-9, "{}", f.factor);
    }

    #[test]
    fn never_below_the_calibration_nor_above_the_cap() {
        let mut f = InSituFactor::default();
        f.add(tally(200, 0), 50e6, 1e9, 1.0);
        assert_eq!(f.factor, 1.0);
        f.add(tally(400, 200), 1e3, 1e9, 1.0);
        assert_eq!(f.factor, MAX_FACTOR);
        // A restart drops what was pending, not the factor found.
        f.add(tally(450, 250), 1e3, 1e9, 1.0);
        f.restart();
        assert_eq!(f.factor, MAX_FACTOR);
    }
}
