//! `wprof check` (being written).

use anyhow::Result;

use crate::args::CheckArgs;

/// Runs `wprof check`.
pub fn run(_a: CheckArgs) -> Result<i32> {
    anyhow::bail!("wprof check is not implemented yet")
}
