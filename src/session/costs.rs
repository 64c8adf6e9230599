//! The probe costs a run corrects with: calibrated on the host before attaching (unless
//! `--no-calibrate`), handed to BPF per phase and to the aggregator.
//!
//! In: the tracer, the resolved phases and the run's plan. Out: [`RunCosts`] (per phase, the
//! cost of a call's probes and its uncertainty), the run's [`Calibration`] record and the
//! stated errors of a corrected tree.

use anyhow::Result;
use wprof_common::PhaseCost;

use super::config::TraceConfig;
use crate::attach::Tracer;
use crate::collect::Collector;
use crate::model::CostClass;
use crate::model::{Calibration, ClassCost};
use crate::model::{PhaseTree, TreeNode};
use crate::probe_cost::{self, Calibrator, Measured, PhaseCosts};
use crate::resolve::{ResolvedPhase, Status};

/// What a run knows about its probes' cost.
pub(super) struct RunCosts {
    /// The calibration, None when skipped or failed (times are then not corrected).
    pub measured: Option<Measured>,
    /// Per phase id, the costs of one call (zeros without calibration).
    pub per_phase: Vec<PhaseCosts>,
    /// The combinations (entry class, uretprobe) the phases use.
    wanted: Vec<(CostClass, bool)>,
    /// The calibration target, kept with its probes for the measurements during and at the
    /// end of the run.
    calibrator: Option<Calibrator>,
    /// The measurements during the run (`session::recalibrate`): seconds after the probes
    /// went live, and what each read.
    pub during: Vec<(f64, Measured)>,
    /// The prices the run corrected with after each of them, summed per phase.
    applied: PriceSums,
}

/// Measurements kept for the record (`calibration.during`): an hour of them.
const KEPT_DURING: usize = 3600;

/// The measurements during the run the price is the lower median of (with the one before
/// it): the last minute's.
const PRICED_OVER: usize = 60;

/// Per phase id, the sums of the pair and own costs the run corrected with, and how many
/// prices were added.
#[derive(Debug, Clone, Default)]
struct PriceSums {
    by_phase: Vec<(f64, f64)>,
    n: u64,
}

impl PriceSums {
    /// Adds one price (`per_phase`, by phase id).
    fn add(&mut self, per_phase: &[PhaseCosts]) {
        for (i, c) in per_phase.iter().enumerate() {
            self.add_one(i, c);
        }
        self.n += 1;
    }

    fn add_one(&mut self, phase: usize, c: &PhaseCosts) {
        if self.by_phase.len() <= phase {
            self.by_phase.resize(phase + 1, (0.0, 0.0));
        }
        self.by_phase[phase].0 += c.pair_ns;
        self.by_phase[phase].1 += c.own_ns;
    }
}

impl RunCosts {
    /// Per phase id, the probe time inside a call's own window (ns), when correcting.
    pub fn own_ns(&self) -> Option<Vec<u64>> {
        self.measured.as_ref()?;
        Some(
            self.per_phase
                .iter()
                .map(|c| c.own_ns.round() as u64)
                .collect(),
        )
    }

