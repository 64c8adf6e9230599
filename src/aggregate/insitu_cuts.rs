//! Which probes a light epoch of the in-situ check (`--in-situ`) takes off.
//!
//! A light epoch keeps the probes live down to one depth of the tree (its cut) and takes off
//! every phase that lives deeper, so the calls at the cut run with their own probes only: a
//! root at cut 0, the root's children at cut 1, and so on. Every other epoch takes the roots'
//! cut and the others the deeper ones in turn ([`cut_for_turn`]), so every parent of the tree
//! gets calls measured without its descendants' probes.
//!
//! In: the tree's shape so far (node, parent, phase, calls) and the phases whose probes can
//! come off. Out: the [`Cut`]s worth making, shallowest first.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A phase reached as a root in more than this share of its calls stays live in every
/// epoch: a flush thread's file writes, say, are roots of their own as well as descendants.
pub const ROOT_SHARE_MAX: f64 = 0.5;

/// One node of the tree's shape, as the aggregator has seen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShapeNode {
    /// The node (path hash).
    pub node: u64,
    /// Its parent node, 0 for a root.
    pub parent: u64,
    /// Its depth (0 for a root).
    pub depth: u32,
    /// Its phase.
    pub phase: u32,
    /// Calls completed there.
    pub calls: u64,
}

/// One kind of light epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The deepest level whose probes stay live (0: the roots).
    pub depth: u32,
    /// The phases taken off.
    pub detach: Vec<u32>,
    /// The phases whose calls at `depth` run with no descendant probe live: their calls
    /// there measure them without their descendants' probes.
    pub clean: Vec<u32>,
}

/// The cuts worth making for this shape: one per depth at which some parent's calls would
/// run with only their own probes. `detachable` are the phases whose probes can come off
/// (user-space probes; a syscall's tracepoints stay, and a parent with one under it is
/// never clean).
pub fn plan(shape: &[ShapeNode], detachable: &[u32]) -> Vec<Cut> {
    let levels = phase_levels(shape);
    let below = descendant_phases(shape);
    let level = |p: u32| levels.get(&p).copied().unwrap_or(u32::MAX);
    let live = |p: u32, cut: u32| !detachable.contains(&p) || level(p) <= cut;
    let parent_depths: BTreeSet<u32> = shape
        .iter()
        .filter(|n| below.get(&n.node).is_some_and(|b| !b.is_empty()))
        .map(|n| n.depth)
        .collect();
    let mut cuts = Vec::new();
    for depth in parent_depths {
        // Per phase at this depth: whether every node of it has no live descendant phase.
        let mut clean: BTreeMap<u32, bool> = BTreeMap::new();
        for n in shape.iter().filter(|n| n.depth == depth) {
            let Some(b) = below.get(&n.node).filter(|b| !b.is_empty()) else {
                continue;
            };
            let ok = live(n.phase, depth) && b.iter().all(|&p| !live(p, depth));
            *clean.entry(n.phase).or_insert(true) &= ok;
        }
        let clean: Vec<u32> = clean.into_iter().filter(|c| c.1).map(|c| c.0).collect();
        if clean.is_empty() {
            continue;
        }
        if depth == 0 {
            // A root's cut takes every other probe off, the other roots' too: their calls run
            // on other threads (a flush, a compaction), and probed they slow this root's. On
            // db_bench, probing the flush thread's table_add alone made the writes 10% longer
            // on the CPU and preempted them 4-9 times as much (benchmarks §41).
            for &root in &clean {
                let mut detach: Vec<u32> =
                    detachable.iter().copied().filter(|&p| p != root).collect();
                detach.sort_unstable();
                detach.dedup();
                cuts.push(Cut {
                    depth,
                    detach,
                    clean: vec![root],
                });
            }
            continue;
        }
        let mut detach: Vec<u32> = detachable
            .iter()
            .copied()
            .filter(|&p| !live(p, depth))
            .collect();
        detach.sort_unstable();
        cuts.push(Cut {
            depth,
            detach,
            clean,
        });
    }
    cuts
}

