//! The in-situ check (`--in-situ`): how much the probes of a root's descendants cost inside the
//! real calls, against what the calibration (empty functions, another process) said.
//!
//! During short "light" epochs only the roots' probes are live. A root call that began in
//! one runs with no descendant probe, so (once its own probe's share inside its window is
//! taken out) its mean is the root's time without them. In the full epochs the same root's
//! raw mean minus its own probe share minus the light mean is what the descendants' probes
//! really added per call; the calibration's figure for it is the descendant probe time the
//! correction took out. Their ratio scales that correction, node by node, under the root.
//!
//! In: root spans tagged by epoch (the session says when each light epoch began and ended).
//! Out: per root phase an [`InSituCheck`], applied to the tree by [`apply`].

use std::collections::HashMap;

use wprof_common::Event;

use crate::model::{new_histogram, InSituCheck, LatencyHistogram, PhaseTree, TreeNode};

/// Light-epoch calls of a root phase needed before the check says anything.
pub const MIN_LIGHT_CALLS: u64 = 30;

/// The light epochs of a run and the root calls that began in them.
#[derive(Debug, Default)]
pub struct LightEpochs {
    /// Closed epochs, [start, end) in CLOCK_MONOTONIC ns, in order.
    windows: Vec<(u64, u64)>,
    /// The epoch going on, from this time.
    open: Option<u64>,
    /// Per root phase: the calls that began in a light epoch.
    calls: HashMap<u32, LightCalls>,
}

/// Root calls made with no descendant probe live.
#[derive(Debug, Clone)]
pub struct LightCalls {
    /// Calls.
    pub count: u64,
    /// Their durations with the root's own probe share taken out, ns.
    pub hist: LatencyHistogram,
    /// Sum of those durations, ns.
    pub total_ns: u64,
}

impl LightEpochs {
    /// A light epoch begins (`at`: CLOCK_MONOTONIC ns, after the descendants' probes came off).
    pub fn begin(&mut self, at: u64) {
        self.open = Some(at);
    }

    /// The light epoch ends (before the descendants' probes go back).
    pub fn end(&mut self, at: u64) {
        if let Some(start) = self.open.take() {
            self.windows.push((start, at));
        }
    }

    /// Whether a call that began at `start_ns` began in a light epoch.
    pub fn contains(&self, start_ns: u64) -> bool {
        if self.open.is_some_and(|s| start_ns >= s) {
            return true;
        }
        let i = self.windows.partition_point(|(s, _)| *s <= start_ns);
        i > 0 && start_ns < self.windows[i - 1].1
    }

    /// Adds a root call that began in a light epoch; `own_ns` is its phase's probe share
    /// inside its own window.
    pub fn add(&mut self, ev: &Event, own_ns: u64) {
        let d = ev.dur_ns.saturating_sub(own_ns).max(1);
        let c = self.calls.entry(ev.phase).or_insert_with(|| LightCalls {
            count: 0,
            hist: new_histogram(),
            total_ns: 0,
        });
        c.count += 1;
        c.total_ns += d;
        c.hist.saturating_record(d);
    }

    /// Light epochs so far (closed ones).
    pub fn epochs(&self) -> usize {
        self.windows.len()
    }

    /// The light calls per root phase.
    pub fn calls(&self) -> &HashMap<u32, LightCalls> {
        &self.calls
    }
}

/// The check for each root phase with enough light calls: `own_ns[phase]` is each phase's
/// probe share inside its own window.
pub fn check(
    tree: &PhaseTree,
    light: &LightEpochs,
    own_ns: &[u64],
    names: &[String],
) -> Vec<InSituCheck> {
    let mut out = Vec::new();
    let mut phases: Vec<&u32> = light.calls.keys().collect();
    phases.sort();
    for &phase in phases {
        let l = &light.calls[&phase];
        let roots: Vec<&TreeNode> = tree.roots.iter().filter(|r| r.phase == phase).collect();
        let full_calls: u64 = roots.iter().map(|r| r.count).sum();
        if l.count < MIN_LIGHT_CALLS || full_calls < MIN_LIGHT_CALLS {
            continue;
        }
        let own = own_ns.get(phase as usize).copied().unwrap_or(0) as f64;
        let raw: u64 = roots.iter().map(|r| r.total_ns).sum();
        let removed: u64 = roots
            .iter()
            .map(|r| r.corrected.as_ref().map_or(0, |c| c.probe_ns))
            .sum();
        let n = full_calls as f64;
        let full_mean = raw as f64 / n - own;
        let calibrated = (removed as f64 / n - own).max(0.0);
        let light_mean = l.total_ns as f64 / l.count as f64;
        let in_situ = full_mean - light_mean;
        let sd_full = roots.iter().map(|r| r.hist.stdev()).fold(0.0, f64::max);
        let error = (sd_full.powi(2) / n + l.hist.stdev().powi(2) / l.count as f64).sqrt();
        let factor = if calibrated > 0.0 && (in_situ - calibrated).abs() > 2.0 * error {
            (in_situ / calibrated).max(0.0)
        } else {
            1.0
        };
        out.push(InSituCheck {
            phase,
            name: names.get(phase as usize).cloned().unwrap_or_default(),
            light_calls: l.count,
            light_mean_ns: light_mean,
            full_calls,
            full_mean_ns: full_mean,
            calibrated_ns: calibrated,
            in_situ_ns: in_situ,
            error_ns: error,
            factor,
        });
    }
    out
}

