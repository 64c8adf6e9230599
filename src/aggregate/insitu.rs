//! The in-situ check (`--in-situ`): how much the probes of a node's descendants cost inside
//! the real calls, against what the calibration (empty functions, another process) said.
//!
//! During short "light" epochs the probes are live only down to one depth of the tree (a
//! [`Cut`]: the roots, then the roots' children, and so on in turn). A call at the cut that
//! began in one runs with no descendant probe, so (once its own probe's share inside its window
//! is taken out) its mean is the node's time without them. In the full epochs the same node's
//! raw mean minus its own probe share minus the light mean is what the descendants' probes
//! really added per call; the calibration's figure for it is the descendant probe time the
//! correction took out. Their ratio scales that correction at the node, and under it down to
//! the next node with a check of its own.
//!
//! In: spans tagged by epoch (the session says when each light epoch began and ended, and its
//! cut). Out: per parent node an [`InSituCheck`], applied to the tree by [`apply`].

use std::collections::{BTreeMap, HashMap};

use wprof_common::Event;

use super::insitu_cuts::Cut;
use crate::model::{
    map_histogram, new_histogram, InSituCheck, LatencyHistogram, PhaseTree, TreeNode,
};

/// Light-epoch calls of a node needed before the check says anything.
pub const MIN_LIGHT_CALLS: u64 = 30;

/// One light epoch: [start, end) in CLOCK_MONOTONIC ns (end `u64::MAX` while it lasts), its
/// cut's depth and the phases whose calls at that depth are clean.
#[derive(Debug, Clone)]
struct Window {
    start: u64,
    end: u64,
    depth: u32,
    clean: Vec<u32>,
}

/// The light epochs of a run and the calls that began in them, by tree node.
#[derive(Debug, Default)]
pub struct LightEpochs {
    /// In order; the last one may still be open.
    windows: Vec<Window>,
    /// Per node: its calls made with no descendant probe live.
    clean: HashMap<u64, LightCalls>,
    /// Per node: its calls that began in a light epoch and are kept out of the tree.
    kept_out: HashMap<u64, u64>,
}

/// Calls made with no descendant probe live.
#[derive(Debug, Clone)]
pub struct LightCalls {
    /// Calls.
    pub count: u64,
    /// Their durations with the node's own probe share taken out, ns.
    pub hist: LatencyHistogram,
    /// Sum of those durations, ns.
    pub total_ns: u64,
    /// Sum of the same durations with all of their preempted time out, ns, and of their
    /// squares: what the check compares (see [`check`]).
    pub unpreempted_ns: u64,
    unpreempted_sq: f64,
}

impl LightCalls {
    fn new() -> LightCalls {
        LightCalls {
            count: 0,
            hist: new_histogram(),
            total_ns: 0,
            unpreempted_ns: 0,
            unpreempted_sq: 0.0,
        }
    }

    /// One call: its duration as the tree would take it, and without its preempted time.
    fn record(&mut self, d: u64, unpreempted: u64) {
        self.count += 1;
        self.total_ns += d;
        self.hist.saturating_record(d);
        self.unpreempted_ns += unpreempted;
        self.unpreempted_sq += (unpreempted as f64).powi(2);
    }

    fn merge(&mut self, other: &LightCalls) {
        self.count += other.count;
        self.total_ns += other.total_ns;
        self.unpreempted_ns += other.unpreempted_ns;
        self.unpreempted_sq += other.unpreempted_sq;
        // Same bounds on both sides: adding cannot fail but for a saturated count.
        let _ = self.hist.add(&other.hist);
    }
}

/// The light epochs' calls by tree path (the phase ids from the root down), once the run
/// ended: what [`check`] and [`apply`] read.
#[derive(Debug, Default)]
pub struct LightPaths {
    /// Per path: the calls measured with no descendant probe live.
    pub clean: HashMap<Vec<u32>, LightCalls>,
    /// Per path: the calls that began in a light epoch and are not in the tree.
    pub kept_out: HashMap<Vec<u32>, u64>,
}

impl LightEpochs {
    /// A light epoch begins (`at`: CLOCK_MONOTONIC ns, after `cut`'s probes came off).
    pub fn begin(&mut self, at: u64, cut: &Cut) {
        self.end(at);
        self.windows.push(Window {
            start: at,
            end: u64::MAX,
            depth: cut.depth,
            clean: cut.clean.clone(),
        });
    }

    /// Probes are coming off or going back from `at`: until the next epoch begins (or
    /// [`LightEpochs::end`]), every call is kept out of the tree (its descendants' probes
    /// partly live, partly not: neither a full call nor a light one).
    pub fn begin_transition(&mut self, at: u64) {
        self.end(at);
        self.windows.push(Window {
            start: at,
            end: u64::MAX,
            depth: u32::MAX,
            clean: Vec::new(),
        });
    }