/// Per phase, the level whose probes it goes with: 0 for a phase mostly reached as a root,
/// else the depth where most of its calls are.
fn phase_levels(shape: &[ShapeNode]) -> HashMap<u32, u32> {
    let mut calls: HashMap<u32, BTreeMap<u32, u64>> = HashMap::new();
    for n in shape {
        *calls
            .entry(n.phase)
            .or_default()
            .entry(n.depth)
            .or_default() += n.calls.max(1);
    }
    calls
        .into_iter()
        .map(|(phase, by_depth)| {
            let all: u64 = by_depth.values().sum();
            let roots = by_depth.get(&0).copied().unwrap_or(0);
            let level = if roots as f64 > all as f64 * ROOT_SHARE_MAX {
                0
            } else {
                by_depth
                    .iter()
                    .filter(|(d, _)| **d > 0)
                    .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                    .map_or(0, |(d, _)| *d)
            };
            (phase, level)
        })
        .collect()
}

/// Per node, the phases of the nodes below it.
fn descendant_phases(shape: &[ShapeNode]) -> HashMap<u64, BTreeSet<u32>> {
    let by_node: HashMap<u64, &ShapeNode> = shape.iter().map(|n| (n.node, n)).collect();
    let mut below: HashMap<u64, BTreeSet<u32>> = HashMap::new();
    for n in shape {
        let mut up = n.parent;
        let mut steps = 0;
        while up != 0 && steps <= 64 {
            below.entry(up).or_default().insert(n.phase);
            up = by_node.get(&up).map_or(0, |p| p.parent);
            steps += 1;
        }
    }
    below
}

