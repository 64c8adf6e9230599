//! wprof's eBPF side: per-thread phase stacks and completed-span events.
//!
//! In: uprobe hits at phase entries and exits (RET sites or uretprobes), each carrying an
//! attach cookie `kind << 32 | phase`. Out: `Event`s in the `EVENTS` ring buffer (one span per
//! completed call, one definition per new tree node) and counters in maps; with in-kernel
//! aggregation (`config::KERNEL_AGGREGATE`) per-node summaries and histogram buckets in maps
//! instead of the spans.
//!
//! The stack of open phases lives here, not in userspace, so a lost event never corrupts the
//! nesting of later calls: parents learn their children's time from the stack itself. A
//! thread has one; so does a goroutine, for the phases of Go functions (cookie bit
//! `COOKIE_GO_BIT`: keyed by the `g` in r14, see `owner_of`).
#![no_std]
#![no_main]
// `add_one`: the atomic add intrinsic (see there); the toolchain is pinned.
#![feature(core_intrinsics)]
#![allow(internal_features)]
// aya's #[uprobe] macros generate undocumented wrapper functions; the programs themselves are
// documented on their definitions below.
#![allow(missing_docs)]

use aya_ebpf::{
    bindings::{
        BPF_ANY, BPF_F_NO_PREALLOC, BPF_F_USER_STACK, BPF_NOEXIST, BPF_RB_AVAIL_DATA,
        BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE,
    },
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user,
        generated::{
            bpf_get_attach_cookie, bpf_probe_read_user as read_user_bytes, bpf_probe_read_user_str,
        },
    },
    macros::{map, perf_event, tracepoint, uprobe, uretprobe},
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf, StackTrace},
    programs::{
        tracing::StackIdContext, PerfEventContext, ProbeContext, RetProbeContext, TracePointContext,
    },
    EbpfContext,
};
use wprof_common::usdt::{COOKIE_USDT_SITE_MASK, COOKIE_USDT_SITE_SHIFT};
use wprof_common::{
    config, counter, goroutine_key, hist_bucket,
    key::{
        key_hash_step, key_next_index, COOKIE_PHASE_MASK, KEY_CSTR, KEY_HASH_START, KEY_NEXT_LEN,
        KEY_PTR_LEN, KEY_START_MODE,
    },
    Event, EventKind, Frame, GoStw, HistKey, NodeCounters, NodeKey, NodeSummary, PhaseCost,
    PhaseCounters, PhaseKey, StackEvent, ThreadStack, TracepointRole, ARG_NONE, ARG_RETVAL,
    CALIBRATION_FIRST_PHASE, COOKIE_ARG_MASK, COOKIE_ARG_SHIFT, COOKIE_GO_BIT, COOKIE_KEY_BIT,
    COOKIE_STW_START_BIT, COOKIE_STW_STOP_BIT, COOKIE_UNDER_SHIFT, COOKIE_URETPROBE_BIT,
    DEFAULT_RING_BYTES, FRAME_URETPROBE, GOROUTINE_KEY_BIT, GO_G_STACK_HI, GO_MAX_STACK, GO_SP_TOP,
    KEY_BYTES, MAX_DEPTH, MAX_HIST_BUCKETS, MAX_NODES, MAX_PENDING_RETURNS, MAX_PHASES,
    MAX_SUMMARY_NODES, MAX_THREADS, SYS_EXIT_BIT, SYS_PHASE_SLOTS,
};

mod usdt;

mod unwind_guard;

/// Open phases per thread, keyed by pid_tgid, and per goroutine for Go phases (keyed by
/// `goroutine_key`). Allocated on the first entry and freed when the outermost phase returns.
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

/// Probe cost of one call per phase id (calibrated by userspace before attaching): each
/// completed call adds its phase's `pair_ns` to the enclosing call's descendant probe time.
#[map]
static PHASE_COSTS: Array<PhaseCost> = Array::with_max_entries(MAX_PHASES, 0);

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
    let regs = unsafe { &*ctx.regs };
    let _ = on_entry::<_, false>(ctx, regs);
    0
}

#[inline(always)]
fn ret_site(ctx: &ProbeContext) -> u32 {
    // SAFETY: as in entry.
    let regs = unsafe { &*ctx.regs };
    let _ = on_return(ctx, regs, regs.rsp);
    0
}

/// A uretprobe fires after RET popped the return address, so the entry's stack pointer was 8
/// bytes lower.
#[inline(always)]
fn uretprobe(ctx: &RetProbeContext) -> u32 {
    // SAFETY: as in entry.
    let regs = unsafe { &*ctx.regs };
    let _ = on_return(ctx, regs, regs.rsp.wrapping_sub(8));
    0
}

/// Whose phase stack a probe hit works on: `key` names it in `STACKS`, `id` is the thread's
/// pid_tgid (what events carry), `sp` the stack pointer as frames store it.
#[derive(Clone, Copy)]
struct Owner {
    key: u64,
    id: u64,
    sp: u64,
    /// The top of the goroutine's stack (`g.stack.hi`) for a goroutine's stack, else 0.
    hi: u64,
}

/// The top of goroutine `g`'s stack (`g.stack.hi`) if `sp` lies on that stack: then `g` (r14)
/// really is the running goroutine, not a register that assembly used for itself.
#[inline(always)]
fn go_stack_top(g: u64, sp: u64) -> Option<u64> {
    // SAFETY: reads 8 bytes of the traced process's memory; a fault just yields an error.
    let hi = unsafe { bpf_probe_read_user((g + GO_G_STACK_HI) as *const u64) }.ok()?;
    (hi > sp && hi - sp <= GO_MAX_STACK).then_some(hi)
}

/// The processes in which a goroutine opened a stack of phases (marked by `stack_for`, once
/// per such stack, not per hit): their CPU samples are looked up on the interrupted
/// goroutine's stack.
#[map]
static GO_PROCS: HashMap<u32, u8> = HashMap::with_max_entries(16_384, 0);

