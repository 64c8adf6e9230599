//! CPU samples and off-CPU records -> folded stacks under their phase paths.
//!
//! In: [`StackEvent`]s as collect decodes them (a stack id pair, the innermost open phase and
//! a weight). Out: per distinct (process, phase node, stacks) the summed weight, and at the
//! end of the run, with the stacks read from BPF and a [`FrameNamer`] to name their frames, a
//! [`StackProfile`] of folded lines `phase;...;phase;user frames;kernel frames weight`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use wprof_common::{EventKind, StackEvent, MAX_PENDING_RETURNS};

use crate::model::{FoldedStack, StackProfile};

/// The first frame of stacks taken while no phase was open on the thread.
pub const OUTSIDE_PHASES: &str = "[outside phases]";

/// The user frames of a stack taken while the kernel was handling a uprobe hit: the probe's
/// cost, made visible under the phase it lands in.
pub const UPROBE_HANDLING: &str = "[uprobe handling]";

/// Kernel functions that mean the sample fell inside uprobe handling (the breakpoint trap,
/// the single-step that follows it, the uretprobe trampoline). The user stack of such a
/// sample cannot be trusted: the thread is stopped between a breakpoint and the function's
/// frame set-up, or a uretprobe return is half done (its return address already restored
/// while the open phase is not yet closed), so a frame-pointer walk skips or repeats callers.
const UPROBE_KERNEL_FRAMES: &[&str] = &[
    "asm_exc_int3_[k]",
    "asm_exc_debug_[k]",
    "handle_swbp_[k]",
    "uprobe_notify_resume_[k]",
    "__do_sys_uretprobe_[k]",
    "uprobe_handle_trampoline_[k]",
];

/// What identifies one aggregated stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StackKey {
    /// Process (its mappings name the user frames).
    pub pid: u32,
    /// Innermost open phase node, 0 for none.
    pub node: u64,
    /// User stack id, negative for none.
    pub user_stack: i32,
    /// Kernel stack id, negative for none.
    pub kernel_stack: i32,
    /// Return addresses the uretprobe trampoline replaced, innermost first.
    pub pending: [u64; MAX_PENDING_RETURNS],
    /// Valid entries of `pending`.
    pub npending: u32,
}

/// Weights per distinct stack of one kind (CPU or off-CPU).
#[derive(Debug, Clone, Default)]
pub struct StackCounts {
    /// Summed weight per stack.
    pub weights: HashMap<StackKey, u64>,
    /// Records added.
    pub records: u64,
}

/// Both kinds of stack records of a run.
#[derive(Debug, Clone, Default)]
pub struct StackAggregator {
    /// CPU samples (weight 1 each).
    pub cpu: StackCounts,
    /// Off-CPU intervals (weight = ns off the CPU).
    pub off_cpu: StackCounts,
    /// CPU samples per thread (`pid << 32 | tid`) and kernel stack id (negative: taken in
    /// user mode), for the in-situ measure of the probes' time while the run goes on
    /// (`session::probe_time`).
    pub cpu_by_kernel_stack: HashMap<(u64, i32), u64>,
    seen_pids: HashSet<u32>,
    new_pids: Vec<u32>,
}

impl StackAggregator {
    /// Adds one record.
    pub fn add(&mut self, ev: &StackEvent) {
        let counts = if ev.kind == EventKind::CpuSample as u32 {
            let thread = (ev.pid as u64) << 32 | ev.tid as u64;
            *self
                .cpu_by_kernel_stack
                .entry((thread, ev.kernel_stack))
                .or_default() += 1;
            &mut self.cpu
        } else if ev.kind == EventKind::OffCpu as u32 {
            &mut self.off_cpu
        } else {
            return;
        };
        let n = (ev.npending as usize).min(MAX_PENDING_RETURNS);
        let mut pending = [0u64; MAX_PENDING_RETURNS];
        pending[..n].copy_from_slice(&ev.pending_returns[..n]);
        let key = StackKey {
            pid: ev.pid,
            node: ev.node,
            user_stack: ev.user_stack,
            kernel_stack: ev.kernel_stack,
            pending,
            npending: n as u32,
        };
        *counts.weights.entry(key).or_default() += ev.weight;
        counts.records += 1;
        if self.seen_pids.insert(ev.pid) {
            self.new_pids.push(ev.pid);
        }
    }

