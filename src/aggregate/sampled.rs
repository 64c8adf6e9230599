//! Sampled phases (`measure = "sample"`, or moved there by `--max-overhead`): phases measured
//! by CPU samples instead of probes.
//!
//! In: each CPU sample's probed phase path (the phases open on the thread, from the root) and
//! the sampled phases whose functions its user stack holds, outermost first. Out: per probed
//! node, how many of its samples fell in each sampled phase, grafted into the tree as
//! children with an estimated time (the share of the parent's samples times the parent's
//! on-CPU time), a 95% interval on that share, and no count: sampling cannot count calls.

use std::collections::HashMap;

use crate::model::{PhaseTree, SampledShare, TreeNode};

/// CPU samples counted against probed paths and the sampled phases below them.
#[derive(Debug, Default, Clone)]
pub struct SampledCounts {
    /// Per probed path (node labels from the root): samples taken while it was open.
    under: HashMap<Vec<String>, u64>,
    /// Per (probed path, sampled chain from the outermost): samples whose stack held it.
    hits: HashMap<(Vec<String>, Vec<String>), u64>,
    /// Per node path (labels from the root): every CPU sample taken while it was open, the
    /// ones in uprobe handling too: each made the call it interrupted that much longer.
    pub interrupted: HashMap<Vec<String>, u64>,
}

impl SampledCounts {
    /// Adds `weight` samples taken with `path` open whose user stacks held `chain`, the
    /// sampled phases' names, outermost first. A path ending in sampled phases (a phase
    /// moved to sampling had been probed, so its own samples carry it) gives them back to
    /// the chain: `is_sampled` says which names are.
    pub fn add(
        &mut self,
        path: &[String],
        chain: &[String],
        weight: u64,
        is_sampled: &dyn Fn(&str) -> bool,
    ) {
        let probed = path.iter().take_while(|p| !is_sampled(p)).count();
        let (path, tail) = path.split_at(probed);
        if path.is_empty() {
            // Outside every probed phase: no parent to share.
            return;
        }
        let mut full: Vec<String> = tail.to_vec();
        for c in chain {
            if !full.contains(c) {
                full.push(c.clone());
            }
        }
        count_prefixes(&mut self.under, path, weight);
        for i in 1..=full.len() {
            *self
                .hits
                .entry((path.to_vec(), full[..i].to_vec()))
                .or_default() += weight;
        }
    }

    /// Counts `weight` samples taken with `path` open against it and each of its ancestors.
    pub fn interrupt(&mut self, path: &[String], weight: u64) {
        count_prefixes(&mut self.interrupted, path, weight);
    }

    /// Whether no sample fell in a sampled phase.
    pub fn is_empty(&self) -> bool {
        self.hits.is_empty()
    }
}

/// Adds `weight` to `path` and to each of its ancestors (its prefixes) in `counts`.
fn count_prefixes(counts: &mut HashMap<Vec<String>, u64>, path: &[String], weight: u64) {
    for i in 1..=path.len() {
        *counts.entry(path[..i].to_vec()).or_default() += weight;
    }
}

/// A sampled phase's id and role, by name.
pub type PhaseOf<'a> = &'a dyn Fn(&str) -> Option<(u32, Option<String>)>;

/// Puts the sampled phases into `tree` under their probed parents. `phase_of` gives a
/// sampled phase's id and role by name. A probed node of the same path (a phase moved to
/// sampling during the run) is replaced: its calls cover part of the run, the samples all
/// of it. Returns the sampled nodes' paths that had no probed parent in the tree.
pub fn graft(tree: &mut PhaseTree, counts: &SampledCounts, phase_of: PhaseOf<'_>) -> Vec<String> {
    let mut keys: Vec<&(Vec<String>, Vec<String>)> = counts.hits.keys().collect();
    // Parents before children, then a stable order.
    keys.sort_by(|a, b| (a.1.len(), a).cmp(&(b.1.len(), b)));
    let mut missing = Vec::new();
    for key in keys {
        let (path, chain) = key;
        let k = counts.hits[key];
        let n = counts.under.get(path).copied().unwrap_or(0);
        let Some(parent) = find_mut(&mut tree.roots, path) else {
            missing.push(path.join("/"));
            continue;
        };
        let base = on_cpu_ns(parent);
        let corrected = parent.corrected.is_some();
        let Some((last, above)) = chain.split_last() else {
            continue;
        };
        let at = if above.is_empty() {
            parent
        } else {
            match find_mut(&mut parent.children, above) {
                Some(a) => a,
                None => continue,
            }
        };
        let Some((phase, role)) = phase_of(last) else {
            continue;
        };
        let share = SampledShare::new(k, n);
        let est = (share.share() * base).round() as u64;
        let node = match at.children.iter().position(|c| &c.name == last) {
            Some(i) => &mut at.children[i],
            None => {
                at.children
                    .push(TreeNode::empty(phase, last.clone(), role.clone()));
                at.children.last_mut().expect("just pushed")
            }
        };
        *node = TreeNode::empty(phase, last.clone(), role);
        node.total_ns = est;
        node.self_ns = est;
        node.sampled = Some(share);
        if corrected {
            node.corrected = Some(crate::model::Corrected {
                total_ns: est,
                self_ns: est,
                probe_ns: 0,
                probe_hits: 0,
                error_ns: 0,
                preempted_ns: 0,
                wprof_ns: 0,
                hist: crate::model::new_histogram(),
            });
        }
    }
    for r in &mut tree.roots {
        settle(r);
    }
    missing.sort();
    missing.dedup();
    missing
}

