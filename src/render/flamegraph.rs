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
        return empty_svg(title, out).context("write the flamegraph SVG");
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

/// A minimal SVG carrying the title and a message, for a run without completed calls (inferno
/// would draw an error and fail).
fn empty_svg(title: &str, out: &mut impl Write) -> std::io::Result<()> {
    write!(
        out,
        concat!(
            "<?xml version=\"1.0\" standalone=\"no\"?>\n",
            "<svg version=\"1.1\" width=\"1200\" height=\"80\" xmlns=\"http://www.w3.org/2000/svg\">\n",
            "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#f8f8f8\"/>\n",
            "<text x=\"600\" y=\"24\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"17\">{}</text>\n",
            "<text x=\"600\" y=\"56\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"12\">",
            "no phase call completed during the run: nothing to draw</text>\n",
            "</svg>\n"
        ),
        xml_escape(title)
    )
}

fn xml_escape(s: &str) -> String {
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
    use crate::render::folded::folded;
    use crate::render::testutil::sample_run;

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
