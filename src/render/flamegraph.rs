//! The phase flamegraph: wall time by phase path, as an interactive SVG.
//!
//! In: folded self-time stacks (see `folded.rs`) and a title. Out: an SVG written by
//! inferno, counts labelled "ns", in the [`PHASE_PALETTE`] colors. A run where no phase call
//! completed still gets a valid SVG that says so, so `--out DIR` always writes every file.

use std::io::Write;

use anyhow::Context;
use inferno::flamegraph::color::{BackgroundColor, BasicPalette, Palette};
use inferno::flamegraph::{self, Options};

/// The palette of phase (wall-time) flamegraphs. Aqua on grey keeps them apart at a glance
/// from CPU flamegraphs, which use the usual red-yellow "hot" palette.
pub const PHASE_PALETTE: Palette = Palette::Basic(BasicPalette::Aqua);

/// Writes the flamegraph of `folded` to `out`.
pub fn flamegraph_svg(folded: &str, title: &str, out: &mut impl Write) -> anyhow::Result<()> {
    if folded.lines().all(|l| l.trim().is_empty()) {
        return empty_svg(
            title,
            "no phase call completed during the run: nothing to draw",
            out,
        )
        .context("write the flamegraph SVG");
    }
    let mut opts = Options::default();
    opts.title = title.to_string();
    opts.count_name = "ns".to_string();
    opts.name_type = "Phase:".to_string();
    opts.colors = PHASE_PALETTE;
    opts.bgcolors = Some(BackgroundColor::Grey);
    // The same phase gets the same color in every graph and on every machine.
    opts.deterministic = true;
    // A phase graph has a handful of frames: keep even the narrowest, so searching for a
    // phase always finds it.
    opts.min_width = 0.0;
    flamegraph::from_lines(&mut opts, folded.lines(), out).context("draw the phase flamegraph")
}

/// A minimal SVG carrying the title and a message, for a graph with nothing to draw (inferno
/// would draw an error and fail).
pub(crate) fn empty_svg(title: &str, message: &str, out: &mut impl Write) -> std::io::Result<()> {
    write!(
        out,
        concat!(
            "<?xml version=\"1.0\" standalone=\"no\"?>\n",
            "<svg version=\"1.1\" width=\"1200\" height=\"80\" xmlns=\"http://www.w3.org/2000/svg\">\n",
            "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#f8f8f8\"/>\n",
            "<text x=\"600\" y=\"24\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"17\">{}</text>\n",
            "<text x=\"600\" y=\"56\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"12\">",
            "{}</text>\n",
            "</svg>\n"
        ),
        xml_escape(title),
        xml_escape(message)
    )
}

