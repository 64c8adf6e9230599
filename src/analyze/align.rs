//! Lining up the nodes of two phase trees, and the statistics compare computes on them.
//!
//! A node's key is its path from a root: phase names (`--by phase`) or roles, a phase without
//! a role keeping its name (`--by role`). Nodes of one run with the same key (two sibling
//! phases with one role) are merged: counts, times and histograms add up.

use crate::model::{AlignBy, Keyed, NodeStats, PhaseTree, TreeNode};

/// The key element of a node.
fn key_of(n: &TreeNode, by: AlignBy) -> String {
    match by {
        AlignBy::Phase => n.label().into_owned(),
        AlignBy::Role => match (&n.role, &n.key) {
            (Some(r), Some(k)) => crate::model::keyed_name(r, k),
            (Some(r), None) => r.clone(),
            (None, _) => n.label().into_owned(),
        },
    }
}

/// Keys every node of a tree.
pub fn key_tree(tree: &PhaseTree, by: AlignBy) -> Keyed {
    fn walk(
        n: &TreeNode,
        by: AlignBy,
        key: &mut Vec<String>,
        names: &mut Vec<String>,
        out: &mut Keyed,
    ) {
        key.push(key_of(n, by));
        names.push(n.label().into_owned());
        match out.nodes.get_mut(key.as_slice()) {
            Some(s) => s.merge(n),
            None => {
                out.order.push(key.clone());
                out.nodes
                    .insert(key.clone(), NodeStats::from_node(names.clone(), n));
            }
        }
        for c in &n.children {
            walk(c, by, key, names, out);
        }
        key.pop();
        names.pop();
    }
    let mut out = Keyed::default();
    for r in &tree.roots {
        walk(r, by, &mut Vec::new(), &mut Vec::new(), &mut out);
        out.root_calls += r.count;
        match out.total.as_mut() {
            Some(t) => t.merge(r),
            None => out.total = Some(NodeStats::from_node(vec!["total".into()], r)),
        }
    }
    out
}

/// The union of the keys of two runs: base order first, then keys only in `new`, each
/// new-only key placed after the last key of its parent path seen so far.
pub fn union_order(base: &Keyed, new: &Keyed) -> Vec<Vec<String>> {
    let mut order = base.order.clone();
    for k in &new.order {
        if base.nodes.contains_key(k) {
            continue;
        }
        // Insert after the last entry that has the parent of `k` as a prefix.
        let parent = &k[..k.len() - 1];
        let pos = order
            .iter()
            .rposition(|o| !parent.is_empty() && o.starts_with(parent))
            .map(|p| p + 1)
            .unwrap_or(order.len());
        order.insert(pos, k.clone());
    }
    order
}

/// Two-sided p-value of Welch's t-test on two means, normal approximation (the counts
/// compare works with are large). `None` when a side has fewer than two calls.
pub fn welch_p(m1: f64, s1: f64, n1: u64, m2: f64, s2: f64, n2: u64) -> Option<f64> {
    if n1 < 2 || n2 < 2 {
        return None;
    }
    let se2 = s1 * s1 / n1 as f64 + s2 * s2 / n2 as f64;
    if se2 <= 0.0 || !se2.is_finite() {
        return Some(if m1 == m2 { 1.0 } else { 0.0 });
    }
    let t = (m1 - m2).abs() / se2.sqrt();
    Some(erfc(t / std::f64::consts::SQRT_2).clamp(0.0, 1.0))
}

/// Complementary error function (Chebyshev fit, relative error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Relative change from `base` to `new` (new / base - 1); infinite when base is 0 and new not.
pub fn relative(base: f64, new: f64) -> f64 {
    if base == 0.0 {
        if new == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        new / base - 1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_known_values() {
        assert!((erfc(0.0) - 1.0).abs() < 1e-6);
        assert!((erfc(1.0) - 0.157_299_207).abs() < 1e-6);
        assert!((erfc(-1.0) - 1.842_700_793).abs() < 1e-6);
        assert!(erfc(6.0) < 1e-15);
    }

    #[test]
    fn welch_p_values() {
        // t = 1.96 -> p = 0.05.
        let p = welch_p(101.96, 10.0, 100, 100.0, 0.0, 100).unwrap();
        assert!((p - 0.05).abs() < 1e-3, "{p}");
        // Same means: p = 1.
        assert!((welch_p(5.0, 1.0, 10, 5.0, 2.0, 10).unwrap() - 1.0).abs() < 1e-6);
        // Unequal variances: t = 10 / sqrt(100/100 + 400/400) = 7.07 -> p ~ 1.5e-12.
        let p = welch_p(110.0, 10.0, 100, 100.0, 20.0, 400).unwrap();
        assert!(p < 1e-10, "{p}");
        // Symmetric.
        assert_eq!(
            welch_p(1.0, 1.0, 50, 1.3, 2.0, 60),
            welch_p(1.3, 2.0, 60, 1.0, 1.0, 50)
        );
        // Too few calls.
        assert_eq!(welch_p(1.0, 0.0, 1, 2.0, 0.0, 100), None);
        // No spread at all.
        assert_eq!(welch_p(1.0, 0.0, 10, 2.0, 0.0, 10), Some(0.0));
        assert_eq!(welch_p(1.0, 0.0, 10, 1.0, 0.0, 10), Some(1.0));
    }

    #[test]
    fn relative_changes() {
        assert!((relative(100.0, 120.0) - 0.2).abs() < 1e-12);
        assert_eq!(relative(0.0, 0.0), 0.0);
        assert!(relative(0.0, 1.0).is_infinite());
    }

    fn node(name: &str, role: Option<&str>, count: u64, children: Vec<TreeNode>) -> TreeNode {
        let mut n = TreeNode::empty(0, name.into(), role.map(String::from));
        n.count = count;
        n.total_ns = count * 100;
        n.self_ns = count * 10;
        for _ in 0..count {
            n.hist.record(100).unwrap();
        }
        n.children = children;
        n
    }

    #[test]
    fn role_keys_merge_and_fall_back_to_names() {
        let tree = PhaseTree {
            roots: vec![node(
                "tuple_insert",
                Some("insert"),
                10,
                vec![
                    node("a", Some("wal"), 5, vec![]),
                    node("b", Some("wal"), 7, vec![]),
                    node("plain", None, 1, vec![]),
                ],
            )],
            ..Default::default()
        };
        let k = key_tree(&tree, AlignBy::Role);
        assert_eq!(k.root_calls, 10);
        let wal = &k.nodes[&vec!["insert".to_string(), "wal".to_string()]];
        assert_eq!(wal.count, 12);
        assert_eq!(wal.hist.len(), 12);
        assert!(k
            .nodes
            .contains_key(&vec!["insert".to_string(), "plain".to_string()]));
        let k = key_tree(&tree, AlignBy::Phase);
        assert_eq!(k.order.len(), 4);
    }
}
