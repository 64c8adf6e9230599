//! The unwind guard: kernel uretprobes (one emulated trap per return) made safe for C++
//! exceptions and Rust panics.
//!
//! A uretprobe replaces the return address in the frame's slot with the kernel's trampoline,
//! which has no unwind information: an unwinder walking through that frame gives up and the
//! program terminates. So, on the thread that starts an unwind (the unwinder's entry points:
//! `_Unwind_RaiseException`, `_Unwind_Resume`, `_Unwind_ForcedUnwind`,
//! `_Unwind_Resume_or_Rethrow`), every open uretprobe frame gets its original return address
//! back (`wprof_unwind`); where the exception is caught (`__cxa_begin_catch`, Rust's catch
//! cleanup), the frames below the catcher are gone (abandoned) and those still live get the
//! trampoline back (`wprof_catch`), so their returns are seen again. The kernel keeps each
//! frame's return instance meanwhile and drops those of skipped frames by stack pointer, as
//! after a longjmp.
//!
//! Only two values are ever written, only into a slot of a frame wprof opened, and only over
//! the value the other one put there: the original return address over the trampoline (the
//! trampoline recognised by its address and code), the trampoline over the original return
//! address of a frame this guard disarmed. A slot holding anything else is left alone and
//! counted (`UNWIND_FOREIGN`). The programs are sleepable: the trampoline's page may have to
//! be faulted in to be recognised.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_probe_read_user, bpf_probe_write_user,
        generated::bpf_copy_from_user,
    },
    macros::uprobe,
    programs::ProbeContext,
};
use wprof_common::{counter, ThreadStack, FRAME_DISARMED, FRAME_URETPROBE, MAX_DEPTH};

use crate::maps::{bump, count_abandoned};
use crate::scope::in_scope;
use crate::stack::{abandon_below, slot, STACKS};

/// Skipped frames a catch looks for above its own stack pointer, innermost first.
const SKIPPED_CHECKS: usize = 4;

/// The first bytes of the kernel's uretprobe trampoline on x86-64 (6.11+, the uretprobe
/// syscall): `push %rax; push %rcx; push %r11`.
const TRAMPOLINE_SYSCALL: [u8; 4] = [0x50, 0x51, 0x41, 0x53];

/// The older trampoline (and the one used with shadow stacks): a lone `int3`.
const TRAMPOLINE_INT3: u8 = 0xcc;

/// An unwinder entry: put back the original return address of every open uretprobe frame.
#[uprobe(sleepable)]
pub fn wprof_unwind(ctx: ProbeContext) -> u32 {
    disarm(sp_of(&ctx));
    0
}

/// An unwinder entry (uprobe_multi link).
#[uprobe(multi, sleepable)]
pub fn wprof_m_unwind(ctx: ProbeContext) -> u32 {
    disarm(sp_of(&ctx));
    0
}

/// A catch: close the frames the unwind skipped, re-arm the live ones.
#[uprobe(sleepable)]
pub fn wprof_catch(ctx: ProbeContext) -> u32 {
    rearm(sp_of(&ctx));
    0
}

/// A catch (uprobe_multi link).
#[uprobe(multi, sleepable)]
pub fn wprof_m_catch(ctx: ProbeContext) -> u32 {
    rearm(sp_of(&ctx));
    0
}

/// The stack pointer at the probed instruction.
#[inline(always)]
fn sp_of(ctx: &ProbeContext) -> u64 {
    // SAFETY: `regs` is the pt_regs the kernel passed to this program.
    unsafe { (*ctx.regs).rsp }
}

/// The thread's stack of open phases, if it has one and is traced.
#[inline(always)]
fn thread_stack() -> Option<&'static mut ThreadStack> {
    let id = bpf_get_current_pid_tgid();
    if !in_scope(id) {
        return None;
    }
    let st = STACKS.get_ptr_mut(&id)?;
    // SAFETY: a thread's stack is only touched by programs running on that thread.
    Some(unsafe { &mut *st })
}

/// Whether `v`, found in an armed frame's return slot, is the kernel's uretprobe trampoline:
/// the one already seen on this thread, or else a page-aligned address (the trampoline opens
/// the kernel's page of probe instructions) whose code is the trampoline's. Learned once.
#[inline(always)]
fn is_trampoline(st: &mut ThreadStack, v: u64) -> bool {
    if st.tramp != 0 {
        return v == st.tramp;
    }
    if v == 0 || v & 0xfff != 0 {
        return false;
    }
    // The page may never have been touched (no call has returned through the trampoline
    // yet): a sleepable program's copy faults it in, where bpf_probe_read_user would fail.
    let mut code = [0u8; 4];
    // SAFETY: copies 4 bytes of the traced process's memory into `code`; a fault that cannot
    // be served just yields an error.
    let rc = unsafe { bpf_copy_from_user(code.as_mut_ptr().cast(), 4, v as *const c_void) };
    if rc != 0 {
        return false;
    }
    if code == TRAMPOLINE_SYSCALL || code[0] == TRAMPOLINE_INT3 {
        st.tramp = v;
        return true;
    }
    false
}

