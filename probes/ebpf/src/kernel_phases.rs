//! Kernel phases: a phase opened and closed by a tracepoint pair or a syscall's enter and exit.
//!
//! In: hits of the `tracepoint` and `syscalls:*` programs (system-wide: untraced processes
//! are dropped first), and `TP_PHASES` / `SYS_PHASES`, which say which phase a tracepoint or
//! syscall opens or closes. Out: frames with stack pointer 0 pushed and popped on the
//! thread's stack, like a function phase's.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{Array, HashMap},
    programs::TracePointContext,
};
use wprof_common::{
    counter, ThreadStack, TracepointRole, MAX_PHASES, SYS_EXIT_BIT, SYS_PHASE_SLOTS,
};

use crate::maps::{bump, closing, count_abandoned, phase_counters};
use crate::probe::frame_flags;
use crate::scope::traced;
use crate::stack::{pop_frame, push_frame, returning_stack, slot, stack_for, Owner};

/// Tracepoints that open or close a kernel phase, keyed by the tracepoint's event type id.
#[map]
static TP_PHASES: HashMap<u32, TracepointRole> = HashMap::with_max_entries(MAX_PHASES * 2, 0);

/// Syscall phases: phase id + 1 (0 = none) at index `nr`, or `nr | SYS_EXIT_BIT` for exits.
/// The syscalls:* tracepoints hand BPF a record whose first word is a pt_regs pointer, not
/// the usual common_type, so they are told apart by the syscall number at offset 8.
#[map]
static SYS_PHASES: Array<u32> = Array::with_max_entries(SYS_PHASE_SLOTS, 0);

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
#[inline(always)]
pub(crate) fn tracepoint(ctx: &TracePointContext) -> u32 {
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

/// syscalls:sys_enter_* (`exit_bit` 0) or sys_exit_* (`SYS_EXIT_BIT`) of a `syscall` phase (or a
/// tracepoint pair in that category).
#[inline(always)]
pub(crate) fn syscall_phase(ctx: &TracePointContext, exit_bit: u32) -> u32 {
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
        let counted = !closing(role.phase);
        let Some(st) = stack_for(key) else {
            if counted {
                pc.entries += 1;
            }
            bump(counter::NO_STACK);
            return Err(());
        };
        // A kernel phase still open on top lost its exit (e.g. the exit tracepoint was missed).
        abandon_kernel_frames(st);
        push_frame(
            st,
            pc,
            who,
            role.phase,
            0,
            frame_flags(false, counted),
            0,
            0,
            0,
        )
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
        count_abandoned(top);
        st.len = (len - 1) as u32;
    }
}
