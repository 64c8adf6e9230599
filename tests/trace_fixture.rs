//! Privileged tests: real probes on the C and C++ fixtures, whose phase times are commanded.
//! Each test checks its capability first (see common::bpf_available) and they run one at a
//! time (common::bpf_lock).

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

/// `wprof record --target fixture --json DIR/run.json [extra] -- PROGRAM ARGS`.
fn record(dir: &Path, extra: &[&str], program: &str, args: &[&str]) -> (Output, serde_json::Value) {
    record_fixture(&dir.join("run.json"), extra, program, args, &[])
}

/// A `key=value` field of the fixture's ground-truth line.
fn truth(out: &Output, key: &str) -> u64 {
    truth_field(out, "fixture:", key)
}

/// A node's median call, corrected for the probes' time (what the tree shows): a parent's raw
/// median also holds its children's probe hits (7 under write_record, ~2 µs each here, so
/// raw sits 5% above the commanded time whenever the host's probes run slow).
fn p50_us(n: &serde_json::Value) -> f64 {
    let corrected = &n["corrected"]["p50_ns"];
    corrected.as_f64().expect("corrected p50_ns") / 1000.0
}

fn assert_within(what: &str, got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= want * tol,
        "{what}: {got:.1} µs, want {want:.1} µs ± {:.0}%",
        tol * 100.0
    );
}

fn assert_shape(run: &serde_json::Value, calls: u64) {
    assert_exact_paths(run, WRITE_PATH, calls);
    let kids = |p: &[&str]| node(run, p)["children"].as_array().map(Vec::len);
    assert_eq!(kids(&["write_record"]), Some(3), "{}", summary(run));
    assert_eq!(kids(&["write_record", "persist_block"]), Some(2));
    assert_eq!(kids(&["write_record", "wal_append"]), Some(1));
}

#[test]
fn tree_shape_is_exact_and_long_phases_match_commanded_times() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let (out, run) = record(dir.path(), &[], "writepath", &["--iterations", "400"]);
    assert_shape(&run, 400);
    assert_eq!(truth(&out, "writes"), 400);
    // C phases, no stacks: neither the run's entries nor the calibrated ones read their
    // return address.
    assert_eq!(run["probe_cost"]["calibration"]["return_addresses"], false);

    // Phases of 100 µs and more: the median call within 5% of the commanded time (self times
    // on the command line: write 3, encode 5, persist 1 + compress 20 + flush 100, wal 2 +
    // sync 150). The median, because a spinning phase preempted on a busy CI machine is a real
    // but rare long call that says nothing about the probes.
    assert_within(
        "flush_block",
        p50_us(node(
            &run,
            &["write_record", "persist_block", "flush_block"],
        )),
        100.0,
        0.05,
    );
    assert_within(
        "wal_sync",
        p50_us(node(&run, &["write_record", "wal_append", "wal_sync"])),
        150.0,
        0.05,
    );
    assert_within(
        "wal_append",
        p50_us(node(&run, &["write_record", "wal_append"])),
        152.0,
        0.05,
    );
    assert_within(
        "persist_block",
        p50_us(node(&run, &["write_record", "persist_block"])),
        121.0,
        0.05,
    );
    assert_within(
        "write_record",
        p50_us(node(&run, &["write_record"])),
        281.0,
        0.05,
    );

    // And within 5% of the same program untraced.
    let plain =
        common::run(std::process::Command::new(fixture("writepath")).args(["--iterations", "400"]));
    assert!(plain.status.success());
    let untraced_us = truth(&plain, "write_p50_ns") as f64 / 1000.0;
    assert_within(
        "write_record vs untraced (medians)",
        p50_us(node(&run, &["write_record"])),
        untraced_us,
        0.05,
    );

    // Every row says what share of its measured time was the probes' (taken out of the shown
    // times): a few % for the 5 µs phase (its own ~0.5 µs), under 1% for the 100 µs one, which
    // is never flagged.
    let tree = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        tree.lines()
            .find(|l| l.contains(name) && l.contains("n="))
            .unwrap_or_else(|| panic!("no {name} row:\n{tree}"))
            .to_string()
    };
    let share = |row: &str| -> f64 {
        let after = row.split("probe").nth(1).unwrap_or_else(|| panic!("{row}"));
        let pct = after.trim_start().split('%').next().unwrap_or("");
        pct.trim()
            .trim_start_matches('<')
            .parse()
            .unwrap_or_else(|_| panic!("{row}"))
    };
    let enc = line("encode_record");
    assert!(enc.contains(" raw "), "{enc}");
    assert!((3.0..=30.0).contains(&share(&enc)), "{enc}");
    assert!(
        !line("flush_block").contains('!'),
        "{}",
        line("flush_block")
    );
}

