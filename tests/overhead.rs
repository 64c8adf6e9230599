//! `--max-overhead`: a probe on a hot function must never stall the target for long. wprof
//! measures the probes' share of the traced process's CPU time every second and detaches,
//! cleanly, over the budget. Privileged: real probes on the C fixture.

mod common;

use common::*;

#[test]
fn over_budget_detaches_writes_outputs_and_exits_5() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let before = wprof_program_ids();
    let dir = tempdir();
    let json = dir.path().join("run.json");
    let out = run(wprof()
        .args([
            "record",
            "--target",
            "fixture",
            "--max-overhead",
            "20%",
            "--json",
        ])
        .arg(&json)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", "600000"])
        .args(ZERO_SPINS));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(stderr.contains("first second:"), "{stderr}");
    assert!(
        stderr.contains("above --max-overhead 20%: detached"),
        "{stderr}"
    );
    // The command ran on to its end, untraced.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("writes=600000"), "{stdout}");
    let run = read_json(&json);
    assert_eq!(
        run["provenance"]["end_reason"],
        "probe overhead above --max-overhead"
    );
    let calls = u(node(&run, &["write_record"]), "count");
    assert!(
        calls > 0 && calls < 600000,
        "write_record traced {calls} times"
    );
    assert_eq!(
        u(&run["counters"], "unmatched_returns"),
        0,
        "{}",
        summary(&run)
    );
    assert!(
        wprof_leftovers(&before).is_empty(),
        "{:?}",
        wprof_leftovers(&before)
    );
}

#[test]
fn within_budget_runs_to_the_end() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let json = dir.path().join("run.json");
    // 1.2 s of 3 ms writes: a few hundred probe hits a second, far below 5%.
    let out = run(wprof()
        .args([
            "record",
            "--target",
            "fixture",
            "--max-overhead",
            "5",
            "--json",
        ])
        .arg(&json)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", "400", "--write-us", "3000"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("first second:") && stderr.contains("(budget 5%)"),
        "{stderr}"
    );
    let run = read_json(&json);
    assert_eq!(run["provenance"]["end_reason"], "traced process exited");
    assert_eq!(u(node(&run, &["write_record"]), "count"), 400);
}

#[test]
fn a_budget_that_is_not_a_percentage_is_a_usage_error() {
    for bad in ["0", "150%", "five"] {
        let out = run(wprof().args([
            "record",
            "--target",
            "fixture",
            "--max-overhead",
            bad,
            "--",
            "true",
        ]));
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out));
        assert!(text(&out).contains("--max-overhead"), "{}", text(&out));
    }
}