/// The owner of a hit on thread `id` with stack pointer `sp`. A Go site's stack is its
/// goroutine's: `r14` holds the running goroutine's `g` (Go's register ABI, amd64, 1.17+),
/// and `g.stack.hi`, the top of its stack, turns `sp` into a distance that survives the
/// runtime moving the stack (growth or shrinking copies the frames to a new stack at the
/// same distance from its top). Anything else, or a `g` that does not hold `sp` (assembly
/// that uses r14 for itself), stays with the thread.
#[inline(always)]
fn owner_of(site: &Site, regs: &aya_ebpf::bindings::pt_regs, id: u64, sp: u64) -> Owner {
    let thread = Owner {
        key: id,
        id,
        sp,
        hi: 0,
    };
    if !site.go {
        return thread;
    }
    let g = regs.r14;
    let Some(hi) = go_stack_top(g, sp) else {
        return thread;
    };
    Owner {
        key: goroutine_key((id >> 32) as u32, g),
        id,
        sp: GO_SP_TOP - (hi - sp),
        hi,
    }
}

/// Frames a Go entry checks for staleness, innermost first (a panic that unwinds several
/// open phases leaves that many).
const GO_STALE_CHECKS: usize = 4;

/// Pops the goroutine's innermost frames that a recovered panic left behind: a frame whose
/// return-address slot (found from the goroutine's stack top `hi`, wherever the stack is now)
/// no longer holds the return address seen at its entry is gone. A live frame's slot is never
/// written (Go does not rewrite return addresses, and wprof puts no uretprobe on Go code);
/// after a recover, the calls made next overwrite the unwound frames' slots. Without this, a
/// call made deeper than the unwound frame would nest inside it (`abandon_below` only knows
/// frames deeper than the new call are stale).
#[inline(always)]
fn abandon_unwound_go(st: &mut ThreadStack, hi: u64) {
    for _ in 0..GO_STALE_CHECKS {
        let len = st.len as usize;
        if len == 0 || len > MAX_DEPTH {
            break;
        }
        let top = &st.frames[slot(len - 1)];
        if top.sp == 0 || top.sp > GO_SP_TOP {
            break;
        }
        let at = hi.wrapping_sub(GO_SP_TOP - top.sp);
        // SAFETY: reads 8 bytes of the goroutine's stack; a fault just yields an error.
        let Ok(ret) = (unsafe { bpf_probe_read_user(at as *const u64) }) else {
            break;
        };
        if ret == top.ret_addr {
            break;
        }
        count_abandoned(top.node);
        st.len = (len - 1) as u32;
    }
}

/// What the attach cookie of the site that fired says.
#[derive(Clone, Copy)]
struct Site {
    phase: u32,
    uretprobe: bool,
    /// `ARG_NONE`, argument index + 1, or `ARG_RETVAL`.
    arg: u64,
    /// Id + 1 of the phase this one must be called inside, 0 for none.
    under: u32,
    /// A Go function: goroutine stack, Go's register ABI.
    go: bool,
    /// An exit of `runtime.stopTheWorldWithSema`: the world is stopped from here.
    stw_stop: bool,
    /// The phase groups its calls by a string argument (`PHASE_KEYS`).
    keyed: bool,
    /// The entry of `runtime.startTheWorldWithSema`: the world restarts.
    stw_start: bool,
    /// A USDT start site's index in `USDT_SITES`.
    usdt_site: u32,
}

#[inline(always)]
fn site_of<C: EbpfContext>(ctx: &C) -> Result<Site, ()> {
    // SAFETY: the helper only reads the cookie of the link that fired.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let phase = (cookie & COOKIE_PHASE_MASK) as u32;
    if phase >= MAX_PHASES {
        return Err(());
    }
    Ok(Site {
        phase,
        uretprobe: cookie & COOKIE_URETPROBE_BIT != 0,
        arg: (cookie >> COOKIE_ARG_SHIFT) & COOKIE_ARG_MASK,
        under: (cookie >> COOKIE_UNDER_SHIFT) as u32 & 0xffff,
        go: cookie & COOKIE_GO_BIT != 0,
        stw_stop: cookie & COOKIE_STW_STOP_BIT != 0,
        stw_start: cookie & COOKIE_STW_START_BIT != 0,
        keyed: cookie & COOKIE_KEY_BIT != 0,
        usdt_site: ((cookie >> COOKIE_USDT_SITE_SHIFT) & COOKIE_USDT_SITE_MASK) as u32,
    })
}

/// Stop-the-world pauses of the traced Go processes, keyed by tgid.
#[map]
static GO_STW: HashMap<u32, GoStw> = HashMap::with_max_entries(16_384, 0);

/// The stopped-the-world time of process `tgid` so far, ns.
#[inline(always)]
fn stw_total(tgid: u32) -> u64 {
    // SAFETY: a map value, read once.
    GO_STW
        .get_ptr(&tgid)
        .map(|s| unsafe { (*s).total_ns })
        .unwrap_or(0)
}

/// The world of process `tgid` stopped at `now` (`stopTheWorldWithSema` returns).
#[inline(always)]
fn stw_stopped(tgid: u32, now: u64) {
    let s = GoStw {
        since_ns: now,
        total_ns: stw_total(tgid),
    };
    let _ = GO_STW.insert(&tgid, &s, BPF_ANY as u64);
}

/// The world of process `tgid` restarts at `now` (`startTheWorldWithSema` is entered): the
/// pause is added to its total.
#[inline(always)]
fn stw_started(tgid: u32, now: u64) {
    if let Some(s) = GO_STW.get_ptr_mut(&tgid) {
        // SAFETY: one goroutine stops and starts a process's world, one at a time.
        let s = unsafe { &mut *s };
        if s.since_ns != 0 && now > s.since_ns {
            s.total_ns += now - s.since_ns;
        }
        s.since_ns = 0;
    }
}

/// Which string argument each grouped phase (`group_by` in the profile) keys its calls by,
/// indexed by phase id.
#[map]
static PHASE_KEYS: Array<PhaseKey> = Array::with_max_entries(MAX_PHASES, 0);

/// The string argument of the call being entered (one per CPU: an entry runs to its end on
/// one CPU), in the form of the record that names a new node.
#[map]
static KEY_SCRATCH: PerCpuArray<NodeKey> = PerCpuArray::with_max_entries(1, 0);

