//! `wprof export`: the bpftrace script and the `perf probe` commands it writes load in the
//! real tools and count the fixture's calls exactly; RET-site phases keep RET-site probes.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use common::*;

fn export(args: &[&str]) -> String {
    let out = run(wprof().arg("export").args(args));
    assert!(out.status.success(), "wprof export: {}", text(&out));
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `@calls[name]: N` lines of bpftrace's output.
fn calls(bt_out: &str, name: &str) -> u64 {
    let key = format!("@calls[{name}]: ");
    bt_out
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in bpftrace's output:\n{bt_out}"))
}

#[test]
fn the_bpftrace_script_counts_every_call_of_the_fixture() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let prog = fixture("writepath");
    let prog = prog.to_str().unwrap();
    // Debian's bpftrace cannot place probes at RET offsets: uretprobes (the fixture is C).
    let script = dir.path().join("fixture.bt");
    let text = export(&[
        "--target",
        "fixture",
        "--binary",
        prog,
        "--return",
        "uretprobe",
        "--bpftrace",
    ]);
    assert!(
        text.contains(&format!("uprobe:{prog}:write_record /pid == $1/")),
        "{text}"
    );
    std::fs::write(&script, &text).unwrap();

    let mut fx = spawn_waiting(&fixture("writepath"), &["--iterations", "150", "--wait"]);
    let mut bt = Command::new("bpftrace")
        .args(["-B", "line"]) // its stdout is a pipe here
        .arg(&script)
        .arg(fx.id().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bpftrace");
    let mut out = BufReader::new(bt.stdout.take().unwrap());
    // "Attaching N probes...", then the script's BEGIN line once they are all live.
    let mut seen = String::new();
    while !seen.contains(" phases of pid ") {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "bpftrace ended: {seen}"
        );
        seen.push_str(&line);
    }
    release(&mut fx);
    let done = fx.wait_with_output().unwrap();
    assert!(done.status.success());
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(bt.id() as i32, libc::SIGINT) };
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let _ = bt.wait();
    for phase in [
        "write_record",
        "encode_record",
        "persist_block",
        "compress_block",
        "flush_block",
        "wal_append",
        "wal_sync",
    ] {
        assert_eq!(calls(&rest, phase), 150, "{phase}");
    }
}

#[test]
fn cxx_phases_keep_ret_site_probes_in_both_exports() {
    // The driver finds the library through its RUNPATH ($ORIGIN), as the loader would.
    let driver = fixture("cxx-driver");
    let driver = driver.to_str().unwrap();
    let lib = fixture("libwpfx_store.so");
    let lib = lib.to_str().unwrap();
    let bt = export(&["--target", "fixture-cxx", "--binary", driver, "--bpftrace"]);
    assert!(!bt.contains("uretprobe:"), "{bt}");
    assert!(
        bt.contains(&format!("uprobe:{lib}:_ZN4wpfx5Store11write_batchEi+")),
        "{bt}"
    );
    let perf = export(&[
        "--target",
        "fixture-cxx",
        "--binary",
        driver,
        "--perf-probe",
    ]);
    assert!(!perf.contains("%return"), "{perf}");
    assert!(
        perf.contains("--add 'wprof:write_batch__ret0=_ZN4wpfx5Store11write_batchEi+"),
        "{perf}"
    );
}

#[test]
fn the_perf_probe_commands_count_every_call_of_the_fixture() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let prog = fixture("writepath");
    let prog = prog.to_str().unwrap();
    let script = dir.path().join("probes.sh");
    std::fs::write(
        &script,
        export(&["--target", "fixture", "--binary", prog, "--perf-probe"]),
    )
    .unwrap();
    let sh = |what: &str| run(Command::new("sh").arg(&script).arg(what));
    let _ = sh("del"); // a previous run that failed half-way
    let added = sh("add");
    assert!(added.status.success(), "{}", text(&added));
    let data = dir.path().join("perf.data");
    let rec = run(Command::new("perf")
        .args(["record", "-q", "-e", "wprof:*", "-o"])
        .arg(&data)
        .args(["--", prog, "--iterations", "30", "--recurse-depth", "2"]));
    let script_out = run(Command::new("perf").args(["script", "-i"]).arg(&data));
    let removed = sh("del");
    assert!(rec.status.success(), "{}", text(&rec));
    assert!(removed.status.success(), "{}", text(&removed));
    let listed = run(Command::new("perf").args(["probe", "-l"]));
    assert!(!String::from_utf8_lossy(&listed.stdout).contains("wprof:"));
    let events = String::from_utf8_lossy(&script_out.stdout).into_owned();
    let count = |ev: &str| {
        events
            .lines()
            .filter(|l| l.contains(&format!(" {ev}:")))
            .count()
    };
    assert_eq!(count("wprof:write_record"), 30, "{events}");
    assert_eq!(count("wprof:write_record__return"), 30);
    assert_eq!(count("wprof:wal_sync__return"), 30);
    // recurse_phase is a RET-site phase: 2 levels per write, each entry and RET seen.
    assert_eq!(count("wprof:recurse_phase"), 60);
    assert_eq!(count("wprof:recurse_phase__ret0"), 60);
}

