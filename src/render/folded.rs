//! Folded stacks of phase self time, the input of flamegraph tools.
//!
//! In: a [`PhaseTree`]. Out: one line per node with nonzero self time, `root;child;leaf <ns>`
//! (the count is integer ns of self time), in depth-first tree order (roots and children in the
//! tree's order, largest total first). A flamegraph of these lines gives each phase a frame as
//! wide as its total: its self time plus its children's frames. The text is the standard folded
//! format, so inferno, flamegraph.pl and speedscope all read it.

use crate::model::{PhaseTree, TreeNode};

/// Folded self-time stacks of the tree, one line per node with self time, newline-terminated.
pub fn folded(tree: &PhaseTree) -> String {
    let mut out = String::new();
    let mut path = Vec::new();
    for root in &tree.roots {
        fold(root, &mut path, &mut out);
    }
    out
}

fn fold(node: &TreeNode, path: &mut Vec<String>, out: &mut String) {
    path.push(frame_name(&node.label()));
    if node.self_ns > 0 {
        out.push_str(&path.join(";"));
        out.push(' ');
        out.push_str(&node.self_ns.to_string());
        out.push('\n');
    }
    for c in &node.children {
        fold(c, path, out);
    }
    path.pop();
}

/// A phase name as one folded frame: `;` separates frames and a newline ends the line, so
/// both become `_` (profile names never contain them; a hand-edited RUN.json might).
fn frame_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c == ';' || c == '\n' || c == '\r' {
                '_'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testutil::sample_run;

    #[test]
    fn lines_parse_back_and_sum_to_root_totals() {
        let run = sample_run();
        let text = folded(&run.tree);
        let mut sum = 0u64;
        for line in text.lines() {
            let count = line
                .split_whitespace()
                .last()
                .and_then(|c| c.parse::<u64>().ok());
            let Some(count) = count else {
                panic!("no integer count in {line:?}")
            };
            assert!(count > 0, "{line}");
            sum += count;
        }
        let roots: u64 = run.tree.roots.iter().map(|r| r.total_ns).sum();
        assert_eq!(sum, roots);
    }

    #[test]
    fn paths_in_tree_order() {
        let run = sample_run();
        let text = folded(&run.tree);
        let stacks: Vec<&str> = text
            .lines()
            .filter_map(|l| l.rsplit_once(' ').map(|(s, _)| s))
            .collect();
        assert_eq!(
            stacks,
            [
                "write_record",
                "write_record;wal_append",
                "write_record;wal_append;wal_sync",
                "write_record;persist_block",
                "write_record;persist_block;compress_block",
                "write_record;persist_block;flush_block",
                "write_record;encode_record",
                "vacuum_page",
            ]
        );
    }

    #[test]
    fn separators_in_names_are_replaced() {
        assert_eq!(frame_name("a;b\nc"), "a_b_c");
    }

    #[test]
    fn empty_tree_gives_no_lines() {
        assert_eq!(folded(&PhaseTree::default()), "");
    }
}