/// The string scanner's tables (`wprof_common::KeyScanner`), in the object's read-only data.
static KEY_CLASS: [u8; 256] = wprof_common::key::KEY_CLASS;
static KEY_NEXT: [u8; KEY_NEXT_LEN] = wprof_common::key::KEY_NEXT;
static KEY_EMIT_CONST: [u8; 4] = wprof_common::key::KEY_EMIT_CONST;
static KEY_EMIT_KEEP: [u8; 4] = wprof_common::key::KEY_EMIT_KEEP;
static KEY_EMIT_MASK: [u64; 4] = wprof_common::key::KEY_EMIT_MASK;

/// The integer argument registers in order: System V x86-64 (6), or Go's register ABI on
/// amd64 (9: a method's receiver first, a string takes two, a slice three). Each is read at a
/// constant offset of the context: loads of `pt_regs` at a computed offset are refused by the
/// verifier ("modified ctx ptr"), which is what a `match` on a runtime index can compile to.
/// Volatile, so LLVM cannot merge them back into one such load. `arg` and `group_by` both
/// read their registers here, through [`pick`].
#[inline(always)]
fn arg_registers(regs: &aya_ebpf::bindings::pt_regs, go: bool) -> [u64; 9] {
    let r = |v: &u64| {
        // SAFETY: a field of the context, read in place.
        unsafe { core::ptr::read_volatile(v) }
    };
    if go {
        [
            r(&regs.rax),
            r(&regs.rbx),
            r(&regs.rcx),
            r(&regs.rdi),
            r(&regs.rsi),
            r(&regs.r8),
            r(&regs.r9),
            r(&regs.r10),
            r(&regs.r11),
        ]
    } else {
        [
            r(&regs.rdi),
            r(&regs.rsi),
            r(&regs.rdx),
            r(&regs.rcx),
            r(&regs.r8),
            r(&regs.r9),
            0,
            0,
            0,
        ]
    }
}

/// `values[n]` without an indexed load (0 past the end): every value masked in or out.
#[inline(always)]
fn pick<const N: usize>(values: &[u64; N], n: u64) -> u64 {
    let mut v = 0;
    for (i, x) in values.iter().enumerate() {
        v |= x & 0u64.wrapping_sub((i as u64 == n) as u64);
    }
    v
}

/// Reads a grouped phase's string argument into `KEY_SCRATCH` and returns the hash of its
/// folded text (`wprof_common::KeyScanner`), never 0; 0 when the phase groups nothing or the string
/// could not be read (the call then counts under the phase's plain node).
#[inline(always)]
fn string_key<const USDT: bool>(site: &Site, regs: &aya_ebpf::bindings::pt_regs) -> u64 {
    let Some(pk) = PHASE_KEYS.get(site.phase) else {
        return 0;
    };
    let Some(buf) = KEY_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's scratch value, used by this program run only.
    let buf = unsafe { &mut *buf };
    let args = arg_registers(regs, site.go);
    let arg = |n: u64| pick(&args, n);
    let ptr = if USDT {
        usdt::key_arg(site.usdt_site, regs)
    } else {
        arg(pk.arg as u64)
    } as *const core::ffi::c_void;
    let dst = buf.text.as_mut_ptr() as *mut core::ffi::c_void;
    let n: i64 = if pk.kind == KEY_CSTR {
        // SAFETY: the helper reads at most KEY_BYTES bytes of user memory into the buffer
        // and NUL-terminates it; it returns the length with the NUL, or a negative error.
        (unsafe { bpf_probe_read_user_str(dst, KEY_BYTES as u32, ptr) }) as i64 - 1
    } else if pk.kind == KEY_PTR_LEN {
        let mut len = arg(pk.arg as u64 + 1);
        if len > KEY_BYTES as u64 {
            len = KEY_BYTES as u64;
        }
        // SAFETY: reads `len` <= KEY_BYTES bytes of user memory into the buffer.
        if unsafe { read_user_bytes(dst, len as u32, ptr) } < 0 {
            -1
        } else {
            len as i64
        }
    } else {
        return 0;
    };
    if n < 0 {
        return 0;
    }
    buf.len = n as u32;
    // KeyScanner::step without a branch: table lookups and masks, one path per byte.
    let mut h = KEY_HASH_START;
    let mut mode = KEY_START_MODE;
    for i in 0..KEY_BYTES {
        if i as i64 >= n {
            break;
        }
        let c = buf.text[i];
        let t = KEY_NEXT[key_next_index(mode, KEY_CLASS[c as usize])];
        mode = t & 7;
        let emit = ((t >> 4) & 3) as usize;
        let byte = KEY_EMIT_CONST[emit] | (c & KEY_EMIT_KEEP[emit]);
        let taken = KEY_EMIT_MASK[emit];
        h = (key_hash_step(h, byte) & taken) | (h & !taken);
    }
    h | 1
}

/// [`wanted`] for a hit of `phase`: a calibration phase's probes sit in wprof's calibration
/// child alone, which `--follow-forks`'s traced set does not hold (the recalibration at the
/// end of a run found no span of it), so they need only the run not to be stopped.
#[inline(always)]
fn wanted_for(phase: u32, key: u64) -> bool {
    if phase >= CALIBRATION_FIRST_PHASE {
        return CONFIG.get(config::STOPPED).copied().unwrap_or(0) == 0;
    }
    wanted(key)
}

/// With `--follow-forks` the uprobes fire in every process that maps the object; only the
/// traced ones (the `--pid`s and their descendants) go on.
#[inline(always)]
fn wanted(key: u64) -> bool {
    if CONFIG.get(config::STOPPED).copied().unwrap_or(0) != 0 {
        return false;
    }
    in_scope(key)
}

/// Whether thread `key` belongs to a traced process, stopped or not (the unwind guard keeps
/// protecting the frames armed before the stop until it is unloaded).
#[inline(always)]
fn in_scope(key: u64) -> bool {
    CONFIG.get(config::FILTER_TRACED).copied().unwrap_or(0) == 0 || traced(key)
}

