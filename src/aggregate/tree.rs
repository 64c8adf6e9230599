//! Building the phase tree from node definitions and spans.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use nohash_hasher::NoHashHasher;
use wprof_common::{hist_bucket_mid, Event, EventKind, HistKey, NodeSummary};

use super::calls::CallRecorder;
use super::split::Splitter;
use crate::model::{
    keyed_name, new_histogram, CallTable, Corrected, LatencyHistogram, NodeSnapshot, PhaseTree,
    ProcessTree, SpanLog, SplitTrees, TreeNode, UnitSpec, Units, MAX_HELD_SPANS,
};

/// Node hashes are already mixed in BPF (splitmix64), so hashing them again is wasted work on
/// the per-event path.
pub(super) type NodeMap<V> = HashMap<u64, V, BuildHasherDefault<NoHashHasher<u64>>>;

#[derive(Debug, Clone, Copy)]
struct NodeDef {
    parent: u64,
    phase: u32,
}

#[derive(Debug, Clone)]
pub(super) struct NodeStats {
    pub(super) count: u64,
    total_ns: u64,
    self_ns: u64,
    off_ns: u64,
    /// Sum of the captured argument (or return value) over the calls.
    arg_sum: u64,
    hist: LatencyHistogram,
    /// Durations with the probes' time taken out, call by call (when costs are known).
    corrected: Option<CorrectedStats>,
}

/// A node's figures with the probe time taken out of every call.
#[derive(Debug, Clone)]
struct CorrectedStats {
    total_ns: u64,
    /// Probe time removed, ns.
    probe_ns: u64,
    /// Probe hits inside the calls' windows (their own entry and return, and every
    /// descendant's).
    probe_hits: u64,
    hist: LatencyHistogram,
}

impl CorrectedStats {
    fn new() -> CorrectedStats {
        CorrectedStats {
            total_ns: 0,
            probe_ns: 0,
            probe_hits: 0,
            hist: new_histogram(),
        }
    }
}

impl Default for NodeStats {
    fn default() -> Self {
        NodeStats {
            count: 0,
            total_ns: 0,
            self_ns: 0,
            off_ns: 0,
            arg_sum: 0,
            hist: new_histogram(),
            corrected: None,
        }
    }
}

impl NodeStats {
    /// Adds one completed call; `own_ns[phase id]` is the part of each phase's own probe cost
    /// that falls inside its window, None when the run does not correct. In-kernel aggregation does the
    /// same arithmetic in BPF (probes/ebpf `aggregate_call`): keep the two in step.
    #[inline]
    pub(super) fn add(&mut self, ev: &Event, own_ns: Option<&[u64]>) {
        self.count += 1;
        self.total_ns += ev.dur_ns;
        self.self_ns += ev.dur_ns.saturating_sub(ev.child_ns);
        self.off_ns += ev.off_ns;
        self.arg_sum = self.arg_sum.saturating_add(ev.arg);
        self.hist.saturating_record(ev.dur_ns.max(1));
        if let Some(own) = own_ns.map(|o| o.get(ev.phase as usize).copied().unwrap_or(0)) {
            let removed = (own + ev.desc_probe_ns).min(ev.dur_ns);
            let c = self.corrected.get_or_insert_with(CorrectedStats::new);
            c.total_ns += ev.dur_ns - removed;
            c.probe_ns += removed;
            c.probe_hits += ev.desc_hits as u64 + 2;
            c.hist.saturating_record((ev.dur_ns - removed).max(1));
        }
    }
}

