//! USDT phases: a start probe opens the phase, a done probe closes it.
//!
//! The two probes may sit in different functions (PostgreSQL's `transaction__start` in
//! `StartTransaction`, `transaction__commit` in `CommitTransaction`), so the frame cannot keep
//! the stack pointer the probe saw: a sibling call entered after the starting function returned
//! would find it below its own and count it abandoned. It keeps the enclosing frame's stack
//! pointer minus one instead (`u64::MAX` at the bottom): it lives as long as that frame, its
//! children nest inside it, and the enclosing frame's return still abandons it. A done probe
//! closes the innermost frame of its phase, abandoning what was left open above it (an
//! `elog(ERROR)` longjmp skips done probes); a start that finds its own phase on top, started
//! from a stack pointer at or below its own, finds a call that never reached its done probe and
//! abandons it.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user},
    macros::{map, uprobe},
    maps::Array,
    programs::ProbeContext,
};
use wprof_common::{
    usdt::{MAX_USDT_SITES, USDT_ARG_CONST, USDT_ARG_DEREF, USDT_ARG_REG},
    ThreadStack, UsdtArg, UsdtSite,
};

use crate::maps::{count_abandoned, phase_counters};
use crate::probe::on_entry;
use crate::scope::wanted;
use crate::site::{pick, site_of};
use crate::stack::{pop_frame, returning_stack, slot, Owner};

/// How far below the top of the stack a done probe looks for its phase's frame (frames above
/// it are abandoned): bounded so the verifier accepts the program.
const DONE_REACH: usize = 16;

/// A USDT start probe: opens its phase.
#[uprobe]
pub fn wprof_usdt_start(ctx: ProbeContext) -> u32 {
    // SAFETY: `regs` is the pt_regs the kernel passed to this program.
    let regs = unsafe { &*ctx.regs };
    let _ = on_entry::<_, true>(&ctx, regs);
    0
}

/// A USDT done probe: closes the innermost open frame of its phase.
#[uprobe]
pub fn wprof_usdt_done(ctx: ProbeContext) -> u32 {
    let _ = done(&ctx);
    0
}

#[inline(always)]
fn done(ctx: &ProbeContext) -> Result<(), ()> {
    // First, so the bookkeeping below is not counted inside the phase.
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let site = site_of(ctx)?;
    let id = bpf_get_current_pid_tgid();
    if !wanted(id) {
        return Ok(());
    }
    let pc = phase_counters(site.phase).ok_or(())?;
    let st = returning_stack(pc, id, true)?;
    let who = Owner {
        key: id,
        id,
        sp: close(st, site.phase),
        hi: 0,
    };
    pop_frame(st, pc, who, site.phase, now, None)
}

/// How each USDT start site reads its phase's arguments, indexed by the site index in its
/// cookie.
#[map]
static USDT_SITES: Array<UsdtSite> = Array::with_max_entries(MAX_USDT_SITES, 0);

/// The stack pointer a USDT frame of `phase` opened now, at `rsp`, keeps. A frame of the same
/// phase on top that started at or below `rsp` is stale (its function has returned since: an
/// `elog(ERROR)` longjmp skipped its done probe) and is abandoned first; one that started
/// above it is an enclosing call (PostgreSQL's `PortalRun` and the `PortalRunMulti` it calls
/// both fire `query__execute__start`).
#[inline(always)]
pub(crate) fn open(st: &mut ThreadStack, phase: u32, rsp: u64) -> u64 {
    let len = st.len as usize;
    if len == 0 || len > wprof_common::MAX_DEPTH {
        return u64::MAX;
    }
    let top = st.frames[slot(len - 1)];
    // A USDT frame's `ret_addr` holds the stack pointer its start saw.
    if top.phase == phase && top.ret_addr <= rsp {
        count_abandoned(&top);
        st.len = (len - 1) as u32;
        if len == 1 {
            return u64::MAX;
        }
        return st.frames[slot(len - 2)].sp.saturating_sub(1);
    }
    top.sp.saturating_sub(1)
}