#[test]
fn cet_build_with_endbr64_keeps_the_shape_and_its_probe_time_is_corrected() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let (out, run) = record(dir.path(), &[], "writepath-cet", &["--iterations", "100"]);
    assert_shape(&run, 100);
    let phases = run["phases"].as_array().expect("phases");
    let encode = phases
        .iter()
        .find(|p| p["name"] == "encode_record")
        .expect("encode phase");
    // The entry probe goes past the endbr64, on push %rbp (tests/endbr.rs).
    assert_eq!(
        encode["entry_cost"], "emulated",
        "entry probed after endbr64: {encode}"
    );
    // What the probes still add is measured and taken out: the 5 µs phase's corrected
    // figures say how much (a few hundred ns of its ~5.6 µs), and the tree shows both.
    let enc = node(&run, &["write_record", "encode_record"]);
    let probe = u(&enc["corrected"], "probe_ns") as f64 / u(enc, "total_ns") as f64;
    assert!((0.01..0.5).contains(&probe), "probe share {probe}: {enc}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = stdout
        .lines()
        .find(|l| l.contains("encode_record"))
        .unwrap_or("");
    assert!(row.contains(" raw ") && row.contains("probe"), "{stdout}");
}

#[test]
fn four_threads_give_the_same_shape_with_counts_summed() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let (_, run) = record(
        dir.path(),
        &[],
        "writepath",
        &["--iterations", "100", "--threads", "4"],
    );
    assert_shape(&run, 400);
}

#[test]
fn per_point_links_of_older_kernels_give_the_same_tree() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let json = dir.path().join("run.json");
    let out = common::run(
        wprof()
            .env("WPROF_PER_POINT_LINKS", "1")
            .args(["record", "--target", "fixture", "--json"])
            .arg(&json)
            .arg("--")
            .arg(fixture("writepath"))
            .args(["--iterations", "100", "--threads", "2"]),
    );
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("(18 links"),
        "one link per point expected: {stderr}"
    );
    assert_shape(&read_json(&json), 200);
}

fn recursion_chain(run: &serde_json::Value) -> Vec<(u64, u64)> {
    let mut n = node(run, &["write_record"]);
    let mut levels = Vec::new();
    while let Some(c) = n["children"]
        .as_array()
        .and_then(|k| k.iter().find(|c| c["name"] == "recurse_phase"))
    {
        levels.push((u(c, "count"), u(c, "abandoned")));
        n = c;
    }
    levels
}

#[test]
fn recursion_100_deep_is_exact_with_ret_sites_and_reported_with_uretprobes() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let args = ["--iterations", "20", "--recurse-depth", "100"];
    let (_, run) = record(dir.path(), &[], "writepath", &args);
    let levels = recursion_chain(&run);
    assert_eq!(levels.len(), 100, "{}", summary(&run));
    assert!(levels.iter().all(|&(n, a)| n == 20 && a == 0), "{levels:?}");

    // Forced uretprobes: the kernel keeps 64 pending returns per thread, so the deepest calls
    // lose theirs. wprof must say so (abandoned), never fold them in.
    let (_, run) = record(dir.path(), &["--return", "uretprobe"], "writepath", &args);
    let levels = recursion_chain(&run);
    assert_eq!(levels.len(), 100, "{}", summary(&run));
    assert!(levels.iter().all(|&(n, a)| n + a == 20), "{levels:?}");
    assert!(
        levels.iter().any(|&(_, a)| a > 0),
        "no loss reported beyond 64 levels: {levels:?}"
    );
    assert!(u(&run["counters"], "abandoned") > 0);
}

