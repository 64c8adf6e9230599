//! The end of a traced run turned into a [`Run`]: the trees corrected for the probes' cost
//! with stated errors, the sampled phases grafted in, one [`PhaseInfo`] per phase, the
//! counters, the probe cost and the provenance.
//!
//! In: the profile, the resolved phases, the run's probe costs and what the collect loop left
//! ([`Traced`]). Out: the [`Run`] every output is rendered from. Warnings (sampled phases
//! with no probed parent) go to stderr.

use std::time::{Duration, SystemTime};

use wprof_common::counter;

use super::budget::Moved;
use super::config::phase_names;
use super::costs::{self, RunCosts};
use super::processes::ProcessLabels;
use super::trace_loop::EndReason;
use crate::aggregate::sampled::SampledCounts;
use crate::aggregate::Aggregator;
use crate::collect::EndState;
use crate::model::profile::Profile;
use crate::model::{
    Calibration, Counters, ObjectInfo, PhaseInfo, PhaseTree, ProbeCost, ProcessRun, ProcessTree,
    Provenance, Run, StackProfile,
};
use crate::probe_cost;
use crate::resolve::{ResolvedPhase, Status};

/// What a traced run leaves for [`build_run`].
pub(super) struct Traced {
    /// The probe costs measured again at the end of the run.
    pub at_end: Option<probe_cost::Measured>,
    /// Every call read.
    pub agg: Aggregator,
    /// BPF's final counters and nodes.
    pub end: EndState,
    /// Why the run ended.
    pub reason: EndReason,
    /// How long the probes were live and events read.
    pub duration: Duration,
    /// The CPU samples (`--cpu-sample`).
    pub cpu: Option<StackProfile>,
    /// The off-CPU time (`--off-cpu`).
    pub off_cpu: Option<StackProfile>,
    /// Labels and parents of the processes seen.
    pub labels: ProcessLabels,
    /// CPU samples counted for the sampled phases.
    pub sampled: SampledCounts,
    /// Phases `--max-overhead` moved to sampling.
    pub moved: Vec<Moved>,
    /// Per phase: unmatched returns caused by taking probes off and putting them back.
    pub excused: Vec<u64>,
    /// Share of the run the probes were live, when `--max-overhead` duty-cycled them.
    pub probes_live: Option<f64>,
    /// When they were live then (Unix ns).
    pub live_windows: Vec<[u64; 2]>,
    /// The probes' time in the CPU samples, when the run sampled enough.
    pub probe_time: Option<crate::model::InSituProbeTime>,
    /// The probed threads' progress, live against paused, when a duty cycle measured it.
    pub progress: Option<crate::model::ProgressCheck>,
    /// What one CPU sample costs the thread it interrupts, ns (0: not measured).
    pub sample_ns: f64,
    /// The threads' wait for a CPU untraced and traced, when measured before attaching.
    pub preemption_baseline: Option<crate::model::PreemptionBaseline>,
}

/// The [`Run`] of a traced run that started at `started`. Its provenance names no pid and no
/// command: the session fills them in.
pub(super) fn build_run(
    profile: &Profile,
    phases: &[ResolvedPhase],
    costs: &RunCosts,
    traced: Traced,
    started: SystemTime,
) -> Run {
    let Traced {
        at_end,
        mut agg,
        end,
        reason,
        duration,
        cpu,
        off_cpu,
        labels,
        sampled,
        moved,
        excused,
        probes_live,
        live_windows,
        probe_time,
        progress,
        sample_ns,
        preemption_baseline,
    } = traced;
    let names = phase_names(profile);
    let roles: Vec<Option<String>> = profile.phases.iter().map(|p| p.role.clone()).collect();
    let events = agg.events();
    let skipped_spans = agg.skipped();
    let light = agg.take_light_epochs();
    let mut split = agg.finish_split(&names, &roles);
    let (mut tree, calls, spans, per_pid) = agg.finish_all(&names, &roles, &end.nodes);
    let calibration = costs
        .measured
        .as_ref()
        .map(|m| costs::calibration(m, at_end.as_ref(), &costs.during));
    let error_per_hit = error_per_hit_ns(costs, at_end.as_ref(), calibration.as_ref(), &end);
    costs::state_errors(&mut tree, error_per_hit);
    let in_situ = match (&light, costs.own_ns()) {
        (Some(l), Some(own)) => {
            let mut checks = crate::aggregate::insitu::check(&tree, l, &own, &names);
            crate::aggregate::insitu::apply(&mut tree, &mut checks, &own, l);
            checks
        }
        _ => Vec::new(),
    };
    // What wprof's own interruptions add beyond the calibrated probe price: the CPU sampler's
    // interrupts in the calls they hit, and what the traps cost the code after them, as the
    // program's own pace showed it under a duty cycle. Taken out before the sampled phases
    // take their shares of the parents.
    crate::aggregate::aftermath::take_out_samples(&mut tree, &sampled.interrupted, sample_ns);
    if let Some(p) = &progress {
        crate::aggregate::aftermath::correct(&mut tree, &|root| p.excess_of(root));
    }
    graft_sampled(&mut tree, &sampled, phases);
    if let Some(s) = &mut split {
        costs::state_errors(&mut s.with, error_per_hit);
        costs::state_errors(&mut s.without, error_per_hit);
    }
    let processes = process_runs(per_pid, &labels, error_per_hit);
    let facts = phase_facts(phases, costs, &end, &moved, &excused);
    let read = Read {
        events,
        skipped_spans,
        orphan_spans: tree.orphan_spans,
    };
    let provenance = Provenance {
        duration_s: duration.as_secs_f64(),
        forked: labels.forked(),
        objects: facts.objects,
        end_reason: reason.to_string(),
        aggregation: end.aggregation,
        probes_live_fraction: probes_live,
        live_windows,
        ..provenance(profile, started)
    };
    Run {
        provenance,
        phases: facts.infos,
        counters: counters(&end, &excused, read),
        probe_cost: ProbeCost {
            model: if costs.measured.is_some() {
                crate::model::MEASURED
            } else {
                crate::model::MODEL
            }
            .to_string(),
            hits: facts.hits,
            added_ns: facts.added_ns,
            calibration,
            in_situ: probe_time,
            progress,
            sample_ns: (sample_ns > 0.0).then_some(sample_ns),
            preemption_baseline,
        },
        calls,
        spans,
        tree,
        cpu,
        off_cpu,
        processes,
        split,
        in_situ,
    }
}

