//! The stack of open phases of a thread or goroutine, in BPF.
//!
//! In: entries and returns already matched to their owner ([`Owner`]) and phase. Out: the
//! [`ThreadStack`] in `STACKS` (frames pushed at entries, popped at returns, abandoned when a
//! return was never seen: longjmp, exception, a missed kernel exit), the span of every
//! completed call (through `events`, or `kernel_agg` with in-kernel aggregation) and the
//! unmatched and abandoned counts (`maps`).

use aya_ebpf::{
    bindings::{BPF_ANY, BPF_F_NO_PREALLOC},
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user},
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use wprof_common::{
    config, counter, Event, EventKind, PhaseCounters, ThreadStack, FRAME_UNCOUNTED,
    FRAME_URETPROBE, GOROUTINE_KEY_BIT, MAX_DEPTH, MAX_THREADS,
};

use crate::events::{define_node, node_hash};
use crate::go::{emit_stw, stw_total, GO_PROCS};
use crate::kernel_agg::aggregate_call;
use crate::maps::{bump, count_abandoned, get_or_insert_with, CONFIG, PHASE_COSTS};
use crate::span_queue::{queue_span, send_queued};

/// Open phases per thread, keyed by pid_tgid, and per goroutine for Go phases (keyed by
/// `goroutine_key`). Allocated on the first entry; freed as `release_stack` says.
#[map]
pub(crate) static STACKS: HashMap<u64, ThreadStack> =
    HashMap::with_max_entries(MAX_THREADS, BPF_F_NO_PREALLOC);

/// A zeroed stack to copy from when a thread is first seen (a ThreadStack is too big for the
/// 512-byte BPF stack).
#[map]
static SCRATCH: PerCpuArray<ThreadStack> = PerCpuArray::with_max_entries(1, 0);

const DEPTH_MASK: usize = MAX_DEPTH - 1;
const _: () = assert!(MAX_DEPTH.is_power_of_two());

/// A frame index the verifier can prove in bounds. LLVM drops a plain `& DEPTH_MASK` when it
/// already knows the range from an earlier check, and may then index with another register
/// copy whose range the verifier never learned; the volatile read makes the value opaque so
/// the mask stays right before the access.
#[inline(always)]
pub(crate) fn slot(i: usize) -> usize {
    // SAFETY: reading a local through a valid reference.
    unsafe { core::ptr::read_volatile(&i) & DEPTH_MASK }
}

/// Whose phase stack a probe hit works on: `key` names it in `STACKS`, `id` is the thread's
/// pid_tgid (what events carry), `sp` the stack pointer as frames store it.
#[derive(Clone, Copy)]
pub(crate) struct Owner {
    /// The `STACKS` key: the thread's pid_tgid or a goroutine key.
    pub(crate) key: u64,
    /// The thread's pid_tgid.
    pub(crate) id: u64,
    /// The stack pointer as frames store it.
    pub(crate) sp: u64,
    /// The top of the goroutine's stack (`g.stack.hi`) for a goroutine's stack, else 0.
    pub(crate) hi: u64,
}

/// Whether phase `under - 1` is open on the thread (always true without `under`).
#[inline(always)]
pub(crate) fn inside(st: &ThreadStack, under: u32) -> bool {
    if under == 0 {
        return true;
    }
    let len = st.len as usize;
    for i in 0..MAX_DEPTH {
        // Volatile: otherwise LLVM rewrites the exit test as `i != min(len, MAX_DEPTH)`, from
        // which 6.1's verifier learns no bound (6.12's does): it walks i past 127 until "The
        // sequence of 8193 jumps is too complex" (EFAULT).
        // SAFETY: reading a local through a valid reference.
        if i >= unsafe { core::ptr::read_volatile(&len) } {
            break;
        }
        if st.frames[slot(i)].phase == under - 1 {
            return true;
        }
    }
    false
}

