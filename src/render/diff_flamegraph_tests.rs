//! Tests of the differential flamegraph: inclusive deltas, colors, vanished stacks, tooltips.

use super::*;

/// A drawn frame: its title and fill, from the SVG parsed as XML.
#[derive(Debug, Clone)]
struct Drawn {
    title: String,
    rgb: (u8, u8, u8),
    w: u64,
}

fn draw(base: &str, new: &str, count_name: &str) -> String {
    let mut buf = Vec::new();
    if let Err(e) = differential_svg(base, new, "diff", count_name, &mut buf) {
        panic!("differential_svg failed: {e:#}");
    }
    match String::from_utf8(buf) {
        Ok(s) => s,
        Err(e) => panic!("not UTF-8: {e}"),
    }
}

fn parse_rgb(fill: &str) -> (u8, u8, u8) {
    let inner = fill
        .strip_prefix("rgb(")
        .and_then(|f| f.strip_suffix(')'))
        .unwrap_or_else(|| panic!("fill {fill:?} is not rgb()"));
    let v: Vec<u8> = inner
        .split(',')
        .map(|c| c.trim().parse().unwrap_or_else(|e| panic!("{fill}: {e}")))
        .collect();
    assert_eq!(v.len(), 3, "{fill}");
    (v[0], v[1], v[2])
}

/// Every frame of the SVG (which must parse as XML).
fn frames(svg: &str) -> Vec<Drawn> {
    crate::render::testutil::svg_frames(svg)
        .into_iter()
        .map(|f| Drawn {
            rgb: parse_rgb(&f.fill),
            title: f.title,
            w: f.samples,
        })
        .collect()
}

fn frame(all: &[Drawn], name: &str) -> Drawn {
    let mut found = all
        .iter()
        .filter(|f| f.title.starts_with(&format!("{name} (")));
    let f = found
        .next()
        .unwrap_or_else(|| panic!("no frame {name} in {all:#?}"))
        .clone();
    assert!(found.next().is_none(), "two frames {name} in {all:#?}");
    f
}

const NEUTRAL: (u8, u8, u8) = (250, 250, 250);

fn is_red(c: (u8, u8, u8)) -> bool {
    c.0 == 255 && c.1 == c.2 && c.1 < 250
}

fn is_blue(c: (u8, u8, u8)) -> bool {
    c.2 == 255 && c.0 == c.1 && c.0 < 250
}

/// Saturation: how far the other two channels are from white.
fn intensity(c: (u8, u8, u8)) -> u8 {
    255 - c.0.min(c.1).min(c.2)
}

#[test]
fn inner_frames_take_the_change_of_their_inclusive_time() {
    // Only the leaf b grew (+50%); a and root have no self time of their own, yet their
    // inclusive time grew by as much. c is unchanged; root;d shrank.
    let base = "root;a;b 100\nroot;c 200\nroot;d 80\n";
    let new = "root;a;b 150\nroot;c 200\nroot;d 60\n";
    let all = frames(&draw(base, new, "ns"));
    let b = frame(&all, "b");
    let a = frame(&all, "a");
    let root = frame(&all, "root");
    let c = frame(&all, "c");
    let d = frame(&all, "d");
    assert!(is_red(b.rgb), "b {b:?}");
    assert!(is_red(a.rgb), "a is not red: {a:?}");
    assert!(is_red(root.rgb), "root is not red: {root:?}");
    assert_eq!(c.rgb, NEUTRAL, "c {c:?}");
    assert!(is_blue(d.rgb), "d is not blue: {d:?}");
    // |delta|: a = b = 50, root = 30, d = 20, c = 0.
    assert_eq!(intensity(a.rgb), intensity(b.rgb));
    assert!(intensity(b.rgb) > intensity(root.rgb), "{b:?} {root:?}");
    assert!(intensity(root.rgb) > intensity(d.rgb), "{root:?} {d:?}");
    assert!(intensity(d.rgb) > intensity(c.rgb), "{d:?} {c:?}");
    // Widths are the new run's, titles carry both runs and the change.
    assert_eq!((root.w, a.w, b.w, c.w, d.w), (410, 150, 150, 200, 60));
    assert_eq!(b.title, "b (new 150 ns, base 100 ns, +50.0%)");
    assert_eq!(a.title, "a (new 150 ns, base 100 ns, +50.0%)");
    assert_eq!(c.title, "c (new 200 ns, base 200 ns, +0.0%)");
    assert_eq!(d.title, "d (new 60 ns, base 80 ns, -25.0%)");
    assert_eq!(
        frame(&all, "all").title,
        "all (new 410 ns, base 380 ns, +7.9%)"
    );
}

