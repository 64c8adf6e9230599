//! String keys: the calls of a `group_by` phase grouped by a string argument.
//!
//! In: `PHASE_KEYS` (which argument each grouped phase reads, and how: C string or pointer and
//! length), set by userspace, and the entry's registers. Out: the hash of the string's folded
//! text, which makes the call's node one of its own, and that text sent once per node as a
//! `NodeKey` record. The scanner's tables (`KEY_*`) are `wprof_common::key`'s, in the object's
//! read-only data.

use aya_ebpf::{
    helpers::generated::{bpf_probe_read_user as read_user_bytes, bpf_probe_read_user_str},
    macros::map,
    maps::{Array, PerCpuArray},
};
use wprof_common::{
    key::{
        key_hash_step, key_next_index, KEY_CSTR, KEY_HASH_START, KEY_NEXT_LEN, KEY_PTR_LEN,
        KEY_START_MODE,
    },
    EventKind, NodeKey, PhaseKey, KEY_BYTES, MAX_PHASES,
};

use crate::events::{submit_flags, EVENTS};
use crate::site::{arg_registers, pick, Site};
use crate::usdt;

/// Which string argument each grouped phase (`group_by` in the profile) keys its calls by,
/// indexed by phase id.
#[map]
pub(crate) static PHASE_KEYS: Array<PhaseKey> = Array::with_max_entries(MAX_PHASES, 0);

/// The string argument of the call being entered (one per CPU: an entry runs to its end on
/// one CPU), in the form of the record that names a new node.
#[map]
pub(crate) static KEY_SCRATCH: PerCpuArray<NodeKey> = PerCpuArray::with_max_entries(1, 0);

/// The string scanner's tables (`wprof_common::KeyScanner`), in the object's read-only data.
static KEY_CLASS: [u8; 256] = wprof_common::key::KEY_CLASS;
static KEY_NEXT: [u8; KEY_NEXT_LEN] = wprof_common::key::KEY_NEXT;
static KEY_EMIT_CONST: [u8; 4] = wprof_common::key::KEY_EMIT_CONST;
static KEY_EMIT_KEEP: [u8; 4] = wprof_common::key::KEY_EMIT_KEEP;
static KEY_EMIT_MASK: [u64; 4] = wprof_common::key::KEY_EMIT_MASK;

/// Reads a grouped phase's string argument into `KEY_SCRATCH` and returns the hash of its
/// folded text (`wprof_common::KeyScanner`), never 0; 0 when the phase groups nothing or the string
/// could not be read (the call then counts under the phase's plain node).
#[inline(always)]
pub(crate) fn string_key<const USDT: bool>(site: &Site, regs: &aya_ebpf::bindings::pt_regs) -> u64 {
    let Some(pk) = PHASE_KEYS.get(site.phase) else {
        return 0;
    };
    let Some(buf) = KEY_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's scratch value, used by this program run only.
    let buf = unsafe { &mut *buf };
    let args = arg_registers(regs, site.go);
    let arg = |n: u64| pick(&args, n);
    let ptr = if USDT {
        usdt::key_arg(site.usdt_site, regs)
    } else {
        arg(pk.arg as u64)
    } as *const core::ffi::c_void;
    let dst = buf.text.as_mut_ptr() as *mut core::ffi::c_void;
    let n: i64 = if pk.kind == KEY_CSTR {
        // SAFETY: the helper reads at most KEY_BYTES bytes of user memory into the buffer
        // and NUL-terminates it; it returns the length with the NUL, or a negative error.
        (unsafe { bpf_probe_read_user_str(dst, KEY_BYTES as u32, ptr) }) as i64 - 1
    } else if pk.kind == KEY_PTR_LEN {
        let mut len = arg(pk.arg as u64 + 1);
        if len > KEY_BYTES as u64 {
            len = KEY_BYTES as u64;
        }
        // SAFETY: reads `len` <= KEY_BYTES bytes of user memory into the buffer.
        if unsafe { read_user_bytes(dst, len as u32, ptr) } < 0 {
            -1
        } else {
            len as i64
        }
    } else {
        return 0;
    };
    if n < 0 {
        return 0;
    }
    buf.len = n as u32;
    // KeyScanner::step without a branch: table lookups and masks, one path per byte.
    let mut h = KEY_HASH_START;
    let mut mode = KEY_START_MODE;
    for i in 0..KEY_BYTES {
        if i as i64 >= n {
            break;
        }
        let c = buf.text[i];
        let t = KEY_NEXT[key_next_index(mode, KEY_CLASS[c as usize])];
        mode = t & 7;
        let emit = ((t >> 4) & 3) as usize;
        let byte = KEY_EMIT_CONST[emit] | (c & KEY_EMIT_KEEP[emit]);
        let taken = KEY_EMIT_MASK[emit];
        h = (key_hash_step(h, byte) & taken) | (h & !taken);
    }
    h | 1
}

/// Sends the string in `KEY_SCRATCH` as the name of grouped node `node`; false when the ring
/// buffer is full.
#[inline(always)]
pub(crate) fn emit_key(node: u64) -> bool {
    let Some(k) = KEY_SCRATCH.get_ptr_mut(0) else {
        return false;
    };
    let Some(mut entry) = EVENTS.reserve::<NodeKey>(0) else {
        return false;
    };
    // SAFETY: this CPU's scratch value; copied into the reserved record field by field
    // (not through the 512-byte BPF stack).
    unsafe {
        (*k).kind = EventKind::NodeKey as u32;
        (*k).node = node;
        core::ptr::copy_nonoverlapping(k as *const NodeKey, entry.as_mut_ptr(), 1);
    }
    entry.submit(submit_flags());
    true
}