/// Scales the descendant part of every corrected node under the checked roots by its check's
/// factor: a node's probe time taken out becomes its own probes' share plus `factor` × the
/// rest, and self times follow. A checked root (one node of its phase) takes the light calls'
/// distribution as its corrected histogram: the in-situ figure is a mean, and shifting every
/// call by it would push the short ones below zero. Other nodes keep their histograms.
pub fn apply(tree: &mut PhaseTree, checks: &[InSituCheck], own_ns: &[u64], light: &LightEpochs) {
    for c in checks.iter().filter(|c| c.applied()) {
        let single = tree.roots.iter().filter(|r| r.phase == c.phase).count() == 1;
        for root in tree.roots.iter_mut().filter(|r| r.phase == c.phase) {
            scale(root, c.factor, own_ns);
            if let (true, Some(l), Some(corr)) =
                (single, light.calls.get(&c.phase), root.corrected.as_mut())
            {
                corr.hist = l.hist.clone();
            }
        }
    }
}

fn scale(n: &mut TreeNode, factor: f64, own_ns: &[u64]) {
    for c in &mut n.children {
        scale(c, factor, own_ns);
    }
    let own = own_ns.get(n.phase as usize).copied().unwrap_or(0);
    let kids: u64 = n
        .children
        .iter()
        .map(|k| k.corrected.as_ref().map_or(k.total_ns, |c| c.total_ns))
        .sum();
    let (count, raw) = (n.count, n.total_ns);
    let Some(c) = n.corrected.as_mut() else {
        return;
    };
    if count == 0 {
        return;
    }
    let own_part = own.saturating_mul(count).min(c.probe_ns);
    let desc = (c.probe_ns - own_part) as f64;
    let probe = ((own_part as f64 + desc * factor).round() as u64).min(raw);
    c.probe_ns = probe;
    c.total_ns = raw - probe;
    c.self_ns = c.total_ns.saturating_sub(kids);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(phase: u32, start: u64, dur: u64) -> Event {
        Event {
            phase,
            start_ns: start,
            dur_ns: dur,
            ..Event::default()
        }
    }

    #[test]
    fn epochs_hold_the_calls_that_began_in_them() {
        let mut l = LightEpochs::default();
        l.begin(100);
        assert!(l.contains(150) && !l.contains(50));
        l.end(200);
        l.begin(300);
        l.end(400);
        assert!(l.contains(100) && l.contains(350));
        assert!(!l.contains(200) && !l.contains(250) && !l.contains(400));
        assert_eq!(l.epochs(), 2);
    }

    fn root(count: u64, raw_mean: u64, removed_per_call: u64) -> TreeNode {
        let mut n = TreeNode::empty(0, "write".into(), None);
        n.count = count;
        n.total_ns = count * raw_mean;
        let mut hist = new_histogram();
        let mut chist = new_histogram();
        for i in 0..count {
            let v = raw_mean - 50 + (i % 100);
            hist.saturating_record(v);
            chist.saturating_record(v - removed_per_call);
        }
        n.hist = hist;
        n.corrected = Some(crate::model::Corrected {
            total_ns: count * (raw_mean - removed_per_call),
            self_ns: count * (raw_mean - removed_per_call),
            probe_ns: count * removed_per_call,
            probe_hits: count * 4,
            error_ns: 0,
            hist: chist,
        });
        n
    }

    #[test]
    fn descendants_costing_more_in_situ_scale_the_correction() {
        // Full calls: 20 µs raw, the calibration took out 1 µs own + 3 µs of descendants.
        // Light calls: 12 µs once the own 1 µs is out. So descendants really cost
        // 20 - 1 - 12 = 7 µs a call, not 3: factor 7/3.
        let mut tree = PhaseTree {
            roots: vec![root(1000, 20_000, 4_000)],
            ..PhaseTree::default()
        };
        let mut l = LightEpochs::default();
        l.begin(0);
        for i in 0..200 {
            l.add(&span(0, i, 13_000 - 50 + (i % 100)), 1_000);
        }
        let own = [1_000];
        let checks = check(&tree, &l, &own, &["write".into()]);
        let c = &checks[0];
        assert_eq!((c.light_calls, c.full_calls), (200, 1000));
        assert!((c.light_mean_ns - 12_000.0).abs() < 10.0, "{c:?}");
        assert!((c.calibrated_ns - 3_000.0).abs() < 1.0, "{c:?}");
        assert!((c.in_situ_ns - 7_000.0).abs() < 10.0, "{c:?}");
        assert!((c.factor - 7.0 / 3.0).abs() < 0.01, "{c:?}");
        apply(&mut tree, &checks, &own, &l);
        let r = tree.roots[0].corrected.as_ref().unwrap();
        // 1 µs own + 7 µs descendants out of 20: 12 µs a call, the light mean.
        assert!(
            (r.total_ns as f64 / 1000.0 - 12_000.0).abs() < 10.0,
            "{r:?}"
        );
        let p50 = r.hist.value_at_quantile(0.5) as f64;
        assert!((p50 - 12_000.0).abs() < 100.0, "{p50}");
    }

    #[test]
    fn a_difference_within_the_noise_leaves_the_correction_alone() {
        let tree = PhaseTree {
            roots: vec![root(1000, 20_000, 4_000)],
            ..PhaseTree::default()
        };
        let mut l = LightEpochs::default();
        l.begin(0);
        for i in 0..200 {
            l.add(&span(0, i, 17_000 - 50 + (i % 100)), 1_000);
        }
        let checks = check(&tree, &l, &[1_000], &["write".into()]);
        assert!((checks[0].in_situ_ns - 3_000.0).abs() < 10.0);
        assert_eq!(checks[0].factor, 1.0);
        // Too few light calls: no verdict.
        let mut few = LightEpochs::default();
        few.begin(0);
        few.add(&span(0, 1, 13_000), 1_000);
        assert!(check(&tree, &few, &[1_000], &["write".into()]).is_empty());
    }
}
