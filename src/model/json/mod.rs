//! The run as JSON, schema v1: the only input of `report`, `compare` and `check`.
//!
//! In: a [`Run`] (to JSON) or the text of a RUN.json (from JSON). Out: a `serde_json::Value`
//! or the [`Run`] back, exactly: histograms are written as their recorded buckets and recorded
//! again on reading, so every figure derived from a reloaded run equals the original's. The
//! model's plain records (provenance, phases, counters, probe cost) are written as they are;
//! the tree ([`tree`]) and the tables ([`tables`]) have encodings of their own (histogram
//! buckets, rows of numbers). docs/json.md describes the document and docs/json-schema-v1.json
//! validates it.

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

mod tables;
mod tree;

use tables::{CallsJ, ProcessJ, SpansJ, SplitJ, StackProfileJ};
use tree::TreeJ;

use crate::model::{
    Counters, InSituCheck, PhaseInfo, ProbeCost, Provenance, Run, StackProfile, SCHEMA_VERSION,
};

/// The run as a JSON document of schema [`SCHEMA_VERSION`].
pub fn to_json(run: &Run) -> serde_json::Value {
    let doc = Doc {
        schema_version: SCHEMA_VERSION,
        provenance: run.provenance.clone(),
        phases: run.phases.clone(),
        counters: run.counters.clone(),
        probe_cost: run.probe_cost.clone(),
        tree: TreeJ::from(&run.tree),
        calls: CallsJ::from(&run.calls),
        spans: SpansJ::from(&run.spans),
        cpu_profile: run.cpu.as_ref().map(StackProfileJ::from),
        off_cpu_profile: run.off_cpu.as_ref().map(StackProfileJ::from),
        processes: run.processes.iter().map(ProcessJ::from).collect(),
        split: run.split.as_ref().map(SplitJ::from),
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
    let processes = (doc.processes.into_iter())
        .map(ProcessJ::into_process)
        .collect::<Result<_>>()?;
    Ok(Run {
        provenance: doc.provenance,
        phases: doc.phases,
        counters: doc.counters,
        probe_cost: doc.probe_cost,
        tree: doc.tree.into_tree()?,
        calls: doc.calls.into_table()?,
        spans: doc.spans.into_log()?,
        cpu: doc.cpu_profile.map(StackProfile::from),
        off_cpu: doc.off_cpu_profile.map(StackProfile::from),
        processes,
        split: doc.split.map(SplitJ::into_split).transpose()?,
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
    provenance: Provenance,
    phases: Vec<PhaseInfo>,
    counters: Counters,
    probe_cost: ProbeCost,
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

#[cfg(test)]
mod tests;
