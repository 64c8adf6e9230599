//! wprof's eBPF side: per-thread phase stacks and completed-span events.
//!
//! In: uprobe hits at phase entries and exits (RET sites or uretprobes), each carrying an
//! attach cookie `kind << 32 | phase`. Out: `Event`s in the `EVENTS` ring buffer (one span per
//! completed call, one definition per new tree node) and counters in maps.
//!
//! The stack of open phases lives here, not in userspace, so a lost event never corrupts the
//! nesting of later calls: parents learn their children's time from the stack itself.
#![no_std]
#![no_main]
// aya's #[uprobe] macros generate undocumented wrapper functions; the programs themselves are
// documented on their definitions below.
#![allow(missing_docs)]

use aya_ebpf::{
    bindings::{
        BPF_ANY, BPF_F_NO_PREALLOC, BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP,
        BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE,
    },
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user,
        generated::bpf_get_attach_cookie,
    },
    macros::{map, uprobe, uretprobe},
    maps::{HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{ProbeContext, RetProbeContext},
    EbpfContext,
};
use wprof_common::{
    counter, Event, EventKind, NodeCounters, PhaseCounters, ThreadStack, COOKIE_URETPROBE_BIT,
    DEFAULT_RING_BYTES, MAX_DEPTH, MAX_NODES, MAX_PHASES, MAX_THREADS,
};

/// Open phases per thread, keyed by pid_tgid. Allocated on a thread's first entry and freed when
/// its outermost phase returns.
#[map]
static STACKS: HashMap<u64, ThreadStack> =
    HashMap::with_max_entries(MAX_THREADS, BPF_F_NO_PREALLOC);

/// A zeroed stack to copy from when a thread is first seen (a ThreadStack is too big for the
/// 512-byte BPF stack).
#[map]
static SCRATCH: PerCpuArray<ThreadStack> = PerCpuArray::with_max_entries(1, 0);

/// Spans and node definitions for userspace. Its size can be changed at load time.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// Global counters, indexed by `wprof_common::counter`.
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Counters per phase id.
#[map]
static PHASE_COUNTERS: PerCpuArray<PhaseCounters> = PerCpuArray::with_max_entries(MAX_PHASES, 0);

/// Lost and abandoned calls per tree node (per CPU, so increments need no atomics).
#[map]
static NODE_COUNTERS: PerCpuHashMap<u64, NodeCounters> =
    PerCpuHashMap::with_max_entries(MAX_NODES, 0);

/// Nodes whose definition reached the ring buffer.
#[map]
static NODES_SEEN: HashMap<u64, u8> = HashMap::with_max_entries(MAX_NODES, 0);

const DEPTH_MASK: usize = MAX_DEPTH - 1;
const _: () = assert!(MAX_DEPTH.is_power_of_two());

/// A frame index the verifier can prove in bounds. LLVM drops a plain `& DEPTH_MASK` when it
/// already knows the range from an earlier check, and may then index with another register
/// copy whose range the verifier never learned; the volatile read makes the value opaque so
/// the mask stays right before the access.
#[inline(always)]
fn slot(i: usize) -> usize {
    // SAFETY: reading a local through a valid reference.
    unsafe { core::ptr::read_volatile(&i) & DEPTH_MASK }
}

// Each program exists twice: once for per-point perf links (any kernel with uprobes) and once
// for uprobe_multi links (6.6+), which attach every point of an object in one link and, more
// to the point, detach them with one RCU grace period instead of ~100 ms per point. Userspace
// loads the set the kernel supports.

/// Entry of a phase.
#[uprobe]
pub fn wprof_entry(ctx: ProbeContext) -> u32 {
    entry(&ctx)
}

/// Entry of a phase (uprobe_multi link).
#[uprobe(multi)]
pub fn wprof_m_entry(ctx: ProbeContext) -> u32 {
    entry(&ctx)
}

/// A RET (or tail-call JMP) site of a phase: the stack pointer is the entry's.
#[uprobe]
pub fn wprof_ret(ctx: ProbeContext) -> u32 {
    ret_site(&ctx)
}

/// A RET site (uprobe_multi link).
#[uprobe(multi)]
pub fn wprof_m_ret(ctx: ProbeContext) -> u32 {
    ret_site(&ctx)
}

/// A uretprobe of a phase.
#[uretprobe]
pub fn wprof_uret(ctx: RetProbeContext) -> u32 {
    uretprobe(&ctx)
}

/// A uretprobe of a phase (uprobe_multi link).
#[uretprobe(multi)]
pub fn wprof_m_uret(ctx: RetProbeContext) -> u32 {
    uretprobe(&ctx)
}

