//! What wprof's own interruptions add to the calls beyond the probes' calibrated price, taken
//! out of the corrected tree.
//!
//! - **CPU samples.** A sample's interrupt (the timer, the BPF program, the stack walk: ~40 µs
//!   on these VMs) makes the call it lands in that much longer. The samples taken while a node
//!   was open are counted (`aggregate::sampled`), and each takes out what a sample costs.
//! - **What a trap costs the code after it.** The calibration prices a probe hit on empty
//!   functions, but in real code each trap also slows what runs next (caches, TLB, branch
//!   predictors). Under a duty cycle the program's own pace measures it
//!   (`session::progress`: the live windows' CPU time over what their work took at the paused
//!   rate, less the hits' price, per hit). Every corrected node loses it once for each hit
//!   inside its calls' windows: a call's own entry (its return's aftermath falls in its
//!   caller, after the window closed) and every probed descendant's entry and return.
//!
//! Sampled children are grafted afterwards, from the corrected parents.

use std::collections::HashMap;

use crate::model::{map_histogram, new_histogram, PhaseTree, TreeNode};

/// Takes `sample_ns` out of every corrected node once for each CPU sample taken while it was
/// open (`interrupted`, by node path from the root). The calls a sample lengthened are the
/// ones it pushed past `sample_ns`: that many of the shortest calls at least that long lose it
/// in the histogram.
pub fn take_out_samples(
    tree: &mut PhaseTree,
    interrupted: &HashMap<Vec<String>, u64>,
    sample_ns: f64,
) {
    if sample_ns <= 0.0 || interrupted.is_empty() {
        return;
    }
    let mut path = Vec::new();
    for root in &mut tree.roots {
        samples_node(root, interrupted, sample_ns.round() as u64, &mut path);
    }
}

fn samples_node(
    n: &mut TreeNode,
    interrupted: &HashMap<Vec<String>, u64>,
    sample_ns: u64,
    path: &mut Vec<String>,
) {
    // Labels, as the samples' paths name nodes (a grouped node's carries its key).
    path.push(n.label().into_owned());
    for c in &mut n.children {
        samples_node(c, interrupted, sample_ns, path);
    }
    let samples = interrupted.get(path.as_slice()).copied().unwrap_or(0);
    path.pop();
    let removed = samples.saturating_mul(sample_ns);
    take_out(n, removed, |c| shorten(&c.hist, samples, sample_ns));
}

/// `hist` with `calls` of its shortest calls of at least `by` ns `by` shorter.
fn shorten(
    hist: &crate::model::LatencyHistogram,
    calls: u64,
    by: u64,
) -> crate::model::LatencyHistogram {
    let mut out = new_histogram();
    let mut left = calls;
    for v in hist.iter_recorded() {
        let (value, count) = (v.value_iterated_to(), v.count_at_value());
        let moved = if value >= by { count.min(left) } else { 0 };
        left -= moved;
        // A count of 0 would still move the histogram's max.
        if moved > 0 {
            out.saturating_record_n((value - by).max(1), moved);
        }
        if count > moved {
            out.saturating_record_n(value, count - moved);
        }
    }
    out
}

/// Takes `removed` ns (at most what is left) out of `n`'s corrected total, adds it to the
/// probe time taken out, and sets the self time against the probed children; `hist` gives
/// the corrected calls' new histogram.
fn take_out(
    n: &mut TreeNode,
    removed: u64,
    hist: impl Fn(&crate::model::Corrected) -> crate::model::LatencyHistogram,
) {
    if removed == 0 || n.count == 0 {
        return;
    }
    let kids: u64 = n.probed_children().map(TreeNode::corrected_total_ns).sum();
    let Some(c) = n.corrected.as_mut() else {
        return;
    };
    let removed = removed.min(c.total_ns);
    c.total_ns -= removed;
    c.probe_ns += removed;
    c.self_ns = c.total_ns.saturating_sub(kids);
    c.hist = hist(c);
}

/// Takes out of every corrected node of `tree` what a hit cost the code after it, once per
/// hit inside its calls (see the module's doc): `excess_of(root)` gives it for each root's
/// subtree, ns (None: nothing to take out). A node never goes below zero.
pub fn correct(tree: &mut PhaseTree, excess_of: &dyn Fn(&str) -> Option<f64>) {
    for root in &mut tree.roots {
        if let Some(x) = excess_of(&root.name).filter(|x| *x > 0.0) {
            correct_node(root, x);
        }
    }
}