/// Whether the code just before `ret` is a call instruction, i.e. `ret` is a genuine return
/// address and not the uretprobe trampoline (the first slot of the kernel's page of probe
/// instructions, preceded by unmapped memory or by another page's bytes). Covers the forms
/// compilers emit: `call rel32`, `call *disp32(%rip)` (PLT-less calls through the GOT),
/// `call *%reg` and `call *disp8/disp32(%reg)`.
#[inline(always)]
fn follows_call(ret: u64) -> bool {
    // SAFETY: reads 8 bytes of the traced process's code; a fault just yields an error.
    let Ok(b) = (unsafe { bpf_probe_read_user(ret.wrapping_sub(8) as *const [u8; 8]) }) else {
        return false;
    };
    // b[7] is the byte just before `ret`. ModRM reg field 2 (/2) is CALL.
    b[3] == 0xe8 // call rel32
        || (b[2] == 0xff && b[3] == 0x15) // call *disp32(%rip)
        || (b[2] == 0xff && b[3] & 0xf8 == 0x90) // call *disp32(%reg)
        || (b[5] == 0xff && b[6] & 0xf8 == 0x50) // call *disp8(%reg) (C++ virtual calls)
        || (b[4] == 0x41 && b[5] == 0xff && b[6] & 0xf8 == 0x50) // call *disp8(%r8-r15)
        || (b[6] == 0xff && b[7] & 0xf8 == 0x10) // call *(%reg)
        || (b[5] == 0x41 && b[6] == 0xff && b[7] & 0xf8 == 0x10) // call *(%r8-r15)
        || (b[6] == 0xff && b[7] & 0xf8 == 0xd0) // call *%reg
        || (b[5] == 0x41 && b[6] == 0xff && b[7] & 0xf8 == 0xd0) // call *%r8-r15
}

/// The return address at `sp` on a function's entry (0 if it cannot be read).
#[inline(always)]
pub(crate) fn return_address(sp: u64) -> u64 {
    // SAFETY: reads 8 bytes of the traced thread's stack; a fault just yields an error.
    unsafe { bpf_probe_read_user(sp as *const u64) }.unwrap_or(0)
}

/// Pops frames that were left without a return we saw (longjmp, exception): those whose entry
/// stack pointer is below `sp`. With `entry_ret = Some(ret)` (an entry at `sp` whose return
/// address is `ret`), a frame at exactly `sp` is stale too. The one exception is a uretprobe
/// frame whose return slot the new call shares without a call instruction before it: the new
/// call is then a tail call made from that frame (its return address is the kernel's
/// trampoline) and nests inside it. A sibling called after a longjmp out of the frame returns
/// to its own call site, after a call instruction, so the frame is stale.
#[inline(always)]
pub(crate) fn abandon_below(st: &mut ThreadStack, sp: u64, entry_ret: Option<u64>) {
    for _ in 0..MAX_DEPTH {
        let len = st.len as usize;
        if len == 0 {
            break;
        }
        let top = &st.frames[slot(len - 1)];
        let gone = match entry_ret {
            Some(ret) if top.sp == sp => {
                // 0: the entry did not read it (a thread's frame: its sp is an address).
                let ret = if ret == 0 { return_address(sp) } else { ret };
                top.uretprobe & FRAME_URETPROBE == 0 || top.ret_addr == ret || follows_call(ret)
            }
            _ => top.sp < sp,
        };
        if !gone {
            break;
        }
        count_abandoned(top);
        st.len = (len - 1) as u32;
    }
}

/// Frees a goroutine's stack once its outermost phase returned (goroutines come and go by the
/// thousand, and nothing tells BPF when one ends). A thread keeps its stack, empty, until it
/// exits (`config::KEEP_THREAD_STACKS`; userspace frees those of exited threads): making one
/// copies a whole `ThreadStack` (~13 KB) from `SCRATCH`, which every root call paid when it was
/// freed at depth 0.
#[inline(always)]
pub(crate) fn release_stack(st: &mut ThreadStack, key: u64) {
    if key & GOROUTINE_KEY_BIT != 0
        || CONFIG.get(config::KEEP_THREAD_STACKS).copied().unwrap_or(0) == 0
    {
        // Its queued spans go first: the stack's memory goes with it.
        send_queued(st);
        let _ = STACKS.remove(&key);
    }
}

