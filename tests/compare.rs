//! `wprof compare` and `report --tail/--first` on real runs of the writepath fixture (and, for
//! bad input, on files that are not runs).

mod common;

use std::path::{Path, PathBuf};

use common::{bpf_available, bpf_lock, fixture, run, svg_frames, tempdir, text, wprof};

const COMPRESS: &str = "write_record/persist_block/compress_block";
const FLUSH: &str = "write_record/persist_block/flush_block";

/// Records the fixture with `target` and the fixture args into `out`.
fn record(target: &str, out: &Path, args: &[&str]) {
    let prog = fixture("writepath");
    let o = run(wprof()
        .args(["record", "-q", "--target", target, "--json"])
        .arg(out)
        .arg("--")
        .arg(&prog)
        .args(args));
    assert!(o.status.success(), "record failed: {}", text(&o));
}

/// Fast runs: every phase but the two under test short.
fn args(compress: &str, flush: &str) -> Vec<String> {
    [
        "--iterations",
        "400",
        "--compress-us",
        compress,
        "--flush-us",
        flush,
        "--sync-us",
        "10",
        "--encode-us",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn rec(dir: &Path, name: &str, target: &str, a: &[String]) -> PathBuf {
    let p = dir.join(name);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    record(target, &p, &a);
    p
}

fn compare(base: &Path, new: &Path, extra: &[&str]) -> (std::process::Output, serde_json::Value) {
    let dir = tempdir();
    let j = dir.path().join("cmp.json");
    let o = run(wprof()
        .arg("compare")
        .arg(base)
        .arg(new)
        .arg("--json")
        .arg(&j)
        .args(extra));
    let v = std::fs::read_to_string(&j)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    (o, v)
}

fn node<'a>(v: &'a serde_json::Value, path: &str) -> &'a serde_json::Value {
    v["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["path"] == path)
        .unwrap_or_else(|| panic!("no node {path} in {v:#}"))
}

#[test]
fn slowdown_is_significant_and_noise_is_not_stably() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    for i in 0..3 {
        let base = rec(
            dir.path(),
            &format!("base{i}.json"),
            "fixture",
            &args("20", "100"),
        );
        let new = rec(
            dir.path(),
            &format!("new{i}.json"),
            "fixture",
            &args("24", "101"),
        );
        let (o, v) = compare(&base, &new, &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let c = node(&v, COMPRESS);
        assert_eq!(
            c["significant"],
            true,
            "round {i}: 20% not flagged: {c}\n{}",
            text(&o)
        );
        let d = c["delta_mean"].as_f64().unwrap();
        assert!((0.12..0.28).contains(&d), "round {i}: delta {d}");
        let f = node(&v, FLUSH);
        assert_eq!(
            f["significant"],
            false,
            "round {i}: 1% flagged: {f}\n{}",
            text(&o)
        );
        assert!(String::from_utf8_lossy(&o.stdout).contains("compress_block"));
    }
}

#[test]
fn fail_if_thresholds_exit_codes_and_outputs() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let base = rec(dir.path(), "base.json", "fixture", &args("20", "100"));
    // +40%: far from both thresholds below, even when a busy host preempts the spinning phases.
    let new = rec(dir.path(), "new.json", "fixture", &args("28", "100"));

    let expr = format!("{COMPRESS}.mean > +10%");
    let (o, v) = compare(&base, &new, &["--fail-if", &expr]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert_eq!(v["failed"][0], expr.as_str());
    assert!(String::from_utf8_lossy(&o.stdout).contains("FAILED"));

    // Neither crossed: the mean (bulk, as Δmean) rose ~40%, the median root call ~5%. Not
    // p99: a busy host preempting 1% of either run's calls moves it past any bound.
    let loose = format!("{COMPRESS}.mean > +100%");
    let (o, v) = compare(
        &base,
        &new,
        &["--fail-if", &loose, "--fail-if", "total.p50 > +50%"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(v["failed"].as_array().unwrap().len(), 0);
    assert_eq!(v["by"], "phase");

    // Differential folded file: "stack base new" per line.
    let folded = dir.path().join("diff.folded");
    let o = run(wprof()
        .arg("compare")
        .arg(&base)
        .arg(&new)
        .arg("--folded-diff")
        .arg(&folded)
        .args(["--tail", "p95"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let f = std::fs::read_to_string(&folded).unwrap();
    let line = f
        .lines()
        .find(|l| l.starts_with("write_record;persist_block;compress_block "))
        .unwrap_or_else(|| panic!("no compress line in\n{f}"));
    let nums: Vec<u64> = line
        .split(' ')
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(nums.len(), 2, "{line}");
    assert!(nums[1] > nums[0], "{line}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Tail split at p95"), "{out}");

    // report --tail / --first on the same run.
    let o = run(wprof().arg("report").arg(&new).args(["--tail", "p90"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Tail split at p90"), "{out}");
    assert!(out.contains("flush_block"), "{out}");
    let o = run(wprof().arg("report").arg(&new).args(["--first", "5"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("First 5 root calls"));
    let o = run(wprof().arg("report").arg(&new).args(["--tail", "p200"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

const RENAMED: &str = r#"
name = "fixture-renamed"
description = "the fixture's functions under other phase names, same roles"
object = "exe"

[[phase]]
name = "put"
symbol = "write_record"
role = "insert"

[[phase]]
name = "serialize"
symbol = "encode_record"
role = "encode"

[[phase]]
name = "store"
symbol = "persist_block"
role = "io"

[[phase]]
name = "squeeze"
symbol = "compress_block"
role = "encode"

[[phase]]
name = "writeout"
symbol = "flush_block"
role = "io"

[[phase]]
name = "log"
symbol = "wal_append"
role = "wal"

[[phase]]
name = "log_sync"
symbol = "wal_sync"
role = "wal"
"#;

#[test]
fn by_role_lines_up_two_profiles() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let toml = dir.path().join("renamed.toml");
    std::fs::write(&toml, RENAMED).unwrap();
    let base = rec(dir.path(), "base.json", "fixture", &args("20", "100"));
    let new = rec(
        dir.path(),
        "new.json",
        toml.to_str().unwrap(),
        &args("24", "100"),
    );

    // By phase, nothing lines up.
    let (o, _) = compare(&base, &new, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no phase path in common"), "{err}");
    assert!(err.contains("--by role"), "{err}");

    let (o, v) = compare(&base, &new, &["--by", "role"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(v["by"], "role");
    let c = node(&v, "insert/io/encode");
    assert_eq!(c["base"]["count"], 400, "{c}");
    assert_eq!(c["new"]["count"], 400, "{c}");
    assert_eq!(c["significant"], true, "{c}");
    let w = node(&v, "insert/wal/wal");
    assert!(w["new"]["count"].as_u64().unwrap() == 400, "{w}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("compress_block | squeeze"), "{out}");
}

/// A synthetic run JSON with one root `name` of `n` calls of `ns` each.
fn synthetic(name: &str, n: u64, ns: u64, build_id: &str) -> String {
    use wprof::model::TreeNode;
    use wprof::model::{ObjectInfo, Run};
    let mut root = TreeNode::empty(0, name.to_string(), None);
    root.count = n;
    root.total_ns = n * ns;
    root.self_ns = n * ns;
    for _ in 0..n {
        root.hist.record(ns).unwrap();
    }
    let mut r = Run::default();
    r.tree.roots.push(root);
    r.provenance.objects.push(ObjectInfo {
        path: "/bin/x".into(),
        build_id: Some(build_id.into()),
    });
    serde_json::to_string(&wprof::model::json::to_json(&r)).unwrap()
}

fn expect_usage(o: &std::process::Output, needle: &str) {
    assert_eq!(o.status.code(), Some(2), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(needle), "stderr lacks {needle:?}: {}", text(o));
}

#[test]
fn bad_input_is_a_usage_error() {
    let dir = tempdir();
    let p = |n: &str| dir.path().join(n);
    let good = synthetic("write_record", 100, 1000, "aa");
    std::fs::write(p("good.json"), &good).unwrap();
    std::fs::write(p("trunc.json"), &good[..good.len() / 2]).unwrap();
    std::fs::write(
        p("other.json"),
        r#"{"traceEvents": [], "displayTimeUnit": "ns"}"#,
    )
    .unwrap();
    std::fs::write(p("disjoint.json"), synthetic("scan", 100, 1000, "aa")).unwrap();
    std::fs::write(
        p("rebuilt.json"),
        synthetic("write_record", 100, 1000, "bb"),
    )
    .unwrap();
    let cmp = |a: &str, b: &str, extra: &[&str]| {
        run(wprof().arg("compare").arg(p(a)).arg(p(b)).args(extra))
    };

    expect_usage(
        &cmp("good.json", "trunc.json", &[]),
        "trunc.json is not a wprof run",
    );
    expect_usage(
        &cmp("other.json", "good.json", &[]),
        "other.json is not a wprof run",
    );
    expect_usage(&cmp("good.json", "missing.json", &[]), "cannot read");
    expect_usage(
        &cmp("good.json", "good.json", &["--fail-if", "total.p98 > 10%"]),
        "--fail-if 'total.p98 > 10%'",
    );
    expect_usage(
        &cmp(
            "good.json",
            "good.json",
            &["--fail-if", "total.mean >> 10%"],
        ),
        "--fail-if 'total.mean >> 10%'",
    );
    expect_usage(
        &cmp(
            "good.json",
            "good.json",
            &["--fail-if", "nowhere.mean > 10%"],
        ),
        "no node nowhere",
    );
    expect_usage(
        &cmp("good.json", "disjoint.json", &[]),
        "no phase path in common",
    );
    expect_usage(
        &cmp("good.json", "good.json", &["--min-effect", "lots"]),
        "--min-effect",
    );
    expect_usage(
        &cmp("good.json", "good.json", &["--tail", "p0"]),
        "--tail 'p0'",
    );

    // Identical runs: fine, nothing significant; a rebuilt binary gets a warning.
    let o = cmp(
        "good.json",
        "rebuilt.json",
        &["--fail-if", "total.mean > +1%"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("build id aa") && err.contains("bb"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("All 1 thresholds passed"));

    // report --tail on a run without per-call rows says so.
    let o = run(wprof()
        .arg("report")
        .arg(p("good.json"))
        .args(["--tail", "p95"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("no per-call table"));
}

/// The frames of an SVG flamegraph: (title, fill).
fn titles_and_fills(path: &Path) -> Vec<(String, String)> {
    svg_frames(path)
        .into_iter()
        .map(|f| (f.title, f.fill))
        .collect()
}

/// The fill of the frame titled `name (...)`, as (r, g, b).
fn fill_of(frames: &[(String, String)], name: &str) -> (u8, u8, u8) {
    let (_, fill) = frames
        .iter()
        .find(|(t, _)| t.starts_with(&format!("{name} (")))
        .unwrap_or_else(|| panic!("no frame {name} in {frames:#?}"));
    let v: Vec<u8> = fill
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .map(|c| c.parse().unwrap_or_else(|e| panic!("{fill}: {e}")))
        .collect();
    assert_eq!(v.len(), 3, "{fill}");
    (v[0], v[1], v[2])
}

/// Clearly red: full red, the other channels well below it.
fn red(c: (u8, u8, u8)) -> bool {
    c.0 == 255 && c.1 <= 200 && c.2 <= 200
}

#[test]
fn flamegraph_of_a_slowdown_is_red_up_the_stack() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    // compress_block gets 20 times slower (+380 µs per root call); the rest is unchanged.
    // The frames show mean time per root call, preemptions included: on a loaded two-core
    // host those move a phase by tens of µs per root call, so the change must dwarf that.
    let base = rec(dir.path(), "base.json", "fixture", &args("20", "100"));
    let new = rec(dir.path(), "new.json", "fixture", &args("400", "100"));
    let svg = dir.path().join("diff.svg");
    let folded = dir.path().join("diff.folded");
    let o = run(wprof()
        .arg("compare")
        .arg(&base)
        .arg(&new)
        .arg("--flamegraph")
        .arg(&svg)
        .arg("--folded-diff")
        .arg(&folded));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let frames = titles_and_fills(&svg);
    // The changed phase, and its ancestors, whose own self time did not change.
    for name in ["compress_block", "persist_block", "write_record"] {
        let c = fill_of(&frames, name);
        assert!(red(c), "{name} is not red: {c:?}\n{frames:#?}");
    }
    let (title, _) = frames
        .iter()
        .find(|(t, _)| t.starts_with("compress_block ("))
        .expect("compress frame");
    assert!(
        title.contains("new ") && title.contains("base ") && title.contains("%)"),
        "{title}"
    );
    // --folded-diff still written alongside.
    let f = std::fs::read_to_string(&folded).unwrap();
    assert!(
        f.contains("write_record;persist_block;compress_block "),
        "{f}"
    );
}

#[test]
fn flamegraph_of_synthetic_runs() {
    let dir = tempdir();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("base.json"), synthetic("write_record", 100, 1000, "aa")).unwrap();
    std::fs::write(p("new.json"), synthetic("write_record", 100, 1500, "aa")).unwrap();
    std::fs::write(p("same.json"), synthetic("write_record", 50, 1000, "aa")).unwrap();
    let draw = |a: &str, b: &str, svg: &str| {
        let o = run(wprof()
            .arg("compare")
            .arg(p(a))
            .arg(p(b))
            .arg("--flamegraph")
            .arg(p(svg)));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        titles_and_fills(&p(svg))
    };
    let frames = draw("base.json", "new.json", "slower.svg");
    let c = fill_of(&frames, "write_record");
    assert!(red(c), "{c:?}");
    assert!(
        frames
            .iter()
            .any(|(t, _)| t == "write_record (new 1.5 µs, base 1.0 µs, +50.0%)"),
        "{frames:#?}"
    );
    let frames = draw("new.json", "base.json", "faster.svg");
    let c = fill_of(&frames, "write_record");
    assert!(c.2 == 255 && c.0 <= 200, "not blue: {c:?}");
    // Per root call: a run half as long with the same calls is unchanged.
    let frames = draw("base.json", "same.json", "same.svg");
    assert_eq!(fill_of(&frames, "write_record"), (250, 250, 250));
}

/// Records the fixture with CPU sampling and off-CPU tracking; returns the run's JSON path.
fn sampled_run(dir: &Path, name: &str, flush_us: &str) -> PathBuf {
    let json = dir.join(format!("{name}.json"));
    let o = run(wprof()
        .args(["record", "-q", "--target", "fixture", "--cpu-sample", "999"])
        .args(["--off-cpu", "--json"])
        .arg(&json)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", "150", "--flush-us", flush_us]));
    assert!(o.status.success(), "{}", text(&o));
    json
}

#[test]
fn cpu_flamegraph_of_a_slower_spin_is_red_under_its_phase() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let base = sampled_run(dir.path(), "base", "300");
    let slow = sampled_run(dir.path(), "slow", "1200");
    let (cpu_svg, off_svg) = (dir.path().join("cpu.svg"), dir.path().join("off.svg"));
    let o = run(wprof()
        .arg("compare")
        .arg(&base)
        .arg(&slow)
        .arg("--cpu-flamegraph")
        .arg(&cpu_svg)
        .arg("--off-cpu-flamegraph")
        .arg(&off_svg));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // flush_block spins 4x longer: its CPU time per root call grew, and so did its callers'.
    // Names repeat (the phase prefix, then the same functions in the user stack): look at the
    // widest frame of each, the phase frame at the bottom.
    let frames = svg_frames(&cpu_svg);
    for name in ["flush_block", "persist_block", "write_record"] {
        let widest = frames
            .iter()
            .filter(|f| f.title.starts_with(&format!("{name} (")))
            .max_by_key(|f| f.samples)
            .unwrap_or_else(|| panic!("no {name} frame"));
        let fill = fill_of(&[(widest.title.clone(), widest.fill.clone())], name);
        assert!(red(fill), "{name} is not red: {widest:?}");
    }
    // The off-CPU graph parses too (the fixture barely blocks; no color is asserted).
    titles_and_fills(&off_svg);

    // A run recorded without --cpu-sample cannot be compared that way: exit 2, and why.
    let plain = dir.path().join("plain.json");
    let o = run(wprof()
        .args(["record", "-q", "--target", "fixture", "--json"])
        .arg(&plain)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", "10"]));
    assert!(o.status.success(), "{}", text(&o));
    let o = run(wprof()
        .arg("compare")
        .arg(&base)
        .arg(&plain)
        .arg("--cpu-flamegraph")
        .arg(dir.path().join("x.svg")));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("has no CPU samples: record both runs with --cpu-sample"),
        "{}",
        text(&o)
    );
    // Nor drawn by report: exit 2, and no empty file left behind.
    let svg = dir.path().join("none.svg");
    let o = run(wprof()
        .arg("report")
        .arg(&plain)
        .args(["--format", "cpu-svg", "-o"])
        .arg(&svg));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("this run has no CPU samples"),
        "{}",
        text(&o)
    );
    assert!(!svg.exists(), "report left {}", svg.display());
}
