//! Which processes are traced, and whether a hit should count.
//!
//! In: `TRACED` (tgids, filled by userspace and, with `--follow-forks`, by the fork
//! tracepoint for every child of a traced process), `CONFIG`'s `FILTER_TRACED` and `STOPPED`.
//! Out: [`wanted`] / [`wanted_for`] / [`in_scope`] for the uprobe programs, [`traced`] for the
//! system-wide ones; the fork and exit tracepoints keep the set (and the exited threads'
//! stacks) up to date.

use aya_ebpf::{
    bindings::BPF_ANY, helpers::bpf_get_current_pid_tgid, macros::map, maps::HashMap,
    programs::TracePointContext,
};
use wprof_common::{config, Event, EventKind, CALIBRATION_FIRST_PHASE, MAX_DEPTH};

use crate::events::emit;
use crate::maps::{count_abandoned, CONFIG};
use crate::span_queue::send_queued;
use crate::stack::{slot, STACKS};

/// Processes being traced (tgid -> 1), filled by userspace and, with `--follow-forks`, by
/// `wprof_fork` for every child of a traced process.
#[map]
static TRACED: HashMap<u32, u8> = HashMap::with_max_entries(16_384, 0);

/// Whether thread `key` (pid_tgid) belongs to a process in `TRACED`.
#[inline(always)]
pub(crate) fn traced(key: u64) -> bool {
    TRACED.get_ptr(&((key >> 32) as u32)).is_some()
}

/// [`wanted`] for a hit of `phase`: a calibration phase's probes sit in wprof's calibration
/// child alone, which `--follow-forks`'s traced set does not hold (the recalibration at the
/// end of a run found no span of it), so they need only the run not to be stopped.
#[inline(always)]
pub(crate) fn wanted_for(phase: u32, key: u64) -> bool {
    if phase >= CALIBRATION_FIRST_PHASE {
        return CONFIG.get(config::STOPPED).copied().unwrap_or(0) == 0;
    }
    wanted(key)
}

/// With `--follow-forks` the uprobes fire in every process that maps the object; only the
/// traced ones (the `--pid`s and their descendants) go on.
#[inline(always)]
pub(crate) fn wanted(key: u64) -> bool {
    if CONFIG.get(config::STOPPED).copied().unwrap_or(0) == 1 {
        return false;
    }
    in_scope(key)
}

/// Whether thread `key` belongs to a traced process, stopped or not (the unwind guard keeps
/// protecting the frames armed before the stop until it is unloaded).
#[inline(always)]
pub(crate) fn in_scope(key: u64) -> bool {
    CONFIG.get(config::FILTER_TRACED).copied().unwrap_or(0) == 0 || traced(key)
}

/// sched:sched_process_fork (`--follow-forks`): the child of a traced process is traced from
/// its first instruction, since this runs in the parent before the child is ever scheduled.
/// Threads come through here too; their tids are removed again when they exit.
#[inline(always)]
pub(crate) fn fork(ctx: &TracePointContext) -> u32 {
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
#[inline(always)]
pub(crate) fn thread_exit() -> u32 {
    let key = bpf_get_current_pid_tgid();
    let tid = key as u32;
    if tid != (key >> 32) as u32 && TRACED.get_ptr(&tid).is_some() {
        let _ = TRACED.remove(&tid);
    }
    if let Some(st) = STACKS.get_ptr_mut(&key) {
        // SAFETY: the exiting thread's own stack; its completed calls are sent before it goes.
        send_queued(unsafe { &mut *st });
        // SAFETY: the exiting thread's own stack, read before it is removed.
        let len = unsafe { (*st).len } as usize;
        for i in 0..MAX_DEPTH {
            if i >= len {
                break;
            }
            // SAFETY: as above.
            count_abandoned(unsafe { &(*st).frames[slot(i)] });
        }
        let _ = STACKS.remove(&key);
    }
    0
}
