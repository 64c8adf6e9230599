//! Functions that start with `endbr64` (`-fcf-protection`): wprof probes their entry at +4,
//! after it, where the kernel emulates `push %rbp` instead of single-stepping `endbr64`.
//! `writepath-cet` traced both ways (`WPROF_ENTRY_AT_ENDBR=1` keeps the probe at +0): the same
//! exact counts, and a 5 µs phase measured at its commanded time only at +4. Also what
//! `wprof probes` and `wprof export` say and do about it.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

const ENV: &str = "WPROF_ENTRY_AT_ENDBR";

/// `wprof record --target fixture --json DIR/run.json -- writepath-cet ARGS`, with the entry
/// probes on the `endbr64` (`at_endbr`) or past it (the default).
fn record(dir: &Path, at_endbr: bool, args: &[&str]) -> (Output, serde_json::Value) {
    let json = dir.join(if at_endbr { "at0.json" } else { "at4.json" });
    let env: &[(&str, &str)] = if at_endbr { &[(ENV, "1")] } else { &[] };
    record_fixture(&json, &[], "writepath-cet", args, env)
}

/// `writes=` of the fixture's ground-truth line.
fn writes(out: &Output) -> u64 {
    truth_field(out, "fixture:", "writes")
}

/// Every phase of the write path (and both levels of `--recurse-depth 2`) seen exactly
/// `calls` times, nothing lost, abandoned or left open.
fn assert_exact(run: &serde_json::Value, calls: u64) {
    let mut paths = WRITE_PATH.to_vec();
    paths.extend([
        &["write_record", "recurse_phase"][..],
        &["write_record", "recurse_phase", "recurse_phase"],
    ]);
    assert_exact_paths(run, &paths, calls);
}

