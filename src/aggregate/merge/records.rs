//! Merging the run's plain records: counters and probe hits add; per phase the attach facts
//! of every host are kept side by side when they differ; the probe cost stays per host.

use crate::model::{Counters, PhaseInfo, ProbeCost, SourceRun, UnwindCounters};

use super::Input;

/// Adds `b`'s counters to `a`'s.
pub(super) fn add_counters(a: &mut Counters, b: &Counters) {
    // Destructured whole, so that a counter added to Counters has to be added here.
    let Counters {
        events,
        lost_spans,
        lost_node_defs,
        orphan_spans,
        unmatched_returns,
        abandoned,
        open_at_end,
        overflow,
        no_stack,
        skipped_spans,
        unwind:
            UnwindCounters {
                unwinds,
                restored,
                rearmed,
                foreign,
                late,
            },
    } = *b;
    a.events += events;
    a.lost_spans += lost_spans;
    a.lost_node_defs += lost_node_defs;
    a.orphan_spans += orphan_spans;
    a.unmatched_returns += unmatched_returns;
    a.abandoned += abandoned;
    a.open_at_end += open_at_end;
    a.overflow += overflow;
    a.no_stack += no_stack;
    a.skipped_spans += skipped_spans;
    a.unwind.unwinds += unwinds;
    a.unwind.restored += restored;
    a.unwind.rearmed += rearmed;
    a.unwind.foreign += foreign;
    a.unwind.late += late;
}

/// Adds the phases of another run (same phases, same order: checked before) to `a`: hits and
/// counts add; where the hosts differ (object path, return mode, entry cost, status) both are
/// kept, ` | `-separated; the per-call probe cost is the hit-weighted mean of the hosts'.
pub(super) fn merge_phases(a: &mut [PhaseInfo], b: Vec<PhaseInfo>) {
    for (x, y) in a.iter_mut().zip(b) {
        let PhaseInfo {
            id: _,
            name: _,
            role,
            object,
            symbols,
            return_mode,
            entry_cost,
            entry_offset: _,
            exit_sites,
            status,
            entries,
            returns,
            unmatched_returns,
            overflow,
            outside_under,
            probe_pair_ns,
            probe_own_ns,
        } = y;
        if x.role.is_none() {
            x.role = role;
        }
        for (mine, theirs) in [
            (&mut x.object, object),
            (&mut x.return_mode, return_mode),
            (&mut x.entry_cost, entry_cost),
            (&mut x.status, status),
        ] {
            either(mine, &theirs);
        }
        for s in symbols {
            if !x.symbols.contains(&s) {
                x.symbols.push(s);
            }
        }
        x.exit_sites = x.exit_sites.max(exit_sites);
        let (wx, wy) = ((x.entries + x.returns) as f64, (entries + returns) as f64);
        if wx + wy > 0.0 {
            x.probe_pair_ns = (x.probe_pair_ns * wx + probe_pair_ns * wy) / (wx + wy);
            x.probe_own_ns = (x.probe_own_ns * wx + probe_own_ns * wy) / (wx + wy);
        }
        x.entries += entries;
        x.returns += returns;
        x.unmatched_returns += unmatched_returns;
        x.overflow += overflow;
        x.outside_under += outside_under;
    }
}

/// `mine`, or `mine | theirs` when the hosts differ (each value once).
fn either(mine: &mut String, theirs: &str) {
    if !mine.split(" | ").any(|v| v == theirs) {
        mine.push_str(" | ");
        mine.push_str(theirs);
    }
}

/// What the model line says of a merged run's probe cost.
const PER_HOST: &str =
    "each host's own calibration or estimate, in provenance.sources[].probe_cost";

/// The merged run's probe cost: hits and added time add; no single calibration (each host's
/// corrected its own times, and stays in its source's record).
pub(super) fn probe_cost(sources: &[SourceRun]) -> ProbeCost {
    let costs = sources.iter().map(|s| &s.probe_cost);
    let same_model = costs
        .clone()
        .all(|c| c.model == sources[0].probe_cost.model)
        && costs.clone().all(|c| c.calibration.is_none());
    ProbeCost {
        model: if same_model {
            sources[0].probe_cost.model.clone()
        } else {
            PER_HOST.to_string()
        },
        hits: costs.clone().map(|c| c.hits).sum(),
        added_ns: costs.map(|c| c.added_ns).sum(),
        calibration: None,
        // Each host's samples read its own probes: in its source's record.
        in_situ: None,
        progress: None,
        sample_ns: None,
        preemption_baseline: None,
    }
}

/// When some runs carry times corrected for the probes and others do not, a sum would mix
/// the two: every run then shows its times as measured, and a warning says so.
pub(super) fn align_corrections(inputs: &mut [Input], warnings: &mut Vec<String>) {
    let corrected: Vec<&str> = (inputs.iter())
        .filter(|i| i.run.is_corrected())
        .map(|i| i.file.as_str())
        .collect();
    if corrected.is_empty() || corrected.len() == inputs.len() {
        return;
    }
    warnings.push(format!(
        "only {} carry times corrected for the probes: the merged run shows every host's times \
         as measured (record every host without --no-calibrate to keep them)",
        corrected.join(", ")
    ));
    for i in inputs {
        i.run.drop_corrections();
    }
}
