//! CPU samples and off-CPU time of the traced threads.
//!
//! In: the per-CPU cpu-clock perf events and sched:sched_switch (system-wide: untraced
//! processes are dropped first). Out: `CpuSampleEvent` records (the stacks copied in),
//! off-CPU `StackEvent` records (user and kernel stack ids in `STACK_TRACES`: a thread's
//! stacks wait in a map while it is off the CPU), each with the innermost open phase and the
//! return addresses pending uretprobes hid, and each off-CPU interval added to the innermost
//! open frame of the thread that comes back. Without `--off-cpu` (`config::OFF_CPU_STACKLESS`)
//! sched_switch only does the last: no stacks, no records, for the preempted time the
//! correction needs.

use aya_ebpf::{
    bindings::{BPF_ANY, BPF_F_USER_STACK},
    helpers::{bpf_get_current_pid_tgid, bpf_get_stack, bpf_ktime_get_ns},
    macros::map,
    maps::{HashMap, StackTrace},
    programs::{tracing::StackIdContext, PerfEventContext, TracePointContext},
    EbpfContext,
};
use wprof_common::{
    config, counter, goroutine_key, CpuSampleEvent, EventKind, StackEvent, FRAME_URETPROBE,
    MAX_DEPTH, MAX_PENDING_RETURNS, MAX_THREADS, SAMPLE_FRAMES,
};

use crate::events::{submit_flags, EVENTS};
use crate::go::{current_goroutine, go_stack_top, GO_PROCS};
use crate::maps::{bump, CONFIG};
use crate::scope::traced;
use crate::stack::{slot, STACKS};

/// User and kernel stacks of CPU samples and off-CPU records. Userspace sizes it at load.
#[map]
static STACK_TRACES: StackTrace = StackTrace::with_max_entries(16_384, 0);

/// wprof's own threads, by tid (userspace fills it when it attaches sched_switch).
#[map]
static OWN_THREADS: HashMap<u32, u8> = HashMap::with_max_entries(64, 0);

/// [`OffCpuStart::preempted`]: left the CPU runnable.
const PREEMPTED: u32 = 1;
/// [`OffCpuStart::preempted`]: left the CPU runnable, to one of wprof's own threads.
const PREEMPTED_BY_WPROF: u32 = 2;

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
    /// [`PREEMPTED`] or [`PREEMPTED_BY_WPROF`] when it left the CPU runnable, 0 when it went
    /// to wait.
    preempted: u32,
    _pad: u32,
}

/// Bits of sched_switch's `prev_state` naming a state the task sleeps in (S, D, T, t, X,
/// Z, P, I: its tracefs print format's mask). None set means it left the CPU runnable ("R"),
/// whether preempted in the kernel ("R+", the bit above) or switched out at a return to
/// user mode or a yield: it waits for a CPU, not for something. The same on 6.1 and 6.18.
const SLEEP_STATES: i64 = 0xff;

