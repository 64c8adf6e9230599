//! Probe-cost correction against ground truth: the fixture's short phases (1, 5, 20 µs of
//! commanded spin) measured through each probe cost class — `push %rbp` entries (emulated by
//! the kernel) and `endbr64` entries probed on the instruction itself (single-stepped, ~10 µs
//! a hit on a VM) — must come out, corrected, within 10% or 1 µs of what was commanded,
//! whichever is larger, or within the error bar wprof states for them, counted up to half the
//! probe time it took out (single-stepped probes cost 18-27 µs a call here and move by several
//! µs between runs, and wprof says so). Privileged: real probes on the C fixture.

mod common;

use std::path::Path;

use common::*;

/// Commanded self times, µs (spin loops on CLOCK_MONOTONIC: exact up to the clock read).
const COMPRESS_US: f64 = 20.0;
const PERSIST_SELF_US: f64 = 1.0;

/// `wprof record --target fixture` on `program` with encode_record spinning `encode_us`;
/// `env` for wprof. Returns the run's JSON.
fn run_fixture(
    dir: &Path,
    program: &str,
    encode_us: u32,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let json = dir.join(format!("{program}-{encode_us}.json"));
    let encode = encode_us.to_string();
    let mut cmd = wprof();
    // --off-cpu: a call preempted on a busy host is counted off the CPU, and taken out below.
    cmd.args(["record", "-q", "--off-cpu", "--target", "fixture", "--json"])
        .arg(&json)
        .arg("--")
        .arg(fixture(program))
        .args(["--iterations", "500", "--encode-us", &encode])
        .args([
            "--compress-us",
            "20",
            "--persist-us",
            "1",
            "--flush-us",
            "2",
        ])
        .args(["--write-us", "1", "--wal-us", "1", "--sync-us", "2"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd);
    assert!(out.status.success(), "wprof record failed:\n{}", text(&out));
    read_json(&json)
}

/// Whether `got` is within 10% or 1 µs of `want`, whichever is larger, or within the error
/// bar wprof states for the figure (`stated`, µs: the calibration's spread times the hits),
/// counted up to half the probe time it took out (`removed`, µs) and no further.
fn close(what: &str, got: f64, want: f64, stated: f64, removed: f64) -> Result<(), String> {
    let tol = (want * 0.10).max(1.0).max(stated.min(removed * 0.5));
    if (got - want).abs() <= tol {
        Ok(())
    } else {
        Err(format!(
            "{what}: corrected {got:.2} µs, commanded {want:.2} µs (± {tol:.2}; wprof's \
             error bar ±{stated:.2} µs on {removed:.2} µs taken out)"
        ))
    }
}

/// What must hold exactly in every run of `calls` writes: counts, and the correction's
/// bookkeeping.
fn check_structure(run: &serde_json::Value, calls: u64, label: &str) {
    assert_eq!(
        u(node(run, &["write_record"]), "count"),
        calls,
        "{}",
        summary(run)
    );
    assert!(
        run["probe_cost"]["calibration"].is_object(),
        "{label}: run not calibrated: {}",
        run["probe_cost"]
    );
    let n = node(run, &["write_record", "encode_record"]);
    let enc = &n["corrected"];
    // The correction is visible: raw figures stay in the node, and corrected = raw − probe
    // time − the probes' share of the preemptions (a busy host preempts some calls).
    assert_eq!(
        u(n, "total_ns"),
        u(enc, "total_ns") + u(enc, "probe_ns") + enc["preempted_ns"].as_u64().unwrap_or(0),
        "{label}: raw total = corrected + probe time + preemptions taken out"
    );
    assert_eq!(
        u(enc, "probe_hits"),
        2 * calls,
        "{label}: a leaf's own entry and return"
    );
    let persist = &node(run, &["write_record", "persist_block"])["corrected"];
    assert_eq!(
        u(persist, "probe_hits"),
        2 * calls * 3,
        "{label}: persist_block's own pair and its two children's"
    );
}

/// The timings against ground truth: encode_record, compress_block, and persist_block's self
/// time, whose correction is its two children's whole probe cost (from the bulk means: one
/// call of each child per persist_block call).
fn check_times(run: &serde_json::Value, encode_us: f64, label: &str) -> Result<(), String> {
    // Corrected total minus the time off the CPU still in it (a preempted spin is real time,
    // not probe cost: the correction takes out only the probes' share of each preemption,
    // `corrected.preempted_ns`, and the rest must not count here), per call, µs.
    let on_cpu_total = |path: &[&str]| {
        let n = node(run, path);
        let c = &n["corrected"];
        let off_left = u(n, "off_cpu_ns").saturating_sub(u(c, "preempted_ns"));
        (u(c, "total_ns") as f64 - off_left as f64) / 1000.0
    };
    let calls = u(node(run, &["write_record"]), "count") as f64;
    // What wprof states per call: its error bar and the probe time it took out, µs.
    let stated = |path: &[&str]| {
        let c = &node(run, path)["corrected"];
        (
            u(c, "error_ns") as f64 / 1000.0 / calls,
            u(c, "probe_ns") as f64 / 1000.0 / calls,
        )
    };
    let enc_path = ["write_record", "encode_record"];
    let comp_path = ["write_record", "persist_block", "compress_block"];
    let persist_path = ["write_record", "persist_block"];
    let enc = on_cpu_total(&enc_path) / calls;
    let comp = on_cpu_total(&comp_path) / calls;
    let flush = on_cpu_total(&["write_record", "persist_block", "flush_block"]) / calls;
    let persist = on_cpu_total(&persist_path) / calls;
    let (e, r) = stated(&enc_path);
    close(&format!("{label} encode_record"), enc, encode_us, e, r)?;
    let (e, r) = stated(&comp_path);
    close(&format!("{label} compress_block"), comp, COMPRESS_US, e, r)?;
    // persist_block's self time carries the error of its whole correction (its children's
    // probes are in it).
    let (e, r) = stated(&persist_path);
    close(
        &format!("{label} persist_block self"),
        persist - comp - flush,
        PERSIST_SELF_US,
        e,
        r,
    )
}

/// Records and checks up to five times, a few seconds apart: the structure must hold in every
/// run, the timings in one (a host's hypervisor can still steal time the guest does not see as
/// off-CPU; once, in a cold CI run, three runs in a row found single-stepped probes ~2.5 µs
/// dearer in the fixture than in the calibration, and the next CI run passed); five misses
/// are a real failure.
fn measure(
    dir: &Path,
    program: &str,
    encode_us: u32,
    env: &[(&str, &str)],
    label: &str,
) -> serde_json::Value {
    let mut misses = Vec::new();
    for attempt in 0..5 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_secs(3));
        }
        let run = run_fixture(dir, program, encode_us, env);
        check_structure(&run, 500, label);
        match check_times(&run, encode_us as f64, label) {
            Ok(()) => return run,
            Err(e) => misses.push(format!("{e}\n{}", summary(&run))),
        }
    }
    panic!("five runs missed:\n{}", misses.join("\n"));
}