/// The `entry_cost` of every attached phase of a run.
fn entry_costs(run: &serde_json::Value) -> Vec<(String, String)> {
    run["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or("?").to_string(),
                p["entry_cost"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

fn encode_p50_us(run: &serde_json::Value) -> f64 {
    node(run, &["write_record", "encode_record"])["p50_ns"]
        .as_f64()
        .expect("p50_ns")
        / 1000.0
}

#[test]
fn entries_past_endbr64_count_exactly_and_a_5us_phase_measures_5us() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    // Default spins (encode_record 5 µs of its own, no children); a RET-site phase too.
    let args = ["--iterations", "300", "--recurse-depth", "2"];

    let (out4, at4) = record(dir.path(), false, &args);
    assert_eq!(writes(&out4), 300);
    assert_exact(&at4, 300);
    for (name, cost) in entry_costs(&at4) {
        assert_eq!(cost, "emulated", "{name}: probed at +4, on push %rbp");
    }
    let enc4 = encode_p50_us(&at4);
    assert!(
        (enc4 - 5.0).abs() <= 1.5,
        "encode_record (commanded 5 µs) measured {enc4:.1} µs with its entry at +4\n{}",
        summary(&at4)
    );

    // The contrast: on the endbr64 itself, two single-steps more per call inside the phase.
    let (out0, at0) = record(dir.path(), true, &args);
    assert_eq!(writes(&out0), 300);
    assert_exact(&at0, 300);
    for (name, cost) in entry_costs(&at0) {
        assert_eq!(cost, "single-step", "{name}: {ENV}=1 probes the endbr64");
    }
    let enc0 = encode_p50_us(&at0);
    assert!(
        enc0 > 8.0,
        "encode_record measured {enc0:.1} µs with its entry on endbr64: expected the \
         single-step's inflation (~15 µs)\n{}",
        summary(&at0)
    );
}

#[test]
fn probes_shows_the_entry_at_plus_4_unless_asked_not_to() {
    let prog = fixture("writepath-cet");
    let probes = |at_endbr: bool| {
        let mut cmd = wprof();
        if at_endbr {
            cmd.env(ENV, "1");
        } else {
            cmd.env_remove(ENV);
        }
        let out = run(cmd
            .args(["probes", "--target", "fixture", "--binary"])
            .arg(&prog));
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let row = |table: &str, phase: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(phase))
            .unwrap_or_else(|| panic!("no row for {phase}:\n{table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let nm = run(Command::new("nm").arg(&prog));
    let nm = String::from_utf8_lossy(&nm.stdout).into_owned();
    let address = |sym: &str| {
        nm.lines()
            .find_map(|l| l.strip_suffix(&format!(" T {sym}")))
            .map(|a| u64::from_str_radix(a, 16).unwrap())
            .unwrap_or_else(|| panic!("nm: no {sym}"))
    };
    let moved = probes(false);
    let kept = probes(true);
    for phase in ["write_record", "encode_record", "wal_sync", "recurse_phase"] {
        // phase object symbol offset return exits entry-cost pair status
        let m = row(&moved, phase);
        assert_eq!(m[2], format!("{phase}+4"), "{m:?}");
        // The fixture is a PIE whose text has file offset = address.
        assert_eq!(m[3], format!("{:#x}", address(phase) + 4), "{m:?}");
        assert_eq!(m[6], "emulated", "{m:?}");
        let k = row(&kept, phase);
        assert_eq!(k[2], phase, "{k:?}");
        assert_eq!(k[3], format!("{:#x}", address(phase)), "{k:?}");
        assert_eq!(k[6], "single-step", "{k:?}");
    }
    assert!(moved.contains("name+4: ") && moved.contains(ENV), "{moved}");
    assert!(!kept.contains("name+4: "), "{kept}");
}

#[test]
fn exports_put_the_entry_where_each_tool_can() {
    let prog = fixture("writepath-cet");
    let prog = prog.to_str().unwrap();
    let export = |args: &[&str]| {
        let out = run(wprof()
            .env_remove(ENV)
            .args(["export", "--target", "fixture", "--binary", prog])
            .args(args));
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // perf probe takes SYMBOL+4; the uretprobe at the same offset goes to tracefs.
    let perf = export(&["--perf-probe"]);
    assert!(
        perf.contains("--add 'wprof:encode_record=encode_record+4'"),
        "{perf}"
    );
    assert!(
        perf.contains("echo 'r:wprof/encode_record__return ")
            && !perf.contains("encode_record%return"),
        "{perf}"
    );
    assert!(
        perf.contains("# Functions that start with endbr64"),
        "{perf}"
    );
    // RET sites keep their offsets from the function's start.
    assert!(
        perf.contains("--add 'wprof:recurse_phase=recurse_phase+4'")
            && perf.contains("--add 'wprof:recurse_phase__ret0=recurse_phase+"),
        "{perf}"
    );
    // bpftrace: a uretprobe phase keeps its entry on the endbr64 (0.17 refuses SYMBOL+4);
    // a RET-site phase, which needs probe offsets anyway, gets +4.
    let bt = export(&["--bpftrace"]);
    assert!(
        bt.contains(&format!("uprobe:{prog}:encode_record /pid == $1/"))
            && bt.contains(&format!("uretprobe:{prog}:encode_record /pid"))
            && bt.contains(&format!("uprobe:{prog}:recurse_phase+4 /pid == $1/")),
        "{bt}"
    );
    assert!(bt.contains("// Functions that start with endbr64"), "{bt}");
    let uret = export(&["--bpftrace", "--return", "uretprobe"]);
    assert!(
        !uret.contains("+4 /pid") && uret.contains(&format!("uprobe:{prog}:recurse_phase /pid")),
        "{uret}"
    );
    // With the escape hatch, nothing is at +4 and nothing goes through tracefs.
    let out = run(wprof().env(ENV, "1").args([
        "export",
        "--target",
        "fixture",
        "--binary",
        prog,
        "--perf-probe",
    ]));
    let perf0 = String::from_utf8_lossy(&out.stdout);
    assert!(
        !perf0.contains("+4'") && !perf0.contains("uprobe_events") && perf0.contains("%return"),
        "{perf0}"
    );
}

#[test]
fn the_exported_perf_probes_count_every_call_at_plus_4() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let prog = fixture("writepath-cet");
    let prog = prog.to_str().unwrap();
    let out = run(wprof().env_remove(ENV).args([
        "export",
        "--target",
        "fixture",
        "--binary",
        prog,
        "--perf-probe",
    ]));
    assert!(out.status.success(), "{}", text(&out));
    let script = dir.path().join("probes.sh");
    std::fs::write(&script, &out.stdout).unwrap();
    let sh = |what: &str| run(Command::new("sh").arg(&script).arg(what));
    let _ = sh("del"); // a previous run that failed half-way
    let added = sh("add");
    let data = dir.path().join("perf.data");
    let rec = added.status.success().then(|| {
        run(Command::new("perf")
            .args(["record", "-q", "-e", "wprof:*", "-o"])
            .arg(&data)
            .args(["--", prog, "--iterations", "30", "--recurse-depth", "2"]))
    });
    let listed = run(Command::new("perf").args(["probe", "-l"]));
    let removed = sh("del");
    assert!(added.status.success(), "{}", text(&added));
    let rec = rec.unwrap();
    assert!(rec.status.success(), "{}", text(&rec));
    assert!(removed.status.success(), "{}", text(&removed));
    let left = run(Command::new("perf").args(["probe", "-l"]));
    assert!(
        !String::from_utf8_lossy(&left.stdout).contains("wprof:"),
        "{}",
        text(&left)
    );
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("wprof:encode_record__return"), "{listed}");
    let script_out = run(Command::new("perf").args(["script", "-i"]).arg(&data));
    let events = String::from_utf8_lossy(&script_out.stdout).into_owned();
    let count = |ev: &str| {
        events
            .lines()
            .filter(|l| l.contains(&format!(" {ev}:")))
            .count()
    };
    for phase in ["write_record", "encode_record", "wal_sync"] {
        assert_eq!(count(&format!("wprof:{phase}")), 30, "{phase}\n{events}");
        assert_eq!(count(&format!("wprof:{phase}__return")), 30, "{phase}");
    }
    assert_eq!(count("wprof:recurse_phase"), 60);
    assert_eq!(count("wprof:recurse_phase__ret0"), 60);
}
