//! Types that cross the kernel/user boundary, declared once for both sides.
//!
//! The eBPF programs (probes/ebpf) write these into maps and the ring buffer; wprof's
//! userspace reads them back with `aya::Pod`. Every struct is `#[repr(C)]` with explicit
//! padding so both sides agree on the layout without any decoding by hand.
#![no_std]

pub mod key;
pub use key::{KeyScanner, NodeKey, PhaseKey, COOKIE_KEY_BIT, KEY_BYTES};
pub mod names;
pub mod usdt;
pub use usdt::{UsdtArg, UsdtSite, COOKIE_USDT_BIT};

/// Deepest per-thread phase stack kept in BPF. A recursion 100 deep must fit; deeper entries
/// are counted as overflow instead of being recorded.
pub const MAX_DEPTH: usize = 128;

/// Largest number of phases one run may attach (phase ids index per-phase counters).
pub const MAX_PHASES: u32 = 1024;

/// The first of the phase ids wprof's probe-cost calibration uses (the last 8): spans of
/// these phases lost to a full ring are the calibration's, never counted as the run's.
pub const CALIBRATION_FIRST_PHASE: u32 = MAX_PHASES - 8;

/// Threads whose stacks BPF can track at once. Stacks are allocated on first use
/// (BPF_F_NO_PREALLOC), so this bounds memory, it does not reserve it.
pub const MAX_THREADS: u32 = 65_536;

/// Distinct phase paths (tree nodes) whose definition has been sent to userspace.
pub const MAX_NODES: u32 = 65_536;

/// Default ring buffer size in bytes (must be a power of two and a multiple of the page size).
pub const DEFAULT_RING_BYTES: u32 = 8 << 20;

/// Bits 32..40 of an attach cookie hold the [`SiteKind`].
pub const COOKIE_KIND_SHIFT: u64 = 32;

/// Bit 40 of an entry cookie: the phase's return is detected by a uretprobe (not RET sites).
pub const COOKIE_URETPROBE_BIT: u64 = 1 << 40;

/// What kind of probe site an attach cookie names.
#[repr(u32)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SiteKind {
    /// The function's entry (first instruction, or a safe later one).
    Entry = 0,
    /// A RET (or tail-call JMP) instruction inside the function: the stack pointer equals the
    /// one seen at entry.
    RetSite = 1,
    /// A kernel uretprobe: fires after the return, stack pointer is entry + 8.
    Uretprobe = 2,
}

/// Bits 41..45 of a cookie: what the site captures ([`ARG_NONE`], `1..=9` = integer argument
/// `n - 1` at an entry, [`ARG_RETVAL`] = the return value at an exit site). Arguments 0-5
/// follow the System V x86-64 convention, 0-8 Go's register ABI for Go sites
/// ([`COOKIE_GO_BIT`]).
pub const COOKIE_ARG_SHIFT: u64 = 41;

/// Mask of the capture field once shifted down.
pub const COOKIE_ARG_MASK: u64 = 0xf;

/// No capture.
pub const ARG_NONE: u64 = 0;

/// Capture the return value (exit sites).
pub const ARG_RETVAL: u64 = 15;

/// Bit 45 of a cookie: the site is in a Go function (Go's register ABI, amd64, Go 1.17+). Its
/// phase stack is the goroutine's, not the thread's: keyed by the `g` pointer in `r14` and
/// the process, with stack pointers taken relative to the top of the goroutine's stack
/// (`g.stack.hi`), which stays put when the runtime moves the stack.
pub const COOKIE_GO_BIT: u64 = 1 << 45;

/// Offset of `stack.hi` in the Go runtime's `g` struct (`stack.lo` is at 0; unchanged since
/// Go 1.0).
pub const GO_G_STACK_HI: u64 = 8;

/// A goroutine's stack is at most 1 GB on 64-bit (`runtime.maxstacksize`): a `g.stack.hi`
/// further than this above the stack pointer is not the running goroutine's.
pub const GO_MAX_STACK: u64 = 1 << 30;

/// Where a Go frame's stack pointer is put for comparisons: `GO_SP_TOP - (g.stack.hi - sp)`,
/// so that, as with real stack pointers, an inner frame's value is lower.
pub const GO_SP_TOP: u64 = 1 << 62;

