//! What one probe hit costs, by the instruction it lands on and the phase's return mode.
//!
//! Measured on the host before each run ([`calibrate`]), or, with `--no-calibrate` and for
//! commands that attach nothing (`probes`), the fixed figures measured on this project's VMs
//! (facts.md: entry+return pairs of 1.2-12.6 µs), labelled as estimates in every output.

mod calibrate;
pub mod targets;

pub use calibrate::{calibrate, calibrate_keeping, Calibrator, Forward, Measured, ROUNDS};
pub use targets::thread_cpu_ns;

use crate::model::profile::ReturnMode;
use crate::model::{ClassCost, CostClass};
use crate::resolve::ResolvedPhase;

/// Cost of one uprobe hit on an instruction of this class, ns (fixed estimate).
pub fn hit_ns(class: CostClass) -> f64 {
    match class {
        CostClass::Nop => 600.0,
        CostClass::Emulated => 700.0,
        CostClass::SingleStep => 5_800.0,
    }
}

/// Cost of one uretprobe return (trampoline trap, no single-step), ns (fixed estimate).
pub const URETPROBE_RETURN_NS: f64 = 1_000.0;

/// The calibrated class whose cost a phase's calls pay: its entry's class and whether it
/// returns through a uretprobe. A USDT phase's start and done probes are two traps on `nop`s,
/// neither single-stepped: the emulated entry + uretprobe pair is the calibrated pair closest
/// to it (two traps, no single-step). None for kernel and unresolved phases.
pub fn cost_key(phase: &ResolvedPhase) -> Option<(CostClass, bool)> {
    if phase.kernel.is_some() {
        return None;
    }
    let t = phase.targets.first()?;
    if phase.usdt.is_some() {
        return Some((CostClass::Emulated, true));
    }
    Some((t.entry.cost, phase.return_mode.uses_uretprobe()))
}

/// Estimated cost of one call's entry + return probes for a resolved phase, ns.
pub fn pair_ns(phase: &ResolvedPhase) -> f64 {
    let Some(t) = phase.targets.first() else {
        return 0.0;
    };
    if phase.usdt.is_some() {
        return hit_ns(CostClass::Nop) * 2.0;
    }
    let ret = match phase.return_mode {
        ReturnMode::Uretprobe | ReturnMode::Guarded => URETPROBE_RETURN_NS,
        // A call leaves through one exit site; take the costliest class present.
        _ => t.exits.iter().map(|s| hit_ns(s.cost)).fold(0.0, f64::max),
    };
    hit_ns(t.entry.cost) + ret
}

/// The costs of one call of a phase, as used to correct its times.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseCosts {
    /// Whole entry + return cost, ns.
    pub pair_ns: f64,
    /// The part inside the call's own window, ns.
    pub own_ns: f64,
    /// Uncertainty of `pair_ns` per call, ns.
    pub error_ns: f64,
    /// The calibrated combination these come from: entry class and uretprobe.
    pub class: Option<(CostClass, bool)>,
}

/// Calibrated costs of a phase: the combination of its entry class and return mode. Kernel
/// phases (tracepoints) are not calibrated and cost nothing here.
pub fn phase_costs(classes: &[ClassCost], phase: &ResolvedPhase) -> PhaseCosts {
    let Some((entry, uretprobe)) = cost_key(phase) else {
        return PhaseCosts::default();
    };
    classes
        .iter()
        .find(|c| c.entry == entry && c.uretprobe == uretprobe)
        .map(|c| PhaseCosts {
            pair_ns: c.pair_ns,
            own_ns: c.own_ns,
            error_ns: c.error_ns,
            class: Some((c.entry, c.uretprobe)),
        })
        .unwrap_or_default()
}
