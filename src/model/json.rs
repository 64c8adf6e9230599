//! The run as JSON, schema v1: the only input of `report`, `compare` and `check`.
//!
//! In: a [`Run`] (to JSON) or the text of a RUN.json (from JSON). Out: a `serde_json::Value`
//! or the [`Run`] back, exactly: histograms are written as their recorded buckets and recorded
//! again on reading, so every figure derived from a reloaded run equals the original's. The
//! document's shape lives only in this file's private mirror structs; docs/json.md describes it
//! and docs/json-schema-v1.json validates it.

use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::model::ClassCost;
use crate::model::InSituCheck;
use crate::model::SampledShare;
use crate::model::{
    new_histogram, CallRow, CallTable, Corrected, LatencyHistogram, PhaseTree, SpanLog, SpanRecord,
    SplitTrees, TreeNode, Units,
};
use crate::model::{
    Calibration, Counters, FoldedStack, ObjectInfo, PhaseInfo, ProbeCost, ProcessRun, Provenance,
    Run, StackProfile, SCHEMA_VERSION,
};

/// The run as a JSON document of schema [`SCHEMA_VERSION`].
pub fn to_json(run: &Run) -> serde_json::Value {
    let doc = Doc {
        schema_version: SCHEMA_VERSION,
        provenance: ProvenanceJ::from(&run.provenance),
        phases: run.phases.iter().map(PhaseJ::from).collect(),
        counters: CountersJ::from(&run.counters),
        probe_cost: ProbeCostJ::from(&run.probe_cost),
        tree: TreeJ::from(&run.tree),
        calls: CallsJ::from(&run.calls),
        spans: SpansJ::from(&run.spans),
        cpu_profile: run.cpu.as_ref().map(StackProfileJ::from),
        off_cpu_profile: run.off_cpu.as_ref().map(StackProfileJ::from),
        processes: run
            .processes
            .iter()
            .map(|p| ProcessJ {
                pid: p.pid,
                label: p.label.clone(),
                parent: p.parent,
                parent_label: p.parent_label.clone(),
                tree: TreeJ::from(&p.tree),
            })
            .collect(),
        split: run.split.as_ref().map(|s| SplitJ {
            phase: s.phase.clone(),
            with: TreeJ::from(&s.with),
            without: TreeJ::from(&s.without),
            unattributed_spans: s.unattributed_spans,
            oversized_roots: s.oversized_roots,
        }),
        in_situ: run.in_situ.clone(),
    };
    // Serializing these structs cannot fail: every map key is a string and there are no
    // custom Serialize impls (non-finite floats become null rather than errors).
    serde_json::to_value(&doc).unwrap_or_else(|e| unreachable!("run serializes to JSON: {e}"))
}

/// The deepest nesting of arrays and objects a run file may have: a tree MAX_DEPTH (128)
/// phases deep nests an object in an array per level, and a node's histogram a few more.
pub const MAX_JSON_NESTING: usize = 2 * wprof_common::MAX_DEPTH + 16;

