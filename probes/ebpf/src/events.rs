//! The ring buffer to userspace, and the tree nodes its records name.
//!
//! In: records built by the other modules (spans, node definitions, forks, loader changes).
//! Out: `EVENTS`, with a wakeup only once a quarter of it is full; a node's definition is
//! sent the first time the node is reached (`NODES_SEEN`), its hash made by [`node_hash`].

use aya_ebpf::{
    bindings::{
        BPF_ANY, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE,
    },
    macros::map,
    maps::{Array, HashMap, RingBuf},
};
use wprof_common::{counter, Event, EventKind, DEFAULT_RING_BYTES, MAX_NODES};

use crate::keys::emit_key;
use crate::maps::bump;

/// Spans and node definitions for userspace. Its size can be changed at load time.
#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// Nodes whose definition reached the ring buffer.
/// Slots of [`NODES_RECENT`] (a power of two).
const RECENT_NODES: u32 = 4096;

/// The nodes defined lately, direct-mapped by their hash's low bits: an entry finds its node
/// here with an array access (inlined by the verifier) instead of the ~20 ns hash lookup of
/// [`NODES_SEEN`], which stays the authority.
#[map]
static NODES_RECENT: Array<u64> = Array::with_max_entries(RECENT_NODES, 0);

#[map]
static NODES_SEEN: HashMap<u64, u8> = HashMap::with_max_entries(MAX_NODES, 0);

/// Mixes a parent path hash and a phase id into the child's path hash (splitmix64 finaliser).
/// userspace never recomputes it: it learns the tree from NodeDef events.
#[inline(always)]
pub(crate) fn node_hash(parent: u64, phase: u32) -> u64 {
    let mut x = parent ^ (phase as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    if x == 0 {
        1
    } else {
        x
    }
}

/// Submit flags for a ring-buffer record: wake the reader only once the ring is a quarter
/// full. A wakeup per event costs the traced thread an interrupt and often a context switch
/// (several µs inside the phase being timed); userspace also polls on a short timeout.
#[inline(always)]
pub(crate) fn submit_flags() -> u64 {
    let avail = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    let size = EVENTS.query(BPF_RB_RING_SIZE as u64);
    if avail >= size / 4 {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

/// Sends a node's definition the first time it is reached; a grouped node (`keyed`) first
/// sends the string of `KEY_SCRATCH` it stands for.
#[inline(always)]
pub(crate) fn define_node(node: u64, parent: u64, phase: u32, depth: u32, id: u64, keyed: bool) {
    let recent = NODES_RECENT.get_ptr_mut(node as u32 & (RECENT_NODES - 1));
    if let Some(r) = recent {
        // SAFETY: an element of an array map; a race with another CPU at worst costs one
        // more NODES_SEEN lookup.
        if unsafe { *r } == node {
            return;
        }
    }
    let remember = || {
        if let Some(r) = recent {
            // SAFETY: as above.
            unsafe { *r = node };
        }
    };
    if NODES_SEEN.get_ptr(&node).is_some() {
        remember();
        return;
    }
    if keyed && !emit_key(node) {
        bump(counter::LOST_NODE_DEFS);
        return;
    }
    let def = Event {
        kind: EventKind::NodeDef as u32,
        phase,
        pid: (id >> 32) as u32,
        tid: id as u32,
        node,
        parent,
        depth,
        ..Event::default()
    };
    if emit(def) {
        let one = 1u8;
        let _ = NODES_SEEN.insert(&node, &one, BPF_ANY as u64);
        remember();
    } else {
        // Not marked as seen: the next entry of this node tries again.
        bump(counter::LOST_NODE_DEFS);
    }
}

/// Writes one record to the ring buffer; false when it is full.
#[inline(always)]
pub(crate) fn emit(ev: Event) -> bool {
    emit_with(ev, submit_flags())
}

/// Writes one record to the ring buffer with these submit flags; false when it is full.
#[inline(always)]
pub(crate) fn emit_with(ev: Event, flags: u64) -> bool {
    match EVENTS.reserve::<Event>(0) {
        Some(mut entry) => {
            entry.write(ev);
            entry.submit(flags);
            true
        }
        None => false,
    }
}