/// Accumulates events of one run.
#[derive(Default)]
pub struct Aggregator {
    defs: NodeMap<NodeDef>,
    stats: NodeMap<NodeStats>,
    /// Nodes with an ancestor of the same phase (recursion): their time is inside that one's.
    nested_same: NodeMap<bool>,
    calls: Option<CallRecorder>,
    events: u64,
    /// Spans that started before this CLOCK_MONOTONIC time are not aggregated (`--skip`).
    skip_before_ns: u64,
    skipped: u64,
    /// Whether off-CPU time is tracked (nodes then carry `off_cpu_ns`).
    off_cpu: bool,
    /// Per phase id: how it counts units.
    units: Vec<Option<UnitSpec>>,
    /// Per phase id: probe time inside a call's own window, ns (set when the run corrects).
    own_probe_ns: Option<Vec<u64>>,
    /// Per process stats, when trees per pid are wanted (`--per-pid`).
    per_pid: Option<HashMap<u32, NodeMap<NodeStats>>>,
    /// Forks seen (`--follow-forks`): child pid -> parent pid, in order.
    forks: Vec<(u32, u32)>,
    /// Processes whose dynamic loader changed its objects since the last look, with the
    /// (CLOCK_MONOTONIC) time of the first change.
    maps_changed: Vec<(u32, u64)>,
    /// The root calls split by a phase (`--split-by`).
    split: Option<Splitter>,
    /// Grouped nodes (`group_by`): the folded string each stands for.
    keys: NodeMap<String>,
    /// The in-situ check's light epochs (`--in-situ`): root calls that began in one are kept
    /// there, not in the tree.
    light: Option<super::insitu::LightEpochs>,
}

/// What BPF could not turn into spans, read from its maps when the run ends.
#[derive(Debug, Clone, Default)]
pub struct EndCounters {
    /// Per node: spans lost to a full ring buffer.
    pub lost: HashMap<u64, u64>,
    /// Per node: calls left without a return (longjmp, exception).
    pub abandoned: HashMap<u64, u64>,
    /// Per node: calls still open when the run ended.
    pub open: HashMap<u64, u64>,
}

impl Aggregator {
    /// An empty aggregator (tree only).
    pub fn new() -> Aggregator {
        Aggregator::default()
    }

    /// An aggregator that also keeps the per-root-call table and the span log (per-event
    /// mode), for phases `names`, capped at `max_calls` rows and `max_spans` spans.
    pub fn with_calls(names: &[String], max_calls: usize, max_spans: usize) -> Aggregator {
        Aggregator {
            calls: Some(CallRecorder::new(names, max_calls, max_spans)),
            ..Aggregator::default()
        }
    }

    /// Adds one ring-buffer event.
    #[inline]
    pub fn add(&mut self, ev: &Event) {
        self.events += 1;
        if ev.kind == EventKind::NodeDef as u32 {
            if self.calls.is_some() {
                let nested = self.has_ancestor_phase(ev.parent, ev.phase);
                self.nested_same.insert(ev.node, nested);
            }
            self.defs.insert(
                ev.node,
                NodeDef {
                    parent: ev.parent,
                    phase: ev.phase,
                },
            );
        } else if ev.kind == EventKind::Span as u32 {
            if ev.start_ns < self.skip_before_ns {
                self.skipped += 1;
                return;
            }
            if let Some(l) = self
                .light
                .as_mut()
                .filter(|l| ev.depth == 0 && l.contains(ev.start_ns))
            {
                let own = self.own_probe_ns.as_deref();
                l.add(
                    ev,
                    own.and_then(|o| o.get(ev.phase as usize).copied())
                        .unwrap_or(0),
                );
                return;
            }
            if let Some(c) = &mut self.calls {
                c.span(ev, self.nested_same.get(&ev.node).copied().unwrap_or(false));
            }
            if let Some(s) = &mut self.split {
                s.span(ev, self.own_probe_ns.as_deref());
            }
            let own = self.own_probe_ns.as_deref();
            self.stats.entry(ev.node).or_default().add(ev, own);
            if let Some(p) = &mut self.per_pid {
                p.entry(ev.pid)
                    .or_default()
                    .entry(ev.node)
                    .or_default()
                    .add(ev, own);
            }
        } else if ev.kind == EventKind::Fork as u32 {
            self.forks.push((ev.pid, ev.tid));
        } else if ev.kind == EventKind::MapsChanged as u32
            && !self.maps_changed.iter().any(|(p, _)| *p == ev.pid)
        {
            self.maps_changed.push((ev.pid, ev.start_ns));
        }
    }