/// Bit 63 of a `STACKS` key that names a goroutine (the others are pid_tgid values, below
/// 2^54).
pub const GOROUTINE_KEY_BIT: u64 = 1 << 63;

/// Bits 48..64 of a cookie: the phase id + 1 of the phase this one must be called inside
/// (`under`), 0 for none.
pub const COOKIE_UNDER_SHIFT: u64 = 48;

/// Builds the attach cookie for a phase, a site kind and the phase's return mode.
pub const fn cookie(phase: u32, kind: SiteKind, uretprobe: bool) -> u64 {
    let flag = if uretprobe { COOKIE_URETPROBE_BIT } else { 0 };
    ((kind as u64) << COOKIE_KIND_SHIFT) | flag | phase as u64
}

/// A cookie with its capture and `under` fields: `arg` is [`ARG_NONE`], `n + 1` for argument
/// `n` (0..6) or [`ARG_RETVAL`]; `under` is the enclosing phase's id + 1, or 0.
pub const fn cookie_with(base: u64, arg: u64, under: u32) -> u64 {
    base | (arg & COOKIE_ARG_MASK) << COOKIE_ARG_SHIFT
        | (under as u64 & 0xffff) << COOKIE_UNDER_SHIFT
}

/// `c` marked as a Go site ([`COOKIE_GO_BIT`]).
pub const fn go_cookie(c: u64) -> u64 {
    c | COOKIE_GO_BIT
}

/// The `STACKS` key of goroutine `g` of process `tgid`: `g` mixed with a hash of `tgid`
/// (the same `g` addresses occur in every Go process), with [`GOROUTINE_KEY_BIT`] set so no
/// thread's key is ever equal. Two goroutines of different processes share a key only if
/// their `g` addresses differ by exactly the two hashes' XOR, which lies below 2^47 for one
/// pair of processes in 2^16.
#[inline(always)]
pub fn goroutine_key(tgid: u32, g: u64) -> u64 {
    let mut x = (tgid as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (g ^ x) | GOROUTINE_KEY_BIT
}

/// One open phase on a thread's stack.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct Frame {
    /// Path hash of this frame's tree node (parent node + phase).
    pub node: u64,
    /// Stack pointer at entry (points at the return address); for a Go frame its distance
    /// below the top of the goroutine's stack, as `GO_SP_TOP - (g.stack.hi - sp)`.
    pub sp: u64,
    /// Entry timestamp, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// Time spent in completed child phases, ns.
    pub child_ns: u64,
    /// Return address found at `sp` on entry (tells a tail call from a stale frame); for a USDT
    /// frame, the stack pointer its start probe saw.
    pub ret_addr: u64,
    /// Phase id (index into the profile's phases).
    pub phase: u32,
    /// [`FRAME_URETPROBE`] when the phase's return is a uretprobe (0 for RET sites), plus
    /// [`FRAME_DISARMED`] while the unwind guard has put the original return address back.
    pub uretprobe: u32,
    /// Time the thread spent off the CPU inside this call so far (children included), ns.
    pub off_ns: u64,
    /// The part of `off_ns` the thread left the CPU runnable (preempted), ns.
    pub preempted_ns: u64,
    /// The part of `preempted_ns` it left the CPU to one of wprof's own threads, ns.
    pub wprof_ns: u64,
    /// The captured argument (or, once the exit site ran, return value); 0 when none.
    pub arg: u64,
    /// Probe time of the completed descendant calls (each one's whole entry + return cost,
    /// from `PHASE_COSTS`), ns: all of it fell inside this call's window.
    pub desc_probe_ns: u64,
    /// Probe hits of the completed descendant calls (entries + returns).
    pub desc_hits: u64,
    /// Go frames: the process's stopped-the-world time so far ([`GoStw::total_ns`]) when the
    /// call entered.
    pub stw_at_entry: u64,
    /// Go frames: stopped-the-world time inside the completed child calls, ns (shown under
    /// them, not again under this call).
    pub stw_child_ns: u64,
}

/// `Frame::uretprobe` bit: the phase returns through a kernel uretprobe (its return-address
/// slot holds the kernel's trampoline while the call runs).
pub const FRAME_URETPROBE: u32 = 1;

