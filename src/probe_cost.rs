//! What one probe hit costs on this kind of host, by the instruction it lands on.
//!
//! Until wprof calibrates on the host (the measurement issue), these are the figures measured
//! on this project's VMs (facts.md: entry+return pairs of 1.2-12.6 µs): estimates, labelled as
//! such in every output.

use crate::profile::ReturnMode;
use crate::resolve::{CostClass, ResolvedPhase};

/// The label outputs carry for these figures.
pub const MODEL: &str =
    "estimated (fixed per-class costs measured on the project's VMs; not calibrated on this host)";

/// Cost of one uprobe hit on an instruction of this class, ns.
pub fn hit_ns(class: CostClass) -> f64 {
    match class {
        CostClass::Nop => 600.0,
        CostClass::Emulated => 700.0,
        CostClass::SingleStep => 5_800.0,
    }
}

/// Cost of one uretprobe return (trampoline trap, no single-step), ns.
pub const URETPROBE_RETURN_NS: f64 = 1_000.0;

/// Estimated cost of one call's entry + return probes for a resolved phase, ns.
pub fn pair_ns(phase: &ResolvedPhase) -> f64 {
    let Some(t) = phase.targets.first() else {
        return 0.0;
    };
    let ret = match phase.return_mode {
        ReturnMode::Uretprobe => URETPROBE_RETURN_NS,
        // A call leaves through one exit site; take the costliest class present.
        _ => t.exits.iter().map(|s| hit_ns(s.cost)).fold(0.0, f64::max),
    };
    hit_ns(t.entry.cost) + ret
}

/// The spelling of a cost class in outputs.
pub fn class_name(class: CostClass) -> &'static str {
    match class {
        CostClass::Nop => "nop",
        CostClass::Emulated => "emulated",
        CostClass::SingleStep => "single-step",
    }
}