#[test]
fn short_phases_corrected_within_10_percent_or_1us_for_push_entries() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    for encode_us in [1, 5] {
        measure(dir.path(), "writepath", encode_us, &[], "push entries");
    }
}

#[test]
fn single_stepped_entries_are_corrected_too() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    // endbr64 probed on the instruction itself: every entry is single-stepped.
    let env = [("WPROF_ENTRY_AT_ENDBR", "1")];
    let run = measure(
        dir.path(),
        "writepath-cet",
        1,
        &env,
        "single-stepped entries",
    );
    // Uncorrected, the 1 µs phase reads several times longer: the correction is what makes
    // this test pass, not a cheap probe.
    let raw = node(&run, &["write_record", "encode_record"]);
    let raw_us = raw["p50_ns"].as_f64().unwrap() / 1000.0;
    assert!(
        raw_us > 3.0,
        "raw encode_record p50 {raw_us:.2} µs: expected the single-step cost in it"
    );
}

#[test]
fn no_calibrate_leaves_times_uncorrected_and_says_so() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let json = dir.path().join("run.json");
    let out = run(wprof()
        .args(["record", "--no-calibrate", "--target", "fixture", "--json"])
        .arg(&json)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", "20"]));
    assert!(out.status.success(), "{}", text(&out));
    let run = read_json(&json);
    assert!(
        run["probe_cost"].get("calibration").is_none(),
        "{}",
        run["probe_cost"]
    );
    assert!(node(&run, &["write_record"]).get("corrected").is_none());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("probe cost (model)"), "{stdout}");
    assert!(!stdout.contains(" raw "), "{stdout}");
}

