//! Merging what a run holds beside its tree: folded stacks add stack by stack, per-root-call
//! tables are concatenated, per-process trees are kept with their host, split trees merge
//! when every run was split by the same phase. What only some runs have is left out.

use std::collections::BTreeMap;

use crate::model::{CallTable, FoldedStack, ProcessRun, Provenance, StackProfile};

use super::Input;

/// The CPU and the off-CPU profiles of the merged run.
pub(super) fn stack_profiles(
    inputs: &[Input],
    warnings: &mut Vec<String>,
) -> (Option<StackProfile>, Option<StackProfile>) {
    (
        add_profiles(
            inputs,
            "CPU samples (--cpu-sample)",
            |r| r.cpu.as_ref(),
            warnings,
        ),
        add_profiles(
            inputs,
            "off-CPU time (--off-cpu)",
            |r| r.off_cpu.as_ref(),
            warnings,
        ),
    )
}

/// One kind of stack profile, added stack by stack when every run has it in the same unit
/// and at the same frequency; None (and a warning) otherwise.
fn add_profiles(
    inputs: &[Input],
    what: &str,
    get: impl Fn(&crate::model::Run) -> Option<&StackProfile>,
    warnings: &mut Vec<String>,
) -> Option<StackProfile> {
    let with: Vec<(&str, &StackProfile)> = (inputs.iter())
        .filter_map(|i| get(&i.run).map(|p| (i.file.as_str(), p)))
        .collect();
    let (_, first) = *with.first()?;
    if with.len() < inputs.len() {
        let files: Vec<&str> = with.iter().map(|(f, _)| *f).collect();
        warnings.push(format!(
            "{what} only in {}: left out (a profile of some hosts would be read as the fleet's)",
            files.join(", ")
        ));
        return None;
    }
    if let Some((f, p)) =
        (with.iter()).find(|(_, p)| p.unit != first.unit || p.frequency_hz != first.frequency_hz)
    {
        warnings.push(format!(
            "{what}: {} has {} at {:?} Hz and {f} {} at {:?} Hz: left out (samples of \
             different weights do not add)",
            with[0].0, first.unit, first.frequency_hz, p.unit, p.frequency_hz
        ));
        return None;
    }
    let mut stacks: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, p) in &with {
        for s in &p.stacks {
            *stacks.entry(&s.stack).or_default() += s.weight;
        }
    }
    Some(StackProfile {
        unit: first.unit.clone(),
        frequency_hz: first.frequency_hz,
        records: with.iter().map(|(_, p)| p.records).sum(),
        lost: with.iter().map(|(_, p)| p.lost).sum(),
        stacks: (stacks.into_iter())
            .map(|(stack, weight)| FoldedStack {
                stack: stack.to_string(),
                weight,
            })
            .collect(),
    })
}

/// Off-CPU time per node is only a fleet's when every run tracked it: otherwise it is left out
/// of every tree (the off-CPU profile goes with [`stack_profiles`]).
pub(super) fn align_off_cpu(inputs: &mut [Input], warnings: &mut Vec<String>) {
    let tracked = inputs.iter().filter(|i| i.run.off_cpu.is_some()).count();
    if tracked == 0 || tracked == inputs.len() {
        return;
    }
    fn forget(n: &mut crate::model::TreeNode) {
        n.off_cpu_ns = None;
        n.preempted_ns = None;
        n.children.iter_mut().for_each(forget);
    }
    let runs = inputs.len();
    for i in inputs {
        i.run.tree.roots.iter_mut().for_each(forget);
        for p in &mut i.run.processes {
            p.tree.roots.iter_mut().for_each(forget);
        }
        if let Some(s) = &mut i.run.split {
            s.with
                .roots
                .iter_mut()
                .chain(&mut s.without.roots)
                .for_each(forget);
        }
    }
    warnings.push(format!(
        "off-CPU time per phase left out: only {tracked} of the {runs} runs tracked it (--off-cpu)"
    ));
}

/// Split trees merge when every run was split by the same phase; otherwise they are left out.
pub(super) fn align_splits(inputs: &mut [Input], warnings: &mut Vec<String>) {
    let phases: Vec<Option<&str>> = (inputs.iter())
        .map(|i| i.run.split.as_ref().map(|s| s.phase.as_str()))
        .collect();
    if phases.iter().all(|p| *p == phases[0]) {
        return;
    }
    let said: Vec<String> = (inputs.iter().zip(&phases))
        .map(|(i, p)| match p {
            Some(p) => format!("{} by {p}", i.file),
            None => format!("{} not split", i.file),
        })
        .collect();
    warnings.push(format!(
        "the split trees (--split-by) are left out: {}",
        said.join(", ")
    ));
    for i in inputs {
        i.run.split = None;
    }
}

/// Appends `b`'s root calls to `a`'s. Each row keeps its host's pid and start time (its own
/// clock): the rows of the merged table are all the hosts' root calls, file after file.
pub(super) fn append_calls(a: &mut CallTable, b: CallTable) {
    if a.columns.is_empty() {
        a.columns = b.columns;
    }
    a.rows.extend(b.rows);
    a.total_calls += b.total_calls;
    a.capped |= b.capped;
}

/// A run's per-process trees, each labelled with the run's host (a merged run's already are).
pub(super) fn hosted(processes: Vec<ProcessRun>, prov: &Provenance) -> Vec<ProcessRun> {
    (processes.into_iter())
        .map(|mut p| {
            if p.host.is_none() {
                p.host = Some(prov.host.clone());
            }
            p
        })
        .collect()
}
