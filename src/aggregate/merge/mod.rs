//! Merge: runs of one profile from many hosts -> one fleet run (`wprof merge`).
//!
//! In: two or more [`Run`]s, each with the name of the file it came from. Out: one [`Run`]
//! that `report`, `compare` and `check` read like any other, and the warnings to print. The
//! runs must share the profile (name, phases) and the aggregation mode; anything else is
//! refused with both files named. What adds, adds: tree nodes aligned by their path of
//! labels add their counts, totals, self times and histograms bucket by bucket (percentiles
//! are the merged histogram's), counters and probe hits add, folded stacks add stack by
//! stack, per-root-call tables are concatenated. Each host's corrected times were corrected
//! with its own calibration, so they add too; the calibrations themselves stay per host in
//! [`crate::model::SourceRun`]. Per-process trees are kept, each labelled with its host.
//! What cannot add is left out and said in a warning: the span log (each host's clock is its
//! own), the in-situ checks, profiles only some runs have. docs/outputs.md, "Merging runs".

mod provenance;
mod records;
mod tables;
mod tree;

use anyhow::Result;

use crate::error::WprofError;
use crate::model::{Run, SpanLog};

/// A run to merge and the file it was read from (named in errors, warnings and provenance).
#[derive(Debug, Clone)]
pub struct Input {
    /// The file, as given on the command line.
    pub file: String,
    /// The run it holds.
    pub run: Run,
}

/// The merged run and what the merge had to leave out or could not vouch for.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The fleet run.
    pub run: Run,
    /// One sentence each, for stderr.
    pub warnings: Vec<String>,
}

/// Merges `inputs` (at least two runs of one profile, same aggregation mode) into one run.
/// Refusals are usage errors (exit 2) naming the files.
pub fn merge(mut inputs: Vec<Input>) -> Result<Merged> {
    if inputs.len() < 2 {
        let got = inputs.iter().map(|i| i.file.as_str()).collect::<Vec<_>>();
        return Err(usage(format!(
            "merge needs at least two runs, got {}{}",
            got.len(),
            if got.is_empty() {
                String::new()
            } else {
                format!(": {}", got.join(", "))
            }
        )));
    }
    check_compatible(&inputs)?;
    let mut warnings = Vec::new();
    records::align_corrections(&mut inputs, &mut warnings);
    tables::align_off_cpu(&mut inputs, &mut warnings);
    tables::align_splits(&mut inputs, &mut warnings);

    let provenance = provenance::merged(&inputs);
    if provenance.profile_hash.contains(", ") {
        warnings.push(format!(
            "the runs' profiles '{}' have the same phases but different texts (hashes {}): \
             merged phase by phase; each run's hash stays in provenance.sources",
            provenance.profile_name, provenance.profile_hash
        ));
    }
    let probe_cost = records::probe_cost(&provenance.sources);
    let stack_profiles = tables::stack_profiles(&inputs, &mut warnings);
    let spans = spans(&inputs, &mut warnings);
    let in_situ_dropped = inputs.iter().filter(|i| !i.run.in_situ.is_empty()).count();
    if in_situ_dropped > 0 {
        warnings.push(format!(
            "the in-situ checks of {in_situ_dropped} run(s) are left out: each scaled its own \
             host's correction (the merged corrected times include that scaling)"
        ));
    }

    let mut runs = inputs.into_iter();
    let first = runs
        .next()
        .unwrap_or_else(|| unreachable!("two inputs or more"));
    let mut notes = tree::Notes::default();
    let mut out = Run {
        provenance,
        probe_cost,
        spans,
        cpu: stack_profiles.0,
        off_cpu: stack_profiles.1,
        in_situ: Vec::new(),
        processes: tables::hosted(first.run.processes, &first.run.provenance),
        ..first.run
    };
    for Input { run, .. } in runs {
        tree::merge_tree(&mut out.tree, run.tree, &mut notes)?;
        records::add_counters(&mut out.counters, &run.counters);
        records::merge_phases(&mut out.phases, run.phases);
        tables::append_calls(&mut out.calls, run.calls);
        out.processes
            .extend(tables::hosted(run.processes, &run.provenance));
        if let (Some(s), Some(o)) = (&mut out.split, run.split) {
            tree::merge_split(s, o, &mut notes)?;
        }
    }
    warnings.extend(notes.into_warnings());
    Ok(Merged { run: out, warnings })
}

/// The span log of the merged run: empty. Spans carry each host's CLOCK_MONOTONIC times and
/// pids, which put on one timeline would show calls of different machines side by side.
fn spans(inputs: &[Input], warnings: &mut Vec<String>) -> SpanLog {
    let with: Vec<&str> = (inputs.iter())
        .filter(|i| !i.run.spans.spans.is_empty())
        .map(|i| i.file.as_str())
        .collect();
    if !with.is_empty() {
        warnings.push(format!(
            "the span logs (report --format trace) of {} are left out: each host's timestamps are its own \
             clock, so one timeline would be false; render each host's trace from its own run",
            with.join(", ")
        ));
    }
    SpanLog::default()
}

/// Refuses runs that do not measure the same thing the same way: another profile, other
/// phases, or the other aggregation mode.
fn check_compatible(inputs: &[Input]) -> Result<()> {
    let first = &inputs[0];
    let p0 = &first.run.provenance;
    let names0: Vec<&str> = first.run.phases.iter().map(|p| p.name.as_str()).collect();
    for other in &inputs[1..] {
        let p = &other.run.provenance;
        let (a, b) = (&first.file, &other.file);
        if p.profile_name != p0.profile_name {
            return Err(usage(format!(
                "cannot merge {a} and {b}: {a} is a run of profile '{}' and {b} of profile '{}'; \
                 only runs of one profile merge",
                p0.profile_name, p.profile_name
            )));
        }
        let names: Vec<&str> = other.run.phases.iter().map(|p| p.name.as_str()).collect();
        let ids_match = (first.run.phases.iter().zip(&other.run.phases)).all(|(x, y)| x.id == y.id);
        if names != names0 || !ids_match {
            let only = |x: &[&str], y: &[&str]| -> String {
                let v: Vec<&str> = x.iter().filter(|n| !y.contains(n)).copied().collect();
                if v.is_empty() {
                    "none".into()
                } else {
                    v.join(", ")
                }
            };
            return Err(usage(format!(
                "cannot merge {a} and {b}: their profile '{}' has different phases (only in {a}: \
                 {}; only in {b}: {}{}); record every host with the same profile",
                p0.profile_name,
                only(&names0, &names),
                only(&names, &names0),
                if names.len() == names0.len() && only(&names0, &names) == "none" {
                    "; the same names in another order"
                } else {
                    ""
                }
            )));
        }
        if p.aggregation != p0.aggregation {
            return Err(usage(format!(
                "cannot merge {a} and {b}: {a} was aggregated {} and {b} {} (--aggregate); a \
                 merged run would have a per-call table for only part of its calls: record every \
                 host with the same --aggregate",
                mode(p0.aggregation),
                mode(p.aggregation)
            )));
        }
    }
    Ok(())
}

/// How an aggregation mode reads in a sentence.
fn mode(a: crate::model::Aggregation) -> &'static str {
    match a {
        crate::model::Aggregation::Event => "per event",
        crate::model::Aggregation::Kernel => "in the kernel",
    }
}

fn usage(msg: String) -> anyhow::Error {
    WprofError::Usage(msg).into()
}

#[cfg(test)]
mod tests;
