//! A function phase's entry and return: from a probe hit to a pushed or popped frame.
//!
//! In: the hit of an entry, RET-site or uretprobe program (and of a USDT start, compiled
//! apart), its cookie and registers. Out: a frame pushed on, or popped off, its owner's stack
//! (`stack`), with the argument, string key and stopped-the-world time it needs; and the
//! dynamic loader's hits as `MapsChanged` records.

use aya_ebpf::{
    bindings::BPF_RB_FORCE_WAKEUP,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    programs::{ProbeContext, RetProbeContext},
    EbpfContext,
};
use wprof_common::{
    config, counter, Event, EventKind, ARG_NONE, ARG_RETVAL, FRAME_UNCOUNTED, FRAME_URETPROBE,
};

use crate::events::emit_with;
use crate::go::{abandon_unwound_go, owner_of, stw_started, stw_stopped, stw_total};
use crate::keys::string_key;
use crate::maps::{bump, closing, phase_counters, CONFIG};
use crate::scope::{wanted, wanted_for};
use crate::site::{arg_registers, pick, site_of};
use crate::stack::{
    abandon_below, inside, pop_frame, push_frame, release_stack, return_address, returning_stack,
    stack_for, top_is,
};
use crate::usdt;

/// An entry program: opens the phase of the cookie on its owner's stack.
#[inline(always)]
pub(crate) fn entry(ctx: &ProbeContext) -> u32 {
    // SAFETY: `regs` is the pt_regs the kernel passed to this program.
    let regs = unsafe { &*ctx.regs };
    let _ = on_entry::<_, false>(ctx, regs);
    0
}

/// A RET-site program: closes the phase, the stack pointer being the entry's.
#[inline(always)]
pub(crate) fn ret_site(ctx: &ProbeContext) -> u32 {
    // SAFETY: as in entry.
    let regs = unsafe { &*ctx.regs };
    let _ = on_return(ctx, regs, regs.rsp);
    0
}

/// A uretprobe fires after RET popped the return address, so the entry's stack pointer was 8
/// bytes lower.
#[inline(always)]
pub(crate) fn uretprobe(ctx: &RetProbeContext) -> u32 {
    // SAFETY: as in entry.
    let regs = unsafe { &*ctx.regs };
    let _ = on_return(ctx, regs, regs.rsp.wrapping_sub(8));
    0
}

/// The dynamic loader's `_dl_debug_state` (the r_debug hook debuggers use): called around
/// every change to the loaded objects (dlopen, dlclose). Tells userspace at once, so phases
/// in a library that was nowhere to be found at attach time are attached as soon as it is
/// mapped.
#[inline(always)]
pub(crate) fn loader_changed() -> u32 {
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
pub(crate) fn on_entry<C: EbpfContext, const USDT: bool>(
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
    // The entry counts where its call's fate is known (`push_frame` for a call pushed), and
    // `closing` is read again where needed: one value live across the loops below would
    // double the states the verifier walks (the entry program went past its 1M instructions).
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
        if !closing(site.phase) {
            pc.entries += 1;
        }
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
        if !closing(site.phase) {
            pc.entries += 1;
            pc.outside_under += 1;
        }
        if st.len == 0 {
            release_stack(st, who.key);
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
        frame_flags(site.uretprobe, !closing(site.phase)),
        arg,
        stw,
        key,
    )
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
        pc.returns += 1;
        return Ok(());
    }
    // The first integer result: rax in both conventions.
    let retval = (site.arg == ARG_RETVAL).then_some(regs.rax);
    pop_frame(st, pc, who, site.phase, now, retval)
}

/// A new frame's `Frame::uretprobe` bits: [`FRAME_URETPROBE`] for a uretprobe phase,
/// [`FRAME_UNCOUNTED`] for a call entering while the run or its phase closes.
#[inline(always)]
pub(crate) fn frame_flags(uretprobe: bool, counted: bool) -> u32 {
    let mut flags = if uretprobe { FRAME_URETPROBE } else { 0 };
    if !counted {
        flags |= FRAME_UNCOUNTED;
    }
    flags
}