#[test]
fn a_phase_left_by_longjmp_is_counted_as_abandoned() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    for mode in ["uretprobe", "ret-sites"] {
        let dir = tempdir();
        let (out, run) = record(
            dir.path(),
            &["--return", mode],
            "writepath",
            &["--iterations", "200", "--longjmp-every", "4"],
        );
        let jumps = truth(&out, "longjmps");
        assert_eq!(jumps, 50);
        let risky = node(&run, &["write_record", "risky_step"]);
        assert_eq!(
            (u(risky, "count"), u(risky, "abandoned")),
            (150, 50),
            "{mode}\n{}",
            summary(&run)
        );
        assert_eq!(u(node(&run, &["write_record"]), "count"), 200, "{mode}");
        // The calls write_record makes after the longjmp are its own children, not nested in
        // the abandoned risky_step (same stack slot, another call site).
        assert_eq!(
            risky["children"].as_array().map(Vec::len),
            Some(0),
            "{mode}\n{}",
            summary(&run)
        );
        for phase in ["encode_record", "persist_block", "wal_append"] {
            let n = node(&run, &["write_record", phase]);
            assert_eq!(u(n, "count"), 200, "{mode} {phase}\n{}", summary(&run));
        }
    }
}

#[test]
fn cxx_library_loaded_after_attach_survives_exceptions_through_probed_frames() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let json = dir.path().join("run.json");
    let mut driver = spawn_waiting(
        &fixture("cxx-driver"),
        &["--calls", "200", "--throw-every", "10"],
    );
    let w = start_attach("fixture-cxx", driver.id(), &json);
    release(&mut driver);
    let d = driver.wait_with_output().expect("driver");
    let stdout = String::from_utf8_lossy(&d.stdout);
    assert!(
        d.status.success(),
        "the traced C++ program died: {:?}\n{stdout}\n{}",
        d.status,
        String::from_utf8_lossy(&d.stderr)
    );
    assert!(
        stdout.contains("cxx-fixture: calls=200 ok=180 exceptions=20"),
        "{stdout}"
    );
    let o = w.wait_with_output().expect("wprof");
    assert!(o.status.success(), "{}", text(&o));
    let run = read_json(&json);
    let wb = node(&run, &["write_batch"]);
    assert_eq!(
        (u(wb, "count"), u(wb, "abandoned")),
        (180, 20),
        "{}",
        summary(&run)
    );
    let enc = node(&run, &["write_batch", "encode_block"]);
    assert_eq!(
        (u(enc, "count"), u(enc, "abandoned")),
        (180, 20),
        "{}",
        summary(&run)
    );
    let modes: Vec<_> = run["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["return_mode"].clone())
        .collect();
    let want = cxx_default_return_mode();
    assert!(
        modes.iter().all(|m| m == want),
        "C++ phases must default to {want}: {modes:?}"
    );
}

#[test]
fn a_tiny_ring_buffer_loses_events_visibly_and_the_tree_stays_consistent() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let zero = ZERO_SPINS;
    let mut args = vec!["--iterations", "20000", "--threads", "2"];
    args.extend(zero);
    let (out, run) = record(dir.path(), &["--ring-size", "4K"], "writepath", &args);
    let lost = u(&run["counters"], "lost_spans");
    assert!(
        lost > 0,
        "a 4 KiB ring did not overflow; the test proves nothing:\n{}",
        summary(&run)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("warning: {lost} calls were not timed"))
            && stderr.contains("the 4 KiB ring buffer was full"),
        "the storm is said on stderr:\n{stderr}"
    );
    let mut lost_rows = 0;
    for path in WRITE_PATH {
        let n = node(&run, path);
        assert_eq!(
            u(n, "count") + u(n, "lost"),
            40_000,
            "{path:?}\n{}",
            summary(&run)
        );
        assert_eq!(u(n, "abandoned"), 0, "{path:?}");
        lost_rows += u(n, "lost");
    }
    assert_eq!(
        lost_rows, lost,
        "every lost span is a counted row under its node"
    );
}

#[test]
fn interval_snapshots_and_skip_bound_a_long_run() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let snaps = dir.path().join("s.jsonl");
    let snaps_arg = snaps.display().to_string();
    let (_, run) = record(
        dir.path(),
        &[
            "--interval",
            "100ms",
            "--skip",
            "100ms",
            "--snapshots",
            &snaps_arg,
        ],
        "writepath",
        &["--iterations", "1500"],
    );
    // One JSON line per interval plus a final one; counts only grow.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&snaps)
        .expect("snapshots")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert!(
        lines.len() >= 3,
        "{} snapshot lines for a ~0.45 s run",
        lines.len()
    );
    let writes = |l: &serde_json::Value| {
        l["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["path"] == "write_record")
            .map_or(0, |n| u(n, "count"))
    };
    assert!(lines.windows(2).all(|w| writes(&w[0]) <= writes(&w[1])));
    let skipped = u(&run["counters"], "skipped_spans");
    let kept = u(node(&run, &["write_record"]), "count");
    assert!(skipped > 0, "nothing skipped in the first 100 ms");
    assert!(kept < 1500 && kept > 500, "kept {kept} of 1500 writes");
    // Every phase of a write is either kept or skipped with it (one boundary call per thread).
    let enc = u(node(&run, &["write_record", "encode_record"]), "count");
    assert!(enc.abs_diff(kept) <= 1, "encode {enc} vs write {kept}");
    assert_eq!(run["calls"]["total_calls"], kept);
}

