//! The run's tables in the JSON: the per-root-call table and the span log as rows of numbers,
//! the folded stacks as `[stack, weight]` pairs, and the per-process and split trees.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::tree::TreeJ;
use crate::model::{
    CallRow, CallTable, FoldedStack, ProcessRun, SpanLog, SpanRecord, SplitTrees, StackProfile,
};

/// The tree split by a phase (`--split-by`): the root calls that contained it, the others.
#[derive(Serialize, Deserialize)]
pub(super) struct SplitJ {
    phase: String,
    with: TreeJ,
    without: TreeJ,
    #[serde(default)]
    unattributed_spans: u64,
    #[serde(default)]
    oversized_roots: u64,
}

/// One process's tree (`--per-pid`).
#[derive(Serialize, Deserialize)]
pub(super) struct ProcessJ {
    pid: u32,
    label: String,
    parent: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    tree: TreeJ,
}

/// CPU samples or off-CPU time: `stacks[i] = [folded stack, weight]`.
#[derive(Serialize, Deserialize)]
pub(super) struct StackProfileJ {
    unit: String,
    frequency_hz: Option<u64>,
    records: u64,
    lost: u64,
    stacks: Vec<(String, u64)>,
}

impl From<&StackProfile> for StackProfileJ {
    fn from(p: &StackProfile) -> Self {
        StackProfileJ {
            unit: p.unit.clone(),
            frequency_hz: p.frequency_hz,
            records: p.records,
            lost: p.lost,
            stacks: p
                .stacks
                .iter()
                .map(|s| (s.stack.clone(), s.weight))
                .collect(),
        }
    }
}

impl From<StackProfileJ> for StackProfile {
    fn from(p: StackProfileJ) -> Self {
        StackProfile {
            unit: p.unit,
            frequency_hz: p.frequency_hz,
            records: p.records,
            lost: p.lost,
            stacks: p
                .stacks
                .into_iter()
                .map(|(stack, weight)| FoldedStack { stack, weight })
                .collect(),
        }
    }
}

/// The per-root-call table: `rows[i] = [start_ns, pid, tid, root, total_ns, ns_0, calls_0,
/// ns_1, calls_1, ...]` with one (ns, calls) pair per entry of `columns` (phase ids in order).
#[derive(Serialize, Deserialize)]
pub(super) struct CallsJ {
    columns: Vec<String>,
    total_calls: u64,
    capped: bool,
    rows: Vec<Vec<u64>>,
}

impl From<&CallTable> for CallsJ {
    fn from(t: &CallTable) -> Self {
        let rows = t
            .rows
            .iter()
            .map(|r| {
                let mut v = vec![
                    r.start_ns,
                    r.pid.into(),
                    r.tid.into(),
                    r.root.into(),
                    r.total_ns,
                ];
                for (ns, n) in r.phase_ns.iter().zip(&r.phase_calls) {
                    v.push(*ns);
                    v.push((*n).into());
                }
                v
            })
            .collect();
        CallsJ {
            columns: t.columns.clone(),
            total_calls: t.total_calls,
            capped: t.capped,
            rows,
        }
    }
}

impl CallsJ {
    pub(super) fn into_table(self) -> Result<CallTable> {
        let width = 5 + 2 * self.columns.len();
        let mut rows = Vec::with_capacity(self.rows.len());
        for (i, r) in self.rows.into_iter().enumerate() {
            if r.len() != width {
                bail!(
                    "calls.rows[{i}] has {} values; {width} expected for {} columns",
                    r.len(),
                    self.columns.len()
                );
            }
            let small = |v: u64, what: &str| -> Result<u32> {
                u32::try_from(v)
                    .with_context(|| format!("calls.rows[{i}]: {what} {v} out of range"))
            };
            rows.push(CallRow {
                start_ns: r[0],
                pid: small(r[1], "pid")?,
                tid: small(r[2], "tid")?,
                root: small(r[3], "root")?,
                total_ns: r[4],
                phase_ns: r[5..].iter().step_by(2).copied().collect(),
                phase_calls: r[6..]
                    .iter()
                    .step_by(2)
                    .map(|&n| small(n, "call count"))
                    .collect::<Result<_>>()?,
            });
        }
        Ok(CallTable {
            columns: self.columns,
            rows,
            total_calls: self.total_calls,
            capped: self.capped,
        })
    }
}

