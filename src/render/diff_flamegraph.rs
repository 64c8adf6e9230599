//! The differential flamegraph: two runs in one SVG, every frame colored by how its
//! *inclusive* time (or count) changed from the base run to the new run.
//!
//! In: two folded inputs (`stack count` lines: phase self time in ns, CPU samples, off-CPU ns,
//! ...), a title and the unit of the counts. Out: an SVG whose frame widths are the new run's
//! (the usual convention) and whose fill is red where the frame's inclusive total grew, blue
//! where it shrank and near-white where it did not change, the saturation proportional to
//! |delta| / (largest |delta| of any frame). Each frame's tooltip reads
//! `name (new 150.2 µs, base 120.0 µs, +25.2%)`.
//!
//! Why not inferno's own differential mode: given `stack base new` lines, inferno colors only
//! the frame that ends each line (`merge::flow` gives every inner frame a delta of 0), so a
//! phase whose children all grew is drawn white. inferno has no option for inclusive deltas,
//! so inferno lays the graph out from the new run's lines and this module rewrites the fill
//! and the title of every frame afterwards. Each frame's path is rebuilt from the geometry
//! (a frame at depth d+1 lies inside the x-range of its parent at depth d) and its inclusive
//! base and new totals are looked up in a prefix tree of the two inputs.
//!
//! A stack present only in the base run is passed to inferno with a count of 0: it has a
//! (zero-width, so invisible) frame that search still finds, and the subtitle gives the number
//! and total of such vanished stacks.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::ops::Range;

use anyhow::{bail, Context};
use inferno::flamegraph::color::{BackgroundColor, BasicPalette, Palette};
use inferno::flamegraph::{self, Direction, Options};

use crate::render::flamegraph::{empty_svg, xml_escape};
use crate::render::units::format_ns;

/// Writes the differential flamegraph of `base_folded` → `new_folded` to `out`.
///
/// Both inputs are folded stacks (`frame;frame;frame count`, one per line; a stack that repeats
/// is summed; blank lines and `# ` comments are skipped). `count_name` is the unit of the
/// counts: `"ns"` formats them as durations, anything else (`"samples"`) prints them raw with
/// the unit. Frame widths follow the new run; colors the change of each frame's inclusive
/// count (its own plus its descendants'), red grew, blue shrank.
pub fn differential_svg(
    base_folded: &str,
    new_folded: &str,
    title: &str,
    count_name: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let base = parse_folded(base_folded).context("read the base folded stacks")?;
    let new = parse_folded(new_folded).context("read the new folded stacks")?;
    let trie = Trie::build(&base, &new);
    let unit = Unit::new(count_name);

    // inferno input: the new run's stacks, and the base-only ones at 0 (zero width).
    let mut lines: Vec<String> = new
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    let vanished: Vec<(&String, &u64)> = base
        .iter()
        .filter(|(s, &b)| b > 0 && new.get(*s).copied().unwrap_or(0) == 0)
        .collect();
    lines.extend(vanished.iter().map(|(s, _)| format!("{s} 0")));
    let vanished_total: u64 = vanished.iter().map(|(_, &b)| b).sum();

    let new_total = trie.nodes[0].new;
    let base_total = trie.nodes[0].base;
    if new_total == 0 {
        let msg = if base_total == 0 {
            "no stacks in either run: nothing to draw".to_string()
        } else {
            format!(
                "nothing in the new run: everything vanished (base total {})",
                unit.format(base_total)
            )
        };
        return empty_svg(title, &msg, out).context("write the differential flamegraph SVG");
    }

    let mut subtitle = format!(
        "width: new run ({}); color: change of inclusive {} from base ({}), red grew, blue shrank",
        unit.format(new_total),
        unit.noun(),
        unit.format(base_total)
    );
    if !vanished.is_empty() {
        let _ = write!(
            subtitle,
            "; {} stack{} only in base ({}) drawn with zero width",
            vanished.len(),
            if vanished.len() == 1 { "" } else { "s" },
            unit.format(vanished_total)
        );
    }

    let mut opts = Options::default();
    opts.title = title.to_string();
    opts.subtitle = Some(subtitle);
    opts.count_name = count_name.to_string();
    opts.name_type = "Frame:".to_string();
    // Overwritten below; a neutral palette in case a frame cannot be resolved.
    opts.colors = Palette::Basic(BasicPalette::Aqua);
    opts.bgcolors = Some(BackgroundColor::Grey);
    opts.deterministic = true;
    // Keep every frame, zero-width ones included (vanished stacks stay searchable).
    opts.min_width = 0.0;
    // The usual orientation, roots at the bottom; `recolor` detects it from the SVG anyway.
    opts.direction = Direction::Straight;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)
        .context("draw the differential flamegraph")?;
    let svg = String::from_utf8(svg).context("inferno wrote an SVG that is not UTF-8")?;
    let svg = recolor(&svg, &trie, &unit)?;
    out.write_all(svg.as_bytes())
        .context("write the differential flamegraph SVG")
}