    /// The light epoch (or transition) ends.
    pub fn end(&mut self, at: u64) {
        if let Some(w) = self.windows.last_mut().filter(|w| w.end == u64::MAX) {
            w.end = at;
        }
    }

    fn window_of(&self, start_ns: u64) -> Option<&Window> {
        let i = self.windows.partition_point(|w| w.start <= start_ns);
        let w = self.windows.get(i.checked_sub(1)?)?;
        (start_ns < w.end).then_some(w)
    }

    /// Takes a span that began in a light epoch at or above its cut out of the tree (a call
    /// at the cut whose phase is clean there is kept as a light call, its phase's probe share
    /// inside its own window, `own_ns`, and its probes' share of its preemptions, `theirs`,
    /// taken out); false for any other span, which goes to the tree.
    pub fn take(&mut self, ev: &Event, own_ns: u64, theirs: u64) -> bool {
        let Some(w) = self.window_of(ev.start_ns) else {
            return false;
        };
        if ev.depth > w.depth {
            return false;
        }
        if ev.depth == w.depth && w.clean.contains(&ev.phase) {
            // Its own probes' share of its preemptions goes too, as in the tree
            // (`NodeStats::add`): the check then compares like with like.
            let d = ev
                .dur_ns
                .saturating_sub(own_ns)
                .saturating_sub(theirs)
                .max(1);
            let unpreempted = ev
                .dur_ns
                .saturating_sub(own_ns)
                .saturating_sub(ev.preempted_ns)
                .max(1);
            self.clean
                .entry(ev.node)
                .or_insert_with(LightCalls::new)
                .record(d, unpreempted);
        }
        *self.kept_out.entry(ev.node).or_default() += 1;
        true
    }

    /// Light epochs so far.
    pub fn epochs(&self) -> usize {
        self.windows.len()
    }

    /// The calls by path; `path_of` gives a node's phase ids from its root (None for a node
    /// never defined: its calls are dropped).
    pub fn into_paths(self, path_of: impl Fn(u64) -> Option<Vec<u32>>) -> LightPaths {
        let mut out = LightPaths::default();
        for (node, calls) in &self.clean {
            if let Some(p) = path_of(*node) {
                out.clean
                    .entry(p)
                    .or_insert_with(LightCalls::new)
                    .merge(calls);
            }
        }
        for (node, n) in &self.kept_out {
            if let Some(p) = path_of(*node) {
                *out.kept_out.entry(p).or_default() += n;
            }
        }
        out
    }
}

/// The tree's nodes with probed children, by path of phase ids (group_by siblings together).
fn parents(tree: &PhaseTree) -> BTreeMap<Vec<u32>, Vec<&TreeNode>> {
    fn walk<'a>(
        n: &'a TreeNode,
        path: &mut Vec<u32>,
        out: &mut BTreeMap<Vec<u32>, Vec<&'a TreeNode>>,
    ) {
        path.push(n.phase);
        if n.children.iter().any(|c| c.sampled.is_none()) {
            out.entry(path.clone()).or_default().push(n);
        }
        for c in &n.children {
            walk(c, path, out);
        }
        path.pop();
    }
    let mut out = BTreeMap::new();
    for r in &tree.roots {
        walk(r, &mut Vec::new(), &mut out);
    }
    out
}