/// Which of `cuts` (from [`plan`], shallowest first) light epoch number `turn` takes: every
/// other epoch is a root's (the roots in turn), the others take the deeper cuts in turn. A
/// root's check is the one that sets the whole write's time, and each light epoch sees the
/// program in one state of its own (a flush running, a compaction), so the roots get half of
/// the epochs. None when there is no cut.
pub fn cut_for_turn(turn: usize, cuts: &[Cut]) -> Option<usize> {
    let roots = cuts.iter().filter(|c| c.depth == 0).count();
    let deeper = cuts.len() - roots;
    match (roots, deeper) {
        (0, 0) => None,
        (r, 0) => Some(turn % r),
        (0, d) => Some(turn % d),
        (r, _) if turn % 2 == 0 => Some((turn / 2) % r),
        (r, d) => Some(r + (turn / 2) % d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roots_take_every_other_epoch() {
        let cut = |depth| Cut {
            depth,
            detach: Vec::new(),
            clean: Vec::new(),
        };
        let turns = |cuts: &[Cut]| (0..8).map(|t| cut_for_turn(t, cuts)).collect::<Vec<_>>();
        assert_eq!(turns(&[]), vec![None; 8]);
        assert_eq!(turns(&[cut(0)]), vec![Some(0); 8]);
        assert_eq!(turns(&[cut(1)]), vec![Some(0); 8]);
        let two_roots_two_deeper: Vec<_> = turns(&[cut(0), cut(0), cut(1), cut(2)])
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(two_roots_two_deeper, vec![0, 2, 1, 3, 0, 2, 1, 3]);
        let one_root: Vec<_> = turns(&[cut(0), cut(1), cut(2)])
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(one_root, vec![0, 1, 0, 2, 0, 1, 0, 2]);
    }

    fn n(node: u64, parent: u64, phase: u32, calls: u64) -> ShapeNode {
        ShapeNode {
            node,
            parent,
            depth: 0,
            phase,
            calls,
        }
    }

    /// The nodes with their depths, from their parent chains (as the aggregator gives them).
    fn with_depths(mut nodes: Vec<ShapeNode>) -> Vec<ShapeNode> {
        let parent: HashMap<u64, u64> = nodes.iter().map(|n| (n.node, n.parent)).collect();
        for n in &mut nodes {
            let mut at = n.parent;
            while at != 0 {
                n.depth += 1;
                at = parent[&at];
            }
        }
        nodes
    }

    /// RocksDB's write: write_impl(0) > write_to_wal(1) > add_record(2) > append(3), and
    /// write_impl > memtable(4) > add(5); a flush thread's job(6) > table_add(7) > append(3),
    /// table_add being mostly a root (compactions).
    fn rocksdb() -> Vec<ShapeNode> {
        with_depths(vec![
            n(10, 0, 0, 1000),
            n(11, 10, 1, 1000),
            n(12, 11, 2, 1000),
            n(13, 12, 3, 2000),
            n(14, 10, 4, 1000),
            n(15, 14, 5, 1000),
            n(20, 0, 6, 2),
            n(21, 20, 7, 500),
            n(22, 21, 3, 40),
            n(30, 0, 7, 900),
        ])
    }

    #[test]
    fn each_parent_level_gets_a_cut_with_only_its_probes_live_below() {
        let all: Vec<u32> = (0..8).collect();
        let cuts = plan(&rocksdb(), &all);
        let depths: Vec<u32> = cuts.iter().map(|c| c.depth).collect();
        assert_eq!(depths, vec![0, 1, 2]);
        // Roots: write_impl is clean; the flush job is not (table_add, mostly a root, stays
        // live in every other cut). write_impl's cut takes every other probe off, the flush
        // thread's roots too.
        assert_eq!(cuts[0].clean, vec![0]);
        assert_eq!(cuts[0].detach, vec![1, 2, 3, 4, 5, 6, 7]);
        // Depth 1: write_to_wal and memtable, and table_add under the flush job (append, under
        // it, is off).
        assert_eq!(cuts[1].clean, vec![1, 4, 7]);
        assert_eq!(cuts[1].detach, vec![2, 3, 5]);
        assert_eq!(cuts[2].clean, vec![2]);
        assert_eq!(cuts[2].detach, vec![3]);
    }

    #[test]
    fn a_phase_that_cannot_come_off_keeps_its_parents_from_being_clean() {
        // A syscall phase (3) under add_record: not detachable.
        let detachable = [1, 2, 4, 5, 6, 7];
        let cuts = plan(&rocksdb(), &detachable);
        assert!(cuts.iter().all(|c| !c.detach.contains(&3)));
        // No root and no WAL level is ever clean: only memtable (no syscall under it).
        assert_eq!(cuts.len(), 1, "{cuts:?}");
        assert_eq!((cuts[0].depth, cuts[0].clean.clone()), (1, vec![4]));
    }

    #[test]
    fn each_clean_root_gets_a_cut_with_every_other_probe_off() {
        // Two roots on two threads: write(0) > wal(1), flush(2) > table_add(3); a leaf root
        // (4) of a third thread.
        let shape = with_depths(vec![
            n(10, 0, 0, 100),
            n(11, 10, 1, 100),
            n(20, 0, 2, 5),
            n(21, 20, 3, 500),
            n(30, 0, 4, 50),
        ]);
        let cuts = plan(&shape, &[0, 1, 2, 3, 4]);
        let roots: Vec<(Vec<u32>, Vec<u32>)> = cuts
            .iter()
            .filter(|c| c.depth == 0)
            .map(|c| (c.clean.clone(), c.detach.clone()))
            .collect();
        assert_eq!(
            roots,
            vec![(vec![0], vec![1, 2, 3, 4]), (vec![2], vec![0, 1, 3, 4])]
        );
        // No deeper level has a parent: the two roots' cuts take the epochs in turn.
        assert_eq!(cuts.len(), 2);
        assert_eq!(cut_for_turn(3, &cuts), Some(1));
    }

    #[test]
    fn leaves_alone_need_no_cut() {
        assert!(plan(&[n(1, 0, 0, 10), n(2, 0, 1, 10)], &[0, 1]).is_empty());
        assert!(plan(&[], &[0]).is_empty());
    }
}