/// Folded stacks summed per stack. Counts with a fraction are truncated, as inferno does.
fn parse_folded(text: &str) -> anyhow::Result<HashMap<String, u64>> {
    let mut out: HashMap<String, u64> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("# ") {
            continue;
        }
        let Some((stack, count)) = line.rsplit_once(char::is_whitespace) else {
            bail!("line {}: no count in {line:?}", i + 1);
        };
        let count = count.split('.').next().unwrap_or("");
        let Ok(count) = count.parse::<u64>() else {
            bail!("line {}: no integer count in {line:?}", i + 1);
        };
        let stack = stack.trim_end();
        if stack.is_empty() {
            bail!("line {}: no stack in {line:?}", i + 1);
        }
        *out.entry(stack.to_string()).or_default() += count;
    }
    Ok(out)
}

/// How counts are shown: durations for ns, raw numbers with their unit otherwise.
struct Unit {
    name: String,
}

impl Unit {
    fn new(name: &str) -> Self {
        Unit {
            name: name.to_string(),
        }
    }

    fn is_ns(&self) -> bool {
        self.name == "ns"
    }

    fn format(&self, v: u64) -> String {
        if self.is_ns() && v >= 1000 {
            format_ns(v as f64)
        } else if self.is_ns() {
            // Integer ns: "40 ns", not format_ns's "40.0 ns" for the smallest values.
            format!("{v} ns")
        } else {
            format!("{v} {}", self.name)
        }
    }

    fn noun(&self) -> &str {
        if self.is_ns() {
            "time"
        } else {
            &self.name
        }
    }
}

/// A prefix tree of both inputs: per path, the inclusive base and new counts.
struct Trie {
    /// `nodes[0]` is the root (the "all" frame).
    nodes: Vec<TrieNode>,
}

struct TrieNode {
    base: u64,
    new: u64,
    children: HashMap<String, usize>,
}

impl Trie {
    fn build(base: &HashMap<String, u64>, new: &HashMap<String, u64>) -> Trie {
        let mut t = Trie {
            nodes: vec![TrieNode {
                base: 0,
                new: 0,
                children: HashMap::new(),
            }],
        };
        for (stack, &b) in base {
            t.add(stack, b, 0);
        }
        for (stack, &n) in new {
            t.add(stack, 0, n);
        }
        t
    }

    fn add(&mut self, stack: &str, base: u64, new: u64) {
        let mut at = 0;
        self.nodes[0].base += base;
        self.nodes[0].new += new;
        for frame in stack.split(';') {
            let next = match self.nodes[at].children.get(frame) {
                Some(&i) => i,
                None => {
                    self.nodes.push(TrieNode {
                        base: 0,
                        new: 0,
                        children: HashMap::new(),
                    });
                    let i = self.nodes.len() - 1;
                    self.nodes[at].children.insert(frame.to_string(), i);
                    i
                }
            };
            self.nodes[next].base += base;
            self.nodes[next].new += new;
            at = next;
        }
    }

    /// The children of `node` a frame titled `name` can be: inferno shows a function without
    /// its `_[k]`-style annotation.
    fn children_named<'a>(
        &'a self,
        node: usize,
        name: &'a str,
    ) -> impl Iterator<Item = usize> + 'a {
        let exact = self.nodes[node].children.get(name).copied();
        let annotated = self.nodes[node]
            .children
            .iter()
            .filter(move |(k, _)| k.as_str() != name && deannotate(k) == name)
            .map(|(_, &i)| i);
        exact.into_iter().chain(annotated)
    }
}

/// inferno's `deannotate`: `foo_[k]` (also `_[w]`, `_[i]`, `_[j]`) is shown as `foo`.
fn deannotate(f: &str) -> &str {
    if f.ends_with(']') {
        if let Some(ai) = f.rfind("_[") {
            if f[ai..].len() == 4 && "kwij".contains(&f[ai + 2..ai + 3]) {
                return &f[..ai];
            }
        }
    }
    f
}

