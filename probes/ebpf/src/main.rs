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
//! `COOKIE_GO_BIT`: keyed by the `g` in r14, see `go::owner_of`).
//!
//! This file holds the programs (thin wrappers; the USDT and unwind-guard programs live in
//! their modules) and the module wiring. The names userspace finds them by are
//! `wprof_common::names`.
#![no_std]
#![no_main]
// `add_one`: the atomic add intrinsic (see there); the toolchain is pinned.
#![feature(core_intrinsics)]
#![allow(internal_features)]
// aya's #[uprobe] macros generate undocumented wrapper functions; the programs themselves are
// documented on their definitions below.
#![allow(missing_docs)]

use aya_ebpf::{
    macros::{perf_event, tracepoint, uprobe, uretprobe},
    programs::{PerfEventContext, ProbeContext, RetProbeContext, TracePointContext},
};
use wprof_common::SYS_EXIT_BIT;

mod events;
mod go;
mod kernel_agg;
mod kernel_phases;
mod keys;
mod maps;
mod probe;
mod sampling;
mod scope;
mod site;
mod span_queue;
mod stack;
mod unwind_guard;
mod usdt;

// Each function-phase program exists twice: once for per-point perf links (any kernel with
// uprobes) and once for uprobe_multi links (6.6+), which attach every point of an object in
// one link and, more to the point, detach them with one RCU grace period instead of ~100 ms
// per point. Userspace loads the set the kernel supports.

/// Entry of a phase.
#[uprobe]
pub fn wprof_entry(ctx: ProbeContext) -> u32 {
    probe::entry(&ctx)
}

/// Entry of a phase (uprobe_multi link).
#[uprobe(multi)]
pub fn wprof_m_entry(ctx: ProbeContext) -> u32 {
    probe::entry(&ctx)
}

/// A RET (or tail-call JMP) site of a phase: the stack pointer is the entry's.
#[uprobe]
pub fn wprof_ret(ctx: ProbeContext) -> u32 {
    probe::ret_site(&ctx)
}

/// A RET site (uprobe_multi link).
#[uprobe(multi)]
pub fn wprof_m_ret(ctx: ProbeContext) -> u32 {
    probe::ret_site(&ctx)
}

/// A uretprobe of a phase.
#[uretprobe]
pub fn wprof_uret(ctx: RetProbeContext) -> u32 {
    probe::uretprobe(&ctx)
}

/// A uretprobe of a phase (uprobe_multi link).
#[uretprobe(multi)]
pub fn wprof_m_uret(ctx: RetProbeContext) -> u32 {
    probe::uretprobe(&ctx)
}

/// The dynamic loader's `_dl_debug_state`: the loaded objects changed (`probe::loader_changed`).
#[uprobe]
pub fn wprof_dl_state(_ctx: ProbeContext) -> u32 {
    probe::loader_changed()
}

// Kernel phases, CPU samples and off-CPU time. These programs fire system-wide (tracepoints,
// per-CPU perf events), so each first checks that the current process is traced.

/// Enter or exit of a kernel phase named by a `tracepoint` pair (`kernel_phases::tracepoint`).
#[tracepoint]
pub fn wprof_tp(ctx: TracePointContext) -> u32 {
    kernel_phases::tracepoint(&ctx)
}

/// syscalls:sys_enter_* of a `syscall` phase (or a tracepoint pair in that category).
#[tracepoint]
pub fn wprof_sys_enter(ctx: TracePointContext) -> u32 {
    kernel_phases::syscall_phase(&ctx, 0)
}

/// syscalls:sys_exit_* of a `syscall` phase.
#[tracepoint]
pub fn wprof_sys_exit(ctx: TracePointContext) -> u32 {
    kernel_phases::syscall_phase(&ctx, SYS_EXIT_BIT)
}

/// sched:sched_process_fork (`--follow-forks`): a traced process's child is traced (`scope::fork`).
#[tracepoint]
pub fn wprof_fork(ctx: TracePointContext) -> u32 {
    scope::fork(&ctx)
}

/// sched:sched_process_exit (`--follow-forks`): an exited thread is forgotten
/// (`scope::thread_exit`).
#[tracepoint]
pub fn wprof_exit(_ctx: TracePointContext) -> u32 {
    scope::thread_exit()
}

/// CPU sample of a traced thread (`sampling::cpu_sample`).
#[perf_event]
pub fn wprof_cpu_sample(ctx: PerfEventContext) -> u32 {
    sampling::cpu_sample(&ctx)
}

/// sched:sched_switch: off-CPU time of traced threads (`sampling::sched_switch`).
#[tracepoint]
pub fn wprof_sched_switch(ctx: TracePointContext) -> u32 {
    sampling::sched_switch(&ctx)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
