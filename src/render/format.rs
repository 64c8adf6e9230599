//! One home for the output formats of a run: [`Format`] names them (for `report --format`
//! and the session's output files alike) and [`write`] renders a run in one of them.
//!
//! In: a [`Run`] and a [`Format`]. Out: the bytes of that output. A new format is a variant
//! here, an arm in [`write`] and its renderer in a module of its own.

use std::io::Write;

use anyhow::Result;

use super::StackKind;
use crate::model::Run;

/// An output format of a run: what `report --format` names and the session's output files
/// are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The text tree.
    Tree,
    /// The JSON run (schema v1).
    Json,
    /// Folded stacks of self time (ns).
    Folded,
    /// A phase flamegraph.
    Svg,
    /// One CSV row per root call.
    Csv,
    /// Chrome/Perfetto trace JSON.
    Trace,
    /// CPU samples as folded stacks (runs recorded with --cpu-sample).
    CpuFolded,
    /// The CPU flamegraph.
    CpuSvg,
    /// Off-CPU time as folded stacks (runs recorded with --off-cpu).
    #[value(name = "offcpu-folded")]
    OffCpuFolded,
    /// The off-CPU flamegraph.
    #[value(name = "offcpu-svg")]
    OffCpuSvg,
    /// The phase tree as a gzipped pprof profile (wall ns and calls), for Pyroscope, Parca and
    /// `go tool pprof`.
    Pprof,
    /// The CPU samples by phase as a gzipped pprof profile (runs recorded with --cpu-sample).
    CpuPprof,
}

impl Format {
    /// Whether the format needs every call (the per-call table or the span log), which a run
    /// aggregated in the kernel does not have.
    pub fn needs_every_call(self) -> bool {
        matches!(self, Format::Csv | Format::Trace)
    }
}

/// Renders `run` in `format` into `w`.
pub fn write(run: &Run, format: Format, w: &mut dyn Write) -> Result<()> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, &crate::model::json::to_json(run))?;
            writeln!(w)?;
        }
        Format::Tree => {
            w.write_all(super::render_tree(run, &super::TextOptions::default()).as_bytes())?
        }
        Format::Folded => w.write_all(super::folded(&run.tree).as_bytes())?,
        Format::Svg => {
            let title = format!("wprof: {} phases (wall time)", run.provenance.profile_name);
            let mut buf = Vec::new();
            super::flamegraph_svg(&super::folded(&run.tree), &title, &mut buf)?;
            w.write_all(&buf)?;
        }
        Format::Csv => w.write_all(super::calls_csv(run).as_bytes())?,
        Format::Pprof => super::pprof::pprof(run, w)?,
        Format::Trace => {
            serde_json::to_writer(&mut *w, &super::chrome_trace(run))?;
            writeln!(w)?;
        }
        Format::CpuFolded
        | Format::CpuSvg
        | Format::CpuPprof
        | Format::OffCpuFolded
        | Format::OffCpuSvg => {
            let (profile, stack_kind, what, flag) = match format {
                Format::CpuFolded | Format::CpuSvg | Format::CpuPprof => {
                    (&run.cpu, StackKind::Cpu, "CPU samples", "--cpu-sample HZ")
                }
                _ => (&run.off_cpu, StackKind::OffCpu, "off-CPU time", "--off-cpu"),
            };
            let Some(profile) = profile else {
                return Err(crate::error::WprofError::Usage(format!(
                    "this run has no {what}: record it with {flag}"
                ))
                .into());
            };
            if format == Format::CpuPprof {
                super::pprof::cpu_pprof(run, profile, w)?;
            } else if matches!(format, Format::CpuFolded | Format::OffCpuFolded) {
                w.write_all(profile.folded().as_bytes())?;
            } else {
                let title = format!("wprof: {} — {what} by phase", run.provenance.profile_name);
                let mut buf = Vec::new();
                super::stack_flamegraph_svg(profile, stack_kind, &title, &mut buf)?;
                w.write_all(&buf)?;
            }
        }
    }
    Ok(())
}
