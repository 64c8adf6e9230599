//! Building the phase tree from node definitions and spans.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use nohash_hasher::NoHashHasher;
use wprof_common::{hist_bucket_mid, Event, EventKind, HistKey, NodeSummary};

use super::build::{sort_by_total, Builder};
use super::calls::CallRecorder;
use super::split::Splitter;
use crate::model::{
    keyed_name, new_histogram, CallTable, LatencyHistogram, NodeSnapshot, PhaseTree, ProcessTree,
    SpanLog, SplitTrees, TreeNode, UnitSpec, MAX_HELD_SPANS,
};

/// Node hashes are already mixed in BPF (splitmix64), so hashing them again is wasted work on
/// the per-event path.
pub(super) type NodeMap<V> = HashMap<u64, V, BuildHasherDefault<NoHashHasher<u64>>>;

#[derive(Debug, Clone, Copy)]
pub(super) struct NodeDef {
    pub(super) parent: u64,
    pub(super) phase: u32,
}

#[derive(Debug, Clone)]
pub(super) struct NodeStats {
    pub(super) count: u64,
    pub(super) total_ns: u64,
    pub(super) self_ns: u64,
    pub(super) off_ns: u64,
    /// The part of `off_ns` the threads left the CPU runnable (preempted).
    pub(super) preempted_ns: u64,
    /// Calls that never left the CPU, and their time: what a call of the node usually runs.
    pub(super) on_cpu_calls: u64,
    pub(super) on_cpu_ns: u64,
    /// Sum of the captured argument (or return value) over the calls.
    pub(super) arg_sum: u64,
    pub(super) hist: LatencyHistogram,
    /// Durations with the probes' time taken out, call by call (when costs are known).
    pub(super) corrected: Option<CorrectedStats>,
}

/// A node's figures with the probe time taken out of every call.
#[derive(Debug, Clone)]
pub(super) struct CorrectedStats {
    pub(super) total_ns: u64,
    /// Probe time removed, ns.
    pub(super) probe_ns: u64,
    /// The probes' share of the preempted time, also removed, ns.
    pub(super) preempted_ns: u64,
    /// The part of it spent waiting for wprof's own threads.
    pub(super) wprof_ns: u64,
    /// Probe hits inside the calls' windows (their own entry and return, and every
    /// descendant's).
    pub(super) probe_hits: u64,
    pub(super) hist: LatencyHistogram,
}

impl CorrectedStats {
    fn new() -> CorrectedStats {
        CorrectedStats {
            total_ns: 0,
            probe_ns: 0,
            preempted_ns: 0,
            wprof_ns: 0,
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
            preempted_ns: 0,
            on_cpu_calls: 0,
            on_cpu_ns: 0,
            arg_sum: 0,
            hist: new_histogram(),
            corrected: None,
        }
    }
}

impl NodeStats {
    /// Adds one completed call; `own_ns[phase id]` is the part of each phase's own probe cost
    /// that falls inside its window, None when the run does not correct; `theirs` the part of
    /// its preempted time that is the probes' doing ([`super::preempted::Carry`]), taken out
    /// with them. In-kernel aggregation does the same arithmetic in BPF (probes/ebpf
    /// `aggregate_call`, without the preempted part): keep the two in step.
    #[inline]
    pub(super) fn add(&mut self, ev: &Event, own_ns: Option<&[u64]>, theirs: u64) {
        self.count += 1;
        self.total_ns += ev.dur_ns;
        self.self_ns += ev.dur_ns.saturating_sub(ev.child_ns);
        self.off_ns += ev.off_ns;
        self.preempted_ns += ev.preempted_ns;
        if ev.off_ns == 0 {
            self.on_cpu_calls += 1;
            self.on_cpu_ns += ev.dur_ns;
        }
        self.arg_sum = self.arg_sum.saturating_add(ev.arg);
        self.hist.saturating_record(ev.dur_ns.max(1));
        if let Some(own) = own_ns.map(|o| o.get(ev.phase as usize).copied().unwrap_or(0)) {
            let removed = removed_ns(ev, own);
            let theirs = theirs.min(ev.dur_ns - removed);
            let kept = ev.dur_ns - removed - theirs;
            let c = self.corrected.get_or_insert_with(CorrectedStats::new);
            c.preempted_ns += theirs;
            c.wprof_ns += ev.wprof_ns.min(theirs);
            c.total_ns += kept;
            c.probe_ns += removed;
            c.probe_hits += ev.desc_hits as u64 + 2;
            c.hist.saturating_record(kept.max(1));
        }
    }