fn correct_node(n: &mut TreeNode, excess: f64) {
    for c in &mut n.children {
        correct_node(c, excess);
    }
    let count = n.count;
    let Some(hits) = n.corrected.as_ref().map(|c| c.probe_hits) else {
        return;
    };
    // Two hits a call of its own, the return's after the window.
    let inside = hits.saturating_sub(count);
    let removed = (inside as f64 * excess).round() as u64;
    // Calls differ in how many hits they hold; each call loses the mean.
    let per_call = removed / count.max(1);
    take_out(n, removed, |c| {
        map_histogram(&c.hist, |v| v.saturating_sub(per_call))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{new_histogram, Corrected};

    /// A node of `count` calls of `dur` ns each, `probe` ns of them taken out already, with
    /// `hits` probe hits inside them.
    fn corrected_node(
        phase: u32,
        name: &str,
        count: u64,
        dur: u64,
        probe: u64,
        hits: u64,
    ) -> TreeNode {
        let mut n = TreeNode::empty(phase, name.to_string(), None);
        n.count = count;
        n.total_ns = count * dur;
        n.self_ns = n.total_ns;
        let mut hist = new_histogram();
        hist.saturating_record_n(dur - probe, count);
        n.corrected = Some(Corrected {
            total_ns: count * (dur - probe),
            self_ns: count * (dur - probe),
            probe_ns: count * probe,
            probe_hits: hits,
            error_ns: 0,
            preempted_ns: 0,
            wprof_ns: 0,
            hist,
        });
        n
    }

    #[test]
    fn each_call_loses_the_excess_once_per_hit_inside_it() {
        // write: 100 calls of 10 µs, each with one persist call (2 hits) inside.
        let child = corrected_node(1, "persist", 100, 2_000, 500, 200);
        let mut root = corrected_node(0, "write", 100, 10_000, 2_000, 400);
        let (root_total, child_total) = (root.corrected_total_ns(), child.corrected_total_ns());
        root.children.push(child);
        let mut tree = PhaseTree {
            roots: vec![root],
            ..Default::default()
        };
        correct(&mut tree, &|_| Some(50.0));
        let root = &tree.roots[0];
        let child = &root.children[0];
        // The child: its own entry only, 100 hits × 50 ns.
        assert_eq!(child.corrected_total_ns(), child_total - 5_000);
        // The root: its own entries and the child's two hits a call, 300 × 50 ns.
        assert_eq!(root.corrected_total_ns(), root_total - 15_000);
        let c = root.corrected.as_ref().expect("corrected");
        assert_eq!(c.probe_ns, 100 * 2_000 + 15_000);
        assert_eq!(
            c.self_ns,
            root.corrected_total_ns() - child.corrected_total_ns()
        );
        // Its calls moved by the mean, 150 ns a call: 8,000 → 7,850 ns (within a bucket).
        assert_eq!(c.hist.len(), 100);
        assert!((c.hist.mean() - 7_850.0).abs() < 40.0, "{}", c.hist.mean());
    }

    #[test]
    fn a_sample_comes_out_of_the_call_it_lengthened_and_its_ancestors() {
        // 100 writes of 8 µs corrected; 3 were hit by a 40 µs sample (48 µs), 2 of them
        // inside persist.
        let mut child = corrected_node(1, "persist", 100, 2_000, 0, 200);
        let mut root = corrected_node(0, "write", 97, 8_000, 0, 400);
        root.count = 100;
        root.total_ns += 3 * 48_000;
        let c = root.corrected.as_mut().expect("corrected");
        c.total_ns += 3 * 48_000;
        c.hist.saturating_record_n(48_000, 3);
        child.count = 100;
        child
            .corrected
            .as_mut()
            .expect("corrected")
            .hist
            .saturating_record_n(42_000, 2);
        root.children.push(child);
        let mut tree = PhaseTree {
            roots: vec![root],
            ..Default::default()
        };
        let interrupted: HashMap<Vec<String>, u64> = [
            (vec!["write".to_string()], 3),
            (vec!["write".to_string(), "persist".to_string()], 2),
        ]
        .into();
        let before = tree.roots[0].corrected_total_ns();
        take_out_samples(&mut tree, &interrupted, 40_000.0);
        let root = &tree.roots[0];
        assert_eq!(root.corrected_total_ns(), before - 120_000);
        let h = &root.corrected.as_ref().expect("corrected").hist;
        assert_eq!(h.len(), 100);
        // Every write is back near 8 µs: the longest is the 48 µs one, less 40 µs.
        assert!(h.max() < 9_000, "{}", h.max());
        let child = &root.children[0].corrected.as_ref().expect("corrected").hist;
        assert!(child.max() < 3_000, "{}", child.max());
    }

    #[test]
    fn a_grouped_node_is_found_by_its_label() {
        let mut root = corrected_node(0, "insert", 10, 50_000, 0, 20);
        root.key = Some("orders".to_string());
        let mut tree = PhaseTree {
            roots: vec![root],
            ..Default::default()
        };
        let interrupted: HashMap<Vec<String>, u64> =
            [(vec!["insert [orders]".to_string()], 2)].into();
        take_out_samples(&mut tree, &interrupted, 40_000.0);
        assert_eq!(tree.roots[0].corrected_total_ns(), 500_000 - 80_000);
    }

    #[test]
    fn no_excess_leaves_the_tree_alone_and_a_node_never_goes_below_zero() {
        let mut tree = PhaseTree {
            roots: vec![corrected_node(0, "write", 10, 1_000, 100, 40)],
            ..Default::default()
        };
        correct(&mut tree, &|_| Some(0.0));
        assert_eq!(tree.roots[0].corrected_total_ns(), 9_000);
        correct(&mut tree, &|r| (r == "write").then_some(1e6));
        assert_eq!(tree.roots[0].corrected_total_ns(), 0);
        assert_eq!(
            tree.roots[0].corrected.as_ref().map(|c| c.probe_ns),
            Some(10_000)
        );
    }
}
