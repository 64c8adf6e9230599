//! Differential CPU and off-CPU flamegraphs of two runs (`compare --cpu-flamegraph`,
//! `--off-cpu-flamegraph`).
//!
//! In: two runs that both carry the profile. Out: a differential SVG whose widths are the new
//! run's and whose colors are the change of each frame's inclusive time. Both profiles are put
//! in the unit of the phase diff, **ns per root call**: CPU samples become CPU time (a sample
//! stands for 1/HZ s of its CPU), off-CPU weights are ns already, and each is divided by the
//! run's root calls, so a run that lasted longer or sampled faster is not drawn redder.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use crate::error::WprofError;
use crate::model::{Run, StackProfile};

/// Which profile to compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackDiffKind {
    /// `--cpu-sample` samples.
    Cpu,
    /// `--off-cpu` time.
    OffCpu,
}

impl StackDiffKind {
    fn profile(self, run: &Run) -> Option<&StackProfile> {
        match self {
            StackDiffKind::Cpu => run.cpu.as_ref(),
            StackDiffKind::OffCpu => run.off_cpu.as_ref(),
        }
    }

    fn what(self) -> (&'static str, &'static str) {
        match self {
            StackDiffKind::Cpu => ("CPU samples", "--cpu-sample HZ"),
            StackDiffKind::OffCpu => ("off-CPU time", "--off-cpu"),
        }
    }
}

/// The profile as folded stacks in ns per root call (rounded; stacks that round to 0 dropped).
pub fn folded_per_root_call(profile: &StackProfile, root_calls: u64) -> String {
    let ns_per_unit = match profile.frequency_hz {
        Some(hz) if profile.unit == "samples" && hz > 0 => 1e9 / hz as f64,
        _ => 1.0,
    };
    let mut out = String::new();
    for s in &profile.stacks {
        let v = (s.weight as f64 * ns_per_unit / root_calls.max(1) as f64).round() as u64;
        if v > 0 {
            let _ = writeln!(out, "{} {v}", s.stack);
        }
    }
    out
}

fn root_calls(run: &Run) -> u64 {
    run.tree.roots.iter().map(|r| r.count).sum()
}

/// Checks that both runs carry the profile, with a message saying how to record it.
pub fn check(kind: StackDiffKind, base: (&Path, &Run), new: (&Path, &Run)) -> Result<()> {
    let (what, flag) = kind.what();
    for (path, run) in [base, new] {
        if kind.profile(run).is_none() {
            return Err(WprofError::Usage(format!(
                "{} has no {what}: record both runs with {flag}",
                path.display()
            ))
            .into());
        }
    }
    Ok(())
}

/// Writes the differential flamegraph of one profile kind to `out_path`.
pub fn write(
    kind: StackDiffKind,
    base: &Run,
    new: &Run,
    title: &str,
    out_path: &Path,
) -> Result<()> {
    let folded = |run: &Run| {
        kind.profile(run)
            .map(|p| folded_per_root_call(p, root_calls(run)))
            .unwrap_or_default()
    };
    let mut svg = Vec::new();
    crate::render::differential_svg(&folded(base), &folded(new), title, "ns", &mut svg)?;
    crate::output_file::write(out_path, &svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FoldedStack;

    #[test]
    fn samples_become_ns_per_root_call() {
        let p = StackProfile {
            unit: "samples".into(),
            frequency_hz: Some(100),
            records: 30,
            lost: 0,
            stacks: vec![
                FoldedStack {
                    stack: "w;main;spin".into(),
                    weight: 20,
                },
                FoldedStack {
                    stack: "w;main;tiny".into(),
                    weight: 0,
                },
            ],
        };
        // 20 samples at 100 Hz = 200 ms over 4 root calls = 50 ms each.
        assert_eq!(folded_per_root_call(&p, 4), "w;main;spin 50000000\n");
        let off = StackProfile {
            unit: "ns".into(),
            frequency_hz: None,
            ..p
        };
        assert_eq!(folded_per_root_call(&off, 4), "w;main;spin 5\n");
    }
}
