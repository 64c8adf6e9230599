//! The stacks CPU samples carry in their records, given ids beside the `STACK_TRACES` map's.
//!
//! In: a sample's user or kernel frames as BPF copied them. Out: an id with [`COPIED_BIT`]
//! set (the map's ids stay below it), and the frames back by id when the run's stacks are
//! read. The rest of the pipeline keeps handling stack ids as it does for off-CPU records.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Set in the ids of copied stacks; the BPF map's ids are below its size (≤ 2^20).
pub const COPIED_BIT: u32 = 1 << 30;

/// At most this many distinct stacks are kept; later new ones count as not taken (-1), as a
/// full stack map's would.
const MAX_STACKS: usize = 1 << 20;

/// Distinct copied stacks by id.
#[derive(Debug, Default)]
pub struct CopiedStacks {
    ids: HashMap<Vec<u64>, u32>,
    frames: Vec<Vec<u64>>,
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
        self.frames.push(frames.to_vec());
        self.ids.insert(frames.to_vec(), id);
        id as i32
    }

    /// The frames of a copied stack's id, None for another id.
    pub fn get(&self, id: u32) -> Option<&[u64]> {
        if id & COPIED_BIT == 0 {
            return None;
        }
        self.frames
            .get((id & !COPIED_BIT) as usize)
            .map(Vec::as_slice)
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
}