/// One frame of inferno's SVG: its `<title>` text and `<rect>` geometry, and where in the
/// SVG text the title and the fill color are.
struct SvgFrame {
    name: String,
    y: f64,
    x: u64,
    w: u64,
    title: Range<usize>,
    fill: Range<usize>,
    depth: usize,
    node: Option<usize>,
}

/// Rewrites the fill and title of every frame of inferno's `svg` from the inclusive totals.
fn recolor(svg: &str, trie: &Trie, unit: &Unit) -> anyhow::Result<String> {
    let mut frames = svg_frames(svg)?;
    if frames.is_empty() {
        bail!("inferno's SVG has no frames");
    }
    assign_depths(&mut frames)?;
    resolve_paths(&mut frames, trie);

    let delta = |f: &SvgFrame| {
        f.node
            .map(|i| trie.nodes[i].new as f64 - trie.nodes[i].base as f64)
    };
    let max_abs = frames
        .iter()
        .filter_map(delta)
        .fold(0f64, |m, d| m.max(d.abs()));

    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    for f in &frames {
        let Some(i) = f.node else { continue };
        let (b, n) = (trie.nodes[i].base, trie.nodes[i].new);
        let name = if f.depth == 0 { "all" } else { f.name.as_str() };
        let change = if b == 0 && n == 0 {
            "no change".to_string()
        } else if b == 0 {
            "only in new".to_string()
        } else {
            format!("{:+.1}%", (n as f64 / b as f64 - 1.0) * 100.0)
        };
        let title = format!(
            "{name} (new {}, base {}, {change})",
            unit.format(n),
            unit.format(b)
        );
        edits.push((f.title.clone(), xml_escape(&title)));
        edits.push((f.fill.clone(), fill(n as f64 - b as f64, max_abs)));
    }
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = String::with_capacity(svg.len() + svg.len() / 4);
    let mut at = 0;
    for (r, text) in edits {
        out.push_str(&svg[at..r.start]);
        out.push_str(&text);
        at = r.end;
    }
    out.push_str(&svg[at..]);
    Ok(out)
}

/// The fill of a frame whose inclusive count changed by `delta`: inferno's differential
/// scale (rgb(250,250,250) for no change, down to 100 in the other two channels at the
/// largest change), red for growth, blue for shrinkage. Any change at all moves off the
/// neutral white, however little.
fn fill(delta: f64, max_abs: f64) -> String {
    if delta == 0.0 || max_abs <= 0.0 {
        return "rgb(250,250,250)".to_string();
    }
    let s = (delta.abs() / max_abs).min(1.0);
    let c = ((100.0 + 150.0 * (1.0 - s)).round() as u8).min(249);
    if delta > 0.0 {
        format!("rgb(255,{c},{c})")
    } else {
        format!("rgb({c},{c},255)")
    }
}

/// The frames of inferno's SVG, in document order: every `<title>` inside the
/// `<svg id="frames">` container, with the `<rect>` that follows it.
fn svg_frames(svg: &str) -> anyhow::Result<Vec<SvgFrame>> {
    let start = svg
        .find("id=\"frames\"")
        .context("inferno's SVG has no frames container")?;
    let mut frames = Vec::new();
    let mut at = start;
    while let Some(t) = svg[at..].find("<title>") {
        let t0 = at + t + "<title>".len();
        let t1 = t0
            + svg[t0..]
                .find("</title>")
                .context("unterminated <title> in inferno's SVG")?;
        let r0 = t1
            + svg[t1..]
                .find("<rect")
                .context("a frame without <rect> in inferno's SVG")?;
        let r1 = r0
            + svg[r0..]
                .find("/>")
                .context("unterminated <rect> in inferno's SVG")?;
        let rect = &svg[r0..r1];
        let num = |name: &str| -> anyhow::Result<f64> {
            let r = attr(rect, name).with_context(|| format!("no {name} in {rect}"))?;
            rect[r.clone()]
                .parse::<f64>()
                .with_context(|| format!("{name} is not a number in {rect}"))
        };
        let fill = attr(rect, "fill").with_context(|| format!("no fill in {rect}"))?;
        let title = xml_unescape(&svg[t0..t1]);
        // inferno's title is `name (count unit, share%[; delta%])`.
        let name = match title.rfind(" (") {
            Some(i) => title[..i].to_string(),
            None => title,
        };
        frames.push(SvgFrame {
            name,
            y: num("y")?,
            x: num("fg:x")? as u64,
            w: num("fg:w")? as u64,
            title: t0..t1,
            fill: r0 + fill.start..r0 + fill.end,
            depth: 0,
            node: None,
        });
        at = r1;
    }
    Ok(frames)
}

