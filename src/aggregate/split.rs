//! Root-call splitting (`--split-by PHASE`): the tree twice, once over the root calls that
//! contained a call of PHASE (at any depth) and once over those that did not.
//!
//! In: the same spans as the tree. Out: [`SplitTrees`], two [`PhaseTree`]s with their own
//! counts, totals, histograms and probe-corrected figures. Spans reach userspace child-first
//! per thread and a root call's own span comes last, so whether a root call contained PHASE is
//! known only when its span arrives: each thread's spans are held until then, and added to one
//! half at once. Spans that started before that root call belong to an earlier root call of
//! the thread whose own span never came (lost to a full ring buffer, left by a longjmp or an
//! exception, or started during `--skip`): they go to neither half and are counted.

use wprof_common::Event;

use super::build::{phase_name, Builder};
use super::tree::{NodeMap, NodeStats};
use super::ThreadMap;
use crate::model::SplitTrees;

/// The spans of one thread's current root call.
#[derive(Default)]
struct Held {
    /// Each span with the part of its preempted time the probes caused.
    spans: Vec<(Event, u64)>,
    /// Spans beyond the cap: the root call will be left out.
    dropped: u64,
}

/// Holds each thread's spans until its root call completes, then sorts them into a half.
pub(super) struct Splitter {
    phase: u32,
    max_held: usize,
    held: ThreadMap<u64, Held>,
    with: NodeMap<NodeStats>,
    without: NodeMap<NodeStats>,
    with_spans: u64,
    without_spans: u64,
    unattributed: u64,
    oversized: u64,
}

impl Splitter {
    /// Splits by phase id `phase`, holding at most `max_held` spans per thread.
    pub(super) fn new(phase: u32, max_held: usize) -> Splitter {
        Splitter {
            phase,
            max_held,
            held: ThreadMap::default(),
            with: NodeMap::default(),
            without: NodeMap::default(),
            with_spans: 0,
            without_spans: 0,
            unattributed: 0,
            oversized: 0,
        }
    }

    /// Adds a span; `own` is each phase's probe time inside its own window when the run
    /// corrects (as for the merged tree, so both halves carry corrected figures too), `theirs`
    /// the probes' part of its preempted time.
    pub(super) fn span(&mut self, ev: &Event, own: Option<&[u64]>, theirs: u64) {
        let key = ev.stack_key();
        let held = self.held.entry(key).or_default();
        if ev.depth != 0 {
            if held.spans.len() < self.max_held {
                held.spans.push((*ev, theirs));
            } else {
                held.dropped += 1;
            }
            return;
        }
        let mut spans = std::mem::take(&mut held.spans);
        let dropped = std::mem::take(&mut held.dropped);
        spans.push((*ev, theirs));
        // A call inside this root call started after it and ended before it.
        let (start, end) = (ev.start_ns, ev.start_ns.saturating_add(ev.dur_ns));
        let inside = |s: &Event| s.start_ns >= start && s.start_ns.saturating_add(s.dur_ns) <= end;
        if dropped > 0 {
            self.oversized += 1;
            self.unattributed += spans.len() as u64 + dropped;
        } else {
            let with = spans
                .iter()
                .any(|(s, _)| s.phase == self.phase && inside(s));
            let (stats, added) = if with {
                (&mut self.with, &mut self.with_spans)
            } else {
                (&mut self.without, &mut self.without_spans)
            };
            for (s, theirs) in &spans {
                if !inside(s) {
                    self.unattributed += 1;
                    continue;
                }
                stats.entry(s.node).or_default().add(s, own, *theirs);
                *added += 1;
            }
        }
        // Keep the buffer's capacity for the thread's next root call.
        spans.clear();
        if let Some(h) = self.held.get_mut(&key) {
            h.spans = spans;
        }
    }

    /// The split phase's name in `names`.
    pub(super) fn phase_name(&self, names: &[String]) -> String {
        phase_name(names, self.phase)
    }

    /// The two trees, built as the merged one is (`build` knows the node definitions), from
    /// the definitions' `roots`; `phase` names the split phase.
    pub(super) fn finish(self, phase: String, build: &Builder<'_>, roots: &[u64]) -> SplitTrees {
        let still_held: u64 = self
            .held
            .values()
            .map(|h| h.spans.len() as u64 + h.dropped)
            .sum();
        SplitTrees {
            phase,
            with: build.partial_tree(roots, self.with, self.with_spans),
            without: build.partial_tree(roots, self.without, self.without_spans),
            unattributed_spans: self.unattributed + still_held,
            oversized_roots: self.oversized,
        }
    }
}

/// The phase id of `phase` in a profile's phase `names`, or a usage error naming them.
pub fn phase_id(names: &[String], phase: &str) -> Result<u32, crate::error::WprofError> {
    names
        .iter()
        .position(|n| n == phase)
        .map(|i| i as u32)
        .ok_or_else(|| {
            crate::error::WprofError::Usage(format!(
                "--split-by {phase}: the profile has no phase '{phase}'; its phases are: {}",
                names.join(", ")
            ))
        })
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
