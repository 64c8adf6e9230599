//! The stacks CPU samples carry in their records, given ids beside the `STACK_TRACES` map's.
//!
//! In: a sample's user or kernel frames as BPF copied them. Out: an id with [`COPIED_BIT`]
//! set (the map's ids stay below it), and the frames back by id when the run's stacks are
//! read. The rest of the pipeline keeps handling stack ids as it does for off-CPU records.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Set in the ids of copied stacks; the BPF map's ids are below its size (≤ 2^20).
pub const COPIED_BIT: u32 = 1 << 30;

/// At most this many distinct stacks are kept (~20 MB at 40 frames each, for a `--serve` run
/// that samples for days); later new ones count as not taken (-1), as a full stack map's would.
/// The kernel's map held 16,384, and lost some of those to bucket collisions.
const MAX_STACKS: usize = 1 << 16;

/// Distinct copied stacks by id.
#[derive(Debug, Default)]
pub struct CopiedStacks {
    ids: HashMap<Arc<[u64]>, u32>,
    frames: Vec<Arc<[u64]>>,
}

/// The store a tracer's collector fills and its end-of-run readers look into.
pub type SharedStacks = Arc<Mutex<CopiedStacks>>;

impl CopiedStacks {
    /// The id of `frames` (innermost first), -1 for an empty stack or a full store.
    pub fn intern(&mut self, frames: &[u64]) -> i32 {
        if frames.is_empty() {
            return -1;
        }
        if let Some(&id) = self.ids.get(frames) {
            return id as i32;
        }
        if self.frames.len() >= MAX_STACKS {
            return -1;
        }
        let id = COPIED_BIT | self.frames.len() as u32;
        let frames: Arc<[u64]> = frames.into();
        self.frames.push(frames.clone());
        self.ids.insert(frames, id);
        id as i32
    }

    /// The frames of a copied stack's id, None for another id.
    pub fn get(&self, id: u32) -> Option<&[u64]> {
        if id & COPIED_BIT == 0 {
            return None;
        }
        self.frames.get((id & !COPIED_BIT) as usize).map(|f| &f[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_frames_get_the_same_id_and_come_back_by_it() {
        let mut s = CopiedStacks::default();
        let a = s.intern(&[1, 2, 3]);
        let b = s.intern(&[4, 5]);
        assert_eq!(s.intern(&[1, 2, 3]), a);
        assert_ne!(a, b);
        assert!(a as u32 & COPIED_BIT != 0 && a > 0);
        assert_eq!(s.get(a as u32), Some(&[1u64, 2, 3][..]));
        assert_eq!(s.get(b as u32), Some(&[4u64, 5][..]));
        assert_eq!(s.get(7), None, "a stack map id is not ours");
    }

    #[test]
    fn an_empty_stack_has_no_id() {
        assert_eq!(CopiedStacks::default().intern(&[]), -1);
    }

    #[test]
    fn a_full_store_keeps_what_it_has_and_takes_no_new_stack() {
        let mut s = CopiedStacks::default();
        for i in 0..MAX_STACKS as u64 {
            assert!(s.intern(&[i]) > 0);
        }
        assert_eq!(s.intern(&[u64::MAX]), -1);
        let first = s.intern(&[0]);
        assert_eq!(s.get(first as u32), Some(&[0u64][..]));
    }
}
