//! The maps every program shares: settings from userspace and the counters it reads back.
//!
//! In: `CONFIG` (settings, indexed by `wprof_common::config`) and `PHASE_COSTS` (the
//! calibrated probe cost of each phase), written by userspace. Out: `COUNTERS` (global,
//! indexed by `wprof_common::counter`), `PHASE_COUNTERS` (per phase id) and `NODE_COUNTERS`
//! (lost and abandoned calls per tree node), read by userspace at the end of a run.
//!
//! Also the one home of the lookup-or-insert pattern on hash maps ([`get_or_insert_with`]).

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap},
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

/// Phases whose probes are coming off (a move or an in-situ epoch), by phase id: 1 while
/// they close as the whole run does at its end (`config::CLOSING`), set before their links
/// go and cleared before they come back.
#[map]
static CLOSING_PHASES: Array<u32> = Array::with_max_entries(MAX_PHASES, 0);

/// Whether a call of `phase` entering now goes uncounted: the run or the phase is closing.
#[inline(always)]
pub(crate) fn closing(phase: u32) -> bool {
    CONFIG.get(config::STOPPED).copied().unwrap_or(0) == config::CLOSING
        || CLOSING_PHASES.get(phase).copied().unwrap_or(0) != 0
}

/// Adds one to global counter `index` (`wprof_common::counter`).
#[inline(always)]
pub(crate) fn bump(index: u32) {
    bump_by(index, 1);
}

/// Adds `n` to global counter `index`.
#[inline(always)]
pub(crate) fn bump_by(index: u32, n: u64) {
    if let Some(c) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU value, no other writer on this CPU while we run.
        unsafe { *c += n };
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
    /// The initial value, in the object's read-only data (see [`get_or_insert`]).
    static ZERO: NodeCounters = NodeCounters {
        lost: 0,
        abandoned: 0,
    };
    get_or_insert(&NODE_COUNTERS, &node, &ZERO)
}

/// A BPF hash map, shared or per CPU, as [`get_or_insert_with`] uses it.
pub(crate) trait KeyedMap<K, V> {
    /// The value at `key` (this CPU's, in a per-CPU map), if there is one.
    fn lookup(&self, key: &K) -> Option<*mut V>;
    /// Creates `key` with `value` unless it exists (`BPF_NOEXIST`); does nothing when it
    /// does or when the map is full (a lookup after it tells which).
    fn create(&self, key: &K, value: &V);
}

// The same two calls on both kinds of hash map (aya gives them no common trait).
macro_rules! keyed_map {
    ($($map:ident),*) => {$(
        impl<K, V> KeyedMap<K, V> for $map<K, V> {
            #[inline(always)]
            fn lookup(&self, key: &K) -> Option<*mut V> {
                self.get_ptr_mut(key)
            }

            #[inline(always)]
            fn create(&self, key: &K, value: &V) {
                let _ = self.insert(key, value, BPF_NOEXIST as u64);
            }
        }
    )*};
}
keyed_map!(HashMap, PerCpuHashMap);

/// The value at `key` in `map`, created first from `init()` when there is none; None when
/// `init` gives nothing or the map is full. `init` runs only on a miss (it may prepare a
/// scratch value too big for the BPF stack). A create that fails because another CPU
/// created the key meanwhile still finds that entry: the second lookup decides.
#[inline(always)]
pub(crate) fn get_or_insert_with<'v, K, V: 'v, M: KeyedMap<K, V>>(
    map: &M,
    key: &K,
    init: impl FnOnce() -> Option<&'v V>,
) -> Option<*mut V> {
    if let Some(p) = map.lookup(key) {
        return Some(p);
    }
    map.create(key, init()?);
    map.lookup(key)
}

/// [`get_or_insert_with`] with a ready initial value. A zero value is best a `static`: in
/// the object's read-only data it costs the miss one address, where a value built on the
/// BPF stack before the lookup stays live on every path after it, which the verifier then
/// walks with that much more state (a `NodeCounters` built so cost the RET-site program
/// ~5% more verified instructions; the static saves ~40%).
#[inline(always)]
pub(crate) fn get_or_insert<K, V, M: KeyedMap<K, V>>(map: &M, key: &K, init: &V) -> Option<*mut V> {
    get_or_insert_with(map, key, || Some(init))
}

/// Counts a call closed without its return (globally and on its node), unless it entered
/// while the run was closing (not counted at all, [`wprof_common::FRAME_UNCOUNTED`]).
#[inline(always)]
pub(crate) fn count_abandoned(frame: &wprof_common::Frame) {
    if frame.uretprobe & wprof_common::FRAME_UNCOUNTED != 0 {
        return;
    }
    bump(counter::ABANDONED);
    if let Some(c) = node_counters(frame.node) {
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
