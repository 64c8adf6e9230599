//! The maps every program shares: settings from userspace and the counters it reads back.
//!
//! In: `CONFIG` (settings, indexed by `wprof_common::config`) and `PHASE_COSTS` (the
//! calibrated probe cost of each phase), written by userspace. Out: `COUNTERS` (global,
//! indexed by `wprof_common::counter`), `PHASE_COUNTERS` (per phase id) and `NODE_COUNTERS`
//! (lost and abandoned calls per tree node), read by userspace at the end of a run.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{Array, PerCpuArray, PerCpuHashMap},
};
use wprof_common::{
    config, counter, NodeCounters, PhaseCost, PhaseCounters, MAX_NODES, MAX_PHASES,
};

/// Settings from userspace, indexed by `wprof_common::config`.
#[map]
pub(crate) static CONFIG: Array<u64> = Array::with_max_entries(config::COUNT, 0);

/// Global counters, indexed by `wprof_common::counter`.
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Counters per phase id.
#[map]
static PHASE_COUNTERS: PerCpuArray<PhaseCounters> = PerCpuArray::with_max_entries(MAX_PHASES, 0);

/// Lost and abandoned calls per tree node (per CPU, so increments need no atomics).
#[map]
static NODE_COUNTERS: PerCpuHashMap<u64, NodeCounters> =
    PerCpuHashMap::with_max_entries(MAX_NODES, 0);

/// Probe cost of one call per phase id (calibrated by userspace before attaching): each
/// completed call adds its phase's `pair_ns` to the enclosing call's descendant probe time.
#[map]
pub(crate) static PHASE_COSTS: Array<PhaseCost> = Array::with_max_entries(MAX_PHASES, 0);

/// Adds one to global counter `index` (`wprof_common::counter`).
#[inline(always)]
pub(crate) fn bump(index: u32) {
    if let Some(c) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU value, no other writer on this CPU while we run.
        unsafe { *c += 1 };
    }
}

/// This CPU's counters of phase id `phase`.
#[inline(always)]
pub(crate) fn phase_counters(phase: u32) -> Option<&'static mut PhaseCounters> {
    // SAFETY: per-CPU value, exclusively ours for the duration of this program.
    PHASE_COUNTERS
        .get_ptr_mut(phase)
        .map(|p| unsafe { &mut *p })
}

/// This CPU's lost and abandoned counts of `node`, created at zero on first use.
#[inline(always)]
fn node_counters(node: u64) -> Option<*mut NodeCounters> {
    if let Some(p) = NODE_COUNTERS.get_ptr_mut(&node) {
        return Some(p);
    }
    let zero = NodeCounters::default();
    let _ = NODE_COUNTERS.insert(&node, &zero, BPF_NOEXIST as u64);
    NODE_COUNTERS.get_ptr_mut(&node)
}

/// Counts a call of `node` closed without its return (globally and on the node).
#[inline(always)]
pub(crate) fn count_abandoned(node: u64) {
    bump(counter::ABANDONED);
    if let Some(c) = node_counters(node) {
        // SAFETY: per-CPU value, exclusively ours while we run.
        unsafe { (*c).abandoned += 1 };
    }
}

/// Counts a span of `node` the full ring buffer dropped (globally and on the node).
#[inline(always)]
pub(crate) fn count_lost(node: u64) {
    bump(counter::LOST_SPANS);
    if let Some(c) = node_counters(node) {
        // SAFETY: per-CPU value, exclusively ours while we run.
        unsafe { (*c).lost += 1 };
    }
}