#[test]
fn hostile_paths_and_names_cannot_inject_into_the_generated_scripts() {
    let dir = tempdir();
    // A binary in a directory whose name closes a shell quote and runs a command.
    let evil = dir.path().join("x'; touch PWNED; '");
    std::fs::create_dir(&evil).unwrap();
    let prog = evil.join("writepath");
    std::fs::copy(fixture("writepath"), &prog).unwrap();
    // A phase name that would close bpftrace's map key and add a statement.
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        "name = \"evil\"\nobject = \"exe\"\n[[phase]]\nname = 'w\"] = count(); printf(\"pwned'\n\
         symbol = \"write_record\"\nreturn = \"uretprobe\"\n",
    )
    .unwrap();
    let perf = run(wprof()
        .args(["export", "--perf-probe", "--target"])
        .arg(&profile)
        .arg("--binary")
        .arg(&prog));
    assert!(perf.status.success(), "{}", text(&perf));
    let script = dir.path().join("probes.sh");
    std::fs::write(&script, &perf.stdout).unwrap();
    // Run with `perf` as a stub that only records its arguments: the path arrives whole, and
    // nothing else runs.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let args_log = dir.path().join("args.log");
    let stub = bin.join("perf");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done >> '{}'\n",
            args_log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = run(Command::new("sh")
        .arg(&script)
        .arg("add")
        .current_dir(dir.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display())));
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !dir.path().join("PWNED").exists(),
        "the generated script ran a command"
    );
    let logged = std::fs::read_to_string(&args_log).unwrap();
    assert!(
        logged.lines().any(|l| l == prog.to_str().unwrap()),
        "{logged}"
    );
    // bpftrace has no quoting for a probe's path: refused, not pasted.
    let bt = run(wprof()
        .args(["export", "--bpftrace", "--target"])
        .arg(&profile)
        .arg("--binary")
        .arg(&prog));
    assert_eq!(bt.status.code(), Some(2), "{}", text(&bt));
    assert!(
        text(&bt).contains("cannot be written into a bpftrace probe"),
        "{}",
        text(&bt)
    );
    // With a plain path, the name stays inside its string literal.
    let bt = export(&[
        "--bpftrace",
        "--target",
        profile.to_str().unwrap(),
        "--binary",
        fixture("writepath").to_str().unwrap(),
    ]);
    assert!(
        bt.contains(r#"@calls["w\"] = count(); printf(\"pwned"]"#),
        "{bt}"
    );
}

/// Issue 17, item 6: every file wprof writes (here `export -o` and `man --dir`; `report -o`,
/// compare's and check's outputs and `--snapshots` share the same code) replaces a symlink
/// planted at its path instead of writing through it, as run outputs already did.
#[test]
fn written_files_replace_a_planted_symlink_instead_of_following_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    // A world-writable directory with a sticky bit, as /tmp.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let link = dir.path().join("probes.bt");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = run(wprof()
        .args(["export", "--bpftrace", "--target", "fixture", "--binary"])
        .arg(fixture("writepath"))
        .arg("-o")
        .arg(&link));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_file(), "{link:?} is still a symlink");
    assert!(std::fs::read_to_string(&link).unwrap().contains("uprobe:"));

    let man = dir.path().join("man");
    std::fs::create_dir(&man).unwrap();
    std::os::unix::fs::symlink(&victim, man.join("wprof.1")).unwrap();
    let out = run(wprof().arg("man").arg("--dir").arg(&man));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(std::fs::symlink_metadata(man.join("wprof.1"))
        .unwrap()
        .is_file());
}
