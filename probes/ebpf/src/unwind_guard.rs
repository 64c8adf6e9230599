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
//!
//! Where the kernel refuses BPF's writes to user memory (lockdown), the `_ask` programs do the
//! same with one difference: they send the writes to wprof (`GUARD_ASKS`), which makes them
//! with `process_vm_writev` under the same checks, and the thread waits in the program until
//! wprof answers (`GUARD_DONE`), so the unwinder only starts once the slots are written. The
//! wait gives its CPU up while it lasts (see [`wait_step`]) and ends after [`ASK_DEADLINE_NS`]
//! at most (`UNWIND_LATE`: the unwind then goes on as it would have without the guard).
//!
//! Nothing on the BPF stack outlives a helper call that may sleep (the trampoline page's fault
//! in [`learn_trampoline`], the wait): on 6.13+ kernels a uprobe program's stack is a per-CPU
//! private stack, and the programs other threads run on the CPU meanwhile write over it
//! (measured: 10% of the clang++ 4-thread runs ended in `std::terminate`, a waiting program
//! reading another's locals as its thread's stack). What a program needs after such a call is
//! in its thread's `ThreadStack::guard`, and it looks the stack up again to read it.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::BPF_RB_FORCE_WAKEUP,
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user, bpf_probe_write_user,
        generated::{
            bpf_copy_from_user, bpf_copy_from_user_task, bpf_get_current_task_btf, bpf_loop,
        },
    },
    macros::{map, uprobe},
    maps::{LruHashMap, RingBuf},
    programs::ProbeContext,
};
use wprof_common::{
    counter, GuardAsk, GuardDone, ThreadStack, FRAME_ASK, FRAME_DISARMED, FRAME_URETPROBE,
    GUARD_SLOTS, MAX_DEPTH,
};

// A request's slots are indexed like a thread's frames (`slot`).
const _: () = assert!(GUARD_SLOTS == MAX_DEPTH);

use crate::maps::{bump, bump_by, count_abandoned};
use crate::scope::in_scope;
use crate::stack::{abandon_below, slot, STACKS};

/// Skipped frames a catch looks for above its own stack pointer, innermost first.
const SKIPPED_CHECKS: usize = 4;

/// The first bytes of the kernel's uretprobe trampoline on x86-64 (6.11+, the uretprobe
/// syscall): `push %rax; push %rcx; push %r11`.
const TRAMPOLINE_SYSCALL: [u8; 4] = [0x50, 0x51, 0x41, 0x53];

/// The older trampoline (and the one used with shadow stacks): a lone `int3`.
const TRAMPOLINE_INT3: u8 = 0xcc;

/// The `_ask` programs' requests to wprof (a few KB each; unwinds are rare and short).
#[map]
static GUARD_ASKS: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// wprof's answers, by thread key (least recently used threads make room).
#[map]
static GUARD_DONE: LruHashMap<u64, GuardDone> = LruHashMap::with_max_entries(8192, 0);

/// How long a thread waits for wprof's answer at most: past it the unwind goes on (and an
/// armed frame on its way terminates the program, as it would without the guard). wprof
/// carries out no request older than half of it (src/attach/guard_writer.rs).
const ASK_DEADLINE_NS: u64 = 2_000_000_000;

/// An unwinder entry: put back the original return address of every open uretprobe frame.
#[uprobe(sleepable)]
pub fn wprof_unwind(ctx: ProbeContext) -> u32 {
    guard::<false, false>(sp_of(&ctx));
    0
}

/// An unwinder entry (uprobe_multi link).
#[uprobe(multi, sleepable)]
pub fn wprof_m_unwind(ctx: ProbeContext) -> u32 {
    guard::<false, false>(sp_of(&ctx));
    0
}

/// A catch: close the frames the unwind skipped, re-arm the live ones.
#[uprobe(sleepable)]
pub fn wprof_catch(ctx: ProbeContext) -> u32 {
    guard::<false, true>(sp_of(&ctx));
    0
}

/// A catch (uprobe_multi link).
#[uprobe(multi, sleepable)]
pub fn wprof_m_catch(ctx: ProbeContext) -> u32 {
    guard::<false, true>(sp_of(&ctx));
    0
}