/// Finds the innermost open frame of `phase`, abandons the frames above it and returns its
/// stack pointer (for `pop_frame`); 0, which no USDT frame has, when none is open.
#[inline(always)]
pub(crate) fn close(st: &mut ThreadStack, phase: u32) -> u64 {
    let len = st.len as usize;
    let mut found = 0usize;
    for i in 0..DONE_REACH {
        if i >= len {
            break;
        }
        if st.frames[slot(len - 1 - i)].phase == phase {
            found = len - i;
            break;
        }
    }
    if found == 0 {
        return 0;
    }
    for _ in 0..DONE_REACH {
        let n = st.len as usize;
        if n <= found || n == 0 {
            break;
        }
        count_abandoned(&st.frames[slot(n - 1)]);
        st.len = (n - 1) as u32;
    }
    st.frames[slot(found - 1)].sp
}

/// The counted argument (`arg`) of the start site `site`.
#[inline(always)]
pub(crate) fn count_arg(site: u32, regs: &aya_ebpf::bindings::pt_regs) -> u64 {
    match USDT_SITES.get(site) {
        Some(s) => value(&s.count, regs),
        None => 0,
    }
}

/// The `group_by` string pointer of the start site `site`.
#[inline(always)]
pub(crate) fn key_arg(site: u32, regs: &aya_ebpf::bindings::pt_regs) -> u64 {
    match USDT_SITES.get(site) {
        Some(s) => value(&s.key, regs),
        None => 0,
    }
}

/// The registers in `wprof_common::usdt::USDT_REGISTERS` order, each read at a constant
/// offset (see `arg_registers`).
#[inline(always)]
fn registers(regs: &aya_ebpf::bindings::pt_regs) -> [u64; 17] {
    let r = |v: &u64| {
        // SAFETY: a field of the context, read in place.
        unsafe { core::ptr::read_volatile(v) }
    };
    [
        r(&regs.rax),
        r(&regs.rbx),
        r(&regs.rcx),
        r(&regs.rdx),
        r(&regs.rsi),
        r(&regs.rdi),
        r(&regs.rbp),
        r(&regs.rsp),
        r(&regs.r8),
        r(&regs.r9),
        r(&regs.r10),
        r(&regs.r11),
        r(&regs.r12),
        r(&regs.r13),
        r(&regs.r14),
        r(&regs.r15),
        r(&regs.rip),
    ]
}

/// One argument's value, narrowed to its size and sign-extended when signed.
#[inline(always)]
fn value(a: &UsdtArg, regs: &aya_ebpf::bindings::pt_regs) -> u64 {
    let raw = if a.kind == USDT_ARG_CONST {
        a.value as u64
    } else if a.kind == USDT_ARG_REG {
        pick(&registers(regs), a.reg as u64)
    } else if a.kind == USDT_ARG_DEREF {
        let at = pick(&registers(regs), a.reg as u64).wrapping_add(a.value as u64);
        // SAFETY: reads the traced process's memory; a fault just yields 0.
        unsafe {
            match a.size {
                1 => bpf_probe_read_user(at as *const u8).map_or(0, u64::from),
                2 => bpf_probe_read_user(at as *const u16).map_or(0, u64::from),
                4 => bpf_probe_read_user(at as *const u32).map_or(0, u64::from),
                _ => bpf_probe_read_user(at as *const u64).unwrap_or(0),
            }
        }
    } else {
        return 0;
    };
    if a.size >= 8 || a.size == 0 {
        return raw;
    }
    let bits = u64::from(a.size) * 8;
    let mask = (1u64 << bits) - 1;
    let v = raw & mask;
    if a.signed != 0 && v >> (bits - 1) != 0 {
        v | !mask
    } else {
        v
    }
}
