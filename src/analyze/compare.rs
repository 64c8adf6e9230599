//! `wprof compare` (being written).

use anyhow::Result;

use crate::args::CompareArgs;

/// Runs `wprof compare`.
pub fn run(_a: CompareArgs) -> Result<i32> {
    anyhow::bail!("wprof compare is not implemented yet")
}