/// The check for each parent node with enough light calls: `own_ns[phase]` is each phase's
/// probe share inside its own window.
pub fn check(
    tree: &PhaseTree,
    light: &LightPaths,
    own_ns: &[u64],
    names: &[String],
) -> Vec<InSituCheck> {
    let mut out = Vec::new();
    for (path, nodes) in parents(tree) {
        let Some(l) = light.clean.get(&path) else {
            continue;
        };
        let phase = *path.last().unwrap_or(&0);
        let full_calls: u64 = nodes.iter().map(|r| r.count).sum();
        if l.count < MIN_LIGHT_CALLS || full_calls < MIN_LIGHT_CALLS {
            continue;
        }
        let own = own_ns.get(phase as usize).copied().unwrap_or(0) as f64;
        let raw: u64 = nodes.iter().map(|r| r.total_ns).sum();
        let removed: u64 = nodes
            .iter()
            .map(|r| r.corrected.as_ref().map_or(0, |c| c.probe_ns))
            .sum();
        // Every preempted ns is out of both means. A preemption comes whole (a time slice of
        // ms) to a few calls: a light epoch's ~15,000 db_bench writes had 23 preempted, 4 ms
        // each, and the draw that keeps the program's own share of them kept a few whole,
        // moving the light mean by 0.3 µs each (benchmarks §41). The probes' cost is
        // measured on what the calls ran.
        let preempted: u64 = nodes.iter().map(|r| r.preempted_ns.unwrap_or(0)).sum();
        let n = full_calls as f64;
        let full_mean = raw.saturating_sub(preempted) as f64 / n - own;
        let calibrated = (removed as f64 / n - own).max(0.0);
        let light_mean = l.unpreempted_ns as f64 / l.count as f64;
        let in_situ = full_mean - light_mean;
        let sd_full = nodes
            .iter()
            .map(|r| unpreempted_sd(&r.hist))
            .fold(0.0, f64::max);
        let sd_light = (l.unpreempted_sq / l.count as f64 - light_mean.powi(2))
            .max(0.0)
            .sqrt();
        let error = (sd_full.powi(2) / n + sd_light.powi(2) / l.count as f64).sqrt();
        // Light calls no faster than full ones say nothing of the probes (a population that
        // changed between the epochs: a compaction's calls, say): no scaling then.
        let factor =
            if calibrated > 0.0 && in_situ > 0.0 && (in_situ - calibrated).abs() > 2.0 * error {
                (in_situ / calibrated).max(0.0)
            } else {
                1.0
            };
        // The descendants' hits a call (entries and returns): the node's own two come off.
        let hits: u64 = nodes
            .iter()
            .filter_map(|r| Some(r.corrected.as_ref()?.probe_hits.saturating_sub(2 * r.count)))
            .sum();
        let hits_per_call = hits as f64 / n;
        let excess_per_hit = if factor != 1.0 && hits_per_call > 0.0 {
            (in_situ - calibrated) / hits_per_call
        } else {
            0.0
        };
        let name_of = |p: u32| names.get(p as usize).cloned().unwrap_or_default();
        out.push(InSituCheck {
            phase,
            name: name_of(phase),
            path: path.iter().map(|&p| name_of(p)).collect(),
            light_calls: l.count,
            kept_out: light.kept_out.get(&path).copied().unwrap_or(0),
            light_mean_ns: light_mean,
            full_calls,
            full_mean_ns: full_mean,
            calibrated_ns: calibrated,
            in_situ_ns: in_situ,
            error_ns: error,
            factor,
            excess_per_hit_ns: excess_per_hit,
            children_fitted: None,
        });
    }
    out
}

/// The spread of a node's calls without their preemptions, from its raw histogram: the
/// standard deviation of the calls up to its 99.9th percentile. The histogram holds each
/// preempted call with its whole wait, and those few lumps of ms would make the error bar
/// theirs, where the means compared hold no preempted time.
fn unpreempted_sd(hist: &LatencyHistogram) -> f64 {
    let top = hist.value_at_quantile(0.999);
    let (mut n, mut sum, mut sq) = (0.0, 0.0, 0.0);
    for v in hist.iter_recorded() {
        if v.value_iterated_to() > top {
            break;
        }
        let (x, c) = (v.value_iterated_to() as f64, v.count_at_value() as f64);
        n += c;
        sum += c * x;
        sq += c * x * x;
    }
    if n < 2.0 {
        return hist.stdev();
    }
    let mean = sum / n;
    (sq / n - mean * mean).max(0.0).sqrt()
}

/// Scales the descendant part of every corrected node by the factor of its own check, or of
/// its nearest ancestor's: a node's probe time taken out becomes its own probes' share plus
/// `factor` × the rest, and self times follow. A checked node that is alone on its path (no
/// group_by siblings) takes the light calls' distribution as its corrected histogram: the
/// in-situ figure is a mean, and shifting every call by it would push the short ones below
/// zero. Other nodes keep their histograms.
///
/// Each check comes from its own light epochs, and the program changes between them (a
/// memtable fills, a flush runs), so checks at two depths can disagree: children corrected by
/// theirs may add up to more than their checked parent leaves them, and a node that takes a
/// large factor from its ancestor can be left with less than its children. A node corrected
/// by a check keeps its own time, and its self time at least its raw self time less the probe
/// time in it; its children's subtrees are scaled down to fit the rest, keeping their shares,
/// and the check says by how much (`children_fitted`, the smallest ratio under it).
pub fn apply(tree: &mut PhaseTree, checks: &mut [InSituCheck], own_ns: &[u64], light: &LightPaths) {
    if !checks.iter().any(InSituCheck::applied) {
        return;
    }
    let counts: HashMap<Vec<u32>, usize> = parents(tree)
        .into_iter()
        .map(|(p, nodes)| (p, nodes.len()))
        .collect();
    let by_path: HashMap<&[String], &InSituCheck> =
        checks.iter().map(|c| (c.path.as_slice(), c)).collect();
    let ctx = Apply {
        by_path,
        counts,
        own_ns,
        light,
    };
    let mut fitted = Vec::new();
    for root in &mut tree.roots {
        ctx.node(root, &mut Vec::new(), &mut Vec::new(), None, &mut fitted);
    }
    for (path, ratio) in fitted {
        if let Some(c) = checks.iter_mut().find(|c| c.path == path) {
            c.children_fitted = Some(c.children_fitted.map_or(ratio, |r| r.min(ratio)));
        }
    }
}