/// The span log: `rows[i] = [start_ns, dur_ns, pid, tid, phase, depth]`, and a 7th column,
/// index + 1 into `keys`, on a span of a `group_by` node.
#[derive(Serialize, Deserialize)]
pub(super) struct SpansJ {
    capped: bool,
    rows: Vec<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    keys: Vec<String>,
}

impl From<&SpanLog> for SpansJ {
    fn from(l: &SpanLog) -> Self {
        let rows = l
            .spans
            .iter()
            .map(|s| {
                let mut row = vec![
                    s.start_ns,
                    s.dur_ns,
                    s.pid.into(),
                    s.tid.into(),
                    s.phase.into(),
                    s.depth.into(),
                ];
                if s.key != 0 {
                    row.push(s.key.into());
                }
                row
            })
            .collect();
        SpansJ {
            capped: l.capped,
            rows,
            keys: l.keys.clone(),
        }
    }
}

impl SpansJ {
    pub(super) fn into_log(self) -> Result<SpanLog> {
        let mut spans = Vec::with_capacity(self.rows.len());
        for (i, r) in self.rows.into_iter().enumerate() {
            let small = |v: u64| {
                u32::try_from(v).with_context(|| format!("spans.rows[{i}]: {v} out of range"))
            };
            let key = match r.len() {
                6 => 0,
                7 if r[6] >= 1 && r[6] <= self.keys.len() as u64 => small(r[6])?,
                7 => bail!(
                    "spans.rows[{i}]: key {} names none of the {} spans.keys",
                    r[6],
                    self.keys.len()
                ),
                n => bail!("spans.rows[{i}]: {n} columns, not 6 or 7"),
            };
            spans.push(SpanRecord {
                start_ns: r[0],
                dur_ns: r[1],
                pid: small(r[2])?,
                tid: small(r[3])?,
                phase: small(r[4])?,
                depth: small(r[5])?,
                key,
            });
        }
        Ok(SpanLog {
            spans,
            capped: self.capped,
            keys: self.keys,
        })
    }
}

impl From<&SplitTrees> for SplitJ {
    fn from(s: &SplitTrees) -> Self {
        SplitJ {
            phase: s.phase.clone(),
            with: TreeJ::from(&s.with),
            without: TreeJ::from(&s.without),
            unattributed_spans: s.unattributed_spans,
            oversized_roots: s.oversized_roots,
        }
    }
}

impl SplitJ {
    pub(super) fn into_split(self) -> Result<SplitTrees> {
        Ok(SplitTrees {
            with: self.with.into_tree().context("split.with")?,
            without: self.without.into_tree().context("split.without")?,
            phase: self.phase,
            unattributed_spans: self.unattributed_spans,
            oversized_roots: self.oversized_roots,
        })
    }
}

impl From<&ProcessRun> for ProcessJ {
    fn from(p: &ProcessRun) -> Self {
        ProcessJ {
            pid: p.pid,
            label: p.label.clone(),
            parent: p.parent,
            parent_label: p.parent_label.clone(),
            host: p.host.clone(),
            tree: TreeJ::from(&p.tree),
        }
    }
}

impl ProcessJ {
    pub(super) fn into_process(self) -> Result<ProcessRun> {
        Ok(ProcessRun {
            tree: (self.tree.into_tree()).with_context(|| format!("process {}", self.pid))?,
            pid: self.pid,
            label: self.label,
            parent: self.parent,
            parent_label: self.parent_label,
            host: self.host,
        })
    }
}
