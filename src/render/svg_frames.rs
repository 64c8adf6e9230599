//! Reading back the frames of an inferno SVG, for the tests: the unit tests of render and the
//! integration tests (tests/common includes this file by path) check flamegraphs through it.
//! It uses only std and roxmltree (a dev-dependency), so both can compile it.

/// A frame of an inferno SVG: its title, fill, `fg:w` (in the graph's count unit) and width in
/// percent of the graph.
#[derive(Debug, Clone)]
pub struct SvgFrame {
    /// The tooltip, e.g. `write_record (300,000 ns, 100%)`.
    pub title: String,
    /// The rect's fill, e.g. `rgb(250,250,250)`.
    pub fill: String,
    /// `fg:w`: the frame's count (ns or samples).
    pub samples: u64,
    /// The rect's width in percent of the graph (0 when absent).
    pub width_pct: f64,
}

/// Every frame of an SVG drawn by inferno, which must parse as XML (inferno writes a DOCTYPE).
pub fn svg_frames(svg: &str) -> Vec<SvgFrame> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(svg, opts)
        .unwrap_or_else(|e| panic!("SVG does not parse: {e}"));
    doc.descendants()
        .filter(|n| n.has_tag_name("g"))
        .filter_map(|g| {
            let title = g.children().find(|c| c.has_tag_name("title"))?;
            let rect = g.children().find(|c| c.has_tag_name("rect"))?;
            // fg:w is in inferno's namespace; roxmltree names it "w".
            let samples = rect
                .attributes()
                .find(|a| a.name() == "w")
                .and_then(|a| a.value().parse().ok())?;
            let width_pct = rect
                .attribute("width")
                .and_then(|w| w.strip_suffix('%'))
                .and_then(|w| w.parse().ok())
                .unwrap_or(0.0);
            Some(SvgFrame {
                title: title.text().unwrap_or_default().to_string(),
                fill: rect.attribute("fill").unwrap_or_default().to_string(),
                samples,
                width_pct,
            })
        })
        .collect()
}