    /// Adds what in-kernel aggregation (`--aggregate kernel`) summed in BPF: per node its
    /// summary (CPUs already added up) and its histogram buckets, each bucket as (key, calls).
    /// Gives the same figures [`Aggregator::add`] would have from the calls' spans: count,
    /// total, self, off-CPU, units and, when the run corrects, the corrected total, probe time
    /// and hits; each bucket's calls go into the node's histogram (or its corrected one) at the
    /// bucket's midpoint, within 0.4% of every duration in it. Calls that came as spans
    /// before the mode was switched on add up with these.
    pub fn add_kernel_summaries(
        &mut self,
        nodes: &[(u64, NodeSummary)],
        buckets: &[(HistKey, u64)],
    ) {
        let correcting = self.own_probe_ns.is_some();
        for (node, k) in nodes {
            let s = self.stats.entry(*node).or_default();
            s.count += k.count;
            s.total_ns += k.total_ns;
            s.self_ns += k.self_ns;
            s.off_ns += k.off_ns;
            s.arg_sum = s.arg_sum.saturating_add(k.arg_sum);
            if correcting {
                let c = s.corrected.get_or_insert_with(CorrectedStats::new);
                c.total_ns += k.corrected_total_ns;
                c.probe_ns += k.probe_ns;
                c.probe_hits += k.probe_hits;
            }
        }
        for (key, calls) in buckets {
            let value = hist_bucket_mid(key.bucket).max(1);
            let s = self.stats.entry(key.node).or_default();
            if key.corrected == 0 {
                s.hist.saturating_record_n(value, *calls);
            } else if correcting {
                s.corrected
                    .get_or_insert_with(CorrectedStats::new)
                    .hist
                    .saturating_record_n(value, *calls);
            }
        }
    }

    /// Stops keeping the per-call table and span log (`--aggregate auto` switched to the
    /// kernel: rows would stop at the switch).
    pub fn drop_calls(&mut self) {
        self.calls = None;
    }

    /// Counts units for the phases that have a `unit` (index = phase id).
    pub fn count_units(&mut self, units: Vec<Option<UnitSpec>>) {
        self.units = units;
    }

    /// Corrects every call for the probes' time: `own_ns[phase id]` is the part of a call's
    /// own probe cost inside its window; descendants' whole costs come with each span.
    pub fn correct_probe_time(&mut self, own_ns: Vec<u64>) {
        self.own_probe_ns = Some(own_ns);
    }

    /// Also keeps the root calls that contained a call of phase id `phase` apart from the
    /// others, for [`Aggregator::finish_split`] (per-event mode: in-kernel summaries are not
    /// split).
    pub fn split_by(&mut self, phase: u32) {
        self.split_by_holding(phase, MAX_HELD_SPANS);
    }

    /// [`Aggregator::split_by`], holding at most `max_held` spans per thread.
    pub fn split_by_holding(&mut self, phase: u32, max_held: usize) {
        self.split = Some(Splitter::new(phase, max_held));
    }

    /// The two halves of a split run (None unless [`Aggregator::split_by`] was called).
    /// BPF's lost/abandoned/open counts are per node, not per root call: they stay in the
    /// merged tree.
    pub fn finish_split(
        &mut self,
        names: &[String],
        roles: &[Option<String>],
    ) -> Option<SplitTrees> {
        let split = self.split.take()?;
        let phase = split.phase_name(names);
        let (children, roots) = self.shape();
        let none = EndCounters::default();
        let build = self.builder(&children, names, roles, &none);
        Some(split.finish(phase, &build, &roots))
    }

    /// Also keeps each process's figures apart, for [`Aggregator::finish_per_pid`].
    pub fn track_per_pid(&mut self) {
        self.per_pid.get_or_insert_with(HashMap::new);
    }

    /// Names grouped nodes (`group_by`): (node, folded string), as the collector read them.
    pub fn add_keys(&mut self, keys: Vec<(u64, String)>) {
        self.keys.extend(keys);
    }

    /// Forks of traced processes seen since the last call: (child, parent), in order.
    pub fn take_forks(&mut self) -> Vec<(u32, u32)> {
        std::mem::take(&mut self.forks)
    }

