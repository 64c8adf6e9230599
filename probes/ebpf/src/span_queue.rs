//! Completed calls queued on their thread's stack and sent as one ring-buffer record.
//!
//! In: a span from `stack::pop_frame`. Out: one `EVENTS` record of every queued span when the
//! root call returns, the queue is full, its oldest span waited [`SPAN_QUEUE_FLUSH_NS`], or the
//! stack is freed. A record costs ~65 ns here whatever its size (the ring's lock and header),
//! so a nested write of 7 phases now pays one instead of seven. Spans still queued when a run
//! ends are read from `STACKS` by userspace (`collect::drain_queued`).
//!
//! Only the stack's own thread (or goroutine) queues or sends, from its own probes, so the
//! queue needs no lock: a CPU-sampling program reads other fields of the stack, never these.

use wprof_common::{Event, ThreadStack, CALIBRATION_FIRST_PHASE, SPAN_QUEUE, SPAN_QUEUE_FLUSH_NS};

use crate::events::{submit_flags, EVENTS};
use crate::maps::count_lost;

const QUEUE_MASK: usize = SPAN_QUEUE - 1;
const _: () = assert!(SPAN_QUEUE.is_power_of_two());

/// Queues `span`, completed at `now`, and sends the queue if `root` (the thread's outermost
/// call returned: nothing of it is left to wait for) or it is full or old.
#[inline(always)]
pub(crate) fn queue_span(st: &mut ThreadStack, span: Event, now: u64, root: bool) {
    // Below SPAN_QUEUE between calls: a full queue is sent at once.
    let n = st.pending as usize & QUEUE_MASK;
    st.spans[n] = span;
    st.pending = n as u32 + 1;
    // The oldest queued span was queued when it ended.
    let oldest = &st.spans[0];
    let queued_at = oldest.start_ns + oldest.dur_ns;
    if root || n + 1 >= SPAN_QUEUE || now.wrapping_sub(queued_at) > SPAN_QUEUE_FLUSH_NS {
        send_queued(st);
    }
}

/// Sends every queued span as one record; counts them lost (per node) if the ring is full.
#[inline(always)]
pub(crate) fn send_queued(st: &mut ThreadStack) {
    // SAFETY: read_volatile of a plain field, so the verifier sees the bound check below on
    // the very register the size is computed from.
    let n = unsafe { core::ptr::read_volatile(&st.pending) } as usize;
    st.pending = 0;
    if n == 0 || n > SPAN_QUEUE {
        return;
    }
    // SAFETY: 1 <= n <= SPAN_QUEUE spans of the stack's own array.
    let spans = unsafe { core::slice::from_raw_parts(st.spans.as_ptr(), n) };
    if EVENTS.output(spans, submit_flags()).is_ok() {
        return;
    }
    for (i, span) in st.spans.iter().enumerate() {
        if i >= n {
            break;
        }
        // A calibration call lost to a full ring (at the end of a run, with the run's calls
        // still coming) only lacks a sample: not the run's loss.
        if span.phase < CALIBRATION_FIRST_PHASE {
            count_lost(span.node);
        }
    }
}
