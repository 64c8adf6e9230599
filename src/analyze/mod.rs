//! Analyze: saved runs -> decisions. `compare` (two runs, node by node), `check` (hypotheses,
//! verdicts) and the tail split of `report --tail`. In: [`crate::model::Run`]s read from JSON.
//! Out: tables, JSON and exit codes. Nothing here touches BPF.

pub mod align;
pub mod check;
pub mod compare;
pub mod hypothesis;
pub mod stack_diff;
pub mod stats;
pub mod tail;
pub mod threshold;
