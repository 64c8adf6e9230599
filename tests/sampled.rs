//! Sampled phases (`measure = "sample"`): a phase too short to probe is measured by the CPU
//! samples whose stacks hold it, inside its probed parent. Ground truth: the C fixture's
//! commanded phase times, and a run of the same program with every phase probed.
//! Privileged: real probes and perf events.

mod common;

use common::*;

/// The fixture profile with every phase but the root sampled.
fn root_only_profile(dir: &std::path::Path) -> std::path::PathBuf {
    let builtin = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("attach-profiles/fixture.toml"),
    )
    .expect("read fixture.toml");
    let mut text = String::new();
    for (i, block) in builtin.split("[[phase]]").enumerate() {
        let skip = ["recurse_phase", "risky_step"]
            .iter()
            .any(|n| block.contains(&format!("symbol = \"{n}\"")));
        if skip {
            continue;
        }
        if i > 0 {
            text.push_str("[[phase]]");
        }
        if i > 0 && !block.contains("symbol = \"write_record\"") {
            text.push_str(&block.replacen("\nrole", "\nmeasure = \"sample\"\nrole", 1));
        } else {
            text.push_str(block);
        }
    }
    let path = dir.join("sampled.toml");
    std::fs::write(&path, text).expect("write profile");
    path
}

/// (path, share of the root's time) of every node below the root.
fn shares(run: &serde_json::Value) -> Vec<(String, f64)> {
    fn walk(n: &serde_json::Value, path: &str, root: f64, out: &mut Vec<(String, f64)>) {
        for c in n["children"].as_array().expect("children") {
            let p = format!("{path}/{}", c["name"].as_str().expect("name"));
            let total = c["corrected"]["total_ns"]
                .as_u64()
                .or(c["total_ns"].as_u64())
                .expect("total");
            out.push((p.clone(), total as f64 / root));
            walk(c, &p, root, out);
        }
    }
    let root = node(run, &["write_record"]);
    let total = root["corrected"]["total_ns"].as_u64().expect("corrected") as f64;
    let mut out = Vec::new();
    walk(root, "write_record", total, &mut out);
    out
}

#[test]
fn sampled_phases_take_their_probed_share_in_place_without_a_count() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let record = |profile: &str, json: &std::path::Path| {
        let out = run(wprof()
            .args([
                "record",
                "--target",
                profile,
                "--cpu-sample",
                "4999",
                "--json",
            ])
            .arg(json)
            .arg("--")
            .arg(fixture("writepath"))
            .args(["--iterations", "5000"]));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        read_json(json)
    };
    let profile = root_only_profile(dir.path());
    // The structure must hold in every pair of runs, the shares (within 5 points of the probed
    // ones, issue 20's bound) in one of three: on these shared 2-vCPU VMs one pair in four
    // came out 5.4-6.4 points apart on persist_block or flush_block (the sampler's calibration
    // said 28 µs a sample that day, against 12-19 µs before), the next pair within 2.
    let mut misses = Vec::new();
    let mut sampled = serde_json::Value::Null;
    for _attempt in 0..3 {
        let probed = record("fixture", &dir.path().join("probed.json"));
        sampled = record(
            profile.to_str().expect("utf-8"),
            &dir.path().join("sampled.json"),
        );
        // The shape is the probed run's; the root's count is exact; sampled nodes count nothing.
        assert_eq!(u(node(&sampled, &["write_record"]), "count"), 5000);
        let want = shares(&probed);
        let got = shares(&sampled);
        let paths = |v: &[(String, f64)]| {
            let mut p: Vec<String> = v.iter().map(|(p, _)| p.clone()).collect();
            p.sort();
            p
        };
        assert_eq!(paths(&got), paths(&want), "{}", summary(&sampled));
        let mut missed = Vec::new();
        for (path, share) in &got {
            let parts: Vec<&str> = path.split('/').collect();
            let n = node(&sampled, &parts);
            assert_eq!(u(n, "count"), 0, "{path}");
            let s = &n["sampled"];
            let (lo, hi) = (
                s["share_low"].as_f64().unwrap(),
                s["share_high"].as_f64().unwrap(),
            );
            assert!(
                lo <= hi && u(s, "samples") <= u(s, "parent_samples"),
                "{path}: {s}"
            );
            let probed_share = want.iter().find(|(p, _)| p == path).expect("same path").1;
            if (share - probed_share).abs() >= 0.05 {
                missed.push(format!(
                    "{path}: sampled {:.1}% of the write, probed {:.1}%",
                    share * 100.0,
                    probed_share * 100.0
                ));
            }
        }
        if missed.is_empty() {
            break;
        }
        misses.push(missed.join("; "));
    }
    assert!(
        misses.len() < 3,
        "three pairs of runs missed:\n{}",
        misses.join("\n")
    );
    // The 20 µs compress phase, 7% of a 281 µs write: found, and not the whole parent.
    let compress = node(
        &sampled,
        &["write_record", "persist_block", "compress_block"],
    );
    assert!(u(&compress["sampled"], "samples") > 50, "{compress}");
    // The phases table says how each phase was measured.
    let status = |name: &str| {
        sampled["phases"]
            .as_array()
            .expect("phases")
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["status"].as_str().unwrap_or("").to_string())
            .expect("phase")
    };
    assert_eq!(status("compress_block"), "sampled");
    assert_eq!(status("write_record"), "attached");
    // The text tree marks the estimates.
    let report = run(wprof()
        .args(["report"])
        .arg(dir.path().join("sampled.json")));
    let tree = String::from_utf8_lossy(&report.stdout);
    assert!(
        tree.contains("~compress_block") && tree.contains("n=~") && tree.contains("sampled: "),
        "{tree}"
    );
}

#[test]
fn a_sampled_phase_that_captures_per_call_figures_is_a_profile_error() {
    let dir = tempdir();
    let p = dir.path().join("bad.toml");
    std::fs::write(
        &p,
        "name = \"bad\"\nobject = \"exe\"\n[[phase]]\nname = \"a\"\nsymbol = \"main\"\n\
         [[phase]]\nname = \"b\"\nsymbol = \"f\"\nmeasure = \"sample\"\narg = 0\nunit = \"rows\"\n",
    )
    .expect("write");
    let out = run(wprof()
        .args(["probes", "--target"])
        .arg(&p)
        .args(["--binary", "/bin/true"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("measure = \"sample\" needs no arg"),
        "{}",
        text(&out)
    );
}