/// Escapes text for an SVG (XML) element or attribute.
pub(crate) fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testutil::sample_run;
    use crate::render::folded::folded;

    fn titles(svg: &str) -> Vec<String> {
        // inferno writes a DOCTYPE line.
        let opts = roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        };
        let doc = match roxmltree::Document::parse_with_options(svg, opts) {
            Ok(d) => d,
            Err(e) => panic!("SVG does not parse: {e}"),
        };
        doc.descendants()
            .filter(|n| n.has_tag_name("title"))
            .filter_map(|n| n.text().map(str::to_string))
            .collect()
    }

    #[test]
    fn svg_has_a_frame_per_phase() -> anyhow::Result<()> {
        let run = sample_run();
        let mut buf = Vec::new();
        flamegraph_svg(&folded(&run.tree), "wprof: kv phases (wall time)", &mut buf)?;
        let svg = String::from_utf8(buf)?;
        let titles = titles(&svg);
        let mut names = Vec::new();
        for r in &run.tree.roots {
            r.walk(&mut Vec::new(), &mut |_, n| names.push(n.name.clone()));
        }
        assert_eq!(names.len(), 8);
        for name in names {
            assert!(
                titles.iter().any(|t| t.starts_with(&format!("{name} ("))),
                "no frame titled {name} in {titles:?}"
            );
        }
        assert!(
            titles.iter().any(|t| t.contains(" ns")),
            "counts are not labelled ns: {titles:?}"
        );
        assert!(svg.contains("wprof: kv phases (wall time)"));
        Ok(())
    }

    use crate::render::testutil::{svg_frames as frames, SvgFrame as Frame};

    /// (name, total_ns) of every node of the sample tree; its names are unique.
    fn node_totals() -> Vec<(String, u64)> {
        let run = sample_run();
        let mut out = Vec::new();
        for r in &run.tree.roots {
            r.walk(&mut Vec::new(), &mut |_, n| {
                out.push((n.name.clone(), n.total_ns))
            });
        }
        out
    }

    fn only_frame<'a>(all: &'a [Frame], name: &str) -> &'a Frame {
        let found: Vec<&Frame> = all
            .iter()
            .filter(|f| f.title.starts_with(&format!("{name} (")))
            .collect();
        assert_eq!(found.len(), 1, "frames titled {name}: {found:?}");
        found[0]
    }

    #[test]
    fn frame_widths_are_proportional_to_node_totals() -> anyhow::Result<()> {
        let run = sample_run();
        let mut buf = Vec::new();
        flamegraph_svg(&folded(&run.tree), "phases", &mut buf)?;
        let all = frames(&String::from_utf8(buf)?);
        let totals = node_totals();
        let grand: u64 = run.tree.roots.iter().map(|r| r.total_ns).sum();
        assert!(grand > 0);
        for (name, total) in &totals {
            let f = only_frame(&all, name);
            let want_pct = 100.0 * *total as f64 / grand as f64;
            assert!(
                (f.width_pct - want_pct).abs() <= 0.05 * want_pct,
                "{name}: width {}% but total is {want_pct:.4}% of the graph",
                f.width_pct
            );
            let ratio = f.samples as f64 / *total as f64;
            assert!(
                (0.95..=1.05).contains(&ratio),
                "{name}: fg:w {} for a total of {total} ns",
                f.samples
            );
        }
        // Siblings keep their proportions: wal_sync inside wal_append.
        let sync = only_frame(&all, "wal_sync");
        let append = only_frame(&all, "wal_append");
        let want = totals
            .iter()
            .find(|(n, _)| n == "wal_sync")
            .map(|t| t.1)
            .unwrap_or(0) as f64
            / totals
                .iter()
                .find(|(n, _)| n == "wal_append")
                .map(|t| t.1)
                .unwrap_or(1) as f64;
        let got = sync.width_pct / append.width_pct;
        assert!((got / want - 1.0).abs() <= 0.05, "{got} vs {want}");
        Ok(())
    }

    #[test]
    fn folded_round_trips_through_inferno() -> anyhow::Result<()> {
        // The folded text, drawn by inferno with its defaults (no wprof options): each frame
        // holds exactly the node's total, and the whole graph the sum of the roots.
        let run = sample_run();
        let text = folded(&run.tree);
        let mut opts = Options::default();
        opts.min_width = 0.0;
        let mut buf = Vec::new();
        flamegraph::from_lines(&mut opts, text.lines(), &mut buf)?;
        let all = frames(&String::from_utf8(buf)?);
        let totals = node_totals();
        assert_eq!(
            all.len(),
            totals.len() + 1,
            "one frame per node plus all: {all:?}"
        );
        for (name, total) in &totals {
            assert_eq!(only_frame(&all, name).samples, *total, "{name}");
        }
        let grand: u64 = run.tree.roots.iter().map(|r| r.total_ns).sum();
        assert_eq!(only_frame(&all, "all").samples, grand);
        Ok(())
    }

    #[test]
    fn empty_input_still_gives_a_valid_svg() -> anyhow::Result<()> {
        let mut buf = Vec::new();
        flamegraph_svg("", "a <title> & more", &mut buf)?;
        let svg = String::from_utf8(buf)?;
        let doc = roxmltree::Document::parse(&svg)?;
        let text: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(text.contains(&"a <title> & more"), "{text:?}");
        Ok(())
    }
}