/// Parses without serde_json's 128-level nesting limit (a tree may be MAX_DEPTH phases deep),
/// but refuses a document nested deeper than [`MAX_JSON_NESTING`] before parsing it: a crafted
/// file would otherwise overflow the stack.
pub fn parse_deep<T: serde::de::DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    if let Some(at) = too_deep(text, MAX_JSON_NESTING) {
        return Err(serde::de::Error::custom(format!(
            "nested deeper than {MAX_JSON_NESTING} levels at byte {at}: no wprof run is (a tree \
             is at most {} phases deep)",
            wprof_common::MAX_DEPTH
        )));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let v = T::deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// The byte offset where `text` first nests arrays and objects deeper than `max`, if it does
/// (brackets inside strings do not count). Written by hand: serde_json can only limit depth at
/// 128, below what a deep tree needs, or not at all.
fn too_deep(text: &str, max: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, b) in text.bytes().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Reads a RUN.json file for report, compare and check: a missing, unreadable or malformed
/// file is a usage error (exit 2) naming the file, on one line.
pub fn read_run_file(path: &std::path::Path) -> Result<Run> {
    let text = crate::privilege::read_to_string(path).map_err(|e| {
        crate::error::WprofError::Usage(format!("cannot read {}: {e}", path.display()))
    })?;
    from_json(&text).map_err(|e| {
        let why = format!("{e:#}").replace('\n', " ");
        crate::error::WprofError::Usage(format!("{} is not a wprof run: {why}", path.display()))
            .into()
    })
}

/// Reads a RUN.json. Refuses other schema versions and malformed or incomplete documents
/// with a message naming the version, or the line and column of the problem.
pub fn from_json(text: &str) -> Result<Run> {
    let head: Head = parse_deep(text).map_err(|e| anyhow!("malformed JSON: {e}"))?;
    match head.schema_version {
        None => bail!("no schema_version field: not a wprof RUN.json"),
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(SCHEMA_VERSION.into()) => {}
        Some(serde_json::Value::Number(n)) => match n.as_u64() {
            Some(v) if v > SCHEMA_VERSION.into() => bail!(
                "RUN.json has schema_version {v}; this wprof reads version {SCHEMA_VERSION} — upgrade wprof"
            ),
            _ => bail!(
                "RUN.json has schema_version {n}; this wprof reads version {SCHEMA_VERSION}, and no wprof writes {n}"
            ),
        },
        Some(other) => bail!("schema_version is {other}, not an integer: not a wprof RUN.json"),
    }
    let doc: Doc = parse_deep(text)
        .map_err(|e| anyhow!("RUN.json does not match schema v{SCHEMA_VERSION}: {e}"))?;
    let mut processes = Vec::with_capacity(doc.processes.len());
    for p in doc.processes {
        processes.push(ProcessRun {
            pid: p.pid,
            label: p.label,
            parent: p.parent,
            parent_label: p.parent_label,
            tree: p
                .tree
                .into_tree()
                .with_context(|| format!("process {}", p.pid))?,
        });
    }
    Ok(Run {
        provenance: doc.provenance.into(),
        phases: doc.phases.into_iter().map(PhaseInfo::from).collect(),
        counters: doc.counters.into(),
        probe_cost: doc.probe_cost.into_probe_cost()?,
        tree: doc.tree.into_tree()?,
        calls: doc.calls.into_table()?,
        spans: doc.spans.into_log()?,
        cpu: doc.cpu_profile.map(StackProfile::from),
        off_cpu: doc.off_cpu_profile.map(StackProfile::from),
        processes,
        split: match doc.split {
            Some(s) => Some(SplitTrees {
                with: s.with.into_tree().context("split.with")?,
                without: s.without.into_tree().context("split.without")?,
                phase: s.phase,
                unattributed_spans: s.unattributed_spans,
                oversized_roots: s.oversized_roots,
            }),
            None => None,
        },
        in_situ: doc.in_situ,
    })
}

/// Only the version, read first so that a newer document is refused by version rather than
/// by whichever field changed.
#[derive(Deserialize)]
struct Head {
    schema_version: Option<serde_json::Value>,
}

#[derive(Serialize, Deserialize)]
struct Doc {
    schema_version: u32,
    provenance: ProvenanceJ,
    phases: Vec<PhaseJ>,
    counters: CountersJ,
    probe_cost: ProbeCostJ,
    tree: TreeJ,
    calls: CallsJ,
    spans: SpansJ,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpu_profile: Option<StackProfileJ>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    off_cpu_profile: Option<StackProfileJ>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    processes: Vec<ProcessJ>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    split: Option<SplitJ>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    in_situ: Vec<InSituCheck>,
}

/// The tree split by a phase (`--split-by`): the root calls that contained it, the others.
#[derive(Serialize, Deserialize)]
struct SplitJ {
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
struct ProcessJ {
    pid: u32,
    label: String,
    parent: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent_label: Option<String>,
    tree: TreeJ,
}

/// CPU samples or off-CPU time: `stacks[i] = [folded stack, weight]`.
#[derive(Serialize, Deserialize)]
struct StackProfileJ {
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
struct CallsJ {
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
    fn into_table(self) -> Result<CallTable> {
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
struct SpansJ {
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
    fn into_log(self) -> Result<SpanLog> {
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

#[derive(Serialize, Deserialize)]
struct ProvenanceJ {
    wprof_version: String,
    host: String,
    kernel: String,
    started_unix: u64,
    duration_s: f64,
    pids: Vec<u32>,
    #[serde(default)]
    follow_forks: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    forked: Vec<u32>,
    command: Option<Vec<String>>,
    profile_name: String,
    profile_origin: String,
    profile_hash: String,
    objects: Vec<ObjectJ>,
    end_reason: String,
    // Absent in runs recorded before `--aggregate`: those aggregated per event.
    #[serde(default)]
    aggregation: AggregationJ,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    probes_live_fraction: Option<f64>,
}

/// Where the calls were aggregated: `"event"` or `"kernel"` (`--aggregate`).
#[derive(Serialize, Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum AggregationJ {
    #[default]
    Event,
    Kernel,
}

#[derive(Serialize, Deserialize)]
struct ObjectJ {
    path: String,
    build_id: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct PhaseJ {
    id: u32,
    name: String,
    role: Option<String>,
    object: String,
    symbols: Vec<String>,
    return_mode: String,
    entry_cost: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    entry_offset: u64,
    exit_sites: u32,
    status: String,
    entries: u64,
    returns: u64,
    unmatched_returns: u64,
    overflow: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    outside_under: u64,
    probe_pair_ns: f64,
    #[serde(default)]
    probe_own_ns: f64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Serialize, Deserialize)]
struct CountersJ {
    events: u64,
    lost_spans: u64,
    lost_node_defs: u64,
    orphan_spans: u64,
    unmatched_returns: u64,
    abandoned: u64,
    open_at_end: u64,
    overflow: u64,
    no_stack: u64,
    #[serde(default)]
    skipped_spans: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    unwinds: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    unwind_restored: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    unwind_rearmed: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    unwind_foreign: u64,
}

#[derive(Serialize, Deserialize)]
struct ProbeCostJ {
    model: String,
    hits: u64,
    added_ns: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    calibration: Option<CalibrationJ>,
}

/// The host calibration (docs/json.md, "probe_cost.calibration").
#[derive(Serialize, Deserialize)]
struct CalibrationJ {
    calls: u64,
    rounds: u32,
    elapsed_ms: f64,
    load_end: f64,
    contended: bool,
    classes: Vec<ClassCostJ>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    at_end: Vec<ClassCostJ>,
}

#[derive(Serialize, Deserialize)]
struct ClassCostJ {
    entry: String,
    return_mode: String,
    pair_ns: f64,
    own_ns: f64,
    error_ns: f64,
}

impl From<&Calibration> for CalibrationJ {
    fn from(c: &Calibration) -> Self {
        CalibrationJ {
            calls: c.calls,
            rounds: c.rounds,
            elapsed_ms: c.elapsed_ms,
            load_end: c.load_end,
            contended: c.contended,
            classes: c.classes.iter().map(ClassCostJ::from).collect(),
            at_end: c.at_end.iter().map(ClassCostJ::from).collect(),
        }
    }
}

impl From<&ClassCost> for ClassCostJ {
    fn from(k: &ClassCost) -> Self {
        ClassCostJ {
            entry: crate::model::class_name(k.entry).to_string(),
            return_mode: k.return_mode().to_string(),
            pair_ns: k.pair_ns,
            own_ns: k.own_ns,
            error_ns: k.error_ns,
        }
    }
}

impl ClassCostJ {
    fn into_class(self) -> Result<ClassCost> {
        Ok(ClassCost {
            entry: crate::model::class_from_name(&self.entry)
                .ok_or_else(|| anyhow!("calibration: unknown entry class {:?}", self.entry))?,
            uretprobe: match self.return_mode.as_str() {
                "uretprobe" => true,
                "ret-sites" => false,
                other => bail!("calibration: unknown return mode {other:?}"),
            },
            pair_ns: self.pair_ns,
            own_ns: self.own_ns,
            error_ns: self.error_ns,
        })
    }
}

impl CalibrationJ {
    fn into_calibration(self) -> Result<Calibration> {
        let classes = |v: Vec<ClassCostJ>| -> Result<Vec<ClassCost>> {
            v.into_iter().map(ClassCostJ::into_class).collect()
        };
        Ok(Calibration {
            classes: classes(self.classes)?,
            calls: self.calls,
            rounds: self.rounds,
            elapsed_ms: self.elapsed_ms,
            load_end: self.load_end,
            contended: self.contended,
            at_end: classes(self.at_end)?,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct TreeJ {
    roots: Vec<NodeJ>,
    orphan_spans: u64,
    events: u64,
}

impl From<&PhaseTree> for TreeJ {
    fn from(t: &PhaseTree) -> Self {
        TreeJ {
            roots: t.roots.iter().map(NodeJ::from).collect(),
            orphan_spans: t.orphan_spans,
            events: t.events,
        }
    }
}

impl TreeJ {
    fn into_tree(self) -> Result<PhaseTree> {
        let mut roots = Vec::with_capacity(self.roots.len());
        for r in self.roots {
            roots.push(r.into_node(&mut Vec::new())?);
        }
        Ok(PhaseTree {
            roots,
            orphan_spans: self.orphan_spans,
            events: self.events,
        })
    }
}

/// Units of a `unit` phase: `{"name": "rows", "total": 200000}`.
#[derive(Serialize, Deserialize)]
struct UnitsJ {
    name: String,
    total: u64,
}

#[derive(Serialize, Deserialize)]
struct NodeJ {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    phase: u32,
    role: Option<String>,
    count: u64,
    total_ns: u64,
    self_ns: u64,
    #[serde(flatten)]
    derived: DerivedJ,
    lost: u64,
    abandoned: u64,
    open: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    off_cpu_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    units: Option<UnitsJ>,
    histogram: HistJ,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    corrected: Option<CorrectedJ>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sampled: Option<SampledJ>,
    children: Vec<NodeJ>,
}

/// What CPU sampling found for a sampled phase (docs/json.md, "sampled").
#[derive(Serialize, Deserialize)]
struct SampledJ {
    samples: u64,
    parent_samples: u64,
    /// Derived (samples / parent_samples); ignored on reading.
    #[serde(default)]
    share: f64,
    share_low: f64,
    share_high: f64,
}

/// A node's calls with the probes' time taken out (docs/json.md, "corrected").
#[derive(Serialize, Deserialize)]
struct CorrectedJ {
    total_ns: u64,
    self_ns: u64,
    probe_ns: u64,
    probe_hits: u64,
    error_ns: u64,
    #[serde(flatten)]
    derived: DerivedJ,
    histogram: HistJ,
}

/// Figures derived from a count, a total and a histogram, for readers without an HDR
/// library; ignored on reading.
#[derive(Serialize, Deserialize, Default)]
struct DerivedJ {
    #[serde(default)]
    mean_ns: f64,
    #[serde(default)]
    p50_ns: u64,
    #[serde(default)]
    p90_ns: u64,
    #[serde(default)]
    p99_ns: u64,
    #[serde(default)]
    max_ns: u64,
}

impl DerivedJ {
    fn of(count: u64, total_ns: u64, h: &LatencyHistogram) -> DerivedJ {
        DerivedJ {
            mean_ns: if count == 0 {
                0.0
            } else {
                total_ns as f64 / count as f64
            },
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
        }
    }
}

impl HistJ {
    fn of(h: &LatencyHistogram) -> HistJ {
        HistJ {
            unit: "ns".to_string(),
            significant_digits: h.sigfig(),
            buckets: h
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct HistJ {
    unit: String,
    significant_digits: u8,
    /// `[value_ns, count]`: value is the highest value equivalent to the bucket.
    buckets: Vec<(u64, u64)>,
}

impl From<&Provenance> for ProvenanceJ {
    fn from(p: &Provenance) -> Self {
        ProvenanceJ {
            wprof_version: p.wprof_version.clone(),
            host: p.host.clone(),
            kernel: p.kernel.clone(),
            started_unix: p.started_unix,
            duration_s: p.duration_s,
            pids: p.pids.clone(),
            follow_forks: p.follow_forks,
            forked: p.forked.clone(),
            command: p.command.clone(),
            profile_name: p.profile_name.clone(),
            profile_origin: p.profile_origin.clone(),
            profile_hash: p.profile_hash.clone(),
            objects: p
                .objects
                .iter()
                .map(|o| ObjectJ {
                    path: o.path.clone(),
                    build_id: o.build_id.clone(),
                })
                .collect(),
            end_reason: p.end_reason.clone(),
            aggregation: match p.aggregation {
                crate::model::Aggregation::Event => AggregationJ::Event,
                crate::model::Aggregation::Kernel => AggregationJ::Kernel,
            },
            probes_live_fraction: p.probes_live_fraction,
        }
    }
}

impl From<ProvenanceJ> for Provenance {
    fn from(p: ProvenanceJ) -> Self {
        Provenance {
            wprof_version: p.wprof_version,
            host: p.host,
            kernel: p.kernel,
            started_unix: p.started_unix,
            duration_s: p.duration_s,
            pids: p.pids,
            follow_forks: p.follow_forks,
            forked: p.forked,
            command: p.command,
            profile_name: p.profile_name,
            profile_origin: p.profile_origin,
            profile_hash: p.profile_hash,
            objects: p
                .objects
                .into_iter()
                .map(|o| ObjectInfo {
                    path: o.path,
                    build_id: o.build_id,
                })
                .collect(),
            end_reason: p.end_reason,
            aggregation: match p.aggregation {
                AggregationJ::Event => crate::model::Aggregation::Event,
                AggregationJ::Kernel => crate::model::Aggregation::Kernel,
            },
            probes_live_fraction: p.probes_live_fraction,
        }
    }
}

impl From<&PhaseInfo> for PhaseJ {
    fn from(p: &PhaseInfo) -> Self {
        PhaseJ {
            id: p.id,
            name: p.name.clone(),
            role: p.role.clone(),
            object: p.object.clone(),
            symbols: p.symbols.clone(),
            return_mode: p.return_mode.clone(),
            entry_cost: p.entry_cost.clone(),
            entry_offset: p.entry_offset,
            exit_sites: p.exit_sites,
            status: p.status.clone(),
            entries: p.entries,
            returns: p.returns,
            unmatched_returns: p.unmatched_returns,
            overflow: p.overflow,
            outside_under: p.outside_under,
            probe_pair_ns: p.probe_pair_ns,
            probe_own_ns: p.probe_own_ns,
        }
    }
}

impl From<PhaseJ> for PhaseInfo {
    fn from(p: PhaseJ) -> Self {
        PhaseInfo {
            id: p.id,
            name: p.name,
            role: p.role,
            object: p.object,
            symbols: p.symbols,
            return_mode: p.return_mode,
            entry_cost: p.entry_cost,
            entry_offset: p.entry_offset,
            exit_sites: p.exit_sites,
            status: p.status,
            entries: p.entries,
            returns: p.returns,
            unmatched_returns: p.unmatched_returns,
            overflow: p.overflow,
            outside_under: p.outside_under,
            probe_pair_ns: p.probe_pair_ns,
            probe_own_ns: p.probe_own_ns,
        }
    }
}

impl From<&Counters> for CountersJ {
    fn from(c: &Counters) -> Self {
        CountersJ {
            events: c.events,
            lost_spans: c.lost_spans,
            lost_node_defs: c.lost_node_defs,
            orphan_spans: c.orphan_spans,
            unmatched_returns: c.unmatched_returns,
            abandoned: c.abandoned,
            open_at_end: c.open_at_end,
            overflow: c.overflow,
            no_stack: c.no_stack,
            skipped_spans: c.skipped_spans,
            unwinds: c.unwind.unwinds,
            unwind_restored: c.unwind.restored,
            unwind_rearmed: c.unwind.rearmed,
            unwind_foreign: c.unwind.foreign,
        }
    }
}

impl From<CountersJ> for Counters {
    fn from(c: CountersJ) -> Self {
        Counters {
            events: c.events,
            lost_spans: c.lost_spans,
            lost_node_defs: c.lost_node_defs,
            orphan_spans: c.orphan_spans,
            unmatched_returns: c.unmatched_returns,
            abandoned: c.abandoned,
            open_at_end: c.open_at_end,
            overflow: c.overflow,
            no_stack: c.no_stack,
            skipped_spans: c.skipped_spans,
            unwind: crate::model::UnwindCounters {
                unwinds: c.unwinds,
                restored: c.unwind_restored,
                rearmed: c.unwind_rearmed,
                foreign: c.unwind_foreign,
            },
        }
    }
}

impl From<&ProbeCost> for ProbeCostJ {
    fn from(p: &ProbeCost) -> Self {
        ProbeCostJ {
            model: p.model.clone(),
            hits: p.hits,
            added_ns: p.added_ns,
            calibration: p.calibration.as_ref().map(CalibrationJ::from),
        }
    }
}

impl ProbeCostJ {
    fn into_probe_cost(self) -> Result<ProbeCost> {
        Ok(ProbeCost {
            model: self.model,
            hits: self.hits,
            added_ns: self.added_ns,
            calibration: self
                .calibration
                .map(CalibrationJ::into_calibration)
                .transpose()?,
        })
    }
}

impl From<&TreeNode> for NodeJ {
    fn from(n: &TreeNode) -> Self {
        let h = &n.hist;
        NodeJ {
            name: n.name.clone(),
            key: n.key.clone(),
            phase: n.phase,
            role: n.role.clone(),
            count: n.count,
            total_ns: n.total_ns,
            self_ns: n.self_ns,
            derived: DerivedJ::of(n.count, n.total_ns, h),
            lost: n.lost,
            abandoned: n.abandoned,
            open: n.open,
            off_cpu_ns: n.off_cpu_ns,
            units: n.units.as_ref().map(|u| UnitsJ {
                name: u.name.clone(),
                total: u.total,
            }),
            histogram: HistJ::of(h),
            corrected: n.corrected.as_ref().map(|c| CorrectedJ {
                total_ns: c.total_ns,
                self_ns: c.self_ns,
                probe_ns: c.probe_ns,
                probe_hits: c.probe_hits,
                error_ns: c.error_ns,
                derived: DerivedJ::of(n.count, c.total_ns, &c.hist),
                histogram: HistJ::of(&c.hist),
            }),
            sampled: n.sampled.map(|s| SampledJ {
                samples: s.samples,
                parent_samples: s.parent_samples,
                share: s.share(),
                share_low: s.share_low,
                share_high: s.share_high,
            }),
            children: n.children.iter().map(NodeJ::from).collect(),
        }
    }
}

impl NodeJ {
    /// The tree node back; `path` (names from the root) locates errors.
    fn into_node(self, path: &mut Vec<String>) -> Result<TreeNode> {
        path.push(self.name.clone());
        let hist = self
            .histogram
            .into_histogram()
            .with_context(|| format!("node {}", path.join(" > ")))?;
        let corrected = match self.corrected {
            Some(c) => Some(Corrected {
                total_ns: c.total_ns,
                self_ns: c.self_ns,
                probe_ns: c.probe_ns,
                probe_hits: c.probe_hits,
                error_ns: c.error_ns,
                hist: c
                    .histogram
                    .into_histogram()
                    .with_context(|| format!("corrected figures of node {}", path.join(" > ")))?,
            }),
            None => None,
        };
        let mut children = Vec::with_capacity(self.children.len());
        for c in self.children {
            children.push(c.into_node(path)?);
        }
        path.pop();
        Ok(TreeNode {
            phase: self.phase,
            name: self.name,
            key: self.key,
            role: self.role,
            count: self.count,
            total_ns: self.total_ns,
            self_ns: self.self_ns,
            hist,
            lost: self.lost,
            abandoned: self.abandoned,
            open: self.open,
            off_cpu_ns: self.off_cpu_ns,
            corrected,
            sampled: self.sampled.map(|s| SampledShare {
                samples: s.samples,
                parent_samples: s.parent_samples,
                share_low: s.share_low,
                share_high: s.share_high,
            }),
            units: self.units.map(|u| Units {
                name: u.name,
                total: u.total,
            }),
            children,
        })
    }
}

impl HistJ {
    fn into_histogram(self) -> Result<LatencyHistogram> {
        if self.unit != "ns" {
            bail!(
                "histogram unit is {:?}; schema v1 histograms are in \"ns\"",
                self.unit
            );
        }
        // Same range as the histograms aggregate builds; only the precision comes from the file.
        let template = new_histogram();
        let mut h: LatencyHistogram =
            Histogram::new_with_bounds(template.low(), template.high(), self.significant_digits)
                .map_err(|e| {
                    anyhow!(
                        "histogram significant_digits {} is not usable: {e:?}",
                        self.significant_digits
                    )
                })?;
        for (value, count) in self.buckets {
            h.record_n(value, count).map_err(|_| {
                anyhow!("histogram bucket {value} ns is outside the histogram range (0 ns..1 h)")
            })?;
        }
        Ok(h)
    }
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