#[inline(always)]
fn entry(ctx: &ProbeContext) -> u32 {
    // SAFETY: `regs` is the pt_regs the kernel passed to this program.
    let sp = unsafe { (*ctx.regs).rsp };
    let _ = on_entry(ctx, sp);
    0
}

#[inline(always)]
fn ret_site(ctx: &ProbeContext) -> u32 {
    // SAFETY: as in entry.
    let sp = unsafe { (*ctx.regs).rsp };
    let _ = on_return(ctx, sp);
    0
}

/// A uretprobe fires after RET popped the return address, so the entry's stack pointer was 8
/// bytes lower.
#[inline(always)]
fn uretprobe(ctx: &RetProbeContext) -> u32 {
    // SAFETY: as in entry.
    let sp = unsafe { (*ctx.regs).rsp };
    let _ = on_return(ctx, sp.wrapping_sub(8));
    0
}

/// The phase id and the uretprobe flag of the site that fired.
#[inline(always)]
fn phase_of<C: EbpfContext>(ctx: &C) -> Result<(u32, bool), ()> {
    // SAFETY: the helper only reads the cookie of the link that fired.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let phase = cookie as u32;
    if phase >= MAX_PHASES {
        return Err(());
    }
    Ok((phase, cookie & COOKIE_URETPROBE_BIT != 0))
}

#[inline(always)]
fn bump(index: u32) {
    if let Some(c) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU value, no other writer on this CPU while we run.
        unsafe { *c += 1 };
    }
}

#[inline(always)]
fn phase_counters(phase: u32) -> Option<&'static mut PhaseCounters> {
    // SAFETY: per-CPU value, exclusively ours for the duration of this program.
    PHASE_COUNTERS
        .get_ptr_mut(phase)
        .map(|p| unsafe { &mut *p })
}

/// Mixes a parent path hash and a phase id into the child's path hash (splitmix64 finaliser).
/// userspace never recomputes it: it learns the tree from NodeDef events.
#[inline(always)]
fn node_hash(parent: u64, phase: u32) -> u64 {
    let mut x = parent ^ (phase as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    if x == 0 {
        1
    } else {
        x
    }
}

#[inline(always)]
fn node_counters(node: u64) -> Option<*mut NodeCounters> {
    if let Some(p) = NODE_COUNTERS.get_ptr_mut(&node) {
        return Some(p);
    }
    let zero = NodeCounters::default();
    let _ = NODE_COUNTERS.insert(&node, &zero, BPF_NOEXIST as u64);
    NODE_COUNTERS.get_ptr_mut(&node)
}

#[inline(always)]
fn count_abandoned(node: u64) {
    bump(counter::ABANDONED);
    if let Some(c) = node_counters(node) {
        // SAFETY: per-CPU value, exclusively ours while we run.
        unsafe { (*c).abandoned += 1 };
    }
}

#[inline(always)]
fn count_lost(node: u64) {
    bump(counter::LOST_SPANS);
    if let Some(c) = node_counters(node) {
        // SAFETY: per-CPU value, exclusively ours while we run.
        unsafe { (*c).lost += 1 };
    }
}

/// Pops frames that were left without a return we saw (longjmp, exception): those whose entry
/// stack pointer is below `sp`. With `entry_ret = Some(ret)` (an entry at `sp` whose return
/// address is `ret`), a frame at exactly `sp` is stale too, unless it is a uretprobe frame with
/// another return address: then the new call is a tail call made from it (its return address
/// is the kernel's trampoline) and nests inside it.
#[inline(always)]
fn abandon_below(st: &mut ThreadStack, sp: u64, entry_ret: Option<u64>) {
    for _ in 0..MAX_DEPTH {
        let len = st.len as usize;
        if len == 0 {
            break;
        }
        let top = &st.frames[slot(len - 1)];
        let gone = match entry_ret {
            Some(ret) if top.sp == sp => top.uretprobe == 0 || top.ret_addr == ret,
            _ => top.sp < sp,
        };
        if !gone {
            break;
        }
        count_abandoned(top.node);
        st.len = (len - 1) as u32;
    }
}

#[inline(always)]
fn stack_for(key: u64) -> Option<&'static mut ThreadStack> {
    if let Some(st) = STACKS.get_ptr_mut(&key) {
        // SAFETY: a thread's stack is only touched by programs running on that thread.
        return Some(unsafe { &mut *st });
    }
    let scratch = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU scratch value, exclusively ours while we run.
    let scratch = unsafe { &mut *scratch };
    scratch.len = 0;
    STACKS.insert(&key, scratch, BPF_NOEXIST as u64).ok()?;
    // SAFETY: as above.
    STACKS.get_ptr_mut(&key).map(|st| unsafe { &mut *st })
}