/// The uncertainty of one probe hit, ns, weighted by the hits each phase's probes took.
fn error_per_hit_ns(
    costs: &RunCosts,
    at_end: Option<&probe_cost::Measured>,
    calibration: Option<&Calibration>,
    end: &EndState,
) -> f64 {
    let hits_by_phase: Vec<u64> = end.phases.iter().map(|p| p.entries + p.returns).collect();
    let errors = costs.errors_ns(at_end);
    calibration.map_or(0.0, |c| {
        // Without a second measurement, a host busier than its CPUs gets doubled errors.
        let factor = if c.contended && c.at_end.is_empty() {
            2.0
        } else {
            1.0
        };
        RunCosts::error_per_hit_ns(&errors, &hits_by_phase) * factor
    })
}

/// Puts the sampled phases into the tree under their probed parents, and says which found no
/// probed parent.
fn graft_sampled(tree: &mut PhaseTree, counts: &SampledCounts, phases: &[ResolvedPhase]) {
    if counts.is_empty() {
        return;
    }
    let phase_of = |name: &str| {
        phases
            .iter()
            .find(|p| p.phase.name == name)
            .map(|p| (p.id, p.phase.role.clone()))
    };
    for path in crate::aggregate::sampled::graft(tree, counts, &phase_of) {
        eprintln!(
            "wprof: warning: CPU samples of sampled phases under '{path}', which has no node in \
             the tree, were left out"
        );
    }
}

/// `--per-pid`: each process's tree with its stated errors, labelled.
fn process_runs(
    per_pid: Vec<ProcessTree>,
    labels: &ProcessLabels,
    error_per_hit: f64,
) -> Vec<ProcessRun> {
    per_pid
        .into_iter()
        .map(|mut p| {
            costs::state_errors(&mut p.tree, error_per_hit);
            ProcessRun {
                pid: p.pid,
                label: labels.label(p.pid),
                parent: labels.parent(p.pid),
                parent_label: labels.parent(p.pid).map(|q| labels.label(q)),
                host: None,
                tree: p.tree,
            }
        })
        .collect()
}

/// What the phases say about the run's probes.
struct PhaseFacts {
    /// One per phase, in id order.
    infos: Vec<PhaseInfo>,
    /// The probed objects, each once, in phase order.
    objects: Vec<ObjectInfo>,
    /// The time the probes added to the traced processes, ns.
    added_ns: f64,
    /// Probe hits, entries and returns.
    hits: u64,
}

