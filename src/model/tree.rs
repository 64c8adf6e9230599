//! The phase tree: per node (a phase reached through one path of ancestors) its calls, times,
//! histogram and what could not be measured.

use std::borrow::Cow;

use super::histogram::{new_histogram, LatencyHistogram};
use super::sampled::SampledShare;

/// How a phase counts units (`unit` in the profile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSpec {
    /// The unit's name (rows, bytes...).
    pub name: String,
    /// True when a captured argument or return value gives the units of each call; false
    /// when each call is one unit.
    pub from_arg: bool,
}

/// Units a node processed (`unit` phases): the sum of the captured argument, or its calls.
/// In the JSON as it is: `{"name": "rows", "total": 200000}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Units {
    /// The unit's name.
    pub name: String,
    /// Units over the completed calls.
    pub total: u64,
}

/// The tree of one traced process (`--per-pid`).
#[derive(Debug, Clone)]
pub struct ProcessTree {
    /// The process id.
    pub pid: u32,
    /// Its tree (same shape as the merged tree, only the nodes it reached).
    pub tree: PhaseTree,
}

/// One node's cumulative figures at a point of a run (`--interval` snapshots).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSnapshot {
    /// Phase names from the root, joined by `/`.
    pub path: String,
    /// Completed calls so far.
    pub count: u64,
    /// Their total time, ns.
    pub total_ns: u64,
    /// Median call, ns.
    pub p50_ns: u64,
    /// 99th percentile call, ns.
    pub p99_ns: u64,
}

/// One node of the phase tree: a phase reached through one path of ancestors.
#[derive(Debug, Clone)]
pub struct TreeNode {
    /// Phase id.
    pub phase: u32,
    /// Phase name.
    pub name: String,
    /// The string the node's calls were grouped by (`group_by`), literals folded; None for
    /// an ungrouped phase.
    pub key: Option<String>,
    /// Phase role, if the profile gives one.
    pub role: Option<String>,
    /// Completed calls.
    pub count: u64,
    /// Sum of call durations, ns.
    pub total_ns: u64,
    /// Sum of durations minus time in child phases, ns.
    pub self_ns: u64,
    /// Distribution of call durations, ns.
    pub hist: LatencyHistogram,
    /// Units processed by the completed calls, for phases with a `unit`.
    pub units: Option<Units>,
    /// Calls whose span was lost (ring buffer full): counted, not timed.
    pub lost: u64,
    /// Calls left without a return (longjmp, exception, skipped uretprobe): not timed.
    pub abandoned: u64,
    /// Calls still open at the end of the run.
    pub open: u64,
    /// Time the thread was off the CPU during completed calls, children included, ns (only
    /// when the run tracked it: `--off-cpu`).
    pub off_cpu_ns: Option<u64>,
    /// The part of `off_cpu_ns` the thread spent preempted: runnable, waiting for a CPU
    /// rather than for something (sched_switch's `prev_state` had no sleep bit). Only with
    /// `--off-cpu`.
    pub preempted_ns: Option<u64>,
    /// The same calls with the probes' time taken out (runs with known probe costs).
    pub corrected: Option<Corrected>,
    /// A sampled phase (`measure = "sample"`): what the CPU samples found. Its `count` is 0
    /// and its times are estimates (share of the parent's on-CPU time).
    pub sampled: Option<SampledShare>,
    /// Child nodes, largest total first.
    pub children: Vec<TreeNode>,
}

/// How a grouped node (`group_by`) is named in paths and flame graphs: `name [key]`.
pub fn keyed_name(name: &str, key: &str) -> String {
    format!("{name} [{key}]")
}