    /// Processes whose loader loaded or unloaded a library since the last call, each with
    /// the CLOCK_MONOTONIC ns of its first such change.
    pub fn take_maps_changed(&mut self) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.maps_changed)
    }

    /// Processes with completed calls so far (only kept with [`Aggregator::track_per_pid`]).
    pub fn pids(&self) -> Vec<u32> {
        self.per_pid
            .as_ref()
            .map(|p| p.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Marks the run as tracking off-CPU time: every node of the tree gets `off_cpu_ns`.
    pub fn track_off_cpu(&mut self) {
        self.off_cpu = true;
    }

    /// The phase names from the root down to `node` (empty if the node is unknown).
    pub fn path_of<'n>(&self, mut node: u64, names: &'n [String]) -> Vec<Cow<'n, str>> {
        let mut parts = Vec::new();
        for _ in 0..=wprof_common::MAX_DEPTH {
            let Some(d) = self.defs.get(&node) else { break };
            let name = names.get(d.phase as usize).map_or("?", String::as_str);
            parts.push(match self.keys.get(&node) {
                Some(k) => Cow::Owned(keyed_name(name, k)),
                None => Cow::Borrowed(name),
            });
            node = d.parent;
        }
        parts.reverse();
        parts
    }

    /// The tree's shape so far by phase: per (parent phase, phase) edge, None for a root,
    /// the calls completed there (which phases `--max-overhead` may move to sampling:
    /// leaves, not roots).
    pub fn phase_edges(&self) -> HashMap<(Option<u32>, u32), u64> {
        let mut edges = HashMap::new();
        for (node, d) in self.defs.iter() {
            let calls = self.stats.get(node).map_or(0, |s| s.count);
            *edges
                .entry((self.defs.get(&d.parent).map(|p| p.phase), d.phase))
                .or_default() += calls;
        }
        edges
    }

    /// The longest 99th-percentile call so far among the nodes of these phases, ns (0 before
    /// any call completed): how long a call of theirs may still be in flight.
    pub fn p99_of(&self, phases: &[u32]) -> u64 {
        self.defs
            .iter()
            .filter(|(_, d)| phases.contains(&d.phase))
            .filter_map(|(node, _)| self.stats.get(node))
            .map(|s| s.hist.value_at_quantile(0.99))
            .max()
            .unwrap_or(0)
    }

    /// Keeps the root calls that begin in light epochs apart (the in-situ check).
    pub fn track_light_epochs(&mut self) {
        self.light.get_or_insert_with(Default::default);
    }

    /// The in-situ check's light epochs, when tracked.
    pub fn light_epochs(&mut self) -> Option<&mut super::insitu::LightEpochs> {
        self.light.as_mut()
    }

    /// Takes the light epochs and their calls out (before the tree is finished).
    pub fn take_light_epochs(&mut self) -> Option<super::insitu::LightEpochs> {
        self.light.take()
    }

    /// Events added so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Drops spans that started before `monotonic_ns` (warm-up excluded by `--skip`).
    pub fn skip_before(&mut self, monotonic_ns: u64) {
        self.skip_before_ns = monotonic_ns;
    }

    /// Spans dropped by [`Aggregator::skip_before`].
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Cumulative figures of every node seen so far, by path, in path order.
    pub fn snapshot(&self, names: &[String]) -> Vec<NodeSnapshot> {
        let path_of = |node: u64| self.path_of(node, names).join("/");
        let mut out: Vec<NodeSnapshot> = self
            .stats
            .iter()
            .map(|(&node, s)| NodeSnapshot {
                path: path_of(node),
                count: s.count,
                total_ns: s.total_ns,
                p50_ns: s.hist.value_at_quantile(0.5),
                p99_ns: s.hist.value_at_quantile(0.99),
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    /// Whether `node` or one of its ancestors is `phase` (bounded by the BPF stack depth).
    fn has_ancestor_phase(&self, mut node: u64, phase: u32) -> bool {
        for _ in 0..=wprof_common::MAX_DEPTH {
            match self.defs.get(&node) {
                Some(d) if d.phase == phase => return true,
                Some(d) => node = d.parent,
                None => return false,
            }
        }
        false
    }

    /// Builds the tree, and the call table and span log when they were kept.
    pub fn finish_all(
        mut self,
        names: &[String],
        roles: &[Option<String>],
        end: &EndCounters,
    ) -> (PhaseTree, CallTable, SpanLog, Vec<ProcessTree>) {
        let (calls, spans) = self
            .calls
            .take()
            .map(|c| c.finish(&self.keys))
            .unwrap_or_default();
        let processes = self.finish_per_pid(names, roles);
        (self.finish(names, roles, end), calls, spans, processes)
    }

    /// One tree per process (`--per-pid`), smallest pid first; empty unless
    /// [`Aggregator::track_per_pid`] was called. BPF's lost/abandoned/open counts are per node,
    /// not per process: they stay in the merged tree.
    pub fn finish_per_pid(
        &mut self,
        names: &[String],
        roles: &[Option<String>],
    ) -> Vec<ProcessTree> {
        let Some(per_pid) = self.per_pid.take() else {
            return Vec::new();
        };
        let (children, roots) = self.shape();
        let none = EndCounters::default();
        let build = self.builder(&children, names, roles, &none);
        let mut out: Vec<ProcessTree> = per_pid
            .into_iter()
            .map(|(pid, stats)| ProcessTree {
                pid,
                tree: build.partial_tree(&roots, stats, 0),
            })
            .collect();
        out.sort_by_key(|p| p.pid);
        out
    }

    /// A tree builder over this run's node definitions.
    fn builder<'a>(
        &'a self,
        children: &'a NodeMap<Vec<u64>>,
        names: &'a [String],
        roles: &'a [Option<String>],
        end: &'a EndCounters,
    ) -> Builder<'a> {
        Builder {
            off_cpu: self.off_cpu,
            defs: &self.defs,
            keys: &self.keys,
            children,
            names,
            roles,
            units: &self.units,
            end,
        }
    }

    /// Children of every node and the roots, from the node definitions.
    fn shape(&self) -> (NodeMap<Vec<u64>>, Vec<u64>) {
        let mut children: NodeMap<Vec<u64>> = NodeMap::default();
        let mut roots = Vec::new();
        for (&node, def) in &self.defs {
            if def.parent == 0 {
                roots.push(node);
            } else {
                children.entry(def.parent).or_default().push(node);
            }
        }
        (children, roots)
    }

    /// Builds the tree. `names[i]` and `roles[i]` describe phase id `i`.
    pub fn finish(
        self,
        names: &[String],
        roles: &[Option<String>],
        end: &EndCounters,
    ) -> PhaseTree {
        let (children, roots) = self.shape();
        let Aggregator {
            defs,
            mut stats,
            events,
            off_cpu: self_off_cpu,
            units,
            keys,
            ..
        } = self;
        let orphan_spans = stats
            .iter()
            .filter(|(n, _)| !defs.contains_key(n))
            .map(|(_, s)| s.count)
            .sum();
        let build = Builder {
            off_cpu: self_off_cpu,
            defs: &defs,
            keys: &keys,
            children: &children,
            names,
            roles,
            units: &units,
            end,
        };
        let mut roots: Vec<TreeNode> = roots
            .into_iter()
            .map(|n| build.node(n, &mut stats))
            .collect();
        sort_by_total(&mut roots);
        PhaseTree {
            roots,
            orphan_spans,
            events,
        }
    }
}