    /// Processes seen for the first time since the last call (their mappings should be read
    /// while they are alive).
    pub fn take_new_pids(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.new_pids)
    }

    /// Every process seen.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.seen_pids.iter().copied()
    }

    /// Every stack id the records refer to.
    pub fn stack_ids(&self) -> BTreeSet<u32> {
        self.cpu
            .weights
            .keys()
            .chain(self.off_cpu.weights.keys())
            .flat_map(|k| [k.user_stack, k.kernel_stack])
            .filter_map(|id| u32::try_from(id).ok())
            .collect()
    }
}

/// Names the frames of raw stacks.
pub trait FrameNamer {
    /// User frames of process `pid`, outermost first, from addresses innermost first; `pending`
    /// are the return addresses uretprobe trampolines replaced, innermost first.
    fn user_frames(&mut self, pid: u32, stack: &[u64], pending: &[u64]) -> Vec<String>;
    /// Kernel frames, outermost first, from addresses innermost first.
    fn kernel_frames(&mut self, stack: &[u64]) -> Vec<String>;
}

/// The addresses of stack `id` (innermost first); empty for none (a negative id: no stack
/// was taken) or one the map no longer holds.
pub fn stack_of(stacks: &HashMap<u32, Vec<u64>>, id: i32) -> &[u64] {
    u32::try_from(id)
        .ok()
        .and_then(|id| stacks.get(&id))
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Whether a sample's kernel frames (named) are the kernel handling a uprobe: the probes'
/// time, not the program's.
pub fn in_uprobe_handling(kernel_frames: &[String]) -> bool {
    kernel_frames
        .iter()
        .any(|f| UPROBE_KERNEL_FRAMES.contains(&f.as_str()))
}

/// Folds one kind of stacks into a profile: each line is the phase path (or
/// [`OUTSIDE_PHASES`]), then the user frames, then the kernel frames. `stacks` maps stack ids
/// to addresses; `path_of` gives a node's phase names from the root.
pub fn fold<'n>(
    counts: &StackCounts,
    stacks: &HashMap<u32, Vec<u64>>,
    path_of: impl Fn(u64) -> Vec<Cow<'n, str>>,
    namer: &mut dyn FrameNamer,
) -> Vec<FoldedStack> {
    let mut folded: BTreeMap<String, u64> = BTreeMap::new();
    let lookup = |id: i32| stack_of(stacks, id);
    for (key, &weight) in &counts.weights {
        let mut frames: Vec<String> = if key.node == 0 {
            vec![OUTSIDE_PHASES.to_string()]
        } else {
            let path = path_of(key.node);
            if path.is_empty() {
                vec!["[unknown phase]".to_string()]
            } else {
                path.into_iter().map(Cow::into_owned).collect()
            }
        };
        let kernel = namer.kernel_frames(lookup(key.kernel_stack));
        if in_uprobe_handling(&kernel) {
            frames.push(UPROBE_HANDLING.to_string());
        } else {
            let user = lookup(key.user_stack);
            let pending = &key.pending[..key.npending as usize];
            frames.extend(namer.user_frames(key.pid, user, pending));
        }
        frames.extend(kernel);
        // ';' separates frames in the folded format; a name holding one would split.
        let line = frames
            .iter()
            .map(|f| f.replace(';', ":"))
            .collect::<Vec<_>>()
            .join(";");
        *folded.entry(line).or_default() += weight;
    }
    folded
        .into_iter()
        .map(|(stack, weight)| FoldedStack { stack, weight })
        .collect()
}