/// `Frame::uretprobe` bit: an unwind in progress made the unwind guard put the frame's original
/// return address back in its slot (so the unwinder can read it); the catch re-arms it.
pub const FRAME_DISARMED: u32 = 2;

/// `Frame::uretprobe` bit: the unwind guard queued a write of this frame's return slot for
/// wprof to make (where the kernel refuses BPF's writes); cleared when the request goes.
pub const FRAME_ASK: u32 = 4;

/// `Frame::uretprobe` bit: the call entered while the run, or its phase's probes, were closing
/// ([`config::CLOSING`], `CLOSING_PHASES`): its frame is kept so the unwind guard knows it,
/// but nothing counts it (no entry, return, span or abandonment).
pub const FRAME_UNCOUNTED: u32 = 8;

/// Return slots one request of the unwind guard carries at most: a thread's open frames.
pub const GUARD_SLOTS: usize = MAX_DEPTH;

/// One return-address slot the unwind guard asks wprof to write: `value` over `expect`, and
/// nothing if the slot holds anything else.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct GuardSlot {
    /// Address of the slot in the thread's stack.
    pub addr: u64,
    /// What the slot must hold for the write to happen.
    pub expect: u64,
    /// What to write.
    pub value: u64,
}

/// Where the kernel refuses BPF writes to user memory (lockdown), the unwind guard's programs
/// ask wprof to write the slots instead, and the thread waits in the program until wprof says
/// it did ([`GuardDone`]).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct GuardAsk {
    /// The asking thread (tgid << 32 | tid): its process's memory is written.
    pub key: u64,
    /// The request's id, echoed in [`GuardDone`].
    pub id: u64,
    /// Valid entries of `slots`.
    pub n: u32,
    /// 1 for a catch's re-arming, 0 for an unwind's disarming (for wprof's counts).
    pub rearm: u32,
    /// The slots to write.
    pub slots: [GuardSlot; GUARD_SLOTS],
}

/// What an unwind guard program needs after it may have slept, in the thread's
/// [`ThreadStack`]: everything else is read again from the maps once it wakes.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct GuardState {
    /// The stack pointer at the unwinder's entry or at the catch.
    pub sp: u64,
    /// A slot value the guard takes for the uretprobe trampoline until its code is read.
    pub tramp_candidate: u64,
    /// The id of the request to wprof the thread waits on.
    pub ask_id: u64,
    /// When the wait ends without an answer (CLOCK_MONOTONIC ns).
    pub ask_deadline: u64,
    /// Slots wprof wrote, from its answer.
    pub ask_written: u64,
    /// The counter the slots written add to.
    pub ask_counter: u32,
    /// 1 once wprof answered.
    pub ask_done: u32,
}

/// wprof's answer to a [`GuardAsk`], in `GUARD_DONE` under the thread's key.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct GuardDone {
    /// The id of the request answered.
    pub id: u64,
    /// Slots written.
    pub written: u64,
}

/// Bit 46 of a cookie: an exit site of `runtime.stopTheWorldWithSema`: the Go world (every
/// goroutine of the process) is stopped from here.
pub const COOKIE_STW_STOP_BIT: u64 = 1 << 46;

/// Bit 47 of a cookie: the entry of `runtime.startTheWorldWithSema`: the world restarts.
pub const COOKIE_STW_START_BIT: u64 = 1 << 47;

/// A Go process's stop-the-world pauses, as its `runtime.stopTheWorldWithSema` returns and
/// `runtime.startTheWorldWithSema` entries show them. Values of the `GO_STW` map, keyed by
/// tgid.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct GoStw {
    /// When the world stopped (CLOCK_MONOTONIC ns), 0 while it runs.
    pub since_ns: u64,
    /// Sum of the pauses that ended, ns.
    pub total_ns: u64,
}

/// What one call of a phase costs in probe time, from wprof's calibration (or its fixed
/// estimate), ns. Values of the `PHASE_COSTS` array, indexed by phase id.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct PhaseCost {
    /// The whole entry + return cost of one call: what an enclosing call's window contains.
    pub pair_ns: u64,
    /// The part of it that falls inside the call's own window (after the entry's clock read,
    /// before the return's).
    pub own_ns: u64,
}