#[test]
fn counts_are_raw_and_durations_formatted() {
    let all = frames(&draw("main;f 1000\n", "main;f 1500\n", "samples"));
    assert_eq!(
        frame(&all, "f").title,
        "f (new 1500 samples, base 1000 samples, +50.0%)"
    );
    let all = frames(&draw("w;s 120000\n", "w;s 150200\n", "ns"));
    assert_eq!(
        frame(&all, "s").title,
        "s (new 150.2 µs, base 120.0 µs, +25.2%)"
    );
}

#[test]
fn same_name_under_different_parents_gets_its_own_totals() {
    // `x` under p grew, `x` under q shrank: paths, not names, are compared.
    let base = "r;p;x 100\nr;q;x 100\nr;q 50\n";
    let new = "r;p;x 180\nr;q;x 40\nr;q 50\n";
    let all = frames(&draw(base, new, "ns"));
    let xs: Vec<&Drawn> = all.iter().filter(|f| f.title.starts_with("x (")).collect();
    assert_eq!(xs.len(), 2, "{all:#?}");
    let grew = xs.iter().find(|f| f.w == 180).expect("x of width 180");
    let shrank = xs.iter().find(|f| f.w == 40).expect("x of width 40");
    assert!(is_red(grew.rgb), "{grew:?}");
    assert!(is_blue(shrank.rgb), "{shrank:?}");
    assert!(is_red(frame(&all, "p").rgb));
    assert!(is_blue(frame(&all, "q").rgb));
    // r: +80 - 60 = +20.
    assert_eq!(frame(&all, "r").title, "r (new 270 ns, base 250 ns, +8.0%)");
}

#[test]
fn vanished_and_new_stacks() {
    let base = "r;a 100\nr;gone;deep 40\nr;b 10\n";
    let new = "r;a 100\nr;b 10\nr;fresh 30\n";
    let svg = draw(base, new, "ns");
    let all = frames(&svg);
    let gone = frame(&all, "gone");
    assert_eq!(gone.w, 0);
    assert!(is_blue(gone.rgb), "{gone:?}");
    assert_eq!(gone.title, "gone (new 0 ns, base 40 ns, -100.0%)");
    let deep = frame(&all, "deep");
    assert_eq!((deep.w, deep.rgb), (0, gone.rgb));
    let fresh = frame(&all, "fresh");
    assert!(is_red(fresh.rgb), "{fresh:?}");
    assert_eq!(fresh.title, "fresh (new 30 ns, base 0 ns, only in new)");
    assert_eq!(frame(&all, "a").rgb, NEUTRAL);
    assert!(
        svg.contains("1 stack only in base (40 ns) drawn with zero width"),
        "subtitle lacks the vanished total"
    );
}