/// Submit flags for a ring-buffer record: wake the reader only once the ring is a quarter
/// full. A wakeup per event costs the traced thread an interrupt and often a context switch
/// (several µs inside the phase being timed); userspace also polls on a short timeout.
#[inline(always)]
fn submit_flags() -> u64 {
    let avail = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    let size = EVENTS.query(BPF_RB_RING_SIZE as u64);
    if avail >= size / 4 {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

#[inline(always)]
fn define_node(node: u64, parent: u64, phase: u32, depth: u32, key: u64) {
    if NODES_SEEN.get_ptr(&node).is_some() {
        return;
    }
    let def = Event {
        kind: EventKind::NodeDef as u32,
        phase,
        pid: (key >> 32) as u32,
        tid: key as u32,
        node,
        parent,
        depth,
        ..Event::default()
    };
    if emit(def) {
        let one = 1u8;
        let _ = NODES_SEEN.insert(&node, &one, BPF_ANY as u64);
    } else {
        // Not marked as seen: the next entry of this node tries again.
        bump(counter::LOST_NODE_DEFS);
    }
}

/// Writes one record to the ring buffer; false when it is full.
#[inline(always)]
fn emit(ev: Event) -> bool {
    match EVENTS.reserve::<Event>(0) {
        Some(mut entry) => {
            entry.write(ev);
            entry.submit(submit_flags());
            true
        }
        None => false,
    }
}

fn on_entry<C: EbpfContext>(ctx: &C, sp: u64) -> Result<(), ()> {
    let (phase, uretprobe) = phase_of(ctx)?;
    let key = bpf_get_current_pid_tgid();
    let pc = phase_counters(phase).ok_or(())?;
    pc.entries += 1;
    // SAFETY: reads 8 bytes of the traced thread's stack; a fault just yields an error.
    let ret_addr = unsafe { bpf_probe_read_user(sp as *const u64) }.unwrap_or(0);
    let Some(st) = stack_for(key) else {
        bump(counter::NO_STACK);
        return Err(());
    };
    // A live ancestor's entry stack pointer is above ours; anything below was left without
    // its return.
    abandon_below(st, sp, Some(ret_addr));
    let len = st.len as usize;
    if len >= MAX_DEPTH {
        pc.overflow += 1;
        bump(counter::OVERFLOW);
        return Err(());
    }
    let parent = if len == 0 {
        0
    } else {
        st.frames[slot(len - 1)].node
    };
    let node = node_hash(parent, phase);
    define_node(node, parent, phase, len as u32, key);
    let frame = &mut st.frames[slot(len)];
    frame.node = node;
    frame.sp = sp;
    frame.child_ns = 0;
    frame.phase = phase;
    frame.ret_addr = ret_addr;
    frame.uretprobe = uretprobe as u32;
    // Last, so the bookkeeping above is not counted inside the phase.
    // SAFETY: plain helper call.
    frame.start_ns = unsafe { bpf_ktime_get_ns() };
    st.len = len as u32 + 1;
    Ok(())
}

fn on_return<C: EbpfContext>(ctx: &C, sp: u64) -> Result<(), ()> {
    // First, so the bookkeeping below is not counted inside the phase.
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let (phase, _) = phase_of(ctx)?;
    let key = bpf_get_current_pid_tgid();
    let pc = phase_counters(phase).ok_or(())?;
    pc.returns += 1;
    let Some(st) = STACKS.get_ptr_mut(&key) else {
        pc.unmatched_returns += 1;
        bump(counter::UNMATCHED_RETURNS);
        return Err(());
    };
    // SAFETY: a thread's stack is only touched by programs running on that thread.
    let st = unsafe { &mut *st };
    abandon_below(st, sp, None);
    let len = st.len as usize;
    if len == 0 || len > MAX_DEPTH {
        pc.unmatched_returns += 1;
        bump(counter::UNMATCHED_RETURNS);
        return Err(());
    }
    let top = st.frames[slot(len - 1)];
    if top.phase != phase || top.sp != sp {
        pc.unmatched_returns += 1;
        bump(counter::UNMATCHED_RETURNS);
        return Err(());
    }
    let dur = now.saturating_sub(top.start_ns);
    let depth = len - 1;
    let parent = if depth == 0 {
        0
    } else {
        let p = &mut st.frames[slot(depth - 1)];
        p.child_ns += dur;
        p.node
    };
    st.len = depth as u32;
    if depth == 0 {
        let _ = STACKS.remove(&key);
    }
    let span = Event {
        kind: EventKind::Span as u32,
        phase,
        pid: (key >> 32) as u32,
        tid: key as u32,
        node: top.node,
        parent,
        start_ns: top.start_ns,
        dur_ns: dur,
        child_ns: top.child_ns,
        depth: depth as u32,
        _pad: 0,
    };
    if !emit(span) {
        count_lost(top.node);
    }
    Ok(())
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