/// `key`'s stack of open phases, made (empty) when it has none; None when `STACKS` is full.
#[inline(always)]
pub(crate) fn stack_for(key: u64) -> Option<&'static mut ThreadStack> {
    let st = get_or_insert_with(&STACKS, &key, || {
        let scratch = SCRATCH.get_ptr_mut(0)?;
        // SAFETY: per-CPU scratch value, exclusively ours while we run.
        let scratch = unsafe { &mut *scratch };
        scratch.len = 0;
        scratch.tramp = 0;
        scratch.pending = 0;
        scratch.tgid = if key & GOROUTINE_KEY_BIT != 0 {
            let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
            let one = 1u8;
            let _ = GO_PROCS.insert(&tgid, &one, BPF_ANY as u64);
            tgid
        } else {
            0
        };
        Some(&*scratch)
    })?;
    // SAFETY: a thread's stack is only touched by programs running on that thread.
    Some(unsafe { &mut *st })
}

/// Opens a frame for `phase` on the thread's stack. Kernel phases use `sp = 0`: no user
/// stack pointer is ever below it, so the next uprobe on the thread treats a kernel frame left
/// open (an exit we never saw) as abandoned.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_frame(
    st: &mut ThreadStack,
    pc: &mut PhaseCounters,
    who: Owner,
    phase: u32,
    ret_addr: u64,
    flags: u32,
    arg: u64,
    stw: u64,
    key: u64,
) -> Result<(), ()> {
    let len = st.len as usize;
    if len >= MAX_DEPTH {
        if flags & FRAME_UNCOUNTED == 0 {
            pc.entries += 1;
        }
        pc.overflow += 1;
        bump(counter::OVERFLOW);
        return Err(());
    }
    let (parent, parent_flags) = if len == 0 {
        (0, 0)
    } else {
        let p = &st.frames[slot(len - 1)];
        (p.node, p.uretprobe)
    };
    // A call inside one nobody counts is not counted either, and shapes no node of the tree
    // (a closing phase's last calls would otherwise leave paths no counted call takes).
    let flags = flags | (parent_flags & FRAME_UNCOUNTED);
    // A grouped call's string key makes its node (and the subtree below) one of its own.
    let node = node_hash(parent ^ key, phase);
    if flags & FRAME_UNCOUNTED == 0 {
        pc.entries += 1;
        define_node(node, parent, phase, len as u32, who.id, key != 0);
    }
    let frame = &mut st.frames[slot(len)];
    frame.node = node;
    frame.sp = who.sp;
    frame.child_ns = 0;
    frame.off_ns = 0;
    frame.preempted_ns = 0;
    frame.wprof_ns = 0;
    frame.phase = phase;
    frame.ret_addr = ret_addr;
    frame.uretprobe = flags;
    frame.arg = arg;
    frame.desc_probe_ns = 0;
    frame.desc_hits = 0;
    frame.stw_at_entry = stw;
    frame.stw_child_ns = 0;
    st.entries = st.entries.wrapping_add(1);
    // Last, so the bookkeeping above is not counted inside the phase.
    // SAFETY: plain helper call.
    frame.start_ns = unsafe { bpf_ktime_get_ns() };
    st.len = len as u32 + 1;
    Ok(())
}

/// Whether the innermost open frame is `phase`'s call entered at `sp`.
#[inline(always)]
pub(crate) fn top_is(st: &ThreadStack, phase: u32, sp: u64) -> bool {
    let len = st.len as usize;
    if len == 0 || len > MAX_DEPTH {
        return false;
    }
    let top = &st.frames[slot(len - 1)];
    top.phase == phase && top.sp == sp
}

#[inline(always)]
fn count_unmatched(pc: &mut PhaseCounters) {
    pc.unmatched_returns += 1;
    bump(counter::UNMATCHED_RETURNS);
}