/// The per-thread stack of open phases. Lives in a BPF hash map keyed by pid_tgid (by
/// [`goroutine_key`] for Go phases) so a lost ring-buffer event can never corrupt the nesting
/// of later calls.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct ThreadStack {
    /// Number of valid frames.
    pub len: u32,
    /// The process (tgid) of a goroutine's stack, whose key does not show it; 0 for a
    /// thread's.
    pub tgid: u32,
    /// The kernel's uretprobe trampoline in this thread's process, once the unwind guard has
    /// seen it in a return-address slot (0 before); what a catch writes back to re-arm.
    pub tramp: u64,
    /// Number of completed calls queued in `spans`, not sent yet.
    pub pending: u32,
    /// Calls entered on this thread, wrapping: what `--max-overhead`'s progress reading
    /// counts the thread's probe hits by (two a call). Also keeps the struct's fields
    /// aligned (it is shared with BPF byte for byte).
    pub entries: u32,
    /// The unwind guard's state while one of its programs runs on this thread, kept here and
    /// not on the BPF stack: on 6.13+ kernels a uprobe program's stack is a per-CPU private
    /// stack, which any BPF program run on the CPU while the guard sleeps (a page fault, its
    /// wait for wprof) writes over. See [`GuardState`].
    pub guard: GuardState,
    /// Completed calls (`Span` events) queued until their root call returns, the queue is
    /// full or [`SPAN_QUEUE_FLUSH_NS`] passed: one ring-buffer record carries them all,
    /// instead of one record a call.
    pub spans: [Event; SPAN_QUEUE],
    /// The frames, outermost first.
    pub frames: [Frame; MAX_DEPTH],
}

/// How many completed calls a thread's stack queues before it sends them (a power of two).
/// A ring-buffer record costs ~65 ns on the return path here whatever its size, so one record
/// a root call (a nested write of 7 phases: 7 spans) instead of one a call saves most of it.
pub const SPAN_QUEUE: usize = 16;

/// The longest a queued span waits when its thread keeps a root call open (ns): about the
/// collector's own poll interval.
pub const SPAN_QUEUE_FLUSH_NS: u64 = 20_000_000;

impl ThreadStack {
    /// The completed calls queued on this stack, not sent yet.
    pub fn queued(&self) -> &[Event] {
        &self.spans[..(self.pending as usize).min(SPAN_QUEUE)]
    }
}

/// Event kinds sent through the ring buffer.
#[repr(u32)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A completed phase call.
    Span = 1,
    /// The first sighting of a tree node: its parent node and phase.
    NodeDef = 2,
    /// A CPU sample of a traced thread (a [`CpuSampleEvent`]).
    CpuSample = 3,
    /// A traced thread came back on the CPU (a [`StackEvent`] weighted by the ns it was off).
    OffCpu = 4,
    /// A traced process forked (`--follow-forks`): `pid` is the child, `tid` the parent's tgid.
    Fork = 5,
    /// A traced process's dynamic loader changed its list of loaded objects (dlopen,
    /// dlclose): libraries of phases not attached yet may be mapped now.
    MapsChanged = 6,
    /// The string a grouped node stands for (a [`NodeKey`]), sent just before its NodeDef.
    NodeKey = 7,
}