/// Whether phase `under - 1` is open on the thread (always true without `under`).
#[inline(always)]
fn inside(st: &ThreadStack, under: u32) -> bool {
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
fn return_address(sp: u64) -> u64 {
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
fn abandon_below(st: &mut ThreadStack, sp: u64, entry_ret: Option<u64>) {
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
        count_abandoned(top.node);
        st.len = (len - 1) as u32;
    }
}

/// Frees a goroutine's stack once its outermost phase returned (goroutines come and go by the
/// thousand, and nothing tells BPF when one ends). A thread keeps its stack, empty, until it
/// exits (`config::KEEP_THREAD_STACKS`; userspace frees those of exited threads): making one
/// copies a whole `ThreadStack` (~13 KB) from `SCRATCH`, which every root call paid when it was
/// freed at depth 0.
#[inline(always)]
fn release_stack(key: u64) {
    if key & GOROUTINE_KEY_BIT != 0
        || CONFIG.get(config::KEEP_THREAD_STACKS).copied().unwrap_or(0) == 0
    {
        let _ = STACKS.remove(&key);
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
    scratch.tramp = 0;
    scratch.tgid = if key & GOROUTINE_KEY_BIT != 0 {
        let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        let one = 1u8;
        let _ = GO_PROCS.insert(&tgid, &one, BPF_ANY as u64);
        tgid
    } else {
        0
    };
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

/// Sends a node's definition the first time it is reached; a grouped node (`keyed`) first
/// sends the string of `KEY_SCRATCH` it stands for.
#[inline(always)]
fn define_node(node: u64, parent: u64, phase: u32, depth: u32, id: u64, keyed: bool) {
    if NODES_SEEN.get_ptr(&node).is_some() {
        return;
    }
    if keyed && !emit_key(node) {
        bump(counter::LOST_NODE_DEFS);
        return;
    }
    let def = Event {
        kind: EventKind::NodeDef as u32,
        phase,
        pid: (id >> 32) as u32,
        tid: id as u32,
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

/// Sends the string in `KEY_SCRATCH` as the name of grouped node `node`; false when the ring
/// buffer is full.
#[inline(always)]
fn emit_key(node: u64) -> bool {
    let Some(k) = KEY_SCRATCH.get_ptr_mut(0) else {
        return false;
    };
    let Some(mut entry) = EVENTS.reserve::<NodeKey>(0) else {
        return false;
    };
    // SAFETY: this CPU's scratch value; copied into the reserved record field by field
    // (not through the 512-byte BPF stack).
    unsafe {
        (*k).kind = EventKind::NodeKey as u32;
        (*k).node = node;
        core::ptr::copy_nonoverlapping(k as *const NodeKey, entry.as_mut_ptr(), 1);
    }
    entry.submit(submit_flags());
    true
}

/// Writes one record to the ring buffer; false when it is full.
#[inline(always)]
fn emit(ev: Event) -> bool {
    emit_with(ev, submit_flags())
}

#[inline(always)]
fn emit_with(ev: Event, flags: u64) -> bool {
    match EVENTS.reserve::<Event>(0) {
        Some(mut entry) => {
            entry.write(ev);
            entry.submit(flags);
            true
        }
        None => false,
    }
}

/// The dynamic loader's `_dl_debug_state` (the r_debug hook debuggers use): called around
/// every change to the loaded objects (dlopen, dlclose). Tells userspace at once, so phases
/// in a library that was nowhere to be found at attach time are attached as soon as it is
/// mapped.
#[uprobe]
pub fn wprof_dl_state(_ctx: ProbeContext) -> u32 {
    let key = bpf_get_current_pid_tgid();
    if !wanted(key) {
        return 0;
    }
    let ev = Event {
        kind: EventKind::MapsChanged as u32,
        pid: (key >> 32) as u32,
        tid: key as u32,
        // SAFETY: plain helper call.
        start_ns: unsafe { bpf_ktime_get_ns() },
        ..Event::default()
    };
    let _ = emit_with(ev, BPF_RB_FORCE_WAKEUP as u64);
    0
}

/// An entry of a phase; `USDT`: a USDT start probe (see `usdt`), compiled apart so the
/// function entry programs carry none of its code.
fn on_entry<C: EbpfContext, const USDT: bool>(
    ctx: &C,
    regs: &aya_ebpf::bindings::pt_regs,
) -> Result<(), ()> {
    let site = site_of(ctx)?;
    let id = bpf_get_current_pid_tgid();
    if !wanted_for(site.phase, id) {
        return Ok(());
    }
    if site.stw_start {
        // SAFETY: plain helper call.
        stw_started((id >> 32) as u32, unsafe { bpf_ktime_get_ns() });
    }
    let pc = phase_counters(site.phase).ok_or(())?;
    pc.entries += 1;
    let ret_addr = if USDT {
        // A USDT probe sits inside a function: no return address at sp. Its frame keeps the
        // stack pointer the start saw instead (see `usdt::open`).
        regs.rsp
    } else if site.go
        || (site.uretprobe && CONFIG.get(config::NEED_RET_ADDR).copied().unwrap_or(0) != 0)
    {
        return_address(regs.rsp)
    } else {
        // Not kept (see config::NEED_RET_ADDR); `abandon_below` reads it if it must.
        0
    };
    let mut who = owner_of(&site, regs, id, regs.rsp);
    let Some(st) = stack_for(who.key) else {
        bump(counter::NO_STACK);
        return Err(());
    };
    // A live ancestor's entry stack pointer is above ours; anything below was left without
    // its return.
    abandon_below(st, who.sp, (!USDT).then_some(ret_addr));
    if USDT {
        who.sp = usdt::open(st, site.phase, regs.rsp);
    }
    if who.hi != 0 {
        abandon_unwound_go(st, who.hi);
    }
    if !inside(st, site.under) {
        pc.outside_under += 1;
        if st.len == 0 {
            release_stack(who.key);
        }
        return Ok(());
    }
    let arg = match site.arg {
        ARG_NONE | ARG_RETVAL => 0,
        _ if USDT => usdt::count_arg(site.usdt_site, regs),
        n => pick(&arg_registers(regs, site.go), n - 1),
    };
    // A Go call notes the world's stopped time so far: what it gained by the return is the
    // pauses the call sat through.
    let stw = if who.hi != 0 {
        stw_total((id >> 32) as u32)
    } else {
        0
    };
    let key = if site.keyed {
        string_key::<USDT>(&site, regs)
    } else {
        0
    };
    push_frame(
        st,
        pc,
        who,
        site.phase,
        ret_addr,
        site.uretprobe,
        arg,
        stw,
        key,
    )
}

/// Opens a frame for `phase` on the thread's stack. Kernel phases use `sp = 0`: no user
/// stack pointer is ever below it, so the next uprobe on the thread treats a kernel frame left
/// open (an exit we never saw) as abandoned.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn push_frame(
    st: &mut ThreadStack,
    pc: &mut PhaseCounters,
    who: Owner,
    phase: u32,
    ret_addr: u64,
    uretprobe: bool,
    arg: u64,
    stw: u64,
    key: u64,
) -> Result<(), ()> {
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
    // A grouped call's string key makes its node (and the subtree below) one of its own.
    let node = node_hash(parent ^ key, phase);
    define_node(node, parent, phase, len as u32, who.id, key != 0);
    let frame = &mut st.frames[slot(len)];
    frame.node = node;
    frame.sp = who.sp;
    frame.child_ns = 0;
    frame.off_ns = 0;
    frame.phase = phase;
    frame.ret_addr = ret_addr;
    frame.uretprobe = if uretprobe { FRAME_URETPROBE } else { 0 };
    frame.arg = arg;
    frame.desc_probe_ns = 0;
    frame.desc_hits = 0;
    frame.stw_at_entry = stw;
    frame.stw_child_ns = 0;
    // Last, so the bookkeeping above is not counted inside the phase.
    // SAFETY: plain helper call.
    frame.start_ns = unsafe { bpf_ktime_get_ns() };
    st.len = len as u32 + 1;
    Ok(())
}

/// A return of a phase at stack pointer `sp` (the entry's: a uretprobe's caller adjusts it).
fn on_return<C: EbpfContext>(
    ctx: &C,
    regs: &aya_ebpf::bindings::pt_regs,
    sp: u64,
) -> Result<(), ()> {
    // First, so the bookkeeping below is not counted inside the phase.
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let site = site_of(ctx)?;
    let id = bpf_get_current_pid_tgid();
    if !wanted_for(site.phase, id) {
        return Ok(());
    }
    if site.stw_stop {
        stw_stopped((id >> 32) as u32, now);
    }
    let pc = phase_counters(site.phase).ok_or(())?;
    let who = owner_of(&site, regs, id, sp);
    // A call made outside its `under` phase was never pushed: its return is expected, not
    // unmatched.
    let may_be_left_out = site.under != 0;
    let st = returning_stack(pc, who.key, !may_be_left_out)?;
    abandon_below(st, who.sp, None);
    if may_be_left_out && !top_is(st, site.phase, who.sp) {
        return Ok(());
    }
    // The first integer result: rax in both conventions.
    let retval = (site.arg == ARG_RETVAL).then_some(regs.rax);
    pop_frame(st, pc, who, site.phase, now, retval)
}

/// Whether the innermost open frame is `phase`'s call entered at `sp`.
#[inline(always)]
fn top_is(st: &ThreadStack, phase: u32, sp: u64) -> bool {
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

/// Counts a return of the phase and finds the thread's stack; a thread without one has no
/// open phase, so the return is unmatched (e.g. its call started before the attach), and
/// counted so when `count_missing`.
#[inline(always)]
fn returning_stack(
    pc: &mut PhaseCounters,
    key: u64,
    count_missing: bool,
) -> Result<&'static mut ThreadStack, ()> {
    pc.returns += 1;
    let Some(st) = STACKS.get_ptr_mut(&key) else {
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
fn pop_frame(
    st: &mut ThreadStack,
    pc: &mut PhaseCounters,
    who: Owner,
    phase: u32,
    now: u64,
    retval: Option<u64>,
) -> Result<(), ()> {
    if !top_is(st, phase, who.sp) {
        count_unmatched(pc);
        return Err(());
    }
    let len = st.len as usize;
    let mut top = st.frames[slot(len - 1)];
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
        p.desc_probe_ns += top.desc_probe_ns + pair_ns;
        p.desc_hits += top.desc_hits + 2;
        p.stw_child_ns += stw;
        p.node
    };
    st.len = depth as u32;
    if depth == 0 {
        release_stack(who.key);
    }
    let arg = retval.unwrap_or(top.arg);
    if kernel_aggregate {
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
    };
    // A calibration call lost to a full ring (at the end of a run, with the run's calls
    // still coming) only lacks a sample: not the run's loss.
    if !emit(span) && phase < CALIBRATION_FIRST_PHASE {
        count_lost(top.node);
    }
    Ok(())
}

/// Sends the stopped-the-world time `ns` of the Go call `top` (closing at `now`, at `depth`
/// - 1) as a span of phase `stw_phase` under it, or adds it to that node's summary with
/// in-kernel aggregation (as the span would have been: its probe-time share included).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn emit_stw(
    top: &Frame,
    stw_phase: u32,
    depth: u32,
    ns: u64,
    now: u64,
    who: &Owner,
    kernel_aggregate: bool,
) {
    let id = who.id;
    let node = node_hash(top.node, stw_phase);
    define_node(node, top.node, stw_phase, depth, id, false);
    if kernel_aggregate {
        let pause = Frame {
            node,
            ..Frame::default()
        };
        let own_ns = PHASE_COSTS.get(stw_phase).map_or(0, |c| c.own_ns);
        aggregate_call(&pause, ns, 0, own_ns);
        return;
    }
    let span = Event {
        kind: EventKind::Span as u32,
        phase: stw_phase,
        pid: (id >> 32) as u32,
        tid: id as u32,
        node,
        parent: top.node,
        start_ns: now.saturating_sub(ns),
        dur_ns: ns,
        depth,
        stack: who.key,
        ..Event::default()
    };
    if !emit(span) {
        count_lost(node);
    }
}

// ---------------------------------------------------------------------------------------------
// In-kernel aggregation (`--aggregate kernel`): a completed call updates its node's summary
// and two histogram buckets (raw and corrected duration) instead of sending a span. Node
// definitions still go through the ring buffer (once per node). Straight-line code, outside
// any loop: 6.1's verifier walks it once per path through pop_frame.

/// Per-node summaries, keyed by node hash (per CPU: no atomics; userspace adds the CPUs).
/// Sized like the node-definition map (`MAX_SUMMARY_NODES`, 65,536); not preallocated, so an
/// entry costs memory only once its node completes a call. A call that finds the map full is
/// counted (`SUMMARY_FULL`) and lost on its node, never dropped silently.
#[map]
static NODE_SUMMARIES: PerCpuHashMap<u64, NodeSummary> =
    PerCpuHashMap::with_max_entries(MAX_SUMMARY_NODES, BPF_F_NO_PREALLOC);

/// Log-linear histogram buckets (128 per power of two, ≤ 1% error): (node, bucket, raw or
/// corrected) -> calls. One map for all CPUs, incremented atomically, and preallocated: a call
/// whose duration lands in a new bucket must not pay a memory allocation inside its parent's
/// window (a per-CPU map without preallocation did: tens of µs on the first calls of each
/// bucket, which shifted the parents' tails), and a per-CPU preallocated map would cost
/// entries × 8 bytes × CPUs. `MAX_HIST_BUCKETS` (262,144) entries, ~18 MiB, sized at load only
/// for `--aggregate kernel` (1 entry otherwise). An increment that finds the map full is
/// counted (`HIST_FULL`).
#[map]
static HIST_BUCKETS: HashMap<HistKey, u64> = HashMap::with_max_entries(MAX_HIST_BUCKETS, 0);

/// Adds one completed call to its node's summary and histograms, with the same arithmetic
/// as userspace's per-event aggregation (`NodeStats::add`): self time never below 0, the
/// argument summed saturating, the probe time taken out `min(dur, own + descendants')`.
#[inline(always)]
fn aggregate_call(top: &Frame, dur: u64, arg: u64, own_ns: u64) {
    let node = top.node;
    let Some(s) = node_summary(node) else {
        bump(counter::SUMMARY_FULL);
        count_lost(node);
        return;
    };
    let removed = (own_ns + top.desc_probe_ns).min(dur);
    let corrected = dur - removed;
    // SAFETY: per-CPU value, exclusively ours while we run.
    let s = unsafe { &mut *s };
    s.count += 1;
    s.total_ns += dur;
    s.self_ns += dur.saturating_sub(top.child_ns);
    s.off_ns += top.off_ns;
    s.arg_sum = s.arg_sum.saturating_add(arg);
    s.corrected_total_ns += corrected;
    s.probe_ns += removed;
    s.probe_hits += top.desc_hits + 2;
    hist_add(node, dur, 0);
    hist_add(node, corrected, 1);
}

#[inline(always)]
fn node_summary(node: u64) -> Option<*mut NodeSummary> {
    if let Some(p) = NODE_SUMMARIES.get_ptr_mut(&node) {
        return Some(p);
    }
    let zero = NodeSummary::default();
    // Fails when the map is full, or when another CPU created the entry meanwhile.
    let _ = NODE_SUMMARIES.insert(&node, &zero, BPF_NOEXIST as u64);
    NODE_SUMMARIES.get_ptr_mut(&node)
}

#[inline(always)]
fn hist_add(node: u64, value: u64, corrected: u32) {
    let key = HistKey {
        node,
        bucket: hist_bucket(value),
        corrected,
    };
    if let Some(c) = HIST_BUCKETS.get_ptr_mut(&key) {
        add_one(c);
        return;
    }
    if HIST_BUCKETS.insert(&key, &1, BPF_NOEXIST as u64).is_ok() {
        return;
    }
    // Another CPU may have created the entry since the lookup; otherwise the map is full.
    match HIST_BUCKETS.get_ptr_mut(&key) {
        Some(c) => add_one(c),
        None => bump(counter::HIST_FULL),
    }
}

/// An atomic increment of a map value shared by every CPU: BPF's XADD (the old value is not
/// used, so no BPF_FETCH, which older kernels lack). The BPF target has no compare-and-swap,
/// so core's `AtomicU64` has no `fetch_add` there: the intrinsic it would call is used
/// directly.
#[inline(always)]
fn add_one(c: *mut u64) {
    use core::intrinsics::{atomic_xadd, AtomicOrdering};
    // SAFETY: a map value: valid, 8-byte aligned, alive while the program runs.
    let _ = unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(c, 1) };
}

// ---------------------------------------------------------------------------------------------
// Kernel phases, CPU samples and off-CPU time. These programs fire system-wide (tracepoints,
// per-CPU perf events), so each first checks that the current process is traced.

/// Processes being traced (tgid -> 1), filled by userspace and, with `--follow-forks`, by
/// `wprof_fork` for every child of a traced process.
#[map]
static TRACED: HashMap<u32, u8> = HashMap::with_max_entries(16_384, 0);

/// Tracepoints that open or close a kernel phase, keyed by the tracepoint's event type id.
#[map]
static TP_PHASES: HashMap<u32, TracepointRole> = HashMap::with_max_entries(MAX_PHASES * 2, 0);

/// Syscall phases: phase id + 1 (0 = none) at index `nr`, or `nr | SYS_EXIT_BIT` for exits.
/// The syscalls:* tracepoints hand BPF a record whose first word is a pt_regs pointer, not
/// the usual common_type, so they are told apart by the syscall number at offset 8.
#[map]
static SYS_PHASES: Array<u32> = Array::with_max_entries(SYS_PHASE_SLOTS, 0);

/// Settings from userspace, indexed by `wprof_common::config`.
#[map]
static CONFIG: Array<u64> = Array::with_max_entries(config::COUNT, 0);

/// User and kernel stacks of CPU samples and off-CPU records. Userspace sizes it at load.
#[map]
static STACK_TRACES: StackTrace = StackTrace::with_max_entries(16_384, 0);

/// Where and when a traced thread went off the CPU, keyed by tid until it comes back.
#[map]
static OFF_CPU_SINCE: HashMap<u32, OffCpuStart> = HashMap::with_max_entries(MAX_THREADS, 0);

/// A traced thread that went off the CPU.
#[repr(C)]
#[derive(Copy, Clone)]
struct OffCpuStart {
    start_ns: u64,
    pid_tgid: u64,
    user_stack: i32,
    kernel_stack: i32,
}

#[inline(always)]
fn traced(key: u64) -> bool {
    TRACED.get_ptr(&((key >> 32) as u32)).is_some()
}

/// The current thread's pid_tgid and the time, if its process is traced. The clock is read
/// first, so a kernel phase's exit does not count this bookkeeping inside the phase.
#[inline(always)]
fn traced_now() -> Option<(u64, u64)> {
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let key = bpf_get_current_pid_tgid();
    traced(key).then_some((key, now))
}

/// Enter or exit of a kernel phase named by a `tracepoint` pair: one program for every such
/// tracepoint; the record's common_type says which.
#[tracepoint]
pub fn wprof_tp(ctx: TracePointContext) -> u32 {
    let Some((key, now)) = traced_now() else {
        return 0;
    };
    // SAFETY: every (non-syscall) trace record starts with the u16 common_type.
    let Ok(ty) = (unsafe { ctx.read_at::<u16>(0) }) else {
        return 0;
    };
    if let Some(role) = TP_PHASES.get_ptr(&(ty as u32)) {
        // SAFETY: a map value, read once.
        let role = unsafe { *role };
        let _ = kernel_phase(key, now, role);
    }
    0
}

/// syscalls:sys_enter_* of a `syscall` phase (or a tracepoint pair in that category).
#[tracepoint]
pub fn wprof_sys_enter(ctx: TracePointContext) -> u32 {
    syscall_phase(&ctx, 0)
}

/// syscalls:sys_exit_* of a `syscall` phase.
#[tracepoint]
pub fn wprof_sys_exit(ctx: TracePointContext) -> u32 {
    syscall_phase(&ctx, SYS_EXIT_BIT)
}

#[inline(always)]
fn syscall_phase(ctx: &TracePointContext, exit_bit: u32) -> u32 {
    let Some((key, now)) = traced_now() else {
        return 0;
    };
    // SAFETY: the syscall number is the int at offset 8 of every syscalls:* record.
    let Ok(nr) = (unsafe { ctx.read_at::<i32>(8) }) else {
        return 0;
    };
    if nr < 0 || nr as u32 >= SYS_EXIT_BIT {
        return 0;
    }
    let Some(&slot) = SYS_PHASES.get(nr as u32 | exit_bit) else {
        return 0;
    };
    if slot == 0 {
        return 0;
    }
    let role = TracepointRole {
        phase: slot - 1,
        exit: (exit_bit != 0) as u32,
    };
    let _ = kernel_phase(key, now, role);
    0
}

#[inline(always)]
fn kernel_phase(key: u64, now: u64, role: TracepointRole) -> Result<(), ()> {
    let pc = phase_counters(role.phase).ok_or(())?;
    let who = Owner {
        key,
        id: key,
        sp: 0,
        hi: 0,
    };
    if role.exit == 0 {
        pc.entries += 1;
        let Some(st) = stack_for(key) else {
            bump(counter::NO_STACK);
            return Err(());
        };
        // A kernel phase still open on top lost its exit (e.g. the exit tracepoint was missed).
        abandon_kernel_frames(st);
        push_frame(st, pc, who, role.phase, 0, false, 0, 0, 0)
    } else {
        let st = returning_stack(pc, key, true)?;
        pop_frame(st, pc, who, role.phase, now, None)
    }
}

/// Pops kernel frames (sp 0) left open on top of the stack.
#[inline(always)]
fn abandon_kernel_frames(st: &mut ThreadStack) {
    for _ in 0..4 {
        let len = st.len as usize;
        if len == 0 {
            break;
        }
        let top = &st.frames[slot(len - 1)];
        if top.sp != 0 {
            break;
        }
        count_abandoned(top.node);
        st.len = (len - 1) as u32;
    }
}

/// sched:sched_process_fork (`--follow-forks`): the child of a traced process is traced from
/// its first instruction, since this runs in the parent before the child is ever scheduled.
/// Threads come through here too; their tids are removed again when they exit.
#[tracepoint]
pub fn wprof_fork(ctx: TracePointContext) -> u32 {
    let key = bpf_get_current_pid_tgid();
    if !traced(key) {
        return 0;
    }
    let off = CONFIG.get(config::FORK_CHILD_PID).copied().unwrap_or(20) as usize;
    // SAFETY: reads a field of the trace record at the offset its tracefs format gives.
    let Ok(child) = (unsafe { ctx.read_at::<i32>(off & 0xff) }) else {
        return 0;
    };
    let child = child as u32;
    let one = 1u8;
    let _ = TRACED.insert(&child, &one, BPF_ANY as u64);
    let ev = Event {
        kind: EventKind::Fork as u32,
        pid: child,
        tid: (key >> 32) as u32,
        ..Event::default()
    };
    let _ = emit(ev);
    0
}

/// sched:sched_process_exit (`--follow-forks`): forget an exited thread, so the `TRACED` set
/// does not fill up with the tids of short-lived threads, and free its phase stack (threads keep
/// theirs between root calls, see `release_stack`), counting the calls still open on it as
/// abandoned (they can never return).
#[tracepoint]
pub fn wprof_exit(_ctx: TracePointContext) -> u32 {
    let key = bpf_get_current_pid_tgid();
    let tid = key as u32;
    if tid != (key >> 32) as u32 && TRACED.get_ptr(&tid).is_some() {
        let _ = TRACED.remove(&tid);
    }
    if let Some(st) = STACKS.get_ptr(&key) {
        // SAFETY: the exiting thread's own stack, read before it is removed.
        let len = unsafe { (*st).len } as usize;
        for i in 0..MAX_DEPTH {
            if i >= len {
                break;
            }
            // SAFETY: as above.
            count_abandoned(unsafe { (*st).frames[slot(i)].node });
        }
        let _ = STACKS.remove(&key);
    }
    0
}

/// CPU sample (software cpu-clock, one perf event per CPU): the traced thread's stacks and the
/// phase open on it.
#[perf_event]
pub fn wprof_cpu_sample(ctx: PerfEventContext) -> u32 {
    let key = bpf_get_current_pid_tgid();
    if !traced(key) {
        return 0;
    }
    let user_stack = ctx
        .get_stackid(&STACK_TRACES, BPF_F_USER_STACK as u64)
        .map(|id| id as i32)
        .unwrap_or(-1);
    let kernel_stack = ctx
        .get_stackid(&STACK_TRACES, 0)
        .map(|id| id as i32)
        .unwrap_or(-1);
    let phases = sampled_stack_key(&ctx, key);
    emit_stack(
        EventKind::CpuSample,
        key,
        phases,
        1,
        user_stack,
        kernel_stack,
    );
    0
}

/// Whose stack of phases a CPU sample of thread `key` falls under: in a Go process, the
/// goroutine it interrupted in user mode (r14 of the interrupted registers, checked against
/// its stack as at a probe), so samples land under the Go phase that goroutine is in, on
/// whatever thread it runs. A sample on the thread's system stack (its `g0`: GC assist
/// marking, stack growth) goes to the goroutine that switched there (`g0.m.curg`) when the
/// binary's layout is known. Otherwise, and in the kernel (no user registers here), the
/// thread's.
#[inline(always)]
fn sampled_stack_key(ctx: &PerfEventContext, key: u64) -> u64 {
    let tgid = (key >> 32) as u32;
    if GO_PROCS.get_ptr(&tgid).is_none() {
        return key;
    }
    let regs = ctx.as_ptr() as *const aya_ebpf::bindings::pt_regs;
    // SAFETY: a perf event program's context (bpf_perf_event_data) starts with the
    // interrupted registers; each field is read at a constant offset.
    let (cs, g, sp) = unsafe { ((*regs).cs, (*regs).r14, (*regs).rsp) };
    if cs & 3 != 3 || go_stack_top(g, sp).is_none() {
        return key;
    }
    let own = goroutine_key(tgid, g);
    if STACKS.get_ptr(&own).is_some() {
        return own;
    }
    match current_goroutine(g) {
        Some(curg) if curg != g => goroutine_key(tgid, curg),
        _ => own,
    }
}

/// The user goroutine running on the thread that `g` runs on (`g.m.curg`), when the traced
/// binary's offsets are known (config `GO_G_M`, `GO_M_CURG`) and it is not nil.
#[inline(always)]
fn current_goroutine(g: u64) -> Option<u64> {
    let g_m = CONFIG.get(config::GO_G_M).copied().unwrap_or(0);
    let m_curg = CONFIG.get(config::GO_M_CURG).copied().unwrap_or(0);
    if g_m == 0 || m_curg == 0 {
        return None;
    }
    // SAFETY: reads 8 bytes of the traced process's memory; a fault just yields an error.
    let m = unsafe { bpf_probe_read_user((g + g_m) as *const u64) }.ok()?;
    // SAFETY: as above.
    let curg = unsafe { bpf_probe_read_user((m + m_curg) as *const u64) }.ok()?;
    (curg != 0).then_some(curg)
}

/// sched:sched_switch: a traced thread leaving the CPU records where and when; one coming back
/// adds the time to its innermost open phase and sends an off-CPU record.
#[tracepoint]
pub fn wprof_sched_switch(ctx: TracePointContext) -> u32 {
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    // At sched_switch the current task is still the one leaving.
    let key = bpf_get_current_pid_tgid();
    if traced(key) && key as u32 != 0 {
        let start = OffCpuStart {
            start_ns: now,
            pid_tgid: key,
            user_stack: ctx
                .get_stackid(&STACK_TRACES, BPF_F_USER_STACK as u64)
                .map(|id| id as i32)
                .unwrap_or(-1),
            kernel_stack: ctx
                .get_stackid(&STACK_TRACES, 0)
                .map(|id| id as i32)
                .unwrap_or(-1),
        };
        let _ = OFF_CPU_SINCE.insert(&(key as u32), &start, BPF_ANY as u64);
    }
    let next_off = CONFIG.get(config::SCHED_NEXT_PID).copied().unwrap_or(56) as usize;
    // SAFETY: reads a field of the trace record at the offset its tracefs format gives.
    let Ok(next_tid) = (unsafe { ctx.read_at::<i32>(next_off & 0xff) }) else {
        return 0;
    };
    let next_tid = next_tid as u32;
    let Some(start) = OFF_CPU_SINCE.get_ptr(&next_tid) else {
        return 0;
    };
    // SAFETY: a map value we only read before removing it.
    let start = unsafe { *start };
    let _ = OFF_CPU_SINCE.remove(&next_tid);
    let off = now.saturating_sub(start.start_ns);
    if let Some(st) = STACKS.get_ptr_mut(&start.pid_tgid) {
        // SAFETY: the thread coming back is not running yet, so nothing else touches its stack.
        let st = unsafe { &mut *st };
        let len = st.len as usize;
        if len > 0 && len <= MAX_DEPTH {
            st.frames[slot(len - 1)].off_ns += off;
        }
    }
    emit_stack(
        EventKind::OffCpu,
        start.pid_tgid,
        start.pid_tgid,
        off,
        start.user_stack,
        start.kernel_stack,
    );
    0
}

/// Sends a [`StackEvent`] for thread `key`: the innermost open phase of the stack of phases
/// `phases` (`STACKS` key: the thread's, or the goroutine's it was running) and the return
/// addresses that stack's pending uretprobes replaced.
#[inline(always)]
fn emit_stack(
    kind: EventKind,
    key: u64,
    phases: u64,
    weight: u64,
    user_stack: i32,
    kernel_stack: i32,
) {
    let Some(mut entry) = EVENTS.reserve::<StackEvent>(0) else {
        bump(match kind {
            EventKind::OffCpu => counter::LOST_OFF_CPU,
            _ => counter::LOST_CPU_SAMPLES,
        });
        return;
    };
    let mut ev = StackEvent {
        kind: kind as u32,
        pid: (key >> 32) as u32,
        tid: key as u32,
        weight,
        user_stack,
        kernel_stack,
        ..StackEvent::default()
    };
    if let Some(st) = STACKS.get_ptr(&phases) {
        // SAFETY: read-only look at the thread's stack.
        let st = unsafe { &*st };
        let len = st.len as usize;
        if len > 0 && len <= MAX_DEPTH {
            ev.node = st.frames[slot(len - 1)].node;
            let mut n = 0usize;
            let mut i = len;
            for _ in 0..MAX_DEPTH {
                if i == 0 || n >= MAX_PENDING_RETURNS {
                    break;
                }
                i -= 1;
                let f = &st.frames[slot(i)];
                // Without a branch (uretprobe is 0 or 1; a slot written for another frame is
                // overwritten or lies past npending): one path per frame instead of two keeps
                // 6.1's verifier under its 1M-instruction limit.
                ev.pending_returns[n & (MAX_PENDING_RETURNS - 1)] = f.ret_addr;
                // A frame the unwind guard disarmed holds its real address again.
                n += (f.uretprobe & FRAME_URETPROBE & !(f.uretprobe >> 1)) as usize;
            }
            ev.npending = n as u32;
        }
    }
    entry.write(ev);
    entry.submit(submit_flags());
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