/// The byte range of attribute `name`'s value in the tag text `tag`.
fn attr(tag: &str, name: &str) -> Option<Range<usize>> {
    let key = format!(" {name}=\"");
    let s = tag.find(&key)? + key.len();
    let e = s + tag[s..].find('"')?;
    Some(s..e)
}

/// Depth of every frame from its row. inferno's default (and ours) draws the roots at the
/// bottom, y growing downwards, so deeper frames have smaller y; an icicle graph is the
/// other way up. The depth-0 row is the one holding the single full-width "all" frame, so the
/// orientation is read from the SVG rather than assumed.
fn assign_depths(frames: &mut [SvgFrame]) -> anyhow::Result<()> {
    let mut ys: Vec<f64> = frames.iter().map(|f| f.y).collect();
    ys.sort_by(f64::total_cmp);
    ys.dedup();
    let total = frames.iter().map(|f| f.x + f.w).max().unwrap_or(0);
    let is_all_row = |y: f64| {
        let row: Vec<&SvgFrame> = frames.iter().filter(|f| f.y == y).collect();
        row.len() == 1 && row[0].x == 0 && row[0].w == total
    };
    let (top, bottom) = (ys[0], ys[ys.len() - 1]);
    let roots_at_bottom = match (is_all_row(top), is_all_row(bottom)) {
        (false, true) => true,
        (true, false) => false,
        (true, true) => {
            // A single chain of frames: the "all" frame is titled so by inferno.
            let titled_all = |y: f64| frames.iter().any(|f| f.y == y && f.name == "all");
            !(titled_all(top) && !titled_all(bottom))
        }
        (false, false) => bail!("no full-width root frame in inferno's SVG"),
    };
    if !roots_at_bottom {
        ys.reverse();
    }
    // ys is now ordered from the deepest row to the root row.
    let n = ys.len();
    for f in frames.iter_mut() {
        let rank = ys
            .binary_search_by(|y| {
                if roots_at_bottom {
                    y.total_cmp(&f.y)
                } else {
                    f.y.total_cmp(y)
                }
            })
            .map_err(|_| anyhow::anyhow!("frame row {} not found", f.y))?;
        f.depth = n - 1 - rank;
    }
    Ok(())
}

/// Finds each frame's node in the prefix tree: the depth-0 frame is the root; a frame at
/// depth d+1 is the child, of its name, of a frame at depth d whose [x, x+w] holds its
/// [x, x+w]. Frames of one depth never overlap, so for a frame of nonzero width that parent is
/// unique; a zero-width frame (a stack only in base) sits on a boundary and may have two
/// candidates, and the one having a child of that name whose new count is the frame's width
/// (zero) wins.
fn resolve_paths(frames: &mut [SvgFrame], trie: &Trie) {
    let max_depth = frames.iter().map(|f| f.depth).max().unwrap_or(0);
    let mut by_depth: Vec<Vec<usize>> = vec![Vec::new(); max_depth + 1];
    for (i, f) in frames.iter().enumerate() {
        by_depth[f.depth].push(i);
    }
    for &i in &by_depth[0] {
        frames[i].node = Some(0);
    }
    for d in 1..=max_depth {
        let mut parents = by_depth[d - 1].clone();
        parents.sort_by_key(|&p| (frames[p].x, frames[p].x + frames[p].w));
        for &c in &by_depth[d] {
            let (cx, cend) = (frames[c].x, frames[c].x + frames[c].w);
            // Parents sorted by start are sorted by end too (they do not overlap): scan back
            // from the last one starting at or before cx while they reach cend.
            let upto = parents.partition_point(|&p| frames[p].x <= cx);
            let mut best = None;
            for &p in parents[..upto].iter().rev() {
                if frames[p].x + frames[p].w < cend {
                    break;
                }
                let Some(pn) = frames[p].node else { continue };
                for k in trie.children_named(pn, &frames[c].name) {
                    let fits = trie.nodes[k].new == frames[c].w;
                    match best {
                        None => best = Some((k, fits)),
                        Some((_, false)) if fits => best = Some((k, fits)),
                        _ => {}
                    }
                }
            }
            frames[c].node = best.map(|(k, _)| k);
        }
    }
}

/// Undoes XML escaping: the five named entities and numeric character references.
fn xml_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(end) = rest.find(';') else { break };
        let entity = &rest[1..end];
        let c = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[path = "diff_flamegraph_tests.rs"]
mod tests;
