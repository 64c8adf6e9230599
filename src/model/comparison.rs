//! What `wprof compare` found: two runs' nodes lined up by key, with per-node statistics.
//! analyze computes it (analyze::compare), render shows it (render::compare).

use std::collections::HashMap;

use super::{LatencyHistogram, TreeNode};

/// p-value below which a difference of means counts as statistically significant.
pub const ALPHA: f64 = 0.01;

/// How compare lines nodes up.
#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum AlignBy {
    /// By the path of phase names.
    Phase,
    /// By the path of roles (phases without a role keep their name).
    Role,
}

/// The merged figures of all nodes of one run that share a key.
#[derive(Debug, Clone)]
pub struct NodeStats {
    /// Phase names of the first merged node, for display.
    pub names: Vec<String>,
    /// Completed calls.
    pub count: u64,
    /// Sum of call durations, ns.
    pub total_ns: u64,
    /// Sum of self times, ns.
    pub self_ns: u64,
    /// Call durations, ns.
    pub hist: LatencyHistogram,
}

impl NodeStats {
    pub(crate) fn from_node(names: Vec<String>, n: &TreeNode) -> NodeStats {
        NodeStats {
            names,
            count: n.count,
            total_ns: n.total_ns,
            self_ns: n.self_ns,
            hist: n.hist.clone(),
        }
    }

    pub(crate) fn merge(&mut self, n: &TreeNode) {
        self.count += n.count;
        self.total_ns += n.total_ns;
        self.self_ns += n.self_ns;
        // Both histograms have the range of `new_histogram`; an error would only drop samples
        // from the percentiles, never from count/total.
        let _ = self.hist.add(&n.hist);
    }

    /// Mean duration of a call, ns (exact: total / count).
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_ns as f64 / self.count as f64
        }
    }

    /// A quantile of the call duration, ns.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.hist.is_empty() {
            0
        } else {
            self.hist.value_at_quantile(q)
        }
    }

    /// Standard deviation of the call duration, ns (from the histogram).
    pub fn stdev_ns(&self) -> f64 {
        if self.hist.len() < 2 {
            0.0
        } else {
            self.hist.stdev()
        }
    }
}

/// The nodes of one run by key, in depth-first order.
#[derive(Debug, Clone, Default)]
pub struct Keyed {
    /// Keys in depth-first order of first appearance.
    pub order: Vec<Vec<String>>,
    /// Figures by key.
    pub nodes: HashMap<Vec<String>, NodeStats>,
    /// Root calls of the run (sum of the roots' counts).
    pub root_calls: u64,
    /// All roots merged (the `total` of `--fail-if`).
    pub total: Option<NodeStats>,
}

/// One aligned node of a comparison.
#[derive(Debug, Clone)]
pub struct Row {
    /// The key path (names or roles).
    pub key: Vec<String>,
    /// Base figures, if the node is in the base run.
    pub base: Option<NodeStats>,
    /// New figures, if the node is in the new run.
    pub new: Option<NodeStats>,
    /// Relative change of the mean (new / base - 1), when in both.
    pub delta_mean: Option<f64>,
    /// Welch's p-value on the means, when in both with ≥ 2 calls each.
    pub p_value: Option<f64>,
    /// p < [`ALPHA`] and |delta_mean| ≥ min_effect.
    pub significant: bool,
}

/// A whole comparison.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Aligned nodes, depth-first.
    pub rows: Vec<Row>,
    /// Root calls of the base run.
    pub base_root_calls: u64,
    /// Root calls of the new run.
    pub new_root_calls: u64,
    /// The base run keyed.
    pub base: Keyed,
    /// The new run keyed.
    pub new: Keyed,
}