/// CPU sample (software cpu-clock, one perf event per CPU): the traced thread's stacks, copied
/// into the record, and the phase open on it.
#[inline(always)]
pub(crate) fn cpu_sample(ctx: &PerfEventContext) -> u32 {
    let key = bpf_get_current_pid_tgid();
    if !traced(key) {
        return 0;
    }
    let phases = sampled_stack_key(ctx, key);
    let Some(mut entry) = EVENTS.reserve::<CpuSampleEvent>(0) else {
        bump(counter::LOST_CPU_SAMPLES);
        return 0;
    };
    let rec = entry.as_mut_ptr();
    let head = stack_head(EventKind::CpuSample, key, phases, 1, -1, -1);
    // SAFETY: `rec` is the reserved record, exclusively ours until submitted; each field is
    // written once, the frames by the helper within their arrays' sizes.
    unsafe {
        (*rec).head = head;
        let user = bpf_get_stack(
            ctx.as_ptr(),
            (*rec).user.as_mut_ptr().cast(),
            (SAMPLE_FRAMES * 8) as u32,
            BPF_F_USER_STACK as u64,
        );
        (*rec).user_bytes = user.max(0) as u32;
        let kernel = bpf_get_stack(
            ctx.as_ptr(),
            (*rec).kernel.as_mut_ptr().cast(),
            (SAMPLE_FRAMES * 8) as u32,
            0,
        );
        (*rec).kernel_bytes = kernel.max(0) as u32;
    }
    entry.submit(submit_flags());
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

/// sched:sched_switch: a traced thread leaving the CPU records where and when; one coming back
/// adds the time to its innermost open phase and sends an off-CPU record.
#[inline(always)]
pub(crate) fn sched_switch(ctx: &TracePointContext) -> u32 {
    // The clock is read only for a switch that involves a traced thread: most switches on a
    // busy host do not, and the read is a third of what this program costs them.
    let mut now = 0;
    // At sched_switch the current task is still the one leaving.
    let key = bpf_get_current_pid_tgid();
    let next_off = CONFIG.get(config::SCHED_NEXT_PID).copied().unwrap_or(56) as usize;
    // SAFETY: reads a field of the trace record at the offset its tracefs format gives.
    let Ok(next_tid) = (unsafe { ctx.read_at::<i32>(next_off & 0xff) }) else {
        return 0;
    };
    let next_tid = next_tid as u32;
    let stackless = CONFIG
        .get(config::OFF_CPU_STACKLESS)
        .is_some_and(|v| *v != 0);
    if traced(key) && key as u32 != 0 && (!stackless || in_a_phase(key)) {
        // SAFETY: plain helper call.
        now = unsafe { bpf_ktime_get_ns() };
        let state_off = CONFIG.get(config::SCHED_PREV_STATE).copied().unwrap_or(32) as usize;
        // SAFETY: reads a field of the trace record at the offset its tracefs format gives.
        let runnable = unsafe { ctx.read_at::<i64>(state_off & 0xff) }
            .is_ok_and(|state| state & SLEEP_STATES == 0);
        let preempted = if !runnable {
            0
        } else if OWN_THREADS.get_ptr(&next_tid).is_some() || wprof_helper(ctx) {
            PREEMPTED_BY_WPROF
        } else {
            PREEMPTED
        };
        let (user_stack, kernel_stack) = if stackless {
            (-1, -1)
        } else {
            (
                ctx.get_stackid(&STACK_TRACES, BPF_F_USER_STACK as u64)
                    .map(|id| id as i32)
                    .unwrap_or(-1),
                ctx.get_stackid(&STACK_TRACES, 0)
                    .map(|id| id as i32)
                    .unwrap_or(-1),
            )
        };
        let start = OffCpuStart {
            start_ns: now,
            pid_tgid: key,
            user_stack,
            kernel_stack,
            preempted,
            _pad: 0,
        };
        let _ = OFF_CPU_SINCE.insert(&(key as u32), &start, BPF_ANY as u64);
    }
    let Some(start) = OFF_CPU_SINCE.get_ptr(&next_tid) else {
        return 0;
    };
    // SAFETY: a map value we only read before removing it.
    let start = unsafe { *start };
    let _ = OFF_CPU_SINCE.remove(&next_tid);
    if now == 0 {
        // SAFETY: plain helper call.
        now = unsafe { bpf_ktime_get_ns() };
    }
    let off = now.saturating_sub(start.start_ns);
    if let Some(st) = STACKS.get_ptr_mut(&start.pid_tgid) {
        // SAFETY: the thread coming back is not running yet, so nothing else touches its stack.
        let st = unsafe { &mut *st };
        let len = st.len as usize;
        if len > 0 && len <= MAX_DEPTH {
            let frame = &mut st.frames[slot(len - 1)];
            frame.off_ns += off;
            if start.preempted != 0 {
                frame.preempted_ns += off;
            }
            if start.preempted == PREEMPTED_BY_WPROF {
                frame.wprof_ns += off;
            }
        }
    }
    if !stackless {
        emit_off_cpu(start.pid_tgid, off, start.user_stack, start.kernel_stack);
    }
    0
}

/// Whether the thread sched_switch hands the CPU to is one of wprof's helper threads, named
/// `wprof-…` (those a helper starts inherit the name): they come and go during a run (the
/// in-situ and budget switches' detaching threads), so `OWN_THREADS`, filled by userspace,
/// can miss them.
#[inline(always)]
fn wprof_helper(ctx: &TracePointContext) -> bool {
    let off = CONFIG.get(config::SCHED_NEXT_COMM).copied().unwrap_or(40) as usize;
    // Its first six bytes against "wprof-", as one little-endian word (a byte array read
    // compiled to code the verifier refused).
    const PREFIX: u64 = u64::from_le_bytes(*b"wprof-\0\0");
    const MASK: u64 = 0xffff_ffff_ffff;
    // SAFETY: reads the first 8 bytes of `next_comm` at the offset its tracefs format gives.
    unsafe { ctx.read_at::<u64>(off & 0xff) }.is_ok_and(|c| c & MASK == PREFIX)
}

/// Whether thread `key` has a phase open (its stack of phases is not empty).
#[inline(always)]
fn in_a_phase(key: u64) -> bool {
    STACKS.get_ptr(&key).is_some_and(|st| {
        // SAFETY: read-only look at the thread's stack length.
        unsafe { (*st).len > 0 }
    })
}

/// Sends thread `key`'s off-CPU record: `off_ns` away, its stacks by id (see [`stack_head`]).
#[inline(always)]
fn emit_off_cpu(key: u64, off_ns: u64, user_stack: i32, kernel_stack: i32) {
    let Some(mut entry) = EVENTS.reserve::<StackEvent>(0) else {
        bump(counter::LOST_OFF_CPU);
        return;
    };
    entry.write(stack_head(
        EventKind::OffCpu,
        key,
        key,
        off_ns,
        user_stack,
        kernel_stack,
    ));
    entry.submit(submit_flags());
}

/// A [`StackEvent`] for thread `key`: the innermost open phase of the stack of phases
/// `phases` (`STACKS` key: the thread's, or the goroutine's it was running) and the return
/// addresses that stack's pending uretprobes replaced.
#[inline(always)]
fn stack_head(
    kind: EventKind,
    key: u64,
    phases: u64,
    weight: u64,
    user_stack: i32,
    kernel_stack: i32,
) -> StackEvent {
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
    ev
}
