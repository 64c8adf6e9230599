//! `wprof doctor` on this host: the verdicts as root, as a user without capabilities, and as
//! a user running a copy of wprof granted CAP_BPF + CAP_PERFMON with setcap (which must then
//! trace for real).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::*;

fn nobody(program: &std::path::Path, args: &[&str]) -> std::process::Output {
    run(Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .arg(program)
        .args(args)
        .current_dir("/"))
}

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no {name} line in:\n{out}"))
}

#[test]
fn doctor_verdicts_as_root_as_a_plain_user_and_with_setcap() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    // Root: everything required is there; the BPF object really loads.
    let out = run(wprof().arg("doctor"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    for name in ["kernel", "uprobes", "capabilities", "bpf", "ring"] {
        assert!(
            line(&text, name).trim_start().starts_with("OK"),
            "{name}:\n{text}"
        );
    }
    assert!(text.ends_with("verdict: attach works here\n"), "{text}");
    let json = run(wprof().args(["doctor", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("doctor --json");
    assert_eq!(v["attach_works"], true);
    assert!(v["checks"].as_array().is_some_and(|c| c.len() >= 10));

    // A user without the capabilities: exit 1, the missing ones named with the fix.
    let out = nobody(
        std::path::Path::new(env!("CARGO_BIN_EXE_wprof")),
        &["doctor"],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out));
    let caps = line(&text, "capabilities");
    assert!(
        caps.contains("MISSING") && caps.contains("CAP_BPF and CAP_PERFMON"),
        "{text}"
    );
    assert!(
        text.contains("fix: sudo setcap cap_bpf,cap_perfmon+ep"),
        "{text}"
    );
    assert!(line(&text, "bpf").contains("not checked"), "{text}");
    assert!(text.ends_with("verdict: attach cannot work here (see MISSING above)\n"));

    // The same user with a copy of wprof granted the two capabilities: OK, and it traces.
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.path().join("wprof");
    std::fs::copy(env!("CARGO_BIN_EXE_wprof"), &copy).unwrap();
    let fx = dir.path().join("writepath");
    std::fs::copy(fixture("writepath"), &fx).unwrap();
    let set = run(Command::new("setcap")
        .arg("cap_bpf,cap_perfmon+ep")
        .arg(&copy));
    assert!(set.status.success(), "setcap: {}", common::text(&set));
    let out = nobody(&copy, &["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    assert!(line(&text, "capabilities").contains("OK"), "{text}");
    assert!(line(&text, "bpf").contains("OK"), "{text}");
    let rec = nobody(
        &copy,
        &[
            "record",
            "--target",
            "fixture",
            "--",
            fx.to_str().unwrap(),
            "--iterations",
            "20",
        ],
    );
    let shown = common::text(&rec);
    assert!(rec.status.success(), "{shown}");
    assert!(
        shown.contains("write_record") && shown.contains("n=20"),
        "{shown}"
    );
}