struct Apply<'a> {
    by_path: HashMap<&'a [String], &'a InSituCheck>,
    counts: HashMap<Vec<u32>, usize>,
    own_ns: &'a [u64],
    light: &'a LightPaths,
}

impl<'a> Apply<'a> {
    /// Corrects `n` and its subtree by its own check, or by `inherited`, its nearest
    /// checked ancestor's; `fitted` gets, for each node whose children were scaled to fit,
    /// the path of the check whose factor it was corrected by, and the ratio.
    fn node(
        &self,
        n: &mut TreeNode,
        ids: &mut Vec<u32>,
        names: &mut Vec<String>,
        inherited: Option<&'a InSituCheck>,
        fitted: &mut Vec<(Vec<String>, f64)>,
    ) {
        ids.push(n.phase);
        names.push(n.name.clone());
        let check = self.by_path.get(names.as_slice()).copied();
        let source = check.or(inherited);
        let factor = source.map_or(1.0, |c| c.factor);
        let excess = source.map_or(0.0, |c| c.excess_per_hit_ns);
        // Its own entry's aftermath lies in its self time, before its first child.
        let in_self = self_probe_ns(n) as f64 * factor + n.count as f64 * excess;
        for c in &mut n.children {
            self.node(c, ids, names, source, fitted);
        }
        scale(n, factor, excess, self.own_ns);
        // Fitted wherever a check's factor corrects: a node that inherits a large one can be
        // left with less than its children as well as a checked one.
        if let (Some(src), Some(ratio)) = (source, fit_children(n, in_self.round() as u64)) {
            fitted.push((src.path.clone(), ratio));
        }
        let single = self.counts.get(ids.as_slice()) == Some(&1);
        if let (Some(_), true, Some(l), Some(corr)) = (
            check.filter(|c| c.applied()),
            single,
            self.light.clean.get(ids.as_slice()),
            n.corrected.as_mut(),
        ) {
            // The light calls ran with the node's own entry: each loses its aftermath.
            corr.hist = map_histogram(&l.hist, |v| (v as f64 - excess).round().max(1.0) as u64);
        }
        ids.pop();
        names.pop();
    }
}

/// The calibrated probe time inside `n`'s self time, ns: its own probes' share inside its
/// window and its children's probes' parts outside theirs (before their entries, after their
/// returns), i.e. what it took out less what its children took out. Read before any scaling.
fn self_probe_ns(n: &TreeNode) -> u64 {
    let Some(c) = n.corrected.as_ref() else {
        return 0;
    };
    let kids: u64 = n
        .probed_children()
        .filter_map(|k| k.corrected.as_ref())
        .map(|k| k.probe_ns)
        .sum();
    c.probe_ns.saturating_sub(kids)
}

/// Scales `n`'s children's corrected subtrees down when they add up to more than `n` leaves
/// them: its corrected time less its raw self time net of `in_self`, the probe time inside
/// it. Returns the ratio, None when they fit.
fn fit_children(n: &mut TreeNode, in_self: u64) -> Option<f64> {
    let kids: u64 = n.probed_children().map(TreeNode::corrected_total_ns).sum();
    let raw_kids: u64 = n.probed_children().map(|k| k.total_ns).sum();
    let own_self = n.total_ns.saturating_sub(raw_kids).saturating_sub(in_self);
    let total = n.corrected.as_ref()?.total_ns;
    let room = total.saturating_sub(own_self);
    // Within a thousandth (rounding), they fit.
    if kids as f64 <= room as f64 * 1.001 || kids == 0 {
        return None;
    }
    let ratio = room as f64 / kids as f64;
    for k in n.children.iter_mut().filter(|k| k.sampled.is_none()) {
        shrink(k, ratio);
    }
    let kids: u64 = n.probed_children().map(TreeNode::corrected_total_ns).sum();
    if let Some(c) = n.corrected.as_mut() {
        c.self_ns = c.total_ns.saturating_sub(kids);
    }
    Some(ratio)
}

/// Multiplies the corrected times of `n` and its subtree by `ratio` (< 1): totals, self
/// times, histograms; the probe time taken out grows to match.
fn shrink(n: &mut TreeNode, ratio: f64) {
    for k in &mut n.children {
        shrink(k, ratio);
    }
    let raw = n.total_ns;
    let Some(c) = n.corrected.as_mut() else {
        return;
    };
    c.total_ns = (c.total_ns as f64 * ratio).round() as u64;
    c.self_ns = (c.self_ns as f64 * ratio).round() as u64;
    c.probe_ns = raw.saturating_sub(c.total_ns);
    c.hist = map_histogram(&c.hist, |v| (v as f64 * ratio).round() as u64);
}

