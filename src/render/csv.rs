//! The per-root-call CSV (being written).

use crate::model::Run;

/// One CSV row per root call.
pub fn calls_csv(_run: &Run) -> String {
    String::new()
}