/// A ring-buffer record. Spans and node definitions share one layout so userspace reads a single
/// type.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct Event {
    /// An [`EventKind`] as u32.
    pub kind: u32,
    /// Phase id.
    pub phase: u32,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Tree node (path hash).
    pub node: u64,
    /// Parent node (0 for a root).
    pub parent: u64,
    /// Entry time (span) in CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// Duration of the call, ns (span only).
    pub dur_ns: u64,
    /// Time in completed child phases, ns (span only).
    pub child_ns: u64,
    /// Depth of the node (0 = root).
    pub depth: u32,
    /// Probe hits of the call's completed descendants (span only; saturates at u32::MAX).
    pub desc_hits: u32,
    /// Time the thread spent off the CPU during the call (children included), ns (span only).
    pub off_ns: u64,
    /// The phase's captured argument or return value (`arg` in the profile), 0 when none.
    pub arg: u64,
    /// Probe time of the call's completed descendants, ns (span only): the part of `dur_ns`
    /// the descendants' probes added.
    pub desc_probe_ns: u64,
    /// The `STACKS` key the call was on (span only): its thread's pid_tgid, or its
    /// goroutine's [`goroutine_key`] for a Go call, whichever threads the goroutine ran on.
    pub stack: u64,
    /// The part of `off_ns` the thread left the CPU still runnable (preempted, waiting for a
    /// CPU rather than for something), ns (span only).
    pub preempted_ns: u64,
    /// The part of `preempted_ns` the thread left the CPU to one of wprof's own threads (its
    /// reader, mostly): wprof's doing, whatever the call was doing, ns (span only).
    pub wprof_ns: u64,
}

impl Event {
    /// Which stack of calls a span belongs to: its goroutine's for a Go call (`stack`), else
    /// its thread's. The per-call table and `--split-by` group spans into root calls by it.
    pub fn stack_key(&self) -> u64 {
        if self.stack != 0 {
            self.stack
        } else {
            (u64::from(self.pid) << 32) | u64::from(self.tid)
        }
    }
}

/// Pending uretprobe return addresses carried with a stack, innermost first.
pub const MAX_PENDING_RETURNS: usize = 8;

/// A stack seen on a traced thread: a CPU sample or the place it went off the CPU. Its kind
/// field comes first, as in [`Event`], so userspace can tell the two record types apart.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct StackEvent {
    /// [`EventKind::CpuSample`] or [`EventKind::OffCpu`] as u32.
    pub kind: u32,
    /// Number of valid entries in `pending_returns`.
    pub npending: u32,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The innermost phase open on the thread (tree node), 0 when none was.
    pub node: u64,
    /// 1 for a CPU sample; ns spent off the CPU for an off-CPU record.
    pub weight: u64,
    /// User stack id in the `STACK_TRACES` map, negative when none was taken.
    pub user_stack: i32,
    /// Kernel stack id in the `STACK_TRACES` map, negative when none was taken.
    pub kernel_stack: i32,
    /// The return addresses the kernel replaced with its uretprobe trampoline in this stack,
    /// innermost first (from the open uretprobe frames), so userspace can restore them.
    pub pending_returns: [u64; MAX_PENDING_RETURNS],
}

/// Frames a CPU sample carries of each stack (the kernel's default `perf_event_max_stack`).
pub const SAMPLE_FRAMES: usize = 127;

/// A CPU sample with its stacks copied in: `head` as for any [`StackEvent`] (its kind
/// [`EventKind::CpuSample`], its stack ids unused), then the user and kernel frames,
/// innermost first. A stack-id map would drop the stacks whose hash buckets another stack
/// already holds: about 5% of db_bench's samples in a 16,384-bucket map.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct CpuSampleEvent {
    /// Who was sampled, under which phase, and the return addresses uretprobes hid.
    pub head: StackEvent,
    /// Bytes of `user` written (a multiple of 8; 0 when none was taken).
    pub user_bytes: u32,
    /// Bytes of `kernel` written.
    pub kernel_bytes: u32,
    /// User frames, innermost first.
    pub user: [u64; SAMPLE_FRAMES],
    /// Kernel frames, innermost first.
    pub kernel: [u64; SAMPLE_FRAMES],
}

impl CpuSampleEvent {
    /// The user frames written.
    pub fn user_frames(&self) -> &[u64] {
        &self.user[..(self.user_bytes as usize / 8).min(SAMPLE_FRAMES)]
    }

    /// The kernel frames written.
    pub fn kernel_frames(&self) -> &[u64] {
        &self.kernel[..(self.kernel_bytes as usize / 8).min(SAMPLE_FRAMES)]
    }
}

/// What a tracepoint means to wprof: the enter or the exit of a kernel phase. Values of the
/// `TP_PHASES` map, keyed by the tracepoint's event type id (its tracefs `id`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct TracepointRole {
    /// Phase id.
    pub phase: u32,
    /// 0 for the phase's enter tracepoint, 1 for its exit.
    pub exit: u32,
}

