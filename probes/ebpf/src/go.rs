//! Go: goroutines as owners of phase stacks, and the runtime's stop-the-world pauses.
//!
//! In: hits of Go functions (cookie bit `COOKIE_GO_BIT`), with the running goroutine's `g` in
//! r14, and the hits of `runtime.stopTheWorldWithSema` / `startTheWorldWithSema`. Out: the
//! [`Owner`] of a Go hit (its goroutine's stack, with stack pointers kept as distances from
//! the stack's top), the frames a recovered panic left behind popped, `GO_PROCS` (processes
//! whose CPU samples look for a goroutine's stack), `GO_STW` (each process's stopped time) and
//! the stop-the-world span under a Go call that sat through a pause.

use aya_ebpf::{bindings::BPF_ANY, helpers::bpf_probe_read_user, macros::map, maps::HashMap};
use wprof_common::{
    config, goroutine_key, Event, EventKind, Frame, GoStw, ThreadStack, GO_G_STACK_HI,
    GO_MAX_STACK, GO_SP_TOP, MAX_DEPTH,
};

use crate::events::{define_node, emit, node_hash};
use crate::kernel_agg::aggregate_call;
use crate::maps::{count_abandoned, count_lost, CONFIG, PHASE_COSTS};
use crate::site::Site;
use crate::stack::{slot, Owner};

/// The top of goroutine `g`'s stack (`g.stack.hi`) if `sp` lies on that stack: then `g` (r14)
/// really is the running goroutine, not a register that assembly used for itself.
#[inline(always)]
pub(crate) fn go_stack_top(g: u64, sp: u64) -> Option<u64> {
    // SAFETY: reads 8 bytes of the traced process's memory; a fault just yields an error.
    let hi = unsafe { bpf_probe_read_user((g + GO_G_STACK_HI) as *const u64) }.ok()?;
    (hi > sp && hi - sp <= GO_MAX_STACK).then_some(hi)
}

/// The processes in which a goroutine opened a stack of phases (marked by `stack_for`, once
/// per such stack, not per hit): their CPU samples are looked up on the interrupted
/// goroutine's stack.
#[map]
pub(crate) static GO_PROCS: HashMap<u32, u8> = HashMap::with_max_entries(16_384, 0);

/// The owner of a hit on thread `id` with stack pointer `sp`. A Go site's stack is its
/// goroutine's: `r14` holds the running goroutine's `g` (Go's register ABI, amd64, 1.17+),
/// and `g.stack.hi`, the top of its stack, turns `sp` into a distance that survives the
/// runtime moving the stack (growth or shrinking copies the frames to a new stack at the
/// same distance from its top). Anything else, or a `g` that does not hold `sp` (assembly
/// that uses r14 for itself), stays with the thread.
#[inline(always)]
pub(crate) fn owner_of(site: &Site, regs: &aya_ebpf::bindings::pt_regs, id: u64, sp: u64) -> Owner {
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
pub(crate) fn abandon_unwound_go(st: &mut ThreadStack, hi: u64) {
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
        count_abandoned(top);
        st.len = (len - 1) as u32;
    }
}

/// Stop-the-world pauses of the traced Go processes, keyed by tgid.
#[map]
static GO_STW: HashMap<u32, GoStw> = HashMap::with_max_entries(16_384, 0);

/// The stopped-the-world time of process `tgid` so far, ns.
#[inline(always)]
pub(crate) fn stw_total(tgid: u32) -> u64 {
    // SAFETY: a map value, read once.
    GO_STW
        .get_ptr(&tgid)
        .map(|s| unsafe { (*s).total_ns })
        .unwrap_or(0)
}

/// The world of process `tgid` stopped at `now` (`stopTheWorldWithSema` returns).
#[inline(always)]
pub(crate) fn stw_stopped(tgid: u32, now: u64) {
    let s = GoStw {
        since_ns: now,
        total_ns: stw_total(tgid),
    };
    let _ = GO_STW.insert(&tgid, &s, BPF_ANY as u64);
}

/// The world of process `tgid` restarts at `now` (`startTheWorldWithSema` is entered): the
/// pause is added to its total.
#[inline(always)]
pub(crate) fn stw_started(tgid: u32, now: u64) {
    if let Some(s) = GO_STW.get_ptr_mut(&tgid) {
        // SAFETY: one goroutine stops and starts a process's world, one at a time.
        let s = unsafe { &mut *s };
        if s.since_ns != 0 && now > s.since_ns {
            s.total_ns += now - s.since_ns;
        }
        s.since_ns = 0;
    }
}

/// Sends the stopped-the-world time `ns` of the Go call `top` (closing at `now`, at depth
/// `depth - 1`) as a span of phase `stw_phase` under it, or adds it to that node's summary with
/// in-kernel aggregation (as the span would have been: its probe-time share included).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_stw(
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

/// The user goroutine running on the thread that `g` runs on (`g.m.curg`), when the traced
/// binary's offsets are known (config `GO_G_M`, `GO_M_CURG`) and it is not nil.
#[inline(always)]
pub(crate) fn current_goroutine(g: u64) -> Option<u64> {
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
