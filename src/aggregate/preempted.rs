//! Preempted time: the part of a phase's off-CPU time its thread spent runnable, waiting for
//! a CPU, rather than waiting for something (a lock, I/O, a sleep).
//!
//! In: each off-CPU record's kernel stack (named, outermost first) and weight, and the phase
//! path it was under. Out: per tree node, `preempted_ns` beside `off_cpu_ns`.
//!
//! Why it matters: a probe's trap returns to user mode through the kernel's reschedule point,
//! and on a host with no spare CPU wprof's own reader is one more runnable thread. With every
//! phase of the `rocksdb` profile probed, db_bench's writer spent 1.7-2.9 µs of each ~6 µs
//! corrected write preempted, 47% of it at the return from the breakpoint trap (benchmarks
//! §37): time the probes cost that no per-hit price holds.

use std::collections::HashMap;

use crate::model::{PhaseTree, TreeNode};

/// Kernel frames that only lead into the switch itself, skipped to find who asked for it.
const SWITCH_FRAMES: &[&str] = &["__schedule_[k]", "schedule_[k]"];

/// Parts of the names of the kernel functions that switch a task that is still runnable: the
/// return to user mode (from a syscall, a trap or an interrupt), an interrupt's exit in the
/// kernel, the preemption and reschedule points, and a yield. Their names moved between
/// kernels (6.1's `exit_to_user_mode_loop`, 6.18's `irqentry_exit_to_user_mode`), so parts.
const PREEMPTING: &[&str] = &[
    "exit_to_user_mode",
    "irqentry_exit",
    "preempt_schedule",
    "cond_resched",
    "sched_yield",
];

/// Whether an off-CPU record whose kernel stack is `frames` (named, outermost first) left
/// the CPU runnable: the first frame outside the switch itself is a preemption point. An
/// empty stack (none taken) is not.
pub fn is_preemption(frames: &[String]) -> bool {
    frames
        .iter()
        .rev()
        .find(|f| !SWITCH_FRAMES.contains(&f.as_str()))
        .is_some_and(|f| PREEMPTING.iter().any(|p| f.contains(p)))
}

/// Sets `preempted_ns` on every node of `tree` that tracks off-CPU time, from `by_path`
/// (preempted ns by node path of labels from the root, each record counted against its node
/// and every ancestor), at most the node's `off_cpu_ns`.
pub fn mark(tree: &mut PhaseTree, by_path: &HashMap<Vec<String>, u64>) {
    let mut path = Vec::new();
    for root in &mut tree.roots {
        mark_node(root, by_path, &mut path);
    }
}

fn mark_node(n: &mut TreeNode, by_path: &HashMap<Vec<String>, u64>, path: &mut Vec<String>) {
    path.push(n.label().into_owned());
    n.preempted_ns = n
        .off_cpu_ns
        .map(|off| by_path.get(path.as_slice()).copied().unwrap_or(0).min(off));
    for c in &mut n.children {
        mark_node(c, by_path, path);
    }
    path.pop();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| format!("{n}_[k]")).collect()
    }

    #[test]
    fn returns_to_user_mode_and_reschedule_points_are_preemptions() {
        for stack in [
            // 6.18: the return from a uprobe's breakpoint trap, a syscall's exit, a tick.
            &[
                "asm_exc_int3",
                "irqentry_exit_to_user_mode",
                "schedule",
                "__schedule",
            ][..],
            &[
                "do_syscall_64",
                "exit_to_user_mode_loop",
                "schedule",
                "__schedule",
            ],
            &[
                "asm_sysvec_apic_timer_interrupt",
                "irqentry_exit_to_user_mode",
                "schedule",
                "__schedule",
            ],
            // A reschedule point inside a long write, and kernel preemption at an interrupt.
            &[
                "ext4_buffered_write_iter",
                "generic_perform_write",
                "__cond_resched",
                "__schedule",
            ],
            &[
                "asm_sysvec_apic_timer_interrupt",
                "irqentry_exit",
                "preempt_schedule_irq",
                "__schedule",
            ],
            &[
                "__x64_sys_sched_yield",
                "do_sched_yield",
                "schedule",
                "__schedule",
            ],
        ] {
            assert!(is_preemption(&frames(stack)), "{stack:?}");
        }
    }

    #[test]
    fn waits_are_not_preemptions() {
        for stack in [
            &[
                "do_syscall_64",
                "__x64_sys_futex",
                "futex_wait_queue",
                "schedule",
                "__schedule",
            ][..],
            &[
                "__x64_sys_clock_nanosleep",
                "do_nanosleep",
                "schedule",
                "__schedule",
            ],
            // "preempt" in a lock's wait is not a preemption.
            &[
                "rwsem_down_read_slowpath",
                "schedule_preempt_disabled",
                "schedule",
                "__schedule",
            ],
            &["ext4_sync_file", "io_schedule", "schedule", "__schedule"],
            &[],
        ] {
            assert!(!is_preemption(&frames(stack)), "{stack:?}");
        }
    }

    #[test]
    fn each_node_gets_its_own_path_and_never_more_than_its_off_cpu_time() {
        let mut child = TreeNode::empty(1, "flush".into(), None);
        child.off_cpu_ns = Some(300);
        let mut root = TreeNode::empty(0, "write".into(), None);
        root.off_cpu_ns = Some(1_000);
        root.children.push(child);
        let mut untracked = TreeNode::empty(2, "other".into(), None);
        untracked
            .children
            .push(TreeNode::empty(3, "inner".into(), None));
        let mut tree = PhaseTree {
            roots: vec![root, untracked],
            ..Default::default()
        };
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let by_path: HashMap<Vec<String>, u64> = [
            (path(&["write"]), 700),
            (path(&["write", "flush"]), 450),
            (path(&["other"]), 5),
        ]
        .into();
        mark(&mut tree, &by_path);
        assert_eq!(tree.roots[0].preempted_ns, Some(700));
        // Its off-CPU time bounds it (the two figures come from different records).
        assert_eq!(tree.roots[0].children[0].preempted_ns, Some(300));
        // No off-CPU tracking, no figure.
        assert_eq!(tree.roots[1].preempted_ns, None);
        assert_eq!(tree.roots[1].children[0].preempted_ns, None);
    }
}