/// Size of the `SYS_PHASES` array: index `nr | exit << 10` for syscall numbers below 1024.
pub const SYS_PHASE_SLOTS: u32 = 2048;

/// Bit of a `SYS_PHASES` index set for a syscall's exit tracepoint.
pub const SYS_EXIT_BIT: u32 = 1 << 10;

/// Indices of the `CONFIG` array userspace fills before attaching.
pub mod config {
    /// Offset of `prev_pid` in the sched:sched_switch record (from its tracefs format).
    pub const SCHED_PREV_PID: u32 = 0;
    /// Offset of `next_pid` in the sched:sched_switch record.
    pub const SCHED_NEXT_PID: u32 = 1;
    /// 1 when uprobes are attached to every process mapping the object (`--follow-forks`):
    /// the programs then keep only the processes in `TRACED`.
    pub const FILTER_TRACED: u32 = 2;
    /// Offset of `child_pid` in the sched:sched_process_fork record.
    pub const FORK_CHILD_PID: u32 = 3;
    /// 1 for in-kernel aggregation (`--aggregate kernel`): a completed call updates its
    /// node's [`NodeSummary`](super::NodeSummary) and histogram buckets instead of sending a
    /// span. Set before attaching.
    pub const KERNEL_AGGREGATE: u32 = 4;
    /// 1 once the run is ending: the uprobe programs ignore every hit from then on, so
    /// detaching them one after another (entries first) leaves the calls in flight open
    /// instead of turning their returns into unmatched ones. [`CLOSING`] before that with
    /// the unwind guard.
    pub const STOPPED: u32 = 5;
    /// [`STOPPED`]'s value while a guarded run's uretprobes come off: the calls in flight
    /// still return and count, and a call entering now still gets its frame (the kernel may
    /// arm it with the trampoline until its uretprobe is gone, and the unwind guard must know
    /// it) but is not counted ([`super::FRAME_UNCOUNTED`]): the run's counts end here, so an
    /// entry seen now without its return is not a lost return.
    pub const CLOSING: u64 = 2;
    /// Phase id + 1 of the phase that stands for the Go runtime's stop-the-world pauses (its
    /// symbol is `runtime.stopTheWorldWithSema`), 0 for none: a Go call the world was stopped
    /// during gets a child node of that phase holding the paused time.
    pub const GO_STW_PHASE: u32 = 6;
    /// Offset of `runtime.g.m` in the traced Go binary (from its DWARF), 0 when unknown.
    /// With [`GO_M_CURG`], a CPU sample on a thread's system stack (its `g0`) is looked up
    /// on the stack of phases of the goroutine that thread is working for (`g0.m.curg`).
    pub const GO_G_M: u32 = 7;
    /// Offset of `runtime.m.curg` in the traced Go binary, 0 when unknown.
    pub const GO_M_CURG: u32 = 8;
    /// 1: a thread keeps its phase stack between root calls (userspace frees those of exited
    /// threads, `Tracer::sweep_exited_threads`); 0: it is freed when its outermost phase
    /// returns.
    pub const KEEP_THREAD_STACKS: u32 = 9;
    /// 1 when uretprobe frames must keep their return address (`Frame::ret_addr`): the unwind
    /// guard puts it back, and CPU and off-CPU stacks are restored with it. Otherwise an entry
    /// does not read it (a read of user memory, ~90 ns a call here); Go and USDT frames keep
    /// theirs always.
    pub const NEED_RET_ADDR: u32 = 10;
    /// Offset of `prev_state` in the sched:sched_switch record (a `long`).
    pub const SCHED_PREV_STATE: u32 = 11;
    /// 1 when sched:sched_switch only adds off-CPU and preempted time to the open frames
    /// (the default when correcting, for the probes' share of the preemptions): no stack ids,
    /// no off-CPU records, and only threads inside a phase are followed off the CPU. 0 for
    /// `--off-cpu`, which wants the stacks.
    pub const OFF_CPU_STACKLESS: u32 = 12;
    /// Offset of `next_comm` in the sched:sched_switch record (`char[16]`).
    pub const SCHED_NEXT_COMM: u32 = 13;
    /// Number of entries.
    pub const COUNT: u32 = 14;
}