    /// Measures the costs again at the end of a run (probes still live), handing the run's
    /// records read meanwhile to `forward`: how far they drifted widens the stated errors. A
    /// failure is a warning.
    pub fn recalibrate(
        &mut self,
        tracer: &mut Tracer,
        collector: &mut Collector,
        ring_bytes: u32,
        forward: probe_cost::Forward<'_>,
    ) -> Option<Measured> {
        self.measured.as_ref()?;
        let again = match self.calibrator.take() {
            Some(mut c) => {
                let m = c.measure(collector, probe_cost::ROUNDS, Some(forward));
                c.stop();
                m
            }
            None => {
                probe_cost::calibrate(tracer, collector, ring_bytes, &self.wanted, Some(forward))
            }
        };
        match again {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("wprof: warning: probe cost recalibration at the end failed ({e:#})");
                None
            }
        }
    }

    /// Measures the costs again while the run goes on (`rounds` rounds, the run's records
    /// read meanwhile to `forward`; `at_s`: seconds since the probes went live), and corrects
    /// what follows with the lower median of every measurement so far, per class: BPF's
    /// per-phase costs now; the per-call own part is the caller's to hand to the aggregator
    /// ([`RunCosts::own_ns`]). A slow spell only adds time, and one that a short measurement
    /// landed in does not move the price (on db_bench, 3 of 18 measurements read 1.98-2.20
    /// µs a pair against 1.68-1.72; benchmarks §40). None without a calibration target.
    pub fn measure_during(
        &mut self,
        tracer: &mut Tracer,
        collector: &mut Collector,
        phases: &[ResolvedPhase],
        rounds: usize,
        at_s: f64,
        forward: probe_cost::Forward<'_>,
    ) -> Option<Result<()>> {
        let c = self.calibrator.as_mut()?;
        let m = match c.measure(collector, rounds, Some(forward)) {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        self.during.push((at_s, m));
        if self.during.len() > KEPT_DURING {
            // A run that goes on for hours (`--serve`): the price follows its last hour.
            self.during.remove(0);
        }
        let first = self.measured.as_ref()?;
        let recent = self.during.len().saturating_sub(PRICED_OVER);
        let all: Vec<&Measured> = std::iter::once(first)
            .chain(self.during[recent..].iter().map(|(_, m)| m))
            .collect();
        let price = lower_medians(&first.classes, &all);
        let set = set_costs(tracer, &mut self.per_phase, &price, phases);
        self.applied.add(&self.per_phase);
        Some(set)
    }

    /// Whether the run can measure its costs again while it goes on.
    pub fn can_measure_during(&self) -> bool {
        self.calibrator.is_some()
    }

    /// No more measurements during the run (one failed); the one at the end starts afresh.
    pub fn stop_measuring(&mut self) {
        if let Some(c) = self.calibrator.take() {
            c.stop();
        }
    }

    /// Sets each phase's costs to the mean of the prices the run corrected with, one for each
    /// stretch between measurements (the one before it, then each after a measurement during
    /// it): what its figures (the probes' added time, the in-situ check) are stated in. BPF is
    /// left alone: the run is over.
    pub fn settle(&mut self, phases: &[ResolvedPhase]) {
        let Some(first) = self.measured.as_ref() else {
            return;
        };
        if self.applied.n == 0 {
            return;
        }
        // The stretch before the first measurement was corrected with the first price.
        let mut sums = self.applied.clone();
        for p in phases
            .iter()
            .filter(|p| matches!(p.status, Status::Resolved))
        {
            let c = probe_cost::phase_costs(&first.classes, p);
            sums.add_one(p.id as usize, &c);
        }
        let n = (sums.n + 1) as f64;
        for p in phases
            .iter()
            .filter(|p| matches!(p.status, Status::Resolved))
        {
            let (pair, own) = sums.by_phase[p.id as usize];
            let c = &mut self.per_phase[p.id as usize];
            c.pair_ns = pair / n;
            c.own_ns = own / n;
        }
    }

    /// Per phase id, the uncertainty of one call's pair cost: the start calibration's spread,
    /// widened to how far the end calibration (if any) moved from it.
    pub fn errors_ns(&self, at_end: Option<&Measured>) -> Vec<f64> {
        self.per_phase
            .iter()
            .map(|c| {
                let again = at_end.zip(c.class).and_then(|(e, (entry, uretprobe))| {
                    e.classes
                        .iter()
                        .find(|x| x.entry == entry && x.uretprobe == uretprobe)
                });
                let moved = again.map_or(0.0, |x| (x.pair_ns - c.pair_ns).abs().max(x.error_ns));
                c.error_ns.max(moved)
            })
            .collect()
    }

    /// Uncertainty of one probe hit, ns: each phase's pair error (`errors[phase id]`) split
    /// over its two hits, weighted by the hits its probes took (`hits[phase id]`).
    pub fn error_per_hit_ns(errors: &[f64], hits: &[u64]) -> f64 {
        let (mut sum, mut n) = (0.0, 0u64);
        for (e, &h) in errors.iter().zip(hits) {
            sum += h as f64 * e / 2.0;
            n += h;
        }
        if n == 0 {
            0.0
        } else {
            sum / n as f64
        }
    }
}

/// Calibrates (unless `config.calibrate` is off: `--no-calibrate`) and gives BPF each phase's
/// costs. A calibration that fails is a warning: the run goes on uncorrected.
pub(super) fn calibrated(
    tracer: &mut Tracer,
    collector: &mut Collector,
    phases: &[ResolvedPhase],
    config: &TraceConfig,
) -> Result<RunCosts> {
    let n = phases.iter().map(|p| p.id as usize + 1).max().unwrap_or(0);
    let mut costs = RunCosts {
        measured: None,
        per_phase: vec![PhaseCosts::default(); n],
        wanted: Vec::new(),
        calibrator: None,
        during: Vec::new(),
        applied: PriceSums::default(),
    };
    if !config.calibrate {
        return Ok(costs);
    }
    let wanted: Vec<(CostClass, bool)> = phases
        .iter()
        .filter(|p| matches!(p.status, Status::Resolved) && p.kernel.is_none())
        .filter_map(probe_cost::cost_key)
        .collect();
    costs.wanted = wanted.clone();
    let measured =
        probe_cost::calibrate_keeping(tracer, collector, config.ring_size, &wanted, None);
    let (calibrator, measured) = match measured {
        Ok(m) => m,
        Err(e) => {
            eprintln!(
                "wprof: warning: probe cost calibration failed ({e:#}); times are not corrected"
            );
            return Ok(costs);
        }
    };
    set_costs(tracer, &mut costs.per_phase, &measured.classes, phases)?;
    costs.calibrator = calibrator;
    if !config.quiet {
        eprintln!("wprof: {}", summary(&measured, phases));
    }
    costs.measured = Some(measured);
    Ok(costs)
}

