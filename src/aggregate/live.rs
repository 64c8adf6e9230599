//! The aggregator's figures while a run goes on (`--serve`): per tree node, for every process
//! together or for one, without finishing the tree; and the retirement of an exited process's
//! own figures (`--per-pid`), so a run of days keeps only the live ones.

use super::{Aggregator, NodeStats};
use crate::model::LatencyHistogram;

/// One node's cumulative figures so far, as the tree shows them: with the probes' time taken
/// out when the run corrects.
pub struct LiveNode<'a> {
    /// The node.
    pub node: u64,
    /// Completed calls.
    pub count: u64,
    /// Their total time, ns.
    pub total_ns: u64,
    /// Their durations.
    pub hist: &'a LatencyHistogram,
}

impl<'a> LiveNode<'a> {
    fn of(node: u64, s: &'a NodeStats) -> LiveNode<'a> {
        let (total_ns, hist) = match &s.corrected {
            Some(c) => (c.total_ns, &c.hist),
            None => (s.total_ns, &s.hist),
        };
        LiveNode {
            node,
            count: s.count,
            total_ns,
            hist,
        }
    }
}

impl Aggregator {
    /// Hands every node's figures so far (all processes together) to `f`.
    pub fn live_nodes(&self, mut f: impl FnMut(LiveNode<'_>)) {
        for (&node, s) in &self.stats {
            f(LiveNode::of(node, s));
        }
    }

    /// Hands the figures of process `pid`'s nodes so far to `f` (`--per-pid` only).
    pub fn live_pid_nodes(&self, pid: u32, mut f: impl FnMut(LiveNode<'_>)) {
        let Some(stats) = self.per_pid.as_ref().and_then(|p| p.get(&pid)) else {
            return;
        };
        for (&node, s) in stats {
            f(LiveNode::of(node, s));
        }
    }

    /// Removes process `pid`'s own figures (its `--per-pid` tree), handing them to `f` first;
    /// its calls stay in the merged tree.
    pub fn retire_pid(&mut self, pid: u32, mut f: impl FnMut(LiveNode<'_>)) {
        let Some(stats) = self.per_pid.as_mut().and_then(|p| p.remove(&pid)) else {
            return;
        };
        for (&node, s) in &stats {
            f(LiveNode::of(node, s));
        }
    }

    /// The phase id of a node, once its definition came.
    pub fn phase_of(&self, node: u64) -> Option<u32> {
        self.defs.get(&node).map(|d| d.phase)
    }

    /// Whether the run takes the probes' time out of every call.
    pub fn corrects(&self) -> bool {
        self.own_probe_ns.is_some()
    }
}