    /// The node's mean call among those that never left the CPU so far, once there are
    /// enough of them to say (`preempted::Carry`).
    pub(super) fn usual_on_cpu(&self) -> Option<u64> {
        (self.on_cpu_calls >= 16).then(|| self.on_cpu_ns / self.on_cpu_calls)
    }
}

/// The probe time inside call `ev`'s window, ns: its own probes' part `own` and all of its
/// descendants', at most the call.
#[inline]
fn removed_ns(ev: &Event, own: u64) -> u64 {
    (own + ev.desc_probe_ns).min(ev.dur_ns)
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
    /// Whether preempted time is tracked (nodes then carry `preempted_ns`, and the correction
    /// takes the probes' share of it out): with off-CPU time, or alone.
    preemption: bool,
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
    /// The in-situ check's light epochs (`--in-situ`): calls at or above an epoch's cut that
    /// began in one are kept there, not in the tree.
    light: Option<super::insitu::LightEpochs>,
    /// The probes' share of each preemption, decided once per preemption.
    carry: super::preempted::Carry,
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
            let own_ns = self.own_probe_ns.as_deref();
            let own = own_ns
                .and_then(|o| o.get(ev.phase as usize).copied())
                .unwrap_or(0);
            // Preempted time is known only where sched_switch is followed.
            let theirs = match own_ns {
                Some(_) if self.preemption => {
                    let stats = &self.stats;
                    self.carry.taken(ev, removed_ns(ev, own), || {
                        stats.get(&ev.node).and_then(NodeStats::usual_on_cpu)
                    })
                }
                _ => 0,
            };
            if let Some(l) = self.light.as_mut() {
                if l.take(ev, own, theirs) {
                    return;
                }
            }
            if let Some(c) = &mut self.calls {
                c.span(ev, self.nested_same.get(&ev.node).copied().unwrap_or(false));
            }
            if let Some(s) = &mut self.split {
                s.span(ev, own_ns, theirs);
            }
            self.stats
                .entry(ev.node)
                .or_default()
                .add(ev, own_ns, theirs);
            if let Some(p) = &mut self.per_pid {
                p.entry(ev.pid)
                    .or_default()
                    .entry(ev.node)
                    .or_default()
                    .add(ev, own_ns, theirs);
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
            s.preempted_ns += k.preempted_ns;
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
        self.preemption = true;
    }

    /// Marks the run as tracking preempted time alone (sched_switch without stacks): every
    /// node gets `preempted_ns`, and the correction takes the probes' share of it out.
    pub fn track_preemption(&mut self) {
        self.preemption = true;
    }

    /// Keeps the program's own preemptions only at the odds `baseline` (the threads' wait
    /// for a CPU before the probes went live) gives them (`preempted::Carry`).
    pub fn set_wait_baseline(&mut self, baseline: super::preempted::WaitBaseline) {
        self.carry.set_baseline(baseline);
    }

    /// The root calls' time on the CPU and preempted time (wprof's threads' share aside) of
    /// the threads a wait baseline covers; None without one.
    pub fn traced_wait(&self) -> Option<super::preempted::ThreadWait> {
        self.carry.traced_wait()
    }

    /// `node` and its ancestors up to its root, innermost first, as far as their definitions
    /// arrived (bounded by the BPF stack depth).
    fn ancestry(&self, node: u64) -> impl Iterator<Item = (u64, &NodeDef)> {
        let mut at = node;
        std::iter::from_fn(move || {
            let d = self.defs.get(&at)?;
            let here = at;
            at = d.parent;
            Some((here, d))
        })
        .take(wprof_common::MAX_DEPTH + 1)
    }

    /// The phase names from the root down to `node` (empty if the node is unknown).
    pub fn path_of<'n>(&self, node: u64, names: &'n [String]) -> Vec<Cow<'n, str>> {
        let mut parts: Vec<Cow<'n, str>> = self
            .ancestry(node)
            .map(|(n, d)| {
                let name = names.get(d.phase as usize).map_or("?", String::as_str);
                match self.keys.get(&n) {
                    Some(k) => Cow::Owned(keyed_name(name, k)),
                    None => Cow::Borrowed(name),
                }
            })
            .collect();
        parts.reverse();
        parts
    }

    /// The tree's shape so far by phase: per (parent phase, phase) edge, None for a root,
    /// the calls completed there (which phases `--max-overhead` may move to sampling:
    /// leaves, not roots).
    pub fn phase_edges(&self) -> HashMap<(Option<u32>, u32), u64> {
        self.phase_edges_with(&HashMap::new())
    }

    /// [`Aggregator::phase_edges`], with `more` calls per node on top of those read so far:
    /// an in-kernel run's counts, which reach the aggregator only at its end.
    pub fn phase_edges_with(&self, more: &HashMap<u64, u64>) -> HashMap<(Option<u32>, u32), u64> {
        let mut edges = HashMap::new();
        for (node, d) in self.defs.iter() {
            let calls =
                self.stats.get(node).map_or(0, |s| s.count) + more.get(node).copied().unwrap_or(0);
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

    /// Takes the light epochs' calls out, by tree path (before the tree is finished).
    pub fn take_light_epochs(&mut self) -> Option<super::insitu::LightPaths> {
        let light = self.light.take()?;
        Some(light.into_paths(|node| self.phase_path(node)))
    }

    /// A node's phase ids from its root down; None unless every definition up to the root
    /// arrived.
    fn phase_path(&self, node: u64) -> Option<Vec<u32>> {
        let chain: Vec<&NodeDef> = self.ancestry(node).map(|(_, d)| d).collect();
        (chain.last()?.parent == 0).then(|| chain.iter().rev().map(|d| d.phase).collect())
    }

    /// The tree's shape so far, node by node (what the in-situ check's cuts are planned on).
    pub fn node_shape(&self) -> Vec<super::insitu_cuts::ShapeNode> {
        self.defs
            .iter()
            .map(|(node, d)| super::insitu_cuts::ShapeNode {
                node: *node,
                parent: d.parent,
                depth: self.ancestry(*node).count().saturating_sub(1) as u32,
                phase: d.phase,
                calls: self.stats.get(node).map_or(0, |s| s.count),
            })
            .collect()
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
    fn has_ancestor_phase(&self, node: u64, phase: u32) -> bool {
        self.ancestry(node).any(|(_, d)| d.phase == phase)
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
            preemption: self.preemption,
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
        mut self,
        names: &[String],
        roles: &[Option<String>],
        end: &EndCounters,
    ) -> PhaseTree {
        let (children, roots) = self.shape();
        let mut stats = std::mem::take(&mut self.stats);
        let orphan_spans = stats
            .iter()
            .filter(|(n, _)| !self.defs.contains_key(n))
            .map(|(_, s)| s.count)
            .sum();
        let build = self.builder(&children, names, roles, end);
        let mut roots: Vec<TreeNode> = roots
            .into_iter()
            .map(|n| build.node(n, &mut stats))
            .collect();
        sort_by_total(&mut roots);
        PhaseTree {
            roots,
            orphan_spans,
            events: self.events,
        }
    }
}

#[path = "live.rs"]
mod live;
pub use live::LiveNode;

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
