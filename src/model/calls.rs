//! The per-root-call table and the span log of a run (per-event mode).

/// One root call: when, where, how long, and each phase's time inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRow {
    /// Entry time of the root call, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Phase id of the root.
    pub root: u32,
    /// Duration of the root call, ns.
    pub total_ns: u64,
    /// Per phase id: time inside this call, ns, counting only the outermost call of a phase
    /// (a recursion's inner levels are inside its outer one). The root's own entry holds
    /// `total_ns`.
    pub phase_ns: Vec<u64>,
    /// Per phase id: number of calls inside this root call (the root counts once).
    pub phase_calls: Vec<u32>,
}

/// The per-root-call table of a run (per-event mode only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallTable {
    /// Phase names, by phase id: the meaning of `phase_ns[i]` and `phase_calls[i]`.
    pub columns: Vec<String>,
    /// The rows, in completion order.
    pub rows: Vec<CallRow>,
    /// Root calls completed in the run (rows beyond the cap are counted, not kept).
    pub total_calls: u64,
    /// Whether rows were dropped at the cap.
    pub capped: bool,
}

/// A completed phase call, for the Chrome/Perfetto trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanRecord {
    /// Entry time, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub dur_ns: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Phase id.
    pub phase: u32,
    /// Nesting depth (0 = root).
    pub depth: u32,
    /// The `group_by` string of the call's node: index + 1 into [`SpanLog::keys`], 0 for none.
    pub key: u32,
}

/// The capped span log of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpanLog {
    /// Spans in completion order (children before their parent).
    pub spans: Vec<SpanRecord>,
    /// Whether spans were dropped at the cap.
    pub capped: bool,
    /// The distinct `group_by` strings the spans' `key` points into.
    pub keys: Vec<String>,
}

impl SpanLog {
    /// The `group_by` string of `span`'s node, if it has one.
    pub fn key_of(&self, span: &SpanRecord) -> Option<&str> {
        let i = span.key.checked_sub(1)?;
        self.keys.get(i as usize).map(String::as_str)
    }
}