/// Indices of the global counters (a per-CPU array summed by userspace).
pub mod counter {
    /// Span events dropped because the ring buffer was full.
    pub const LOST_SPANS: u32 = 0;
    /// Node definitions dropped because the ring buffer was full (retried on the next entry).
    pub const LOST_NODE_DEFS: u32 = 1;
    /// Returns that matched no open frame (e.g. the call started before attach).
    pub const UNMATCHED_RETURNS: u32 = 2;
    /// Open frames closed without a return (longjmp, exception, tail call out of a uretprobe).
    pub const ABANDONED: u32 = 3;
    /// Entries dropped because the thread's stack was already MAX_DEPTH deep.
    pub const OVERFLOW: u32 = 4;
    /// Entries dropped because no stack could be allocated for the thread.
    pub const NO_STACK: u32 = 5;
    /// CPU samples dropped because the ring buffer was full.
    pub const LOST_CPU_SAMPLES: u32 = 6;
    /// Off-CPU records dropped because the ring buffer was full.
    pub const LOST_OFF_CPU: u32 = 7;
    /// In-kernel aggregation: completed calls left out because `NODE_SUMMARIES` was full
    /// (also counted as lost on their node).
    pub const SUMMARY_FULL: u32 = 8;
    /// In-kernel aggregation: histogram increments left out because `HIST_BUCKETS` was full
    /// (the call is in its node's count and total, not in its histogram).
    pub const HIST_FULL: u32 = 9;
    /// Unwind guard: uretprobe frames whose original return address was put back when an
    /// exception or panic started to unwind through them.
    pub const UNWIND_DISARMED: u32 = 10;
    /// Unwind guard: frames the catch found still live and gave the trampoline back (their
    /// returns are seen again).
    pub const UNWIND_REARMED: u32 = 11;
    /// Unwind guard: a uretprobe frame's slot held neither its return address nor the kernel's
    /// trampoline, so it was left alone.
    pub const UNWIND_FOREIGN: u32 = 12;
    /// Unwind guard: exceptions or panics (unwinder entries) seen on threads with open phases.
    pub const UNWINDS: u32 = 13;
    /// Unwind guard written by wprof ([`super::GuardAsk`]): requests wprof did not answer in
    /// time, so the unwind went on with the slots as they were.
    pub const UNWIND_LATE: u32 = 14;
    /// Number of counters.
    pub const COUNT: u32 = 15;
}

/// Per-node counters kept in BPF: what could not be reported as a span for that node.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct NodeCounters {
    /// Spans of this node lost to a full ring buffer.
    pub lost: u64,
    /// Calls of this node abandoned (left without a return being seen).
    pub abandoned: u64,
}

/// Per-phase counters kept in BPF.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct PhaseCounters {
    /// Entries seen.
    pub entries: u64,
    /// Returns seen (matched or not).
    pub returns: u64,
    /// Returns that matched no open frame.
    pub unmatched_returns: u64,
    /// Entries dropped by stack overflow.
    pub overflow: u64,
    /// Entries left out because the phase's `under` phase was not open on the thread.
    pub outside_under: u64,
}

/// Entries of the in-kernel aggregation's per-node summaries: one per tree node, like
/// [`MAX_NODES`]. The map is not preallocated, so a run pays only for the nodes it reaches
/// (about 100 bytes + 64 bytes per CPU each).
pub const MAX_SUMMARY_NODES: u32 = MAX_NODES;

/// Entries of the in-kernel histogram buckets: (node, bucket, raw or corrected). A node whose
/// calls spread over three decades of duration fills at most ~1,300 buckets of each kind
/// (128 per power of two), so 262,144 entries hold ~100 such nodes; a typical write path
/// (a few dozen nodes, calls within one or two decades) uses a few percent. Preallocated, one
/// map for all CPUs (~72 bytes an entry, ~18 MiB), and only for `--aggregate kernel`: wprof
/// loads it with 1 entry otherwise.
pub const MAX_HIST_BUCKETS: u32 = 1 << 18;

/// Sub-buckets per power of two of the in-kernel histograms: a bucket is at most 1/128 of
/// its values wide, so its midpoint is within 0.4% of any value in it.
pub const HIST_SUB_BUCKETS: u64 = 128;

