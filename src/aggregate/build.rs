//! Turning the aggregator's per-node figures into [`TreeNode`]s: nodes linked to their
//! children, named, given their end counters, pruned of what no call reached, largest first.

use super::tree::{EndCounters, NodeDef, NodeMap, NodeStats};
use crate::model::{Corrected, PhaseTree, TreeNode, UnitSpec, Units};

pub(super) struct Builder<'a> {
    pub(super) off_cpu: bool,
    pub(super) preemption: bool,
    pub(super) defs: &'a NodeMap<NodeDef>,
    pub(super) keys: &'a NodeMap<String>,
    pub(super) children: &'a NodeMap<Vec<u64>>,
    pub(super) names: &'a [String],
    pub(super) roles: &'a [Option<String>],
    pub(super) units: &'a [Option<UnitSpec>],
    pub(super) end: &'a EndCounters,
}

/// The name of phase id `phase` in `names`, `phase#N` for an id it does not have.
pub(super) fn phase_name(names: &[String], phase: u32) -> String {
    names
        .get(phase as usize)
        .cloned()
        .unwrap_or_else(|| format!("phase#{phase}"))
}

impl Builder<'_> {
    /// The tree over part of the run's calls (one process's, one half of a split), from the
    /// node definitions' `roots`: only the nodes those calls reached, largest root first;
    /// `events` is what the part saw.
    pub(super) fn partial_tree(
        &self,
        roots: &[u64],
        mut stats: NodeMap<NodeStats>,
        events: u64,
    ) -> PhaseTree {
        let mut trees: Vec<TreeNode> = roots
            .iter()
            .map(|&n| self.node(n, &mut stats))
            .filter_map(prune_unreached)
            .collect();
        sort_by_total(&mut trees);
        PhaseTree {
            roots: trees,
            // What no root's subtree took: spans of never-defined nodes.
            orphan_spans: stats.values().map(|s| s.count).sum(),
            events,
        }
    }

    pub(super) fn node(&self, node: u64, stats: &mut NodeMap<NodeStats>) -> TreeNode {
        let phase = self.defs.get(&node).map_or(u32::MAX, |d| d.phase);
        let name = phase_name(self.names, phase);
        let role = self.roles.get(phase as usize).cloned().flatten();
        let mut t = TreeNode::empty(phase, name, role);
        t.key = self.keys.get(&node).cloned();
        if let Some(s) = stats.remove(&node) {
            t.count = s.count;
            t.total_ns = s.total_ns;
            t.self_ns = s.self_ns;
            t.hist = s.hist;
            if self.off_cpu {
                t.off_cpu_ns = Some(s.off_ns);
            }
            if self.preemption {
                t.preempted_ns = Some(s.preempted_ns.min(s.off_ns));
            }
            t.corrected = s.corrected.map(|c| Corrected {
                total_ns: c.total_ns,
                self_ns: 0,
                probe_ns: c.probe_ns,
                probe_hits: c.probe_hits,
                error_ns: 0,
                preempted_ns: c.preempted_ns,
                wprof_ns: c.wprof_ns,
                hist: c.hist,
            });
            if let Some(Some(u)) = self.units.get(phase as usize) {
                t.units = Some(Units {
                    name: u.name.clone(),
                    total: if u.from_arg { s.arg_sum } else { s.count },
                });
            }
        }
        t.lost = self.end.lost.get(&node).copied().unwrap_or(0);
        t.abandoned = self.end.abandoned.get(&node).copied().unwrap_or(0);
        t.open = self.end.open.get(&node).copied().unwrap_or(0);
        if let Some(kids) = self.children.get(&node) {
            t.children = kids.iter().map(|k| self.node(*k, stats)).collect();
            sort_by_total(&mut t.children);
        }
        let kids_corrected: u64 = t
            .children
            .iter()
            .filter_map(|c| c.corrected.as_ref().map(|c| c.total_ns))
            .sum();
        if let Some(c) = &mut t.corrected {
            c.self_ns = c.total_ns.saturating_sub(kids_corrected);
        }
        t
    }
}

/// Drops the nodes a process never reached (no calls, open or abandoned, none below).
pub(super) fn prune_unreached(mut n: TreeNode) -> Option<TreeNode> {
    n.children = std::mem::take(&mut n.children)
        .into_iter()
        .filter_map(prune_unreached)
        .collect();
    (n.count > 0 || !n.children.is_empty()).then_some(n)
}

pub(super) fn sort_by_total(nodes: &mut [TreeNode]) {
    nodes.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
}