/// One line on what the calibration found for the classes this run's phases use.
fn summary(m: &Measured, phases: &[ResolvedPhase]) -> String {
    let used: Vec<String> = m
        .classes
        .iter()
        .filter(|c| {
            phases
                .iter()
                .any(|p| probe_cost::cost_key(p) == Some((c.entry, c.uretprobe)))
        })
        .map(|c| {
            format!(
                "{} {:.2} µs ({:.2} inside its own call) ±{:.2}",
                c.label(),
                c.pair_ns / 1e3,
                c.own_ns / 1e3,
                c.error_ns / 1e3
            )
        })
        .collect();
    format!(
        "probe cost per call, calibrated in {:.0} ms: {}",
        m.elapsed_ms,
        if used.is_empty() {
            "no symbol phase".to_string()
        } else {
            used.join(", ")
        }
    )
}

/// Per class of `classes`, the lower median of its pair and of its own part over `all`.
fn lower_medians(classes: &[ClassCost], all: &[&Measured]) -> Vec<ClassCost> {
    let lower_median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0.0)
    };
    (classes.iter())
        .map(|k| {
            let same: Vec<&ClassCost> = (all.iter().flat_map(|m| m.classes.iter()))
                .filter(|x| x.entry == k.entry && x.uretprobe == k.uretprobe)
                .collect();
            ClassCost {
                pair_ns: lower_median(same.iter().map(|x| x.pair_ns).collect()),
                own_ns: lower_median(same.iter().map(|x| x.own_ns).collect()),
                ..k.clone()
            }
        })
        .collect()
}

/// Each resolved phase's costs from `classes`, into `per_phase` and BPF.
fn set_costs(
    tracer: &mut Tracer,
    per_phase: &mut [PhaseCosts],
    classes: &[ClassCost],
    phases: &[ResolvedPhase],
) -> Result<()> {
    for p in phases
        .iter()
        .filter(|p| matches!(p.status, Status::Resolved))
    {
        per_phase[p.id as usize] = probe_cost::phase_costs(classes, p);
    }
    let bpf: Vec<PhaseCost> = per_phase
        .iter()
        .map(|c| PhaseCost {
            pair_ns: c.pair_ns.round() as u64,
            own_ns: c.own_ns.round() as u64,
        })
        .collect();
    tracer.set_phase_costs(&bpf)
}

/// The run's record of a calibration, with the host's load at the end of the run: a load
/// above the CPU count means the traced threads competed for CPUs, so the calibration (made
/// before) may not hold and its errors are doubled. `during`: the measurements made while
/// the run went on.
pub(super) fn calibration(
    m: &Measured,
    at_end: Option<&Measured>,
    during: &[(f64, Measured)],
) -> Calibration {
    let load_end = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    Calibration {
        classes: m.classes.clone(),
        calls: m.calls,
        rounds: m.rounds,
        elapsed_ms: m.elapsed_ms,
        load_end,
        contended: load_end > cpus,
        at_end: at_end.map(|e| e.classes.clone()).unwrap_or_default(),
        return_addresses: m.return_addresses,
        during: (during.iter())
            .map(|(at_s, d)| crate::model::DuringCalibration {
                at_s: *at_s,
                classes: d.classes.clone(),
            })
            .collect(),
    }
}

/// Sets every corrected node's stated error: its probe hits times the error per hit.
pub(super) fn state_errors(tree: &mut PhaseTree, error_per_hit_ns: f64) {
    fn walk(n: &mut TreeNode, e: f64) {
        if let Some(c) = &mut n.corrected {
            c.error_ns = (c.probe_hits as f64 * e).round() as u64;
        }
        n.children.iter_mut().for_each(|c| walk(c, e));
    }
    tree.roots
        .iter_mut()
        .for_each(|r| walk(r, error_per_hit_ns));
}

#[cfg(test)]
mod price_tests {
    use super::*;

    fn measured(pairs: &[(bool, f64)]) -> Measured {
        Measured {
            classes: (pairs.iter())
                .map(|&(uretprobe, pair_ns)| ClassCost {
                    entry: CostClass::Emulated,
                    uretprobe,
                    pair_ns,
                    own_ns: pair_ns / 2.0,
                    error_ns: 10.0,
                })
                .collect(),
            ..Measured::nothing(false)
        }
    }

    #[test]
    fn a_slow_spell_in_one_measurement_does_not_move_the_price() {
        let before = measured(&[(true, 1_700.0), (false, 10_000.0)]);
        let spell = measured(&[(true, 2_200.0), (false, 14_000.0)]);
        let calm = measured(&[(true, 1_690.0), (false, 10_100.0)]);
        // Before and one measurement in a spell: the lower of the two.
        let p = lower_medians(&before.classes, &[&before, &spell]);
        assert_eq!((p[0].pair_ns, p[1].pair_ns), (1_700.0, 10_000.0));
        assert_eq!(p[0].own_ns, 850.0);
        // A spell before the run is outvoted by the measurements after it.
        let p = lower_medians(&spell.classes, &[&spell, &calm, &before]);
        assert_eq!((p[0].pair_ns, p[1].pair_ns), (1_700.0, 10_100.0));
        // Classes keep their identity, and the error of the first.
        assert!(p[0].uretprobe && !p[1].uretprobe && p[0].error_ns == 10.0);
    }
}
