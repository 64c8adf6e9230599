//! The per-root-call table and the span log, built from the same events as the tree.
//!
//! A root call is a phase entered with no phase open on its thread. Its children's spans reach
//! userspace before its own (same thread, ring-buffer order), so each thread accumulates the
//! time of every phase inside its current root call until the root's span closes the row.

use std::collections::HashMap;

use super::ThreadMap;

use wprof_common::Event;

use crate::model::{CallRow, CallTable, SpanLog, SpanRecord};

/// Most root calls kept in a run's table by default (a row per call; the tree is unbounded).
pub const DEFAULT_MAX_CALLS: usize = 100_000;

/// Most spans kept for the trace export by default.
pub const DEFAULT_MAX_SPANS: usize = 200_000;

#[derive(Default)]
struct Pending {
    phase_ns: Vec<u64>,
    phase_calls: Vec<u32>,
}

/// Builds the call table and span log.
pub struct CallRecorder {
    nphases: usize,
    max_calls: usize,
    max_spans: usize,
    pending: ThreadMap<u64, Pending>,
    table: CallTable,
    log: SpanLog,
    /// Each kept span's tree node: its string arrives after the span at times (same drain),
    /// so keys are looked up at the end.
    span_nodes: Vec<u64>,
}

impl CallRecorder {
    /// A recorder for phases `names`, keeping at most `max_calls` rows and `max_spans` spans.
    pub fn new(names: &[String], max_calls: usize, max_spans: usize) -> CallRecorder {
        CallRecorder {
            nphases: names.len(),
            max_calls,
            max_spans,
            pending: ThreadMap::default(),
            table: CallTable {
                columns: names.to_vec(),
                ..CallTable::default()
            },
            log: SpanLog::default(),
            span_nodes: Vec::new(),
        }
    }

    /// Adds a span. `nested_in_same_phase` says whether an ancestor of its node is the same
    /// phase (then its time is already inside that ancestor's).
    pub fn span(&mut self, ev: &Event, nested_in_same_phase: bool) {
        if self.log.spans.len() < self.max_spans {
            self.log.spans.push(SpanRecord {
                start_ns: ev.start_ns,
                dur_ns: ev.dur_ns,
                pid: ev.pid,
                tid: ev.tid,
                phase: ev.phase,
                depth: ev.depth,
                key: 0,
            });
            self.span_nodes.push(ev.node);
        } else {
            self.log.capped = true;
        }
        let phase = ev.phase as usize;
        if phase >= self.nphases {
            return;
        }
        if self.table.capped {
            // Full: a root call only counts now (its phases' sums would go nowhere).
            if ev.depth == 0 {
                self.table.total_calls += 1;
            }
            return;
        }
        let key = ev.stack_key();
        let n = self.nphases;
        let p = self.pending.entry(key).or_insert_with(|| Pending {
            phase_ns: vec![0; n],
            phase_calls: vec![0; n],
        });
        p.phase_calls[phase] += 1;
        if !nested_in_same_phase {
            p.phase_ns[phase] += ev.dur_ns;
        }
        if ev.depth != 0 {
            return;
        }
        let Some(p) = self.pending.remove(&key) else {
            return;
        };
        self.table.total_calls += 1;
        if self.table.rows.len() >= self.max_calls {
            self.table.capped = true;
            self.pending = ThreadMap::default();
            return;
        }
        self.table.rows.push(CallRow {
            start_ns: ev.start_ns,
            pid: ev.pid,
            tid: ev.tid,
            root: ev.phase,
            total_ns: ev.dur_ns,
            phase_ns: p.phase_ns,
            phase_calls: p.phase_calls,
        });
    }

    /// The table and the span log, each span with its node's `group_by` string in `keys`.
    pub fn finish<S: std::hash::BuildHasher>(
        mut self,
        keys: &HashMap<u64, String, S>,
    ) -> (CallTable, SpanLog) {
        let mut index: HashMap<u64, u32> = HashMap::new();
        for (span, node) in self.log.spans.iter_mut().zip(&self.span_nodes) {
            let Some(text) = keys.get(node) else {
                continue;
            };
            span.key = *index.entry(*node).or_insert_with(|| {
                self.log.keys.push(text.clone());
                self.log.keys.len() as u32
            });
        }
        (self.table, self.log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wprof_common::EventKind;

    fn span(phase: u32, depth: u32, dur: u64, tid: u32) -> Event {
        Event {
            kind: EventKind::Span as u32,
            phase,
            depth,
            dur_ns: dur,
            tid,
            pid: 1,
            ..Event::default()
        }
    }

    #[test]
    fn rows_hold_each_phase_time_inside_the_root_call() {
        let names: Vec<String> = ["w", "e", "r"].iter().map(|s| s.to_string()).collect();
        let mut c = CallRecorder::new(&names, 10, 10);
        // thread 7: e (10), r (30 outer) with r (20 inner) inside, then w (100)
        c.span(&span(1, 1, 10, 7), false);
        c.span(&span(2, 2, 20, 7), true);
        c.span(&span(2, 1, 30, 7), false);
        // another thread interleaves
        c.span(&span(1, 1, 5, 8), false);
        c.span(&span(0, 0, 100, 7), false);
        c.span(&span(0, 0, 50, 8), false);
        let (t, log) = c.finish(&HashMap::new());
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0].phase_ns, [100, 10, 30]);
        assert_eq!(t.rows[0].phase_calls, [1, 1, 2]);
        assert_eq!(
            (t.rows[1].tid, t.rows[1].phase_ns.clone()),
            (8, vec![50, 5, 0])
        );
        assert_eq!(log.spans.len(), 6);
    }

    #[test]
    fn caps_are_counted_and_said() {
        let names = vec!["w".to_string(), "e".to_string()];
        let mut c = CallRecorder::new(&names, 2, 1);
        for _ in 0..5 {
            c.span(&span(1, 1, 1, 1), false);
            c.span(&span(0, 0, 2, 1), false);
        }
        // Once full, the table keeps no per-thread sums it could not put in a row.
        c.span(&span(1, 1, 1, 1), false);
        assert!(c.pending.is_empty());
        let (t, log) = c.finish(&HashMap::new());
        assert_eq!((t.rows.len(), t.total_calls, t.capped), (2, 5, true));
        assert_eq!(t.rows[1].phase_ns, [2, 1]);
        assert!(log.capped);
    }

    #[test]
    fn spans_of_grouped_nodes_carry_their_string_once_per_node() {
        let names = vec!["w".to_string()];
        let mut c = CallRecorder::new(&names, 10, 10);
        for node in [5, 6, 5, 7] {
            c.span(
                &Event {
                    node,
                    ..span(0, 0, 1, 1)
                },
                false,
            );
        }
        let keys = HashMap::from([(5, "SELECT ?".to_string()), (7, "DELETE".to_string())]);
        let (_, log) = c.finish(&keys);
        let got: Vec<Option<&str>> = log.spans.iter().map(|s| log.key_of(s)).collect();
        assert_eq!(
            got,
            [Some("SELECT ?"), None, Some("SELECT ?"), Some("DELETE")]
        );
        assert_eq!(log.keys, ["SELECT ?", "DELETE"]);
    }
}
