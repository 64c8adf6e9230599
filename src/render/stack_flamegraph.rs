//! CPU and off-CPU flamegraphs: the run's sampled or blocked stacks, each under the phase
//! path open at the time, drawn by inferno.
//!
//! In: a [`StackProfile`] (folded lines `phase;...;user frames;kernel frames_[k] weight`).
//! Out: an SVG in the usual "hot" palette for CPU samples and the blue "io" palette for
//! off-CPU time (the flamegraph.pl conventions), so the two never get mixed up.

use std::io::Write;

use anyhow::Context;
use inferno::flamegraph::color::{BackgroundColor, BasicPalette, Palette};
use inferno::flamegraph::{self, Options};

use super::flamegraph::empty_svg;
use crate::model::StackProfile;

/// Which stacks a profile holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackKind {
    /// CPU samples (weights are sample counts).
    Cpu,
    /// Off-CPU time (weights are ns).
    OffCpu,
}

/// Writes the flamegraph of `profile` to `out`; a profile without stacks gets a valid SVG
/// that says so.
pub fn stack_flamegraph_svg(
    profile: &StackProfile,
    kind: StackKind,
    title: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if profile.stacks.is_empty() {
        let msg = match kind {
            StackKind::Cpu => "no CPU sample of a traced thread was taken: nothing to draw",
            StackKind::OffCpu => "no traced thread went off the CPU: nothing to draw",
        };
        return empty_svg(title, msg, out).context("write the flamegraph SVG");
    }
    let mut opts = Options::default();
    opts.title = title.to_string();
    match kind {
        StackKind::Cpu => {
            opts.count_name = "samples".to_string();
            opts.colors = Palette::Basic(BasicPalette::Hot);
            opts.subtitle = profile.frequency_hz.map(|hz| {
                format!(
                    "{hz} Hz per CPU (software cpu-clock), {} samples",
                    profile.records
                )
            });
        }
        StackKind::OffCpu => {
            opts.count_name = "ns".to_string();
            opts.colors = Palette::Basic(BasicPalette::Io);
            opts.bgcolors = Some(BackgroundColor::Blue);
            opts.subtitle = Some(format!(
                "time off the CPU, by phase and the stack where the thread blocked ({} switches)",
                profile.records
            ));
        }
    }
    opts.deterministic = true;
    let folded = profile.folded();
    flamegraph::from_lines(&mut opts, folded.lines(), out).context("draw the flamegraph")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FoldedStack;

    fn profile(stacks: &[(&str, u64)]) -> StackProfile {
        StackProfile {
            unit: "samples".into(),
            frequency_hz: Some(99),
            records: stacks.iter().map(|s| s.1).sum(),
            lost: 0,
            stacks: stacks
                .iter()
                .map(|(s, w)| FoldedStack {
                    stack: s.to_string(),
                    weight: *w,
                })
                .collect(),
        }
    }

    /// (title text, fg:w) of every frame.
    fn frames(svg: &str) -> Vec<(String, u64)> {
        crate::render::testutil::svg_frames(svg)
            .into_iter()
            .map(|f| (f.title, f.samples))
            .collect()
    }

    #[test]
    fn cpu_graph_has_phase_prefixed_frames_with_sample_widths() {
        let p = profile(&[
            ("write;compress;main;compress_block;spin_ns", 30),
            ("write;flush;main;flush_block;spin_ns", 70),
        ]);
        let mut svg = Vec::new();
        stack_flamegraph_svg(&p, StackKind::Cpu, "cpu", &mut svg).unwrap();
        let f = frames(std::str::from_utf8(&svg).unwrap());
        let width = |prefix: &str| {
            f.iter()
                .find(|(t, _)| t.starts_with(prefix))
                .map(|x| x.1)
                .unwrap_or_else(|| panic!("no frame {prefix} in {f:?}"))
        };
        assert_eq!(width("write ("), 100);
        assert_eq!(width("flush ("), 70);
        assert_eq!(width("compress_block ("), 30);
    }

    #[test]
    fn empty_profile_still_gives_a_valid_svg() {
        let mut svg = Vec::new();
        stack_flamegraph_svg(&profile(&[]), StackKind::OffCpu, "off", &mut svg).unwrap();
        let text = String::from_utf8(svg).unwrap();
        assert!(text.contains("no traced thread went off the CPU"));
        roxmltree::Document::parse(&text).unwrap();
    }
}