/// A run longer than a second measures the probes' price again every second on the
/// calibration target kept from before it (`calibration.during`), corrects the calls after
/// each with it, and still comes out within the same tolerances; `--calibrate-once` keeps
/// the single measurement before the run.
#[test]
fn the_price_is_measured_again_during_a_longer_run() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let record = |options: &[&str], name: &str| {
        let json = dir.path().join(name);
        let out = run(wprof()
            .args(["record", "-q", "--off-cpu", "--target", "fixture"])
            .args(options)
            .arg("--json")
            .arg(&json)
            .arg("--")
            .arg(fixture("writepath"))
            // ~45 µs a write traced: ~2.5 s.
            .args([
                "--iterations",
                "55000",
                "--encode-us",
                "5",
                "--compress-us",
                "20",
            ])
            .args(["--persist-us", "1", "--flush-us", "2", "--write-us", "1"])
            .args(["--wal-us", "1", "--sync-us", "2"]));
        assert!(out.status.success(), "wprof record failed:\n{}", text(&out));
        read_json(&json)
    };
    let mut misses = Vec::new();
    for attempt in 0..3 {
        let runj = record(&[], &format!("during-{attempt}.json"));
        let c = &runj["probe_cost"]["calibration"];
        let during = c["during"].as_array().cloned().unwrap_or_default();
        let live_s = runj["provenance"]["duration_s"].as_f64().unwrap();
        assert!(
            during.len() as f64 >= live_s - 1.5 && !during.is_empty(),
            "{} measurements in a {live_s:.1} s run: {c}",
            during.len()
        );
        let at: Vec<f64> = during.iter().map(|d| d["at_s"].as_f64().unwrap()).collect();
        assert!(
            at.windows(2).all(|w| w[1] - w[0] >= 0.9) && at[0] >= 0.9 && at[at.len() - 1] <= live_s,
            "measured at {at:?} s of {live_s:.1}"
        );
        // Each measured the classes the run uses, at a price of the same order as before it.
        let before = c["classes"].as_array().unwrap();
        for d in &during {
            for k in before {
                let again = (d["classes"].as_array().unwrap().iter())
                    .find(|x| x["entry"] == k["entry"] && x["return_mode"] == k["return_mode"])
                    .unwrap_or_else(|| panic!("{k} not measured again: {d}"));
                let (p0, p1) = (
                    k["pair_ns"].as_f64().unwrap(),
                    again["pair_ns"].as_f64().unwrap(),
                );
                assert!(
                    p1 > p0 / 3.0 && p1 < p0 * 3.0,
                    "pair {p0:.0} ns before, {p1:.0} ns at {d}"
                );
            }
        }
        check_structure(&runj, 55_000, "measured again");
        match check_times(&runj, 5.0, "measured again") {
            Ok(()) => {
                misses.clear();
                break;
            }
            Err(e) => misses.push(format!("attempt {attempt}: {e}\n{}", summary(&runj))),
        }
    }
    assert!(
        misses.is_empty(),
        "three runs missed:\n{}",
        misses.join("\n")
    );
    let once = record(&["--calibrate-once"], "once.json");
    assert!(
        once["probe_cost"]["calibration"].get("during").is_none(),
        "{}",
        once["probe_cost"]["calibration"]
    );
}
