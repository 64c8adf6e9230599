//! Merging phase trees: nodes aligned by their path of labels (name, and `group_by` key) add
//! their counts, times and histograms; a node only one run reached is kept as it is.

use std::cmp::Reverse;

use anyhow::{anyhow, Result};

use crate::model::{new_histogram, Corrected, PhaseTree, SampledShare, SplitTrees, TreeNode};

/// What the tree merge could not add as it is, by node path, for the warnings.
#[derive(Debug, Default)]
pub(super) struct Notes {
    /// Nodes probed in one run and sampled in another: merged as sampled estimates.
    mixed_sampling: Vec<String>,
    /// Nodes corrected in one run and not in another: their corrected figures left out.
    partly_corrected: Vec<String>,
}

impl Notes {
    /// One warning per kind of note, naming the node paths.
    pub(super) fn into_warnings(mut self) -> Vec<String> {
        let mut out = Vec::new();
        for v in [&mut self.mixed_sampling, &mut self.partly_corrected] {
            v.sort();
            v.dedup();
        }
        if !self.mixed_sampling.is_empty() {
            out.push(format!(
                "{} probed in some runs and sampled in others (--max-overhead moved it): merged \
                 as a sampled estimate, its probed calls' times added, their count and \
                 percentiles left out",
                self.mixed_sampling.join(", ")
            ));
        }
        if !self.partly_corrected.is_empty() {
            out.push(format!(
                "{}: corrected for the probes in some runs only; the merged node shows the times \
                 as measured",
                self.partly_corrected.join(", ")
            ));
        }
        out
    }
}

/// Adds `from` into `into`.
pub(super) fn merge_tree(into: &mut PhaseTree, from: PhaseTree, notes: &mut Notes) -> Result<()> {
    let PhaseTree {
        roots,
        orphan_spans,
        events,
    } = from;
    into.orphan_spans += orphan_spans;
    into.events += events;
    merge_nodes(&mut into.roots, roots, &mut Vec::new(), notes)
}

/// Adds the halves of `from` into those of `into` (both split by the same phase).
pub(super) fn merge_split(
    into: &mut SplitTrees,
    from: SplitTrees,
    notes: &mut Notes,
) -> Result<()> {
    let SplitTrees {
        phase: _,
        with,
        without,
        unattributed_spans,
        oversized_roots,
    } = from;
    merge_tree(&mut into.with, with, notes)?;
    merge_tree(&mut into.without, without, notes)?;
    into.unattributed_spans += unattributed_spans;
    into.oversized_roots += oversized_roots;
    Ok(())
}

/// Adds each node of `from` to the sibling of the same label in `into` (or appends it), then
/// orders the siblings largest total first, as aggregate does.
fn merge_nodes(
    into: &mut Vec<TreeNode>,
    from: Vec<TreeNode>,
    path: &mut Vec<String>,
    notes: &mut Notes,
) -> Result<()> {
    for node in from {
        match into
            .iter_mut()
            .find(|n| n.name == node.name && n.key == node.key)
        {
            Some(n) => merge_node(n, node, path, notes)?,
            None => into.push(node),
        }
    }
    into.sort_by_key(|n| Reverse(n.total_ns));
    Ok(())
}

/// Adds `b` into `a`, the same node of another run.
fn merge_node(
    a: &mut TreeNode,
    b: TreeNode,
    path: &mut Vec<String>,
    notes: &mut Notes,
) -> Result<()> {
    path.push(a.label().into_owned());
    let here = path.join("/");
    // Destructured whole, so that a field added to TreeNode has to be thought about here.
    let TreeNode {
        phase: _,
        name: _,
        key: _,
        role,
        count,
        total_ns,
        self_ns,
        hist,
        units,
        lost,
        abandoned,
        open,
        off_cpu_ns,
        preempted_ns,
        corrected,
        sampled,
        children,
    } = b;
    if a.role.is_none() {
        a.role = role;
    }
    a.count += count;
    a.total_ns += total_ns;
    a.self_ns += self_ns;
    a.hist
        .add(&hist)
        .map_err(|e| anyhow!("node {here}: histograms do not add: {e:?}"))?;
    a.lost += lost;
    a.abandoned += abandoned;
    a.open += open;
    a.units = match (a.units.take(), units) {
        (Some(mut x), Some(y)) if x.name == y.name => {
            x.total += y.total;
            Some(x)
        }
        (Some(x), Some(y)) => {
            return Err(anyhow!(
                "node {here}: counts {} in one run and {} in another: the profiles differ",
                x.name,
                y.name
            ))
        }
        (x, y) => x.or(y),
    };
    a.off_cpu_ns = add_known(a.off_cpu_ns, off_cpu_ns);
    a.preempted_ns = add_known(a.preempted_ns, preempted_ns);
    a.corrected = match (a.corrected.take(), corrected) {
        (Some(x), Some(y)) => Some(add_corrected(x, y, &here)?),
        (None, None) => None,
        _ => {
            notes.partly_corrected.push(here.clone());
            None
        }
    };
    merge_sampling(a, sampled, &here, notes);
    merge_nodes(&mut a.children, children, path, notes)?;
    path.pop();
    Ok(())
}

/// Sampled shares pool their samples (the interval is recomputed); a node probed in one run
/// and sampled in another becomes a sampled estimate, as aggregate's graft makes a phase moved
/// to sampling during a run: its times add, its partial count and histogram are dropped.
fn merge_sampling(a: &mut TreeNode, b: Option<SampledShare>, here: &str, notes: &mut Notes) {
    let pooled = match (a.sampled, b) {
        (None, None) => return,
        (Some(x), Some(y)) => {
            SampledShare::new(x.samples + y.samples, x.parent_samples + y.parent_samples)
        }
        (Some(x), None) | (None, Some(x)) => x,
    };
    if a.sampled.is_none() || b.is_none() {
        // A sampled node counts no call: a count here is the probed side's.
        if a.count > 0 {
            notes.mixed_sampling.push(here.to_string());
        }
        a.count = 0;
        a.hist = new_histogram();
        if let Some(c) = &mut a.corrected {
            c.hist = new_histogram();
        }
    }
    a.sampled = Some(pooled);
}

/// The sum of two runs' figures of a kind, or the one that has it (a run that did not
/// track it, e.g. off-CPU time, has None).
fn add_known(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x + y),
        (x, y) => x.or(y),
    }
}

/// The corrected figures of one node in two runs, added: each run's were corrected with its
/// own host's calibration, so the sums are corrected too; the errors add (they are bounds).
fn add_corrected(mut x: Corrected, y: Corrected, here: &str) -> Result<Corrected> {
    let Corrected {
        total_ns,
        self_ns,
        probe_ns,
        probe_hits,
        error_ns,
        preempted_ns,
        wprof_ns,
        hist,
    } = y;
    x.total_ns += total_ns;
    x.self_ns += self_ns;
    x.probe_ns += probe_ns;
    x.preempted_ns += preempted_ns;
    x.wprof_ns += wprof_ns;
    x.probe_hits += probe_hits;
    x.error_ns += error_ns;
    x.hist
        .add(&hist)
        .map_err(|e| anyhow!("node {here}: corrected histograms do not add: {e:?}"))?;
    Ok(x)
}