/// log2 of [`HIST_SUB_BUCKETS`].
pub const HIST_SUB_BITS: u32 = 7;

/// The in-kernel histogram bucket of a duration (log-linear, ≤ 1% relative error): values
/// below 128 are their own bucket; above, with `msb = floor(log2 v)`, the bucket is
/// `(msb - 6) * 128 + ((v >> (msb - 7)) & 127)`, i.e. 128 sub-buckets per power of two. The
/// largest index (v = u64::MAX) is 7,423.
///
/// Written without a branch, for the verifier: `v | 128` makes the shift 0 below 256, where
/// `shift * 128 + (v >> shift)` is `v` itself, and BPF, which has no count-leading-zeros
/// instruction, gets `leading_zeros` as LLVM's expansion: shifts, ors and a popcount,
/// straight-line code.
#[inline(always)]
pub fn hist_bucket(v: u64) -> u32 {
    let msb = 63 - (v | HIST_SUB_BUCKETS).leading_zeros();
    let shift = msb - HIST_SUB_BITS;
    shift * HIST_SUB_BUCKETS as u32 + (v >> shift) as u32
}

/// Lowest and highest value of an in-kernel histogram bucket (the inverse of [`hist_bucket`]).
pub fn hist_bucket_range(index: u32) -> (u64, u64) {
    let sub = HIST_SUB_BUCKETS as u32;
    if index < sub {
        return (index as u64, index as u64);
    }
    let shift = (index / sub - 1).min(63 - HIST_SUB_BITS);
    let low = (HIST_SUB_BUCKETS + (index % sub) as u64) << shift;
    (low, low + ((1u64 << shift) - 1))
}

/// The value that stands for every value of an in-kernel histogram bucket: its midpoint
/// (rounded down), within 0.4% of any of them.
pub fn hist_bucket_mid(index: u32) -> u64 {
    let (low, high) = hist_bucket_range(index);
    low + (high - low) / 2
}

/// Per-node figures of in-kernel aggregation (`--aggregate kernel`): what userspace's
/// aggregator sums from the spans in per-event mode, summed in BPF instead. Values of the
/// per-CPU `NODE_SUMMARIES` map, keyed by node hash; userspace adds the CPUs up.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSummary {
    /// Completed calls.
    pub count: u64,
    /// Sum of their durations, ns.
    pub total_ns: u64,
    /// Sum of their self times (duration minus completed children, never below 0), ns.
    pub self_ns: u64,
    /// Time the thread spent off the CPU during them (children included), ns.
    pub off_ns: u64,
    /// The part of `off_ns` it left the CPU runnable (preempted), ns.
    pub preempted_ns: u64,
    /// Sum of the captured argument or return value (saturating).
    pub arg_sum: u64,
    /// Sum of the durations with the probes' time taken out of each call, ns.
    pub corrected_total_ns: u64,
    /// Probe time taken out, ns.
    pub probe_ns: u64,
    /// Probe hits inside the calls' windows (their own entry and return and every
    /// descendant's).
    pub probe_hits: u64,
}

/// Key of the `HIST_BUCKETS` map (value: calls in the bucket, u64, shared by the CPUs).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct HistKey {
    /// Tree node (path hash).
    pub node: u64,
    /// [`hist_bucket`] of the duration.
    pub bucket: u32,
    /// 0 for the raw duration, 1 for the duration with the probes' time taken out.
    pub corrected: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all these types are #[repr(C)], Copy, contain only integers, and have explicit
    // padding fields, so every bit pattern is a valid value.
    unsafe impl aya::Pod for super::Event {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ThreadStack {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NodeCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PhaseCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::StackEvent {}
    // SAFETY: plain integers and arrays of them, repr(C).
    unsafe impl aya::Pod for super::CpuSampleEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::TracepointRole {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PhaseCost {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::UsdtSite {}
    // SAFETY: repr(C), integers only.
    unsafe impl aya::Pod for super::GuardDone {}
    // SAFETY: repr(C), integers only.
    unsafe impl aya::Pod for super::GuardAsk {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NodeSummary {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::HistKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PhaseKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NodeKey {}
}