/// A profile of one kind from its folded stacks.
pub fn profile(
    unit: &str,
    frequency_hz: Option<u64>,
    counts: &StackCounts,
    lost: u64,
    stacks: Vec<FoldedStack>,
) -> StackProfile {
    StackProfile {
        unit: unit.to_string(),
        frequency_hz,
        records: counts.records,
        lost,
        stacks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Hex;
    impl FrameNamer for Hex {
        fn user_frames(&mut self, _pid: u32, stack: &[u64], pending: &[u64]) -> Vec<String> {
            let mut v: Vec<String> = stack.iter().rev().map(|a| format!("u{a:x}")).collect();
            v.extend(pending.iter().map(|a| format!("p{a:x}")));
            v
        }
        fn kernel_frames(&mut self, stack: &[u64]) -> Vec<String> {
            stack.iter().rev().map(|a| format!("k{a:x}_[k]")).collect()
        }
    }

    fn ev(kind: EventKind, node: u64, user: i32, kernel: i32, weight: u64) -> StackEvent {
        StackEvent {
            kind: kind as u32,
            pid: 7,
            tid: 7,
            node,
            weight,
            user_stack: user,
            kernel_stack: kernel,
            ..StackEvent::default()
        }
    }

    #[test]
    fn folds_under_phase_paths_user_then_kernel_frames() {
        let mut a = StackAggregator::default();
        a.add(&ev(EventKind::CpuSample, 5, 1, -1, 1));
        a.add(&ev(EventKind::CpuSample, 5, 1, -1, 1));
        a.add(&ev(EventKind::CpuSample, 0, 1, 2, 1));
        a.add(&ev(EventKind::OffCpu, 5, 1, 2, 1500));
        assert_eq!(a.take_new_pids(), [7]);
        assert!(a.take_new_pids().is_empty());
        assert_eq!(a.stack_ids().into_iter().collect::<Vec<_>>(), [1, 2]);
        let stacks = HashMap::from([(1, vec![0x10, 0x20]), (2, vec![0xa, 0xb])]);
        let path = |n: u64| {
            if n == 5 {
                vec![Cow::Borrowed("w"), Cow::Borrowed("sync")]
            } else {
                vec![]
            }
        };
        let cpu = fold(&a.cpu, &stacks, path, &mut Hex);
        assert_eq!(
            cpu,
            [
                FoldedStack {
                    stack: "[outside phases];u20;u10;kb_[k];ka_[k]".into(),
                    weight: 1
                },
                FoldedStack {
                    stack: "w;sync;u20;u10".into(),
                    weight: 2
                },
            ]
        );
        let off = fold(&a.off_cpu, &stacks, path, &mut Hex);
        // A sample inside uprobe handling keeps its kernel frames, not its user stack.
        let mut b = StackAggregator::default();
        b.add(&ev(EventKind::CpuSample, 5, 1, 3, 1));
        let trap = HashMap::from([(1, vec![0x10]), (3, vec![0xe])]);
        struct Trap;
        impl FrameNamer for Trap {
            fn user_frames(&mut self, _: u32, _: &[u64], _: &[u64]) -> Vec<String> {
                vec!["main".into()]
            }
            fn kernel_frames(&mut self, _: &[u64]) -> Vec<String> {
                vec!["asm_exc_int3_[k]".into(), "handle_swbp_[k]".into()]
            }
        }
        let t = fold(&b.cpu, &trap, path, &mut Trap);
        assert_eq!(
            t[0].stack,
            "w;sync;[uprobe handling];asm_exc_int3_[k];handle_swbp_[k]"
        );
        assert_eq!(off[0].stack, "w;sync;u20;u10;kb_[k];ka_[k]");
        assert_eq!(off[0].weight, 1500);
        let p = profile("ns", None, &a.off_cpu, 0, off);
        assert_eq!(p.records, 1);
        assert_eq!(p.folded(), "w;sync;u20;u10;kb_[k];ka_[k] 1500\n");
    }
}
