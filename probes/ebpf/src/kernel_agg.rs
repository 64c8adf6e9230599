//! In-kernel aggregation (`--aggregate kernel`): summaries and histograms instead of spans.
//!
//! In: a completed call (its frame, duration, argument and probe cost). Out: its node's
//! summary in `NODE_SUMMARIES` and two buckets (raw and corrected duration) in
//! `HIST_BUCKETS`, read by userspace after the detach. Node definitions still go through the
//! ring buffer (once per node). Straight-line code, outside any loop: 6.1's verifier walks it
//! once per path through `pop_frame`.

use aya_ebpf::{
    bindings::BPF_F_NO_PREALLOC,
    macros::map,
    maps::{HashMap, PerCpuHashMap},
};
use wprof_common::{
    counter, hist_bucket, Frame, HistKey, NodeSummary, MAX_HIST_BUCKETS, MAX_SUMMARY_NODES,
};

use crate::maps::{bump, count_lost, get_or_insert};

/// Per-node summaries, keyed by node hash (per CPU: no atomics; userspace adds the CPUs).
/// Sized like the node-definition map (`MAX_SUMMARY_NODES`, 65,536); not preallocated, so an
/// entry costs memory only once its node completes a call. A call that finds the map full is
/// counted (`SUMMARY_FULL`) and lost on its node, never dropped silently.
#[map]
static NODE_SUMMARIES: PerCpuHashMap<u64, NodeSummary> =
    PerCpuHashMap::with_max_entries(MAX_SUMMARY_NODES, BPF_F_NO_PREALLOC);

/// Log-linear histogram buckets (128 per power of two, ≤ 1% error): (node, bucket, raw or
/// corrected) -> calls. One map for all CPUs, incremented atomically, and preallocated: a call
/// whose duration lands in a new bucket must not pay a memory allocation inside its parent's
/// window (a per-CPU map without preallocation did: tens of µs on the first calls of each
/// bucket, which shifted the parents' tails), and a per-CPU preallocated map would cost
/// entries × 8 bytes × CPUs. `MAX_HIST_BUCKETS` (262,144) entries, ~18 MiB, sized at load only
/// for `--aggregate kernel` (1 entry otherwise). An increment that finds the map full is
/// counted (`HIST_FULL`).
#[map]
static HIST_BUCKETS: HashMap<HistKey, u64> = HashMap::with_max_entries(MAX_HIST_BUCKETS, 0);

/// Adds one completed call to its node's summary and histograms, with the same arithmetic
/// as userspace's per-event aggregation (`NodeStats::add`): self time never below 0, the
/// argument summed saturating, the probe time taken out `min(dur, own + descendants')`.
#[inline(always)]
pub(crate) fn aggregate_call(top: &Frame, dur: u64, arg: u64, own_ns: u64) {
    let node = top.node;
    let Some(s) = node_summary(node) else {
        bump(counter::SUMMARY_FULL);
        count_lost(node);
        return;
    };
    let removed = (own_ns + top.desc_probe_ns).min(dur);
    let corrected = dur - removed;
    // SAFETY: per-CPU value, exclusively ours while we run.
    let s = unsafe { &mut *s };
    s.count += 1;
    s.total_ns += dur;
    s.self_ns += dur.saturating_sub(top.child_ns);
    s.off_ns += top.off_ns;
    s.preempted_ns += top.preempted_ns;
    s.arg_sum = s.arg_sum.saturating_add(arg);
    s.corrected_total_ns += corrected;
    s.probe_ns += removed;
    s.probe_hits += top.desc_hits + 2;
    hist_add(node, dur, 0);
    hist_add(node, corrected, 1);
}

/// This CPU's summary of `node`, created at zero on its first completed call.
#[inline(always)]
fn node_summary(node: u64) -> Option<*mut NodeSummary> {
    /// The initial value, in the object's read-only data (see [`get_or_insert`]).
    static ZERO: NodeSummary = NodeSummary {
        count: 0,
        total_ns: 0,
        self_ns: 0,
        off_ns: 0,
        preempted_ns: 0,
        arg_sum: 0,
        corrected_total_ns: 0,
        probe_ns: 0,
        probe_hits: 0,
    };
    get_or_insert(&NODE_SUMMARIES, &node, &ZERO)
}

/// Counts one call of `value` ns in `node`'s raw (`corrected` 0) or corrected histogram.
#[inline(always)]
fn hist_add(node: u64, value: u64, corrected: u32) {
    let key = HistKey {
        node,
        bucket: hist_bucket(value),
        corrected,
    };
    // A new bucket is created at 0 and counted like the others: atomically, since another
    // CPU may count in it from the moment it exists.
    match get_or_insert(&HIST_BUCKETS, &key, &0) {
        Some(c) => add_one(c),
        None => bump(counter::HIST_FULL),
    }
}

/// An atomic increment of a map value shared by every CPU: BPF's XADD (the old value is not
/// used, so no BPF_FETCH, which older kernels lack). The BPF target has no compare-and-swap,
/// so core's `AtomicU64` has no `fetch_add` there: the intrinsic it would call is used
/// directly.
#[inline(always)]
pub(crate) fn add_one(c: *mut u64) {
    use core::intrinsics::{atomic_xadd, AtomicOrdering};
    // SAFETY: a map value: valid, 8-byte aligned, alive while the program runs.
    let _ = unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(c, 1) };
}