/// Corrects `n` by a check: its own probes' share, `factor` × the descendant probe time the
/// calibration took out, and `excess` ns a call for its own entry's aftermath.
fn scale(n: &mut TreeNode, factor: f64, excess: f64, own_ns: &[u64]) {
    let own = own_ns.get(n.phase as usize).copied().unwrap_or(0);
    let kids: u64 = n.children.iter().map(TreeNode::corrected_total_ns).sum();
    let (count, raw) = (n.count, n.total_ns);
    let Some(c) = n.corrected.as_mut() else {
        return;
    };
    if count == 0 {
        return;
    }
    let own_part = own.saturating_mul(count).min(c.probe_ns);
    let desc = (c.probe_ns - own_part) as f64;
    let on_cpu = raw.saturating_sub(c.preempted_ns);
    let probe = (own_part as f64 + desc * factor + count as f64 * excess)
        .round()
        .clamp(0.0, on_cpu as f64) as u64;
    c.probe_ns = probe;
    c.total_ns = on_cpu - probe;
    c.self_ns = c.total_ns.saturating_sub(kids);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(phase: u32, node: u64, depth: u32, start: u64, dur: u64) -> Event {
        Event {
            phase,
            node,
            depth,
            start_ns: start,
            dur_ns: dur,
            ..Event::default()
        }
    }

    fn cut(depth: u32, clean: &[u32]) -> Cut {
        Cut {
            depth,
            detach: Vec::new(),
            clean: clean.to_vec(),
        }
    }

    #[test]
    fn epochs_keep_the_calls_at_and_above_their_cut_out_of_the_tree() {
        let mut l = LightEpochs::default();
        // Cut 1 from 100 to 200: phase 1 (node 11, depth 1) is clean, phase 2 is not.
        l.begin(100, &cut(1, &[1]));
        l.end(200);
        l.begin(300, &cut(0, &[0]));
        l.end(400);
        assert!(!l.take(&span(0, 10, 0, 50, 9), 0, 0), "before any epoch");
        assert!(
            l.take(&span(0, 10, 0, 150, 9), 0, 0),
            "a root above the cut"
        );
        assert!(l.take(&span(1, 11, 1, 160, 9), 2, 0), "clean at the cut");
        assert!(
            l.take(&span(2, 12, 1, 170, 9), 0, 0),
            "at the cut, not clean"
        );
        assert!(
            !l.take(&span(3, 13, 2, 180, 9), 0, 0),
            "below the cut: tree"
        );
        assert!(!l.take(&span(0, 10, 0, 250, 9), 0, 0), "between epochs");
        assert!(l.take(&span(0, 10, 0, 350, 9), 1, 0), "clean root");
        assert!(!l.take(&span(0, 10, 0, 400, 9), 1, 0), "the end is not in");
        assert_eq!(l.epochs(), 2);
        // A transition keeps every call out, clean at no depth.
        l.begin_transition(500);
        assert!(l.take(&span(3, 13, 5, 510, 9), 0, 0), "any depth");
        l.end(600);
        assert!(!l.take(&span(3, 13, 5, 610, 9), 0, 0));
        let paths = l.into_paths(|node| match node {
            10 => Some(vec![0]),
            11 => Some(vec![0, 1]),
            12 => Some(vec![0, 2]),
            _ => None,
        });
        assert_eq!(paths.kept_out[&vec![0]], 2);
        assert_eq!(paths.kept_out[&vec![0, 1]], 1);
        assert_eq!(paths.kept_out[&vec![0, 2]], 1);
        assert!(
            !paths.kept_out.contains_key(&vec![0, 3]),
            "node 13 has no path"
        );
        assert_eq!(paths.clean[&vec![0]].count, 1);
        assert_eq!(paths.clean[&vec![0]].total_ns, 8);
        assert_eq!(paths.clean[&vec![0, 1]].total_ns, 7);
        assert!(!paths.clean.contains_key(&vec![0, 2]));
    }

    fn node(phase: u32, name: &str, count: u64, raw_mean: u64, removed: u64) -> TreeNode {
        let mut n = TreeNode::empty(phase, name.into(), None);
        n.count = count;
        n.total_ns = count * raw_mean;
        let mut hist = new_histogram();
        let mut chist = new_histogram();
        for i in 0..count {
            let v = raw_mean - 50 + (i % 100);
            hist.saturating_record(v);
            chist.saturating_record(v - removed);
        }
        n.hist = hist;
        n.corrected = Some(crate::model::Corrected {
            total_ns: count * (raw_mean - removed),
            self_ns: count * (raw_mean - removed),
            probe_ns: count * removed,
            probe_hits: count * 2,
            error_ns: 0,
            preempted_ns: 0,
            wprof_ns: 0,
            hist: chist,
        });
        n
    }

    /// Sets every node's probe hits to those inside its calls: its own two a call and its
    /// descendants'.
    fn with_hits(mut tree: PhaseTree) -> PhaseTree {
        fn hits(n: &mut TreeNode) -> u64 {
            let kids: u64 = n.children.iter_mut().map(hits).sum();
            let c = n.corrected.as_mut().unwrap();
            c.probe_hits = 2 * n.count + kids;
            c.probe_hits
        }
        tree.roots.iter_mut().for_each(|r| {
            hits(r);
        });
        tree
    }

    fn light(paths: &[(Vec<u32>, u64, u64)]) -> LightPaths {
        let mut out = LightPaths::default();
        for (path, calls, mean) in paths {
            let mut c = LightCalls::new();
            for i in 0..*calls {
                let d = mean - 50 + (i % 100);
                c.record(d, d);
            }
            out.clean.insert(path.clone(), c);
            out.kept_out.insert(path.clone(), *calls);
        }
        out
    }

    fn names() -> Vec<String> {
        vec!["write".into(), "wal".into(), "sync".into()]
    }

    #[test]
    fn descendants_costing_more_in_situ_scale_the_correction() {
        // Full calls: 20 µs raw, the calibration took out 1 µs own + 3 µs of descendants.
        // Light calls: 12 µs once the own 1 µs is out. So descendants really cost
        // 20 - 1 - 12 = 7 µs a call, not 3: factor 7/3. Over wal's two hits a call, a hit
        // cost 2 µs beyond its price, and the root's own entry loses that too.
        let mut root = node(0, "write", 1000, 20_000, 4_000);
        root.children.push(node(1, "wal", 1000, 5_000, 1_000));
        let mut tree = with_hits(PhaseTree {
            roots: vec![root],
            ..PhaseTree::default()
        });
        let l = light(&[(vec![0], 200, 12_000)]);
        let own = [1_000, 1_000];
        let mut checks = check(&tree, &l, &own, &names());
        let c = &checks[0];
        assert_eq!((c.light_calls, c.full_calls, c.kept_out), (200, 1000, 200));
        assert_eq!(c.path, vec!["write".to_string()]);
        assert!((c.light_mean_ns - 12_000.0).abs() < 10.0, "{c:?}");
        assert!((c.calibrated_ns - 3_000.0).abs() < 1.0, "{c:?}");
        assert!((c.in_situ_ns - 7_000.0).abs() < 10.0, "{c:?}");
        assert!((c.factor - 7.0 / 3.0).abs() < 0.01, "{c:?}");
        assert!((c.excess_per_hit_ns - 2_000.0).abs() < 10.0, "{c:?}");
        apply(&mut tree, &mut checks, &own, &l);
        let r = tree.roots[0].corrected.as_ref().unwrap();
        // 1 µs own + 7 µs descendants out of 20: 12 µs a call, the light mean; less the own
        // entry's 2 µs: 10 µs, and the light calls' distribution moves down by it.
        assert!(
            (r.total_ns as f64 / 1000.0 - 10_000.0).abs() < 10.0,
            "{}",
            r.total_ns
        );
        let p50 = r.hist.value_at_quantile(0.5) as f64;
        assert!((p50 - 10_000.0).abs() < 100.0, "{p50}");
        // wal, under the root's check: 5 - 1 own - 2 for its own entry.
        let wal = tree.roots[0].children[0].corrected_total_ns() as f64 / 1000.0;
        assert!((wal - 2_000.0).abs() < 10.0, "{wal}");
    }

    #[test]
    fn a_child_with_a_check_of_its_own_is_corrected_by_it() {
        // write (20 µs raw, 1 own + 6 descendants' calibrated) > wal (12 µs raw, 1 own + 2
        // calibrated for sync) > sync (4 µs raw, 1 own).
        let mut tree = with_hits(write_wal_sync(7_000));
        // The root alone: 10 µs (descendants cost 9 in situ, not 6: ×1.5); wal alone: 9 µs
        // (sync's probes cost 2 in situ, as calibrated: no scaling there). write's descendants
        // hit 4 times a call: 3 µs more than calibrated is 0.75 µs a hit, which write's own
        // entry costs too.
        let l = light(&[(vec![0], 500, 10_000), (vec![0, 1], 500, 9_000)]);
        let own = [1_000, 1_000, 1_000];
        let mut checks = check(&tree, &l, &own, &names());
        assert_eq!(checks.len(), 2, "{checks:?}");
        let wal_check = wal_of(&checks);
        assert_eq!(wal_check.path, vec!["write".to_string(), "wal".to_string()]);
        assert!((checks[0].factor - 1.5).abs() < 0.01, "{checks:?}");
        assert_eq!(wal_check.factor, 1.0, "{wal_check:?}");
        assert_eq!(wal_check.excess_per_hit_ns, 0.0);
        assert!(
            (checks[0].excess_per_hit_ns - 750.0).abs() < 1.0,
            "{checks:?}"
        );
        apply(&mut tree, &mut checks, &own, &l);
        let r = &tree.roots[0];
        let mean = |n: &TreeNode| n.corrected.as_ref().unwrap().total_ns as f64 / n.count as f64;
        assert!((mean(r) - 9_250.0).abs() < 10.0, "{}", mean(r));
        // wal keeps its own factor (1): 12 - 1 - 2 = 9 µs, not 12 - 1 - 3. That leaves write
        // 0.25 µs of self time, but write's own self time is 20 - 12 = 8 µs raw, of which its
        // probes (its own 1 µs, wal's 3 µs outside wal's window) take 4 × 1.5, and its entry
        // 0.75 more: 1.25 µs. So wal's subtree is fitted into the 8 µs left: ×8/9.
        let fitted = checks[0].children_fitted.expect("fitted");
        assert!((fitted - 8.0 / 9.0).abs() < 0.001, "{fitted}");
        assert_eq!(wal_of(&checks).children_fitted, None);
        assert!((mean(&r.children[0]) - 8_000.0).abs() < 10.0);
        assert!((mean(&r.children[0].children[0]) - 3_000.0 * 8.0 / 9.0).abs() < 10.0);
        let self_ns = r.corrected.as_ref().unwrap().self_ns as f64 / 1000.0;
        assert!((self_ns - 1_250.0).abs() < 10.0, "{self_ns}");
        let p50 = r.children[0]
            .corrected
            .as_ref()
            .unwrap()
            .hist
            .value_at_quantile(0.5);
        assert!((p50 as f64 - 8_000.0).abs() < 100.0, "{p50}");
    }

    #[test]
    fn a_node_corrected_by_its_ancestors_factor_fits_its_children_too() {
        // write (20 µs raw, 1 own + 4 for its descendants) > wal (6 µs raw, 1 own + 2 for
        // sync) > sync (4 µs raw, 1 own). Only write has light calls: 13 µs, so its
        // descendants cost 6 in situ against 4 (×1.5), and wal, unchecked, takes that factor:
        // 6 - 1 - 2 × 1.5 = 2 µs, less 0.5 for its own entry (2 µs more than calibrated over
        // write's 4 descendant hits a call): 1.5, under sync's 4 - 1 - 0.5 = 2.5. wal keeps its
        // raw self time (2 µs) less the probe time in it ((3 - 1) × 1.5 + 0.5 = 3.5): nothing,
        // so sync is fitted into wal's 1.5 µs (×0.6), and write's check says so.
        let mut wal = node(1, "wal", 1000, 6_000, 3_000);
        wal.children.push(node(2, "sync", 1000, 4_000, 1_000));
        let mut root = node(0, "write", 1000, 20_000, 5_000);
        root.children.push(wal);
        let mut tree = with_hits(PhaseTree {
            roots: vec![root],
            ..PhaseTree::default()
        });
        let l = light(&[(vec![0], 500, 13_000)]);
        let own = [1_000, 1_000, 1_000];
        let mut checks = check(&tree, &l, &own, &names());
        assert_eq!(checks.len(), 1, "{checks:?}");
        apply(&mut tree, &mut checks, &own, &l);
        let fitted = checks[0].children_fitted.expect("fitted");
        assert!((fitted - 0.6).abs() < 0.001, "{fitted}");
        let wal = &tree.roots[0].children[0];
        let total = |n: &TreeNode| n.corrected_total_ns() as f64 / n.count as f64;
        assert!((total(wal) - 1_500.0).abs() < 10.0, "{}", total(wal));
        assert!((total(&wal.children[0]) - 1_500.0).abs() < 10.0);
    }

    /// write (20 µs raw, `removed` taken out by the calibration) > wal (12 µs raw, 1 own + 2
    /// for sync) > sync (4 µs raw, 1 own), 1,000 calls each.
    fn write_wal_sync(removed: u64) -> PhaseTree {
        let mut wal = node(1, "wal", 1000, 12_000, 3_000);
        wal.children.push(node(2, "sync", 1000, 4_000, 1_000));
        let mut root = node(0, "write", 1000, 20_000, removed);
        root.children.push(wal);
        PhaseTree {
            roots: vec![root],
            ..PhaseTree::default()
        }
    }

    fn wal_of(checks: &[InSituCheck]) -> &InSituCheck {
        checks.iter().find(|c| c.name == "wal").expect("wal")
    }

    #[test]
    fn children_that_fit_in_their_checked_parent_are_left_alone() {
        // Probes costing 1.5× the calibration at every depth: write (20 µs raw, 1 own + 4
        // calibrated for its descendants) > wal (12 µs raw, 1 own + 2 for sync) > sync (4 µs
        // raw, 1 own). write alone: 13 µs (descendants 6 in situ, ×1.5); wal alone: 8 µs
        // (sync 3, ×1.5). write keeps 20 - 12 = 8 raw µs of self time, of which its probes
        // take (5 - 3) × 1.5 = 3: 5 µs, and wal's 8 µs fill the 13 - 5 left exactly. A hit
        // costs 0.5 µs beyond its price at both checks (2 µs over write's 4 descendant hits,
        // 1 over wal's 2), and every node loses that for its own entry: each still fits.
        let mut tree = with_hits(write_wal_sync(5_000));
        let l = light(&[(vec![0], 500, 13_000), (vec![0, 1], 500, 8_000)]);
        let own = [1_000, 1_000, 1_000];
        let mut checks = check(&tree, &l, &own, &names());
        assert!(
            checks.iter().all(|c| (c.factor - 1.5).abs() < 0.01),
            "{checks:?}"
        );
        apply(&mut tree, &mut checks, &own, &l);
        assert!(
            checks.iter().all(|c| c.children_fitted.is_none()),
            "{checks:?}"
        );
        let r = &tree.roots[0];
        let mean = |n: &TreeNode| n.corrected.as_ref().unwrap().total_ns as f64 / n.count as f64;
        assert!((mean(r) - 12_500.0).abs() < 10.0, "{}", mean(r));
        assert!((mean(&r.children[0]) - 7_500.0).abs() < 10.0);
        assert!((mean(&r.children[0].children[0]) - 2_500.0).abs() < 10.0);
    }

    #[test]
    fn preemptions_stay_out_of_the_check() {
        // Full calls: 20 µs on the CPU a call and 3 µs preempted on average, in one whole
        // time slice (one call of 1,000 waited 3 ms; db_bench's full epochs had one in
        // ~1,200).
        let mut root = node(0, "write", 1000, 23_000, 4_000);
        root.preempted_ns = Some(1000 * 3_000);
        root.hist = new_histogram();
        for i in 0..1000 {
            let on_cpu = 20_000 - 50 + i % 100;
            root.hist
                .saturating_record(on_cpu + if i == 500 { 3_000_000 } else { 0 });
        }
        root.children.push(node(1, "wal", 1000, 5_000, 1_000));
        let tree = with_hits(PhaseTree {
            roots: vec![root],
            ..PhaseTree::default()
        });
        // Light calls: 12 µs once the own 1 µs is out; one of 200 was preempted for a 4 ms
        // time slice and the draw kept it (its probes' share, `theirs`, is 0).
        let mut l = LightEpochs::default();
        l.begin(0, &cut(0, &[0]));
        for i in 0..200u64 {
            let mut ev = span(0, 10, 0, 1 + i, 13_000);
            if i == 7 {
                ev.dur_ns += 4_000_000;
                ev.preempted_ns = 4_000_000;
            }
            assert!(l.take(&ev, 1_000, 0));
        }
        let paths = l.into_paths(|_| Some(vec![0]));
        let c = &check(&tree, &paths, &[1_000, 1_000], &names())[0];
        // Without the waits: 20 - 1 - 12 = 7 µs of descendants' probes a call, not 3, and a
        // difference of 4 µs well beyond the calls' spread without their waits.
        assert!((c.light_mean_ns - 12_000.0).abs() < 1.0, "{c:?}");
        assert!((c.full_mean_ns - 19_000.0).abs() < 1.0, "{c:?}");
        assert!((c.in_situ_ns - 7_000.0).abs() < 1.0, "{c:?}");
        assert!(c.error_ns < 100.0, "{c:?}");
        assert!((c.factor - 7.0 / 3.0).abs() < 0.01, "{c:?}");
    }

    #[test]
    fn a_difference_within_the_noise_leaves_the_correction_alone() {
        let mut root = node(0, "write", 1000, 20_000, 4_000);
        root.children.push(node(1, "wal", 1000, 5_000, 1_000));
        let tree = PhaseTree {
            roots: vec![root],
            ..PhaseTree::default()
        };
        let l = light(&[(vec![0], 200, 16_000)]);
        let checks = check(&tree, &l, &[1_000, 1_000], &names());
        assert!((checks[0].in_situ_ns - 3_000.0).abs() < 10.0);
        assert_eq!(checks[0].factor, 1.0);
        // Too few light calls: no verdict.
        let few = light(&[(vec![0], 1, 13_000)]);
        assert!(check(&tree, &few, &[1_000, 1_000], &names()).is_empty());
        // A leaf has nothing to check.
        let leaf = light(&[(vec![0, 1], 200, 3_000)]);
        assert!(check(&tree, &leaf, &[1_000, 1_000], &names()).is_empty());
    }
}
