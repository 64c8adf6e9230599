//! Restoring the return addresses that pending uretprobes replaced.
//!
//! A uretprobe overwrites the return address of the probed call with the address of the
//! kernel's trampoline in the `[uprobes]` mapping; a user stack captured while such calls are
//! open shows the trampoline instead of the real caller. The original return addresses are
//! known (the kernel keeps them; wprof's BPF side records them per pending phase), so the
//! trampoline frames can be put back.

use super::maps::ProcessMaps;

/// Replaces trampoline frames in `stack` with the real return addresses.
///
/// `stack` is innermost first (as `bpf_get_stackid` returns it); `pending` holds the original
/// return addresses of the pending uretprobe frames, innermost first. The i-th frame inside
/// the `[uprobes]` mapping becomes `pending[i]`. When there are fewer pending entries than
/// trampoline frames, the rest stay as they are (they render as `[uprobes]`). Returns how
/// many frames were replaced.
///
/// `complete` says `pending` holds *every* pending return (BPF caps the list). Then, when the
/// walk shows fewer trampolines than there are pending returns, the missing ones are the
/// innermost: a frame-pointer walk skips the caller of a function sampled before it set up its
/// frame (e.g. right after its entry probe), never an outer frame. So the trampolines are
/// matched from the outermost end; matching from the innermost would shift every caller by
/// one (seen on PostgreSQL: `DoCopy` missing, a frame repeated).
pub fn restore_uretprobe_returns(
    stack: &mut [u64],
    maps: &ProcessMaps,
    pending: &[u64],
    complete: bool,
) -> usize {
    let seen = stack.iter().filter(|&&a| maps.is_trampoline(a)).count();
    let skipped = if complete {
        pending.len().saturating_sub(seen)
    } else {
        0
    };
    let mut next = pending[skipped..].iter();
    let mut replaced = 0;
    for frame in stack.iter_mut() {
        if !maps.is_trampoline(*frame) {
            continue;
        }
        match next.next() {
            Some(&ret) => {
                *frame = ret;
                replaced += 1;
            }
            None => break,
        }
    }
    replaced
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::maps::{Mapping, MappingKind};
    use std::path::PathBuf;

    const TRAMP: u64 = 0x7fff_ffff_e000;

    fn maps() -> ProcessMaps {
        ProcessMaps::from_mappings(
            7,
            vec![
                Mapping {
                    start: 0x40_0000,
                    end: 0x50_0000,
                    offset: 0,
                    kind: MappingKind::File {
                        path: PathBuf::from("/bin/app"),
                        open_path: PathBuf::from("/bin/app"),
                        inode: 0,
                    },
                },
                Mapping {
                    start: TRAMP,
                    end: TRAMP + 0x1000,
                    offset: 0,
                    kind: MappingKind::Uprobes,
                },
            ],
        )
    }

    #[test]
    fn replaces_in_order() {
        let maps = maps();
        let mut stack = [0x40_1000, TRAMP, 0x40_2000, TRAMP, 0x40_3000];
        let n = restore_uretprobe_returns(&mut stack, &maps, &[0x41_0001, 0x42_0002], true);
        assert_eq!(n, 2);
        assert_eq!(
            stack,
            [0x40_1000, 0x41_0001, 0x40_2000, 0x42_0002, 0x40_3000]
        );
    }

    #[test]
    fn fewer_pending_leaves_rest() {
        let maps = maps();
        let mut stack = [TRAMP, TRAMP + 0x10, TRAMP, 0x40_3000];
        let n = restore_uretprobe_returns(&mut stack, &maps, &[0x41_0001], false);
        assert_eq!(n, 1);
        assert_eq!(stack, [0x41_0001, TRAMP + 0x10, TRAMP, 0x40_3000]);
    }

    #[test]
    fn a_skipped_inner_frame_does_not_shift_the_callers() {
        // Three calls pending, but the walk skipped the innermost one's return address (the
        // sample hit before it set up its frame): the two trampolines seen are the outer two.
        let maps = maps();
        let mut stack = [0x40_1000, TRAMP, 0x40_2000, TRAMP];
        let pending = [0x43_0003, 0x41_0001, 0x42_0002];
        assert_eq!(
            restore_uretprobe_returns(&mut stack, &maps, &pending, true),
            2
        );
        assert_eq!(stack, [0x40_1000, 0x41_0001, 0x40_2000, 0x42_0002]);
        // A capped list (not complete) is matched from the innermost end.
        let mut stack = [TRAMP, TRAMP];
        assert_eq!(
            restore_uretprobe_returns(&mut stack, &maps, &pending, false),
            2
        );
        assert_eq!(stack, [0x43_0003, 0x41_0001]);
    }

    #[test]
    fn extra_pending_and_no_trampoline() {
        let maps = maps();
        let mut stack = [0x40_1000, 0x40_2000];
        assert_eq!(
            restore_uretprobe_returns(&mut stack, &maps, &[1, 2, 3], true),
            0
        );
        assert_eq!(stack, [0x40_1000, 0x40_2000]);
        let mut empty: [u64; 0] = [];
        assert_eq!(restore_uretprobe_returns(&mut empty, &maps, &[1], false), 0);
    }
}