/// [`wprof_unwind`], the writes made by wprof.
#[uprobe(sleepable)]
pub fn wprof_unwind_ask(ctx: ProbeContext) -> u32 {
    guard::<true, false>(sp_of(&ctx));
    0
}

/// [`wprof_m_unwind`], the writes made by wprof.
#[uprobe(multi, sleepable)]
pub fn wprof_m_unwind_ask(ctx: ProbeContext) -> u32 {
    guard::<true, false>(sp_of(&ctx));
    0
}

/// [`wprof_catch`], the writes made by wprof.
#[uprobe(sleepable)]
pub fn wprof_catch_ask(ctx: ProbeContext) -> u32 {
    guard::<true, true>(sp_of(&ctx));
    0
}

/// [`wprof_m_catch`], the writes made by wprof.
#[uprobe(multi, sleepable)]
pub fn wprof_m_catch_ask(ctx: ProbeContext) -> u32 {
    guard::<true, true>(sp_of(&ctx));
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

/// One of the guard's programs at stack pointer `sp`: a catch (`REARM`) or an unwinder entry,
/// its writes made by wprof with `ASK`.
#[inline(always)]
fn guard<const ASK: bool, const REARM: bool>(sp: u64) {
    if !prepare::<REARM>(sp) {
        return;
    }
    // Looked up again, with `sp`: `prepare` may have slept.
    let Some(st) = thread_stack() else {
        return;
    };
    let sp = st.guard.sp;
    if REARM {
        rearm::<ASK>(st, sp);
    } else {
        disarm::<ASK>(st, sp);
    }
}

/// Notes `sp` in the thread's guard state and, at an unwind on a thread that has not seen the
/// trampoline yet, learns it ([`learn_trampoline`]). False when the thread is not traced.
#[inline(always)]
fn prepare<const REARM: bool>(sp: u64) -> bool {
    let Some(st) = thread_stack() else {
        return false;
    };
    st.guard.sp = sp;
    if REARM || st.tramp != 0 {
        return true;
    }
    let candidate = trampoline_candidate(st, sp);
    if candidate != 0 {
        st.guard.tramp_candidate = candidate;
        learn_trampoline();
    }
    true
}

/// What the innermost open uretprobe frame above `sp` holds in its return slot, when that is
/// not its return address but a page-aligned address (the trampoline opens the kernel's page of
/// probe instructions); 0 when no frame has such a value.
#[inline(always)]
fn trampoline_candidate(st: &ThreadStack, sp: u64) -> u64 {
    let len = st.len as usize;
    if len > MAX_DEPTH {
        return 0;
    }
    let mut i = len;
    for _ in 0..MAX_DEPTH {
        if i == 0 {
            break;
        }
        i -= 1;
        let f = st.frames[slot(i)];
        if f.uretprobe & FRAME_URETPROBE == 0 || f.sp <= sp {
            continue;
        }
        // SAFETY: reads 8 bytes of the thread's stack; a fault just yields an error.
        let Ok(v) = (unsafe { bpf_probe_read_user(f.sp as *const u64) }) else {
            continue;
        };
        if v != f.ret_addr && v != 0 && v & 0xfff == 0 {
            return v;
        }
    }
    0
}

/// Takes the thread's trampoline candidate for the trampoline if its code is the trampoline's
/// (`ThreadStack::tramp`, learned once a thread). The page may never have been touched (no
/// call has returned through the trampoline yet): a sleepable program's copy faults it in,
/// where bpf_probe_read_user would fail. The copy may sleep, so after it only its result, the
/// bytes it wrote and the stack looked up again are used.
#[inline(always)]
fn learn_trampoline() {
    let Some(st) = thread_stack() else {
        return;
    };
    let v = st.guard.tramp_candidate;
    let mut code = [0u8; 4];
    // SAFETY: copies 4 bytes of the traced process's memory into `code`; a fault that cannot
    // be served just yields an error.
    let rc = unsafe { bpf_copy_from_user(code.as_mut_ptr().cast(), 4, v as *const c_void) };
    let Some(st) = thread_stack() else {
        return;
    };
    if rc == 0 && (code == TRAMPOLINE_SYSCALL || code[0] == TRAMPOLINE_INT3) {
        st.tramp = st.guard.tramp_candidate;
    }
}

/// Where the guard's writes go: straight into the thread's stack (`bpf_probe_write_user`), or,
/// with `ASK`, marked on the frames ([`FRAME_ASK`]) and sent to wprof once all are known
/// ([`Writes::finish`]), the thread waiting for its answer. The request is reserved in the
/// ring only then: a record reserved before a program sleeps (a page fault in
/// [`learn_trampoline`]) would hold up every request behind it.
/// (A count of its own would multiply the verifier's states: each write bumps the counter
/// instead, and `marked` is only set.)
struct Writes<const ASK: bool> {
    /// The counter a slot written adds to.
    counter: u32,
    /// Whether a frame was marked (with `ASK`).
    marked: bool,
}

impl<const ASK: bool> Writes<ASK> {
    #[inline(always)]
    fn new(counter: u32) -> Self {
        Writes {
            counter,
            marked: false,
        }
    }

    /// Writes `value` in frame `k`'s return slot (the caller checked what it holds): done now,
    /// or marked for wprof. Whether it was (or is to be) written.
    #[inline(always)]
    fn write(&mut self, st: &mut ThreadStack, k: usize, value: u64) -> bool {
        if ASK {
            st.frames[k].uretprobe |= FRAME_ASK;
            self.marked = true;
            return true;
        }
        let addr = st.frames[k].sp;
        // SAFETY: writes one of the guard's two values over the other in a frame's return
        // slot (see the module's doc).
        let ok = unsafe { bpf_probe_write_user(addr as *mut u64, &value) }.is_ok();
        if ok {
            bump(self.counter);
        }
        ok
    }

    /// With `ASK`, sends the marked frames' slots to wprof (the trampoline over the return
    /// address with `rearm`, the other way round without) and waits for its answer, adding
    /// the slots it wrote to the counter; `UNWIND_LATE` when the answer did not come in time
    /// or the request could not be made.
    #[inline(always)]
    fn finish(self, st: &mut ThreadStack, key: u64, rearm: bool) {
        if !ASK || !self.marked {
            return;
        }
        let len = st.len as usize;
        let tramp = st.tramp;
        let Some(mut entry) = GUARD_ASKS.reserve::<GuardAsk>(0) else {
            clear_marks(st);
            bump(counter::UNWIND_LATE);
            return;
        };
        // SAFETY: plain helper call.
        let id = unsafe { bpf_ktime_get_ns() };
        st.guard.ask_id = id;
        st.guard.ask_deadline = id + ASK_DEADLINE_NS;
        st.guard.ask_counter = self.counter;
        st.guard.ask_written = 0;
        st.guard.ask_done = 0;
        // SAFETY: fills the reserved record; no helper that may sleep runs until it is sent.
        unsafe {
            let a = entry.as_mut_ptr();
            (*a).key = key;
            (*a).id = id;
            (*a).n = len.min(GUARD_SLOTS) as u32;
            (*a).rearm = rearm as u32;
            for i in 0..MAX_DEPTH {
                if i >= len {
                    break;
                }
                let k = slot(i);
                let f = st.frames[k];
                let s = &mut (*a).slots[k];
                if f.uretprobe & FRAME_ASK == 0 {
                    s.addr = 0;
                    continue;
                }
                st.frames[k].uretprobe &= !FRAME_ASK;
                s.addr = f.sp;
                (s.expect, s.value) = if rearm {
                    (f.ret_addr, tramp)
                } else {
                    (tramp, f.ret_addr)
                };
            }
        }
        entry.submit(BPF_RB_FORCE_WAKEUP as u64);
        wait_for_answer();
        // The wait slept: only what the thread's stack holds is used after it.
        let Some(st) = thread_stack() else {
            return;
        };
        if st.guard.ask_done == 0 {
            bump(counter::UNWIND_LATE);
            return;
        }
        bump_by(st.guard.ask_counter, st.guard.ask_written);
    }
}

/// Clears the frames' [`FRAME_ASK`] marks (a request that could not be sent).
#[inline(always)]
fn clear_marks(st: &mut ThreadStack) {
    for i in 0..MAX_DEPTH {
        if i >= st.len as usize {
            break;
        }
        st.frames[slot(i)].uretprobe &= !FRAME_ASK;
    }
}

/// Waits for wprof's answer to the thread's request (`ThreadStack::guard`), at most until its
/// deadline: [`wait_step`] over and over. No context goes to the steps (a pointer into this
/// program's stack would not survive their sleeps), and the flags are 0 only at run time
/// (`pid_tgid >> 63`), so the verifier keeps the helper rather than inline the loop with its
/// counter on the stack.
#[inline(always)]
fn wait_for_answer() {
    let flags = bpf_get_current_pid_tgid() >> 63;
    // SAFETY: `wait_step` is a static function of this object; no context.
    unsafe {
        bpf_loop(
            1 << 23,
            wait_step as *mut c_void,
            core::ptr::null_mut(),
            flags,
        )
    };
}

/// One step of the wait for wprof's answer (a `bpf_loop` callback): 1 once it came or the
/// deadline passed. A busy-wait would hold the CPU on a kernel without preemption (wprof
/// could then never run on it), so each step also reads a byte of the thread's own stack
/// through `bpf_copy_from_user_task`: its page walk offers the CPU to whichever task waits
/// for it (`cond_resched`). Nothing is used after that call.
#[inline(never)]
extern "C" fn wait_step(_index: u32, _ctx: *mut c_void) -> i64 {
    let key = bpf_get_current_pid_tgid();
    let Some(st) = STACKS.get_ptr_mut(&key) else {
        return 1;
    };
    // SAFETY: the thread's own stack (see `thread_stack`).
    let g = unsafe { &mut (*st).guard };
    // SAFETY: a lookup in a map of plain values.
    if let Some(d) = unsafe { GUARD_DONE.get(&key) } {
        if d.id == g.ask_id {
            g.ask_written = d.written;
            g.ask_done = 1;
            return 1;
        }
    }
    // SAFETY: plain helper call.
    if unsafe { bpf_ktime_get_ns() } >= g.ask_deadline {
        return 1;
    }
    let mut byte = 0u8;
    // SAFETY: copies one byte of the current task's own stack into `byte` (an address
    // unmapped would fail before the page walk that offers the CPU).
    unsafe {
        bpf_copy_from_user_task(
            (&mut byte as *mut u8).cast(),
            1,
            g.sp as *const c_void,
            bpf_get_current_task_btf(),
            0,
        )
    };
    0
}

/// Puts back the original return address of the open uretprobe frames above `sp` (the
/// unwinder's own entry stack pointer: everything the unwind walks lies above it).
#[inline(always)]
fn disarm<const ASK: bool>(st: &mut ThreadStack, sp: u64) {
    bump(counter::UNWINDS);
    // Frames below the unwinder's entry are long gone (a longjmp we did not see).
    abandon_below(st, sp, None);
    let len = st.len as usize;
    if len == 0 || len > MAX_DEPTH {
        return;
    }
    let key = bpf_get_current_pid_tgid();
    let mut writes = Writes::<ASK>::new(counter::UNWIND_DISARMED);
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
        if st.tramp == 0 || v != st.tramp {
            bump(counter::UNWIND_FOREIGN);
            continue;
        }
        if f.ret_addr == st.tramp {
            continue;
        }
        if writes.write(st, k, f.ret_addr) {
            st.frames[k].uretprobe |= FRAME_DISARMED;
        }
    }
    writes.finish(st, key, false);
}

/// At a catch whose entry stack pointer is `sp`: the frames the unwind skipped lie at or below
/// it (the catcher's call pushed its return address into the slot of the skipped frame it had
/// called) and are closed as abandoned; a disarmed frame above it still runs and gets the
/// trampoline back if its slot still holds its return address.
#[inline(always)]
fn rearm<const ASK: bool>(st: &mut ThreadStack, sp: u64) {
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
        count_abandoned(&top);
        st.len = (len - 1) as u32;
    }
    let len = st.len as usize;
    if len == 0 || len > MAX_DEPTH || st.tramp == 0 {
        return;
    }
    let tramp = st.tramp;
    let key = bpf_get_current_pid_tgid();
    let mut writes = Writes::<ASK>::new(counter::UNWIND_REARMED);
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
        // The kernel still holds the frame's return instance (it drops one only when the
        // stack pointer passes the frame): the trampoline goes back over the return address
        // this guard put there.
        writes.write(st, k, tramp);
    }
    writes.finish(st, key, true);
}