/// The node's time on the CPU, ns: corrected when known, less its off-CPU time when tracked.
fn on_cpu_ns(n: &TreeNode) -> f64 {
    n.corrected_total_ns()
        .saturating_sub(n.off_cpu_ns.unwrap_or(0)) as f64
}

/// The node at `path` (labels) among `nodes`.
fn find_mut<'a>(nodes: &'a mut [TreeNode], path: &[String]) -> Option<&'a mut TreeNode> {
    let (first, rest) = path.split_first()?;
    let n = nodes.iter_mut().find(|n| n.label() == first.as_str())?;
    if rest.is_empty() {
        Some(n)
    } else {
        find_mut(&mut n.children, rest)
    }
}

/// Self times again below every node that has sampled children (their estimates come out of
/// the parent's self time, as a probed child's time does), children largest first.
fn settle(n: &mut TreeNode) {
    for c in &mut n.children {
        settle(c);
    }
    if !n.children.iter().any(|c| c.sampled.is_some()) {
        return;
    }
    let children: u64 = n.children.iter().map(|c| c.total_ns).sum();
    n.self_ns = n.total_ns.saturating_sub(children);
    if let Some(c) = &mut n.corrected {
        let kids: u64 = n.children.iter().map(TreeNode::corrected_total_ns).sum();
        c.self_ns = c.total_ns.saturating_sub(kids);
    }
    n.children.sort_by_key(|c| std::cmp::Reverse(c.total_ns));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probed(name: &str, total: u64, children: Vec<TreeNode>) -> TreeNode {
        let mut n = TreeNode::empty(0, name.into(), None);
        n.count = 10;
        n.total_ns = total;
        n.self_ns = total - children.iter().map(|c| c.total_ns).sum::<u64>();
        n.children = children;
        n
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn sampled_children_take_their_share_of_the_parent_and_of_its_self_time() {
        let mut tree = PhaseTree {
            roots: vec![probed(
                "write",
                1_000_000,
                vec![probed("flush", 400_000, vec![])],
            )],
            ..PhaseTree::default()
        };
        let mut c = SampledCounts::default();
        let sampled = |n: &str| n == "encode" || n == "crc";
        // 100 samples in write: 40 in flush, 20 in encode (5 of them in crc within it).
        c.add(&s(&["write", "flush"]), &[], 40, &sampled);
        c.add(&s(&["write"]), &s(&["encode"]), 15, &sampled);
        c.add(&s(&["write"]), &s(&["encode", "crc"]), 5, &sampled);
        c.add(&s(&["write"]), &[], 40, &sampled);
        // Outside any probed phase: no parent, ignored.
        c.add(&[], &s(&["encode"]), 7, &sampled);
        let ids = |n: &str| Some((if n == "encode" { 4 } else { 5 }, None));
        assert!(graft(&mut tree, &c, &ids).is_empty());
        let w = &tree.roots[0];
        assert_eq!(w.children[0].name, "flush");
        let e = &w.children[1];
        assert_eq!(e.name, "encode");
        assert_eq!(e.phase, 4);
        assert_eq!(e.count, 0, "sampling counts no calls");
        assert_eq!(e.sampled.unwrap().samples, 20);
        assert_eq!(e.sampled.unwrap().parent_samples, 100);
        assert_eq!(e.total_ns, 200_000);
        assert_eq!(e.self_ns, 150_000);
        let crc = &e.children[0];
        assert_eq!((crc.name.as_str(), crc.total_ns), ("crc", 50_000));
        // write's self time gave encode's estimate away.
        assert_eq!(w.self_ns, 1_000_000 - 400_000 - 200_000);
    }

    #[test]
    fn a_phase_moved_to_sampling_replaces_its_probed_node_with_all_its_samples() {
        let mut tree = PhaseTree {
            roots: vec![probed("write", 1_000, vec![probed("encode", 300, vec![])])],
            ..PhaseTree::default()
        };
        let mut c = SampledCounts::default();
        let sampled = |n: &str| n == "encode";
        // Probed period: samples inside encode carry it in their path.
        c.add(&s(&["write", "encode"]), &[], 10, &sampled);
        // Sampled period: found in the stack.
        c.add(&s(&["write"]), &s(&["encode"]), 15, &sampled);
        c.add(&s(&["write"]), &[], 75, &sampled);
        graft(&mut tree, &c, &|_| Some((1, None)));
        let w = &tree.roots[0];
        assert_eq!(w.children.len(), 1);
        let e = &w.children[0];
        assert_eq!((e.count, e.total_ns), (0, 250));
        assert_eq!(e.sampled.unwrap().samples, 25);
        assert_eq!(w.self_ns, 750);
    }

    #[test]
    fn a_sampled_phase_without_a_probed_parent_in_the_tree_is_reported() {
        let mut tree = PhaseTree::default();
        let mut c = SampledCounts::default();
        c.add(&s(&["gone"]), &s(&["encode"]), 3, &|n| n == "encode");
        assert_eq!(graft(&mut tree, &c, &|_| Some((1, None))), ["gone"]);
    }
}
