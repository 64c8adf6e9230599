//! The merged run's provenance: every source run's record kept whole in `sources`, and a
//! top level that summarises them (hosts, earliest start, longest duration...).

use crate::model::{ObjectInfo, Provenance, SourceRun};

use super::Input;

/// The provenance of the merge of `inputs`. A merged input contributes its own sources, so
/// merging merged runs lists the same hosts as merging the original runs at once.
pub(super) fn merged(inputs: &[Input]) -> Provenance {
    let sources: Vec<SourceRun> = inputs.iter().flat_map(sources_of).collect();
    let provs: Vec<&Provenance> = sources.iter().map(|s| &s.provenance).collect();
    let first = provs[0];
    let hosts = distinct_list(provs.iter().map(|p| p.host.as_str()));
    let commands_agree = provs.iter().all(|p| p.command == first.command);
    let mut objects: Vec<ObjectInfo> = Vec::new();
    for o in provs.iter().flat_map(|p| &p.objects) {
        if !objects.contains(o) {
            objects.push(o.clone());
        }
    }
    Provenance {
        wprof_version: distinct(provs.iter().map(|p| p.wprof_version.as_str())),
        host: match hosts.as_slice() {
            [one] => one.to_string(),
            many => format!("{} hosts: {}", many.len(), many.join(", ")),
        },
        kernel: distinct(provs.iter().map(|p| p.kernel.as_str())),
        started_unix: provs.iter().map(|p| p.started_unix).min().unwrap_or(0),
        // The runs of a fleet run side by side: its wall time is the longest run's, so that
        // rates over the run (units/s) are the fleet's.
        duration_s: provs.iter().map(|p| p.duration_s).fold(0.0, f64::max),
        pids: provs.iter().flat_map(|p| p.pids.iter().copied()).collect(),
        follow_forks: provs.iter().any(|p| p.follow_forks),
        forked: provs
            .iter()
            .flat_map(|p| p.forked.iter().copied())
            .collect(),
        command: if commands_agree {
            first.command.clone()
        } else {
            None
        },
        profile_name: first.profile_name.clone(),
        profile_origin: distinct(provs.iter().map(|p| p.profile_origin.as_str())),
        profile_hash: distinct(provs.iter().map(|p| p.profile_hash.as_str())),
        objects,
        end_reason: distinct(provs.iter().map(|p| p.end_reason.as_str())),
        aggregation: first.aggregation,
        probes_live_fraction: live_fraction(&provs),
        // Each host's windows are on its own clock, and overlap others': none for the fleet.
        live_windows: Vec::new(),
        sources,
    }
}

/// The source records a run contributes: its sources when it is itself a merge, else itself.
fn sources_of(input: &Input) -> Vec<SourceRun> {
    let r = &input.run;
    if !r.provenance.sources.is_empty() {
        return r.provenance.sources.clone();
    }
    vec![SourceRun {
        file: input.file.clone(),
        provenance: r.provenance.clone(),
        counters: r.counters.clone(),
        probe_cost: r.probe_cost.clone(),
    }]
}

/// The share of the fleet's run time the probes were live (`--max-overhead`), weighted by each
/// run's duration; None when they were live throughout on every host.
fn live_fraction(provs: &[&Provenance]) -> Option<f64> {
    if provs.iter().all(|p| p.probes_live_fraction.is_none()) {
        return None;
    }
    let live = |p: &Provenance| p.probes_live_fraction.unwrap_or(1.0);
    let time: f64 = provs.iter().map(|p| p.duration_s).sum();
    Some(if time > 0.0 {
        provs.iter().map(|p| live(p) * p.duration_s).sum::<f64>() / time
    } else {
        provs.iter().map(|p| live(p)).sum::<f64>() / provs.len() as f64
    })
}

/// The distinct values, in order of first appearance.
fn distinct_list<'a>(values: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// The distinct values joined by `, `: one value when the runs agree.
pub(super) fn distinct<'a>(values: impl Iterator<Item = &'a str>) -> String {
    distinct_list(values).join(", ")
}
