//! Model: the run as data, the ground floor every stage builds on or reads.
//!
//! A [`Run`] holds provenance, per-phase attach facts, counters, the probe cost and the phase
//! tree ([`PhaseTree`] of [`TreeNode`]s with HDR histograms), the per-root-call table, the span
//! log and the folded stacks. The session builds it at the end of `attach`/`record`; `--json`
//! writes it ([`json`], schema v1, docs/json.md) and `report`, `compare` and `check` read it
//! back, so everything printed about a run comes from this one value. Nothing here imports a
//! stage: resolve, attach, collect, aggregate, render and analyze all import from here.

mod calls;
mod comparison;
mod cost;
mod histogram;
mod hypothesis;
mod insitu;
pub mod json;
pub mod profile;
mod run;
mod sampled;
mod stacks;
pub mod symbol;
mod tree;

#[cfg(test)]
pub(crate) mod testutil;

pub use calls::{CallRow, CallTable, SpanLog, SpanRecord};
pub use comparison::{AlignBy, Comparison, Keyed, NodeStats, Row, ALPHA};
pub use cost::{class_from_name, class_name, ClassCost, CostClass, MEASURED, MODEL};
pub use histogram::{
    map_histogram, new_histogram, LatencyHistogram, MAX_TRACKED_NS, SIGNIFICANT_DIGITS,
};
pub use hypothesis::{Bound, Hypothesis, Kind, Outcome, Standing, Verdict};
pub use insitu::InSituCheck;
pub use run::{
    Aggregation, Calibration, Counters, DuringCalibration, InSituProbeTime, ObjectInfo, PhaseInfo,
    PreemptionBaseline, ProbeCost, ProcessRun, ProgressCheck, Provenance, RootExcess, Run,
    SourceRun, UnwindCounters, SCHEMA_VERSION,
};
pub use sampled::SampledShare;
pub use stacks::{FoldedStack, StackProfile};
pub use symbol::Language;
pub use tree::{
    keyed_name, Corrected, NodeSnapshot, PhaseTree, ProcessTree, SplitTrees, TreeNode, UnitSpec,
    Units, MAX_HELD_SPANS,
};