/// Puts back the original return address of the open uretprobe frames above `sp` (the
/// unwinder's own entry stack pointer: everything the unwind walks lies above it).
#[inline(always)]
fn disarm(sp: u64) {
    let Some(st) = thread_stack() else {
        return;
    };
    bump(counter::UNWINDS);
    // Frames below the unwinder's entry are long gone (a longjmp we did not see).
    abandon_below(st, sp, None);
    let len = st.len as usize;
    if len == 0 || len > MAX_DEPTH {
        return;
    }
    // Innermost first: a phase tail-called from another shares its slot and recorded the
    // trampoline as its return address; the outer frame, met later, writes the real one.
    let mut i = len;
    for _ in 0..MAX_DEPTH {
        if i == 0 {
            break;
        }
        i -= 1;
        let k = slot(i);
        let f = st.frames[k];
        if f.uretprobe & FRAME_URETPROBE == 0 || f.sp <= sp {
            continue;
        }
        // SAFETY: reads 8 bytes of the thread's stack; a fault just yields an error.
        let Ok(v) = (unsafe { bpf_probe_read_user(f.sp as *const u64) }) else {
            continue;
        };
        if v == f.ret_addr {
            // Already the real address (disarmed before, or the kernel kept this one).
            continue;
        }
        if !is_trampoline(st, v) {
            bump(counter::UNWIND_FOREIGN);
            continue;
        }
        if f.ret_addr == st.tramp {
            continue;
        }
        // SAFETY: writes the frame's own return address over the trampoline the kernel put
        // in its slot (checked just above).
        if unsafe { bpf_probe_write_user(f.sp as *mut u64, &f.ret_addr) }.is_ok() {
            st.frames[k].uretprobe |= FRAME_DISARMED;
            bump(counter::UNWIND_DISARMED);
        }
    }
}

/// At a catch whose entry stack pointer is `sp`: the frames the unwind skipped lie at or below
/// it (the catcher's call pushed its return address into the slot of the skipped frame it had
/// called) and are closed as abandoned; a disarmed frame above it still runs and gets the
/// trampoline back if its slot still holds its return address.
#[inline(always)]
fn rearm(sp: u64) {
    let Some(st) = thread_stack() else {
        return;
    };
    // SAFETY: reads 8 bytes of the thread's stack; a fault just yields an error.
    let ret = unsafe { bpf_probe_read_user(sp as *const u64) }.unwrap_or(0);
    abandon_below(st, sp, Some(ret));
    // A catch reached through a call or two (Rust's cleanup) leaves skipped frames above
    // `sp`: a skipped frame's slot has been reused since, a live one's has not.
    for _ in 0..SKIPPED_CHECKS {
        let len = st.len as usize;
        if len == 0 || len > MAX_DEPTH {
            break;
        }
        let top = st.frames[slot(len - 1)];
        if top.uretprobe & FRAME_DISARMED == 0 {
            break;
        }
        // SAFETY: as in disarm.
        let Ok(v) = (unsafe { bpf_probe_read_user(top.sp as *const u64) }) else {
            break;
        };
        if v == top.ret_addr {
            break;
        }
        count_abandoned(top.node);
        st.len = (len - 1) as u32;
    }
    let len = st.len as usize;
    if len == 0 || len > MAX_DEPTH || st.tramp == 0 {
        return;
    }
    let tramp = st.tramp;
    let mut i = len;
    for _ in 0..MAX_DEPTH {
        if i == 0 {
            break;
        }
        i -= 1;
        let k = slot(i);
        let f = st.frames[k];
        if f.uretprobe & FRAME_DISARMED == 0 {
            continue;
        }
        st.frames[k].uretprobe &= !FRAME_DISARMED;
        // SAFETY: as in disarm.
        let Ok(v) = (unsafe { bpf_probe_read_user(f.sp as *const u64) }) else {
            continue;
        };
        if f.sp <= sp || v != f.ret_addr {
            continue;
        }
        // SAFETY: writes the trampoline back over the return address this guard put there;
        // the kernel still holds the frame's return instance (it drops one only when the
        // stack pointer passes the frame).
        if unsafe { bpf_probe_write_user(f.sp as *mut u64, &tramp) }.is_ok() {
            bump(counter::UNWIND_REARMED);
        }
    }
}