impl TreeNode {
    /// The node's name with its grouping string, `name [key]` (just `name` when ungrouped):
    /// what tells grouped siblings apart in paths, flame graphs and comparisons.
    pub fn label(&self) -> Cow<'_, str> {
        match &self.key {
            Some(k) => Cow::Owned(keyed_name(&self.name, k)),
            None => Cow::Borrowed(&self.name),
        }
    }

    /// A node with no calls yet.
    pub fn empty(phase: u32, name: String, role: Option<String>) -> TreeNode {
        TreeNode {
            phase,
            name,
            key: None,
            role,
            count: 0,
            total_ns: 0,
            self_ns: 0,
            hist: new_histogram(),
            units: None,
            lost: 0,
            abandoned: 0,
            open: 0,
            off_cpu_ns: None,
            preempted_ns: None,
            corrected: None,
            sampled: None,
            children: Vec::new(),
        }
    }

    /// The children measured by probes (sampled ones are grafted from the corrected parent).
    pub fn probed_children(&self) -> impl Iterator<Item = &TreeNode> {
        self.children.iter().filter(|k| k.sampled.is_none())
    }

    /// Total time, ns: corrected when the run was corrected, raw otherwise.
    pub fn corrected_total_ns(&self) -> u64 {
        self.corrected
            .as_ref()
            .map_or(self.total_ns, |c| c.total_ns)
    }

    /// Mean duration of a completed call, ns.
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_ns as f64 / self.count as f64
        }
    }

    /// Depth-first walk with the path of names from the root.
    pub fn walk<'a>(
        &'a self,
        path: &mut Vec<&'a str>,
        f: &mut dyn FnMut(&[&'a str], &'a TreeNode),
    ) {
        path.push(&self.name);
        f(path, self);
        for c in &self.children {
            c.walk(path, f);
        }
        path.pop();
    }

    /// Finds a descendant (or self) by a path of names, e.g. `["write", "persist", "flush"]`.
    pub fn find(&self, path: &[&str]) -> Option<&TreeNode> {
        match path.split_first() {
            Some((first, rest)) if *first == self.name => {
                if rest.is_empty() {
                    Some(self)
                } else {
                    self.children.iter().find_map(|c| c.find(rest))
                }
            }
            _ => None,
        }
    }
}

/// A node's calls with the probes' own time taken out, call by call: each call loses the
/// part of its own entry/return cost inside its window and the whole cost of every
/// descendant call's probes.
#[derive(Debug, Clone)]
pub struct Corrected {
    /// Sum of corrected call durations, ns.
    pub total_ns: u64,
    /// Corrected total minus the children's corrected totals, ns.
    pub self_ns: u64,
    /// Probe time taken out, ns (raw total − corrected total).
    pub probe_ns: u64,
    /// Probe hits inside the calls (own entries and returns plus every descendant's).
    pub probe_hits: u64,
    /// Uncertainty of the corrected total, ns: the calibration's error per hit times the hits.
    pub error_ns: u64,
    /// The probes' share of the calls' preempted time, also taken out, ns (runs that track
    /// off-CPU time; see `aggregate::preempted`). Raw total − corrected total = `probe_ns` +
    /// this.
    pub preempted_ns: u64,
    /// The part of `preempted_ns` the threads waited while the CPU ran one of wprof's own
    /// threads (its reader, mostly), ns.
    pub wprof_ns: u64,
    /// Distribution of corrected call durations, ns.
    pub hist: LatencyHistogram,
}

/// The aggregated result of a run: one tree per root phase.
#[derive(Debug, Clone, Default)]
pub struct PhaseTree {
    /// Root nodes (phases entered with no phase open on the thread), largest total first.
    pub roots: Vec<TreeNode>,
    /// Spans whose node definition never arrived (its ring-buffer record was lost).
    pub orphan_spans: u64,
    /// Events aggregated.
    pub events: u64,
}

impl PhaseTree {
    /// Finds a node by a path of names starting at a root.
    pub fn find(&self, path: &[&str]) -> Option<&TreeNode> {
        self.roots.iter().find_map(|r| r.find(path))
    }
}

/// Most spans held for one thread's open root call (about 90 bytes each): a root call with
/// more calls inside is left out of both halves and counted, so that one huge root call cannot
/// take the memory of the run.
pub const MAX_HELD_SPANS: usize = 1 << 18;

/// The two halves of a run split by a phase (`--split-by`).
#[derive(Debug, Clone)]
pub struct SplitTrees {
    /// The phase the root calls were split by.
    pub phase: String,
    /// The root calls in which a call of `phase` completed, at any depth (a root call of
    /// `phase` itself included).
    pub with: PhaseTree,
    /// The other root calls.
    pub without: PhaseTree,
    /// Completed calls in neither half: their root call never completed in the run (its span
    /// was lost, it left without a return, it was still open at the end, or it started during
    /// `--skip`), or it was too large to hold (`oversized_roots`).
    pub unattributed_spans: u64,
    /// Root calls left out of both halves because they held more than [`MAX_HELD_SPANS`]
    /// calls.
    pub oversized_roots: u64,
}