#[test]
fn every_frame_is_recolored() {
    // Names sorting around ';' split inferno's frames ("a;b" and "a;b-x" and "a;b;c"):
    // every piece still resolves and no frame keeps inferno's palette.
    let base = "a;b 5\na;b-x 3\na;b;c 1\na;b;c;d 7\nz 2\n";
    let new = "a;b 6\na;b-x 3\na;b;c 2\na;b;c;d 9\nz 2\n";
    let all = frames(&draw(base, new, "ns"));
    for f in &all {
        assert!(
            f.title.contains(" (new ") && f.title.contains(", base "),
            "not rewritten: {f:?}"
        );
        assert!(
            f.rgb == NEUTRAL || is_red(f.rgb) || is_blue(f.rgb),
            "not recolored: {f:?}"
        );
    }
    assert_eq!(frame(&all, "z").rgb, NEUTRAL);
    assert!(is_red(frame(&all, "d").rgb));
}

#[test]
fn escaping_round_trips() {
    let base = "w<&>;\"q\" 10\n";
    let new = "w<&>;\"q\" 20\n";
    let all = frames(&draw(base, new, "ns"));
    assert_eq!(
        frame(&all, "\"q\"").title,
        "\"q\" (new 20 ns, base 10 ns, +100.0%)"
    );
    assert!(is_red(frame(&all, "w<&>").rgb));
}

#[test]
fn empty_new_run_gives_a_message() {
    let svg = draw("a 10\n", "", "ns");
    let doc = roxmltree::Document::parse(&svg).expect("parses");
    let text: String = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(
        text.contains("everything vanished (base total 10 ns)"),
        "{text}"
    );
    let svg = draw("", "", "ns");
    assert!(svg.contains("nothing to draw"));
}

#[test]
fn bad_lines_are_errors() {
    let mut buf = Vec::new();
    let e = differential_svg("a;b x\n", "a 1\n", "t", "ns", &mut buf)
        .expect_err("a count that is not a number");
    assert!(format!("{e:#}").contains("line 1"), "{e:#}");
}

#[test]
fn icicle_orientation_is_detected() {
    // recolor reads the orientation from the SVG: an icicle graph (roots on top) gives the
    // same colors and titles as the default one.
    let base: HashMap<String, u64> = [("r;a;b".to_string(), 100), ("r;c".to_string(), 50)]
        .into_iter()
        .collect();
    let new: HashMap<String, u64> = [("r;a;b".to_string(), 150), ("r;c".to_string(), 50)]
        .into_iter()
        .collect();
    let trie = Trie::build(&base, &new);
    let mut results = Vec::new();
    for direction in [Direction::Straight, Direction::Inverted] {
        let mut opts = Options::default();
        opts.direction = direction;
        opts.min_width = 0.0;
        let mut svg = Vec::new();
        flamegraph::from_lines(&mut opts, ["r;a;b 150", "r;c 50"], &mut svg).expect("draw");
        let svg = recolor(
            &String::from_utf8(svg).expect("utf8"),
            &trie,
            &Unit::new("ns"),
        )
        .expect("recolor");
        let mut all: Vec<(String, (u8, u8, u8))> =
            frames(&svg).into_iter().map(|f| (f.title, f.rgb)).collect();
        all.sort();
        results.push(all);
    }
    assert_eq!(results[0], results[1]);
    let a = results[1]
        .iter()
        .find(|(t, _)| t.starts_with("a ("))
        .expect("a");
    assert!(is_red(a.1), "{a:?}");
    let c = results[1]
        .iter()
        .find(|(t, _)| t.starts_with("c ("))
        .expect("c");
    assert_eq!(c.1, NEUTRAL);
}

#[test]
fn unit_helpers() {
    assert_eq!(deannotate("foo_[k]"), "foo");
    assert_eq!(deannotate("foo_[x]"), "foo_[x]");
    assert_eq!(xml_unescape("a&amp;b&#60;&#x3e;&bogus"), "a&b<>&bogus");
    assert_eq!(fill(0.0, 10.0), "rgb(250,250,250)");
    assert_eq!(fill(10.0, 10.0), "rgb(255,100,100)");
    assert_eq!(fill(-10.0, 10.0), "rgb(100,100,255)");
    assert_eq!(fill(1e-9, 10.0), "rgb(255,249,249)");
}