#[test]
fn a_library_dlopened_from_an_unknown_path_is_attached_when_it_is_mapped() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    // A copy of the C++ library under a name and in a directory no search path holds: wprof
    // cannot find it at attach time, only when the driver dlopens it.
    let hidden = dir.path().join("private-plugins");
    std::fs::create_dir(&hidden).unwrap();
    let lib = hidden.join("libhidden_store.so");
    std::fs::copy(fixture("libwpfx_store.so"), &lib).unwrap();
    let profile = dir.path().join("hidden.toml");
    std::fs::write(
        &profile,
        r#"name = "hidden"
object = "libhidden_store.so"
[[phase]]
name = "write_batch"
symbol = "wpfx::Store::write_batch"
optional = true
"#,
    )
    .unwrap();
    let json = dir.path().join("run.json");
    // 60 calls of ~5 ms: the late attach (~10 ms after the dlopen here) misses a few of them.
    let mut driver = spawn_waiting(
        &fixture("cxx-driver"),
        &[
            "--calls",
            "60",
            "--throw-every",
            "0",
            "--spin-us",
            "5000",
            "--lib",
            lib.to_str().unwrap(),
        ],
    );
    let w = start_attach(profile.to_str().unwrap(), driver.id(), &json);
    release(&mut driver);
    let d = driver.wait_with_output().expect("driver");
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    let o = w.wait_with_output().expect("wprof");
    assert!(o.status.success(), "{}", text(&o));
    let run = read_json(&json);
    let phase = &run["phases"][0];
    assert_eq!(phase["status"], "attached", "{phase}");
    assert!(
        phase["object"]
            .as_str()
            .unwrap_or("")
            .ends_with("private-plugins/libhidden_store.so"),
        "{phase}"
    );
    let n = u(node(&run, &["write_batch"]), "count");
    assert!((50..=60).contains(&n), "{n} of 60 calls seen");
}

#[test]
fn a_tail_call_out_of_a_phase_nests_with_uretprobes_and_closes_it_with_ret_sites() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let profile = dir.path().join("tailcall.toml");
    std::fs::write(
        &profile,
        "name = \"tailcall\"\nobject = \"exe\"\n\
         [[phase]]\nname = \"start\"\nsymbol = \"start\"\n\
         [[phase]]\nname = \"finish\"\nsymbol = \"finish\"\n\
         [[phase]]\nname = \"other\"\nsymbol = \"other\"\n",
    )
    .unwrap();
    for mode in ["uretprobe", "ret-sites"] {
        let json = dir.path().join(format!("{mode}.json"));
        let out = common::run(
            wprof()
                .args([
                    "record",
                    "--target",
                    profile.to_str().unwrap(),
                    "--return",
                    mode,
                ])
                .arg("--json")
                .arg(&json)
                .arg("--")
                .arg(fixture("tailcall"))
                .arg("300"),
        );
        assert!(out.status.success(), "{}", text(&out));
        let run = read_json(&json);
        let sum = summary(&run);
        if mode == "uretprobe" {
            // start's return slot holds the kernel's trampoline when finish is entered by
            // `jmp`: finish is inside start, whose uretprobe fires when finish returns.
            assert_eq!(u(node(&run, &["start"]), "count"), 300, "{sum}");
            assert_eq!(u(node(&run, &["start", "finish"]), "count"), 300, "{sum}");
        } else {
            // The tail JMP is one of start's exit sites: start ends there, finish follows it.
            assert_eq!(u(node(&run, &["start"]), "count"), 300, "{sum}");
            assert_eq!(u(node(&run, &["finish"]), "count"), 300, "{sum}");
        }
        // other, called from main's own call site next, is never nested in start.
        assert_eq!(u(node(&run, &["other"]), "count"), 300, "{mode}: {sum}");
        let c = &run["counters"];
        assert_eq!(
            (u(c, "abandoned"), u(c, "unmatched_returns")),
            (0, 0),
            "{mode}: {sum}"
        );
    }
}