/// Each phase's attach facts, hits and probe cost.
fn phase_facts(
    phases: &[ResolvedPhase],
    costs: &RunCosts,
    end: &EndState,
    moved: &[Moved],
    excused: &[u64],
) -> PhaseFacts {
    let mut facts = PhaseFacts {
        infos: Vec::new(),
        objects: Vec::new(),
        added_ns: 0.0,
        hits: 0,
    };
    for rp in phases {
        let pc = end.phases.get(rp.id as usize).copied().unwrap_or_default();
        let first = rp.targets.first();
        let attached = matches!(rp.status, Status::Resolved);
        let calibrated = costs
            .per_phase
            .get(rp.id as usize)
            .copied()
            .unwrap_or_default();
        let pair = match (attached, &costs.measured) {
            (false, _) => 0.0,
            (true, Some(_)) => calibrated.pair_ns,
            (true, None) => probe_cost::pair_ns(rp),
        };
        facts.hits += pc.entries + pc.returns;
        if let Some(t) = first {
            let entry_hit = match costs.measured {
                // The calibration measures pairs: split evenly between entry and return.
                Some(_) => pair / 2.0,
                None => probe_cost::hit_ns(t.entry.cost),
            };
            facts.added_ns +=
                pc.entries as f64 * entry_hit + pc.returns as f64 * (pair - entry_hit);
            let o = ObjectInfo {
                path: t.display_object.clone(),
                build_id: t.build_id.clone(),
            };
            if !facts.objects.contains(&o) {
                facts.objects.push(o);
            }
        }
        let (object, symbols, return_mode) = probe_sites(rp, attached);
        facts.infos.push(PhaseInfo {
            id: rp.id,
            name: rp.phase.name.clone(),
            role: rp.phase.role.clone(),
            object,
            symbols,
            return_mode,
            entry_cost: first
                .map(|t| crate::model::class_name(t.entry.cost).to_string())
                .unwrap_or_default(),
            entry_offset: first.map_or(0, |t| t.entry_offset),
            exit_sites: rp.targets.iter().map(|t| t.exits.len() as u32).sum(),
            status: phase_status(rp, attached, moved),
            entries: pc.entries,
            returns: pc.returns,
            unmatched_returns: pc
                .unmatched_returns
                .saturating_sub(excused.get(rp.id as usize).copied().unwrap_or(0)),
            overflow: pc.overflow,
            outside_under: pc.outside_under,
            probe_pair_ns: pair,
            probe_own_ns: if attached { calibrated.own_ns } else { 0.0 },
        });
    }
    facts
}

/// Where a phase's probes sit: its object, its symbols, how its returns are caught.
fn probe_sites(rp: &ResolvedPhase, attached: bool) -> (String, Vec<String>, String) {
    match &rp.kernel {
        // A kernel phase: its two tracepoints instead of an object's symbols.
        Some(k) => (
            "[kernel]".to_string(),
            vec![k.enter.to_string(), k.exit.to_string()],
            "tracepoint".to_string(),
        ),
        None => (
            rp.targets
                .first()
                .map(|t| t.display_object.clone())
                .unwrap_or_default(),
            rp.targets.iter().map(|t| t.symbol.clone()).collect(),
            match (attached, &rp.usdt) {
                (false, _) => "-".into(),
                // Closed by a done probe: no return probe at all.
                (true, Some(_)) => "usdt".into(),
                (true, None) => rp.return_mode.as_str().to_string(),
            },
        ),
    }
}

/// A phase's status line: moved to sampling, sampled, attached, or why not.
fn phase_status(rp: &ResolvedPhase, attached: bool, moved: &[Moved]) -> String {
    match moved.iter().find(|m| m.id == rp.id) {
        Some(m) => format!(
            "moved to sampling after {:.1} s ({:.0} calls/s, --max-overhead)",
            m.after_s, m.calls_per_s
        ),
        None if attached && !rp.is_probed() => "sampled".into(),
        None if attached => "attached".into(),
        None => super::status_text(&rp.status),
    }
}

/// What wprof counted of the records it read.
struct Read {
    /// Records read.
    events: u64,
    /// Calls left out by `--skip`.
    skipped_spans: u64,
    /// Spans whose parent never came.
    orphan_spans: u64,
}

/// BPF's end counters, less the unmatched returns the run caused itself (`excused`), with
/// wprof's own.
fn counters(end: &EndState, excused: &[u64], read: Read) -> Counters {
    Counters {
        events: read.events,
        lost_spans: end.counter(counter::LOST_SPANS),
        lost_node_defs: end.counter(counter::LOST_NODE_DEFS),
        orphan_spans: read.orphan_spans,
        unmatched_returns: end
            .counter(counter::UNMATCHED_RETURNS)
            .saturating_sub(excused.iter().sum()),
        abandoned: end.nodes.abandoned.values().sum(),
        open_at_end: end.nodes.open.values().sum(),
        overflow: end.counter(counter::OVERFLOW),
        no_stack: end.counter(counter::NO_STACK),
        skipped_spans: read.skipped_spans,
        unwind: crate::model::UnwindCounters {
            unwinds: end.counter(counter::UNWINDS),
            restored: end.counter(counter::UNWIND_DISARMED),
            rearmed: end.counter(counter::UNWIND_REARMED),
            foreign: end.counter(counter::UNWIND_FOREIGN),
            late: end.counter(counter::UNWIND_LATE),
        },
    }
}

/// Who made the run where, with which profile; the run's own figures left at their defaults.
fn provenance(profile: &Profile, started: SystemTime) -> Provenance {
    let started_unix = started
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Provenance {
        wprof_version: env!("CARGO_PKG_VERSION").to_string(),
        host: read_trim("/proc/sys/kernel/hostname"),
        kernel: read_trim("/proc/sys/kernel/osrelease"),
        started_unix,
        profile_name: profile.name.clone(),
        profile_origin: profile.origin.clone(),
        profile_hash: profile.hash(),
        ..Provenance::default()
    }
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