/// Finds the thread's stack for a return of the phase; a thread without one has no open
/// phase, so the return is counted, and counted as unmatched (e.g. its call started before
/// the attach) when `count_missing`. [`pop_frame`] counts the others, and the caller those
/// it leaves alone.
#[inline(always)]
pub(crate) fn returning_stack(
    pc: &mut PhaseCounters,
    key: u64,
    count_missing: bool,
) -> Result<&'static mut ThreadStack, ()> {
    let Some(st) = STACKS.get_ptr_mut(&key) else {
        pc.returns += 1;
        if count_missing {
            count_unmatched(pc);
        }
        return Err(());
    };
    // SAFETY: a thread's stack is only touched by programs running on that thread.
    Ok(unsafe { &mut *st })
}

/// Closes the innermost frame if it is `phase`'s at `sp`, and sends its span, carrying the
/// return value instead of the entry's captured argument when `retval` is given.
#[inline(always)]
pub(crate) fn pop_frame(
    st: &mut ThreadStack,
    pc: &mut PhaseCounters,
    who: Owner,
    phase: u32,
    now: u64,
    retval: Option<u64>,
) -> Result<(), ()> {
    if !top_is(st, phase, who.sp) {
        pc.returns += 1;
        count_unmatched(pc);
        return Err(());
    }
    let len = st.len as usize;
    let mut top = st.frames[slot(len - 1)];
    if top.uretprobe & FRAME_UNCOUNTED != 0 {
        // Entered while the run or its phase was closing: gone, and never counted.
        st.len = (len - 1) as u32;
        if len == 1 {
            release_stack(st, who.key);
        }
        return Ok(());
    }
    pc.returns += 1;
    let dur = now.saturating_sub(top.start_ns);
    let depth = len - 1;
    let cost = PHASE_COSTS.get(phase).copied().unwrap_or_default();
    let kernel_aggregate = CONFIG.get(config::KERNEL_AGGREGATE).copied().unwrap_or(0) != 0;
    // A Go call the world was stopped during: the pauses not already shown under its
    // children become a child of the stop-the-world phase.
    let mut stw = 0;
    if who.hi != 0 {
        stw = stw_total((who.id >> 32) as u32).saturating_sub(top.stw_at_entry);
        let own = stw.saturating_sub(top.stw_child_ns);
        let stw_phase = CONFIG.get(config::GO_STW_PHASE).copied().unwrap_or(0);
        if own > 0 && stw_phase != 0 {
            top.child_ns += own;
            emit_stw(
                &top,
                (stw_phase - 1) as u32,
                depth as u32 + 1,
                own,
                now,
                &who,
                kernel_aggregate,
            );
        }
    }
    let parent = if depth == 0 {
        0
    } else {
        let pair_ns = cost.pair_ns;
        let p = &mut st.frames[slot(depth - 1)];
        p.child_ns += dur;
        p.off_ns += top.off_ns;
        p.preempted_ns += top.preempted_ns;
        p.wprof_ns += top.wprof_ns;
        p.desc_probe_ns += top.desc_probe_ns + pair_ns;
        p.desc_hits += top.desc_hits + 2;
        p.stw_child_ns += stw;
        p.node
    };
    st.len = depth as u32;
    let arg = retval.unwrap_or(top.arg);
    if kernel_aggregate {
        if depth == 0 {
            release_stack(st, who.key);
        }
        aggregate_call(&top, dur, arg, cost.own_ns);
        return Ok(());
    }
    let span = Event {
        kind: EventKind::Span as u32,
        phase,
        pid: (who.id >> 32) as u32,
        tid: who.id as u32,
        node: top.node,
        parent,
        start_ns: top.start_ns,
        dur_ns: dur,
        child_ns: top.child_ns,
        depth: depth as u32,
        desc_hits: top.desc_hits.min(u32::MAX as u64) as u32,
        off_ns: top.off_ns,
        arg,
        desc_probe_ns: top.desc_probe_ns,
        stack: who.key,
        preempted_ns: top.preempted_ns,
        wprof_ns: top.wprof_ns,
    };
    queue_span(st, span, now, depth == 0);
    if depth == 0 {
        release_stack(st, who.key);
    }
    Ok(())
}