pub(super) struct Builder<'a> {
    off_cpu: bool,
    defs: &'a NodeMap<NodeDef>,
    keys: &'a NodeMap<String>,
    children: &'a NodeMap<Vec<u64>>,
    names: &'a [String],
    roles: &'a [Option<String>],
    units: &'a [Option<UnitSpec>],
    end: &'a EndCounters,
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
            t.corrected = s.corrected.map(|c| Corrected {
                total_ns: c.total_ns,
                self_ns: 0,
                probe_ns: c.probe_ns,
                probe_hits: c.probe_hits,
                error_ns: 0,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn def(node: u64, parent: u64, phase: u32) -> Event {
        Event {
            kind: EventKind::NodeDef as u32,
            node,
            parent,
            phase,
            ..Event::default()
        }
    }
    fn span(node: u64, phase: u32, dur: u64, child: u64) -> Event {
        Event {
            kind: EventKind::Span as u32,
            node,
            phase,
            dur_ns: dur,
            child_ns: child,
            ..Event::default()
        }
    }

    #[test]
    fn builds_nested_tree_with_self_time() {
        let mut a = Aggregator::new();
        a.add(&def(10, 0, 0));
        a.add(&def(11, 10, 1));
        a.add(&def(12, 10, 2));
        for _ in 0..3 {
            a.add(&span(11, 1, 100, 0));
            a.add(&span(12, 2, 50, 0));
            a.add(&span(10, 0, 200, 150));
        }
        let names = vec!["write".into(), "encode".into(), "wal".into()];
        let t = a.finish(
            &names,
            &[None, None, Some("wal".into())],
            &EndCounters::default(),
        );
        assert_eq!(t.roots.len(), 1);
        let w = &t.roots[0];
        assert_eq!((w.count, w.total_ns, w.self_ns), (3, 600, 150));
        assert_eq!(
            w.children
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["encode", "wal"]
        );
        assert_eq!(
            t.find(&["write", "wal"]).unwrap().role.as_deref(),
            Some("wal")
        );
        assert_eq!(t.find(&["write", "encode"]).unwrap().hist.len(), 3);
        assert_eq!(t.events, 12);
    }

    #[test]
    fn call_rows_count_a_recursion_once_in_time_and_every_level_in_calls() {
        let names: Vec<String> = vec!["w".into(), "r".into()];
        let mut a = Aggregator::with_calls(&names, 10, 10);
        a.add(&def(1, 0, 0));
        a.add(&def(2, 1, 1));
        a.add(&def(3, 2, 1));
        let mut inner = span(3, 1, 40, 0);
        inner.depth = 2;
        let mut outer = span(2, 1, 70, 40);
        outer.depth = 1;
        a.add(&inner);
        a.add(&outer);
        a.add(&span(1, 0, 100, 70));
        let (_, calls, spans, _) = a.finish_all(&names, &[None, None], &EndCounters::default());
        assert_eq!(calls.rows.len(), 1);
        assert_eq!(calls.rows[0].phase_ns, [100, 70]);
        assert_eq!(calls.rows[0].phase_calls, [1, 2]);
        assert_eq!(spans.spans.len(), 3);
    }

    #[test]
    fn skip_drops_early_spans_and_snapshots_name_paths() {
        let mut a = Aggregator::new();
        a.skip_before(1_000);
        a.add(&def(1, 0, 0));
        a.add(&def(2, 1, 1));
        let mut early = span(2, 1, 10, 0);
        early.start_ns = 999;
        let mut late = span(2, 1, 20, 0);
        late.start_ns = 1_000;
        a.add(&early);
        a.add(&late);
        assert_eq!(a.skipped(), 1);
        let snap = a.snapshot(&["w".into(), "e".into()]);
        assert_eq!(snap.len(), 1);
        assert_eq!(
            (snap[0].path.as_str(), snap[0].count, snap[0].total_ns),
            ("w/e", 1, 20)
        );
    }

    #[test]
    fn span_without_definition_is_an_orphan_not_a_root() {
        let mut a = Aggregator::new();
        a.add(&span(99, 0, 10, 0));
        let t = a.finish(&["x".into()], &[None], &EndCounters::default());
        assert!(t.roots.is_empty());
        assert_eq!(t.orphan_spans, 1);
    }

    #[test]
    fn end_counters_land_on_their_nodes() {
        let mut a = Aggregator::new();
        a.add(&def(1, 0, 0));
        a.add(&def(2, 1, 1));
        let mut end = EndCounters::default();
        end.lost.insert(2, 7);
        end.abandoned.insert(2, 1);
        end.open.insert(1, 1);
        let t = a.finish(&["r".into(), "c".into()], &[None, None], &end);
        let c = t.find(&["r", "c"]).unwrap();
        assert_eq!((c.lost, c.abandoned, c.count), (7, 1, 0));
        assert_eq!(t.roots[0].open, 1);
    }

    #[test]
    fn units_sum_the_captured_argument_or_count_calls() {
        let names: Vec<String> = vec!["copy".into(), "multi".into(), "single".into()];
        let mut a = Aggregator::new();
        a.count_units(vec![
            None,
            Some(UnitSpec {
                name: "rows".into(),
                from_arg: true,
            }),
            Some(UnitSpec {
                name: "rows".into(),
                from_arg: false,
            }),
        ]);
        a.add(&def(1, 0, 0));
        a.add(&def(2, 1, 1));
        a.add(&def(3, 1, 2));
        for (node, phase, arg) in [(2, 1, 1000), (2, 1, 24), (3, 2, 0), (3, 2, 0), (3, 2, 0)] {
            a.add(&Event {
                arg,
                ..span(node, phase, 10, 0)
            });
        }
        a.add(&span(1, 0, 100, 50));
        let t = a.finish(&names, &[None, None, None], &EndCounters::default());
        let units = |p: &[&str]| t.find(p).unwrap().units.clone().map(|u| (u.name, u.total));
        assert_eq!(units(&["copy"]), None);
        assert_eq!(units(&["copy", "multi"]), Some(("rows".into(), 1024)));
        assert_eq!(units(&["copy", "single"]), Some(("rows".into(), 3)));
    }

    /// What BPF's `aggregate_call` (probes/ebpf) sums for these spans, the arithmetic
    /// mirrored here: per node a summary, per (node, bucket, raw/corrected) a count.
    type Folded = (Vec<(u64, NodeSummary)>, Vec<(HistKey, u64)>);

    fn kernel_fold(spans: &[Event], own: &[u64]) -> Folded {
        let mut nodes: HashMap<u64, NodeSummary> = HashMap::new();
        let mut buckets: HashMap<HistKey, u64> = HashMap::new();
        for ev in spans {
            let removed = (own[ev.phase as usize] + ev.desc_probe_ns).min(ev.dur_ns);
            let s = nodes.entry(ev.node).or_default();
            s.count += 1;
            s.total_ns += ev.dur_ns;
            s.self_ns += ev.dur_ns.saturating_sub(ev.child_ns);
            s.off_ns += ev.off_ns;
            s.arg_sum = s.arg_sum.saturating_add(ev.arg);
            s.corrected_total_ns += ev.dur_ns - removed;
            s.probe_ns += removed;
            s.probe_hits += ev.desc_hits as u64 + 2;
            for (value, corrected) in [(ev.dur_ns, 0), (ev.dur_ns - removed, 1)] {
                let key = HistKey {
                    node: ev.node,
                    bucket: wprof_common::hist_bucket(value),
                    corrected,
                };
                *buckets.entry(key).or_default() += 1;
            }
        }
        (nodes.into_iter().collect(), buckets.into_iter().collect())
    }

    /// The same calls aggregated per event and in the kernel give the same tree: counts,
    /// totals, self, off-CPU, units and corrected figures exactly, percentiles within 1%.
    #[test]
    fn kernel_summaries_build_the_tree_per_event_aggregation_builds() {
        let names: Vec<String> = vec!["w".into(), "a".into(), "b".into()];
        let roles = [None, None, None];
        let own = vec![300, 200, 100];
        let mut spans = Vec::new();
        let mut x = 12_345u64;
        for i in 0..5_000u64 {
            // A spread of durations over four decades, from a small LCG.
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let a = 500 + (x >> 40) % 2_000_000;
            let b = 50 + (x >> 20) % 5_000;
            let child = |node, phase, dur| Event {
                off_ns: dur / 10,
                arg: i,
                desc_probe_ns: 0,
                desc_hits: 0,
                ..span(node, phase, dur, 0)
            };
            spans.push(child(2, 1, a));
            spans.push(child(3, 2, b));
            spans.push(Event {
                off_ns: (a + b) / 10,
                desc_probe_ns: 2 * 1_000,
                desc_hits: 4,
                ..span(1, 0, a + b + 1_000 + i % 7, a + b)
            });
        }
        spans.push(span(2, 1, 10, 0)); // shorter than its probe time: corrected to 0
        let units = vec![
            None,
            Some(UnitSpec {
                name: "rows".into(),
                from_arg: true,
            }),
            Some(UnitSpec {
                name: "calls".into(),
                from_arg: false,
            }),
        ];
        let setup = || {
            let mut a = Aggregator::new();
            a.count_units(units.clone());
            a.correct_probe_time(own.clone());
            a.track_off_cpu();
            a.add(&def(1, 0, 0));
            a.add(&def(2, 1, 1));
            a.add(&def(3, 1, 2));
            a
        };
        let mut per_event = setup();
        spans.iter().for_each(|e| per_event.add(e));
        let mut in_kernel = setup();
        let (nodes, buckets) = kernel_fold(&spans, &own);
        in_kernel.add_kernel_summaries(&nodes, &buckets);
        let end = EndCounters::default();
        let want = per_event.finish(&names, &roles, &end);
        let got = in_kernel.finish(&names, &roles, &end);
        for path in [&["w"][..], &["w", "a"], &["w", "b"]] {
            let (w, g) = (want.find(path).unwrap(), got.find(path).unwrap());
            assert_eq!(
                (
                    g.count,
                    g.total_ns,
                    g.self_ns,
                    g.off_cpu_ns,
                    g.units.clone()
                ),
                (
                    w.count,
                    w.total_ns,
                    w.self_ns,
                    w.off_cpu_ns,
                    w.units.clone()
                ),
                "{path:?}"
            );
            assert_eq!(g.hist.len(), w.hist.len());
            let (wc, gc) = (w.corrected.as_ref().unwrap(), g.corrected.as_ref().unwrap());
            assert_eq!(
                (gc.total_ns, gc.self_ns, gc.probe_ns, gc.probe_hits),
                (wc.total_ns, wc.self_ns, wc.probe_ns, wc.probe_hits),
                "{path:?}"
            );
            assert_eq!(gc.hist.len(), wc.hist.len());
            for q in [0.5, 0.9, 0.99, 1.0] {
                for (what, w, g) in [("raw", &w.hist, &g.hist), ("corrected", &wc.hist, &gc.hist)] {
                    let (w, g) = (w.value_at_quantile(q) as f64, g.value_at_quantile(q) as f64);
                    assert!(
                        (g - w).abs() <= w * 0.01,
                        "{path:?} {what} q{q}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn kernel_summaries_without_correction_leave_corrected_out() {
        let mut a = Aggregator::new();
        a.add(&def(1, 0, 0));
        let spans = [span(1, 0, 1_000, 0), span(1, 0, 3_000, 0)];
        let (nodes, buckets) = kernel_fold(&spans, &[0]);
        a.add_kernel_summaries(&nodes, &buckets);
        // A span that came before the mode was switched on adds up with the summaries.
        a.add(&span(1, 0, 2_000, 0));
        let t = a.finish(&["w".into()], &[None], &EndCounters::default());
        let w = &t.roots[0];
        assert_eq!((w.count, w.total_ns, w.hist.len()), (3, 6_000, 3));
        assert!(w.corrected.is_none());
        let p50 = w.hist.value_at_quantile(0.5) as f64;
        assert!((p50 - 2_000.0).abs() <= 20.0, "{p50}");
    }

    #[test]
    fn per_pid_trees_hold_only_what_each_process_reached() {
        let names: Vec<String> = vec!["r".into(), "a".into(), "b".into()];
        let mut a = Aggregator::new();
        a.track_per_pid();
        a.add(&def(1, 0, 0));
        a.add(&def(2, 1, 1));
        a.add(&def(3, 1, 2));
        let at = |pid: u32, node: u64, phase: u32, dur: u64| Event {
            pid,
            ..span(node, phase, dur, 0)
        };
        a.add(&at(10, 2, 1, 5));
        a.add(&at(10, 1, 0, 20));
        a.add(&at(20, 3, 2, 7));
        a.add(&at(20, 3, 2, 7));
        a.add(&at(20, 1, 0, 30));
        a.add(&Event {
            kind: EventKind::Fork as u32,
            pid: 20,
            tid: 1,
            ..Event::default()
        });
        assert_eq!(a.take_forks(), vec![(20, 1)]);
        assert!(a.take_forks().is_empty());
        let mut pids = a.pids();
        pids.sort();
        assert_eq!(pids, vec![10, 20]);
        let roles = [None, None, None];
        let (merged, _, _, procs) = a.finish_all(&names, &roles, &EndCounters::default());
        assert_eq!(merged.find(&["r"]).unwrap().count, 2);
        assert_eq!(procs.iter().map(|p| p.pid).collect::<Vec<_>>(), [10, 20]);
        let (t10, t20) = (&procs[0].tree, &procs[1].tree);
        assert_eq!(t10.find(&["r", "a"]).unwrap().count, 1);
        assert!(t10.find(&["r", "b"]).is_none(), "pid 10 never reached b");
        assert_eq!(t20.find(&["r", "b"]).unwrap().count, 2);
        assert_eq!(t20.find(&["r"]).unwrap().total_ns, 30);
        assert!(t20.find(&["r", "a"]).is_none());
    }
}
