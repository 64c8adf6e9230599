//! Every way a run ends leaves no probe behind and the target unharmed; every bad input gets
//! a one-line error and its documented exit code.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Checks that nothing of wprof is loaded: no program, and no link to the programs it had
/// (`seen`, taken while it ran).
fn assert_nothing_left(seen: &[u64]) {
    // Program teardown after the last fd closes is asynchronous (RCU): allow it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = wprof_leftovers(seen);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "wprof left BPF programs loaded: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(pid: u32, sig: &str) {
    let out = run(Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]));
    assert!(out.status.success(), "kill -{sig} {pid}: {}", text(&out));
}

/// Lets a waiting fixture go on (a line on stdin) and checks it finishes normally.
fn finish_unharmed(mut fx: Child) {
    let _ = fx.stdin.as_mut().expect("stdin").write_all(b"go\ngo\n");
    drop(fx.stdin.take());
    let out = fx.wait_with_output().expect("fixture");
    assert!(
        out.status.success(),
        "traced fixture was harmed: {}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("fixture:"),
        "{}",
        text(&out)
    );
}

#[test]
fn every_exit_path_detaches_everything_and_leaves_the_target_unharmed() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let fx_args = ["--wait", "--linger", "--iterations", "300"];

    // 1. Normal end: record runs the command to its exit.
    let dir = tempdir();
    let out = run(wprof()
        .args(["record", "-q", "--target", "fixture", "--json"])
        .arg(dir.path().join("a.json"))
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", "50"]));
    assert!(out.status.success(), "{}", text(&out));
    assert_nothing_left(&[]);

    // 2 and 3. Ctrl-C and SIGTERM end an attach cleanly, with every output written.
    for sig in ["INT", "TERM"] {
        let fx = spawn_waiting(&fixture("writepath"), &fx_args);
        let json = dir.path().join(format!("{sig}.json"));
        let w = start_attach("fixture", fx.id(), &json);
        let seen = wprof_program_ids();
        // Entry, return and sched_switch (preemptions followed).
        assert_eq!(
            seen.len(),
            4,
            "wprof should have its 4 programs loaded while attached"
        );
        assert!(
            wprof_leftovers(&seen).iter().any(|l| l.starts_with("link")),
            "bpftool shows no link of wprof while attached: the leftover check would prove nothing"
        );
        signal(w.id(), sig);
        let o = w.wait_with_output().expect("wprof");
        assert!(o.status.success(), "SIG{sig}: {}", text(&o));
        assert!(read_json(&json)["provenance"]["end_reason"]
            .as_str()
            .unwrap_or("")
            .contains(if sig == "INT" { "SIGINT" } else { "SIGTERM" }));
        assert_nothing_left(&seen);
        finish_unharmed(fx);
    }

    // 4. The target is SIGKILLed mid-run: wprof notices, ends, writes its outputs.
    let mut fx = spawn_waiting(&fixture("writepath"), &["--wait", "--iterations", "100000"]);
    let json = dir.path().join("kill-target.json");
    let w = start_attach("fixture", fx.id(), &json);
    let seen = wprof_program_ids();
    fx.stdin
        .as_mut()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("go");
    std::thread::sleep(Duration::from_millis(300));
    fx.kill().expect("kill fixture");
    let _ = fx.wait();
    let o = w.wait_with_output().expect("wprof");
    assert!(o.status.success(), "{}", text(&o));
    let run_json = read_json(&json);
    assert_eq!(
        run_json["provenance"]["end_reason"],
        "traced process exited"
    );
    assert!(
        u(node(&run_json, &["write_record"]), "count") > 0,
        "{}",
        summary(&run_json)
    );
    assert_nothing_left(&seen);

    // 5. wprof itself is SIGKILLed mid-run: the kernel drops its probes with its fds and the
    //    target runs on unharmed.
    let fx = spawn_waiting(&fixture("writepath"), &fx_args);
    let mut w = start_attach("fixture", fx.id(), &dir.path().join("never.json"));
    let seen = wprof_program_ids();
    w.kill().expect("kill wprof");
    let _ = w.wait();
    assert_nothing_left(&seen);
    finish_unharmed(fx);
}

/// A program that writes faster than wprof reads (here a reader slowed to ~10,000 records a
/// second) never leaves the ring buffer empty: the run still ends at its --duration, says
/// what it lost, and leaves nothing behind.
#[test]
fn a_reader_slower_than_the_program_still_ends_on_time() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let json = dir.path().join("slow.json");
    let mut fx = spawn_waiting(
        &fixture("writepath"),
        &[
            &["--wait", "--iterations", "100000000"][..],
            common::ZERO_SPINS,
        ]
        .concat(),
    );
    let mut w = common::start_attach_with(
        &["--duration", "2s"],
        "fixture",
        fx.id(),
        &json,
        &[("WPROF_TEST_SLOW_READER_US", "100")],
    );
    common::release(&mut fx);
    let started = std::time::Instant::now();
    let ended = loop {
        if let Some(status) = w.try_wait().expect("wait wprof") {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(30) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if ended.is_none() {
        let _ = w.kill();
    }
    let _ = fx.kill();
    let _ = fx.wait();
    let took = started.elapsed();
    assert!(
        ended.is_some_and(|s| s.success()),
        "wprof with a slow reader did not end on its own in {took:?} (--duration 2s): {ended:?}"
    );
    let run_json = read_json(&json);
    assert_eq!(run_json["provenance"]["end_reason"], "duration elapsed");
    assert!(
        run_json["counters"]["lost_spans"].as_u64().unwrap_or(0) > 0,
        "the reader kept up, so this proves nothing: {}",
        run_json["counters"]
    );
}

fn expect_error(cmd: &mut Command, code: i32, needles: &[&str]) {
    let o = run(cmd);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{}", text(&o));
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {}", text(&o));
    }
    assert!(!err.contains("panicked"), "{}", text(&o));
}

fn write_profile(dir: &Path, body: &str) -> String {
    let p = dir.join("p.toml");
    std::fs::write(&p, body).expect("write profile");
    p.display().to_string()
}

#[test]
fn bad_input_gets_a_clear_error_and_exit_code() {
    let dir = tempdir();
    let exe = fixture("writepath");

    // `wprof probes` with a profile written for the case, against the fixture.
    let probes_with = |profile: &str, code: i32, needles: &[&str]| {
        let p = write_profile(dir.path(), profile);
        expect_error(
            wprof()
                .args(["probes", "--target", &p, "--binary"])
                .arg(&exe),
            code,
            needles,
        );
    };
    // Malformed profile: exit 2, with line and column.
    probes_with(
        "name = \"x\"\n[[phase]]\nname = \"a\"\nsymbol = [\n",
        2,
        &["line", "column"],
    );
    // Unresolved required symbol: exit 4, with the nearest names.
    probes_with(
        "name = \"x\"\n[[phase]]\nname = \"w\"\nsymbol = \"write_recrd\"\n",
        4,
        &["write_recrd", "write_record"],
    );
    // An object that is not ELF: exit 4, saying so.
    probes_with(
        "name = \"x\"\nobject = \"/etc/hostname\"\n[[phase]]\nname = \"w\"\nsymbol = \"f\"\n",
        4,
        &["not an ELF"],
    );

    // A pid that does not exist: exit 1.
    expect_error(
        wprof().args(["attach", "--target", "fixture", "--pid", "999999999"]),
        1,
        &["no process with pid 999999999"],
    );

    // Unknown built-in profile: usage, exit 2.
    expect_error(
        wprof()
            .args(["probes", "--target", "nope", "--binary"])
            .arg(&exe),
        2,
        &["wprof targets", "fixture"],
    );
}

#[test]
fn missing_capabilities_are_named_even_for_root() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let fx = spawn_waiting(&fixture("writepath"), &["--wait", "--linger"]);
    // uid 0 with an empty bounding set: root, but without CAP_BPF/CAP_PERFMON.
    expect_error(
        Command::new("setpriv")
            .args([
                "--inh-caps=-all",
                "--ambient-caps=-all",
                "--bounding-set=-all",
                "--",
            ])
            .arg(env!("CARGO_BIN_EXE_wprof"))
            .args([
                "attach",
                "--target",
                "fixture",
                "--pid",
                &fx.id().to_string(),
            ]),
        1,
        &["CAP_BPF", "CAP_PERFMON", "setcap"],
    );
    finish_unharmed(fx);
}

#[test]
fn a_pid_that_exits_during_attach_is_an_error_not_an_empty_run() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let mut fx = spawn_waiting(&fixture("writepath"), &["--wait"]);
    let w = wprof()
        .args([
            "attach",
            "--target",
            "fixture",
            "--pid",
            &fx.id().to_string(),
        ])
        .env("WPROF_TEST_PAUSE_BEFORE_ATTACH_MS", "700")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wprof");
    std::thread::sleep(Duration::from_millis(200));
    fx.kill().expect("kill");
    let _ = fx.wait();
    let o = w.wait_with_output().expect("wprof");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("exited"),
        "{}",
        text(&o)
    );
    assert_nothing_left(&[]);
}

#[test]
fn the_postgres_profile_resolves_against_debians_stripped_binary() {
    let pg = Path::new("/usr/lib/postgresql/15/bin/postgres");
    if !wprof::testing::require(pg.exists(), "postgresql-15") {
        return;
    }
    let o = run(wprof()
        .args(["probes", "--target", "postgres", "--binary"])
        .arg(pg));
    assert!(o.status.success(), "{}", text(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    for f in [
        "heap_insert",
        "btinsert",
        "XLogInsert",
        "XLogFlush",
        "CommitTransactionCommand",
    ] {
        let row = table
            .lines()
            .find(|l| l.contains(f))
            .unwrap_or_else(|| panic!("no row for {f}:\n{table}"));
        assert!(row.ends_with("resolved"), "{row}");
    }
}

#[test]
fn record_exits_with_the_commands_status() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    // The fixture exits 2 on an unknown option; wprof itself succeeded, so it passes the 2 on.
    let o = run(wprof()
        .args(["record", "-q", "--target", "fixture", "--"])
        .arg(fixture("writepath"))
        .arg("--no-such-option"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no-such-option"),
        "{}",
        text(&o)
    );
    // A command that does not exist is wprof's own usage error.
    expect_error(
        wprof().args(["record", "--target", "fixture", "--", "/nonexistent/prog"]),
        2,
        &["not found"],
    );
}

/// Runs `cmd` with its stdout a pipe whose reader is already gone (`wprof ... | true`).
fn with_closed_stdout(cmd: &mut Command) -> std::process::Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = cmd
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{cmd:?}: {}",
        text(&out)
    );
    out
}

#[test]
fn a_closed_stdout_ends_printing_quietly_and_every_file_is_still_written() {
    let dir = tempdir();
    // Commands that need no privileges first.
    let o = with_closed_stdout(wprof().arg("targets"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = with_closed_stdout(wprof().args(["completions", "bash"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let json = dir.path().join("r.json");
    let folded = dir.path().join("r.folded");
    let o = with_closed_stdout(
        wprof()
            .args(["record", "--target", "fixture", "--json"])
            .arg(&json)
            .arg("--folded")
            .arg(&folded)
            .arg("--")
            .arg(fixture("writepath"))
            .args(["--iterations", "50"]),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = read_json(&json);
    assert_eq!(u(node(&run, &["write_record"]), "count"), 50);
    assert!(std::fs::read_to_string(&folded)
        .unwrap()
        .contains("write_record"));
    // report and compare of that run, into the same closed pipe: the run's exit code.
    let o = with_closed_stdout(wprof().arg("report").arg(&json));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = with_closed_stdout(wprof().arg("compare").arg(&json).arg(&json));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn wprof_refuses_to_trace_itself() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    // The shell's pid becomes wprof's at exec.
    let started = Instant::now();
    let o = run(Command::new("sh").arg("-c").arg(format!(
        "exec {} attach --target fixture --pid $$ --duration 2s",
        env!("CARGO_BIN_EXE_wprof")
    )));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("wprof cannot trace itself"),
        "{}",
        text(&o)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn json_nested_beyond_any_run_is_refused_not_a_stack_overflow() {
    let dir = tempdir();
    let deep = dir.path().join("deep.json");
    std::fs::write(&deep, "[".repeat(50_000)).unwrap();
    // A run whose tree is 3,000 phases deep (MAX_DEPTH is 128): valid JSON, too deep.
    let mut node = String::from("{\"name\":\"x\",\"children\":[]}");
    for _ in 0..3000 {
        node = format!("{{\"name\":\"x\",\"children\":[{node}]}}");
    }
    let tree = dir.path().join("tree.json");
    std::fs::write(
        &tree,
        format!("{{\"schema_version\":1,\"tree\":{{\"roots\":[{node}]}}}}"),
    )
    .unwrap();
    let h = dir.path().join("h.toml");
    std::fs::write(
        &h,
        "[[hypothesis]]\nid = \"H\"\nphase = \"x\"\nmean_us = \"< 1\"\n",
    )
    .unwrap();
    for f in [&deep, &tree] {
        let name = f.file_name().unwrap().to_str().unwrap();
        for cmd in [
            wprof().arg("report").arg(f),
            wprof().arg("compare").arg(f).arg(f),
            wprof().arg("check").arg("--hypotheses").arg(&h).arg(f),
        ] {
            expect_error(cmd, 2, &[name, "nested deeper than"]);
        }
    }
}

#[test]
fn control_characters_in_a_phase_name_are_refused() {
    let dir = tempdir();
    let p = write_profile(
        dir.path(),
        "name = \"x\"\nobject = \"exe\"\n[[phase]]\nname = \"a\\u001b[31m\"\nsymbol = \"f\"\n",
    );
    expect_error(
        wprof().args(["probes", "--target", &p, "--binary", "/bin/true"]),
        2,
        &["control character"],
    );
}

#[test]
fn a_function_the_kernel_cannot_probe_is_named_and_a_glob_leaves_it_out() {
    // PostgreSQL's SetLatch starts with `lock addl` (a memory barrier): the kernel refuses a
    // uprobe there (error 524 at attach, naming nothing). Named at resolution instead.
    let postgres = "/usr/lib/postgresql/15/bin/postgres";
    if !wprof::testing::require(Path::new(postgres).exists(), "PostgreSQL 15") {
        return;
    }
    let dir = tempdir();
    let one = write_profile(
        dir.path(),
        "name = \"x\"\nobject = \"exe\"\n[[phase]]\nname = \"latch\"\nsymbol = \"SetLatch\"\n",
    );
    expect_error(
        wprof().args(["probes", "--target", &one, "--binary", postgres]),
        4,
        &["phase 'latch'", "SetLatch", "lock prefix", "uprobes refuse"],
    );
    let glob = dir.path().join("glob.toml");
    std::fs::write(
        &glob,
        "name = \"x\"\nobject = \"exe\"\n[[phase]]\nname = \"many\"\nsymbol = \"Set[A-Z]*\"\n\
         all_matches = true\n",
    )
    .unwrap();
    let o = run(wprof()
        .arg("probes")
        .arg("--target")
        .arg(&glob)
        .args(["--binary", postgres]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(
        err.contains("phase 'many': SetLatch") && err.contains("left out"),
        "{}",
        text(&o)
    );
    assert!(!out.contains("SetLatch "), "{out}");
    assert!(out.contains("SetWalWriterSleeping"), "{out}");
}

#[test]
fn output_paths_are_checked_before_attaching_and_written_without_following_symlinks() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let fx = fixture("writepath");
    let record = |extra: &[&std::ffi::OsStr]| {
        let mut c = wprof();
        c.args(["record", "--quiet", "--target", "fixture"])
            .args(extra)
            .arg("--")
            .arg(&fx);
        c.args(["--iterations", "20"]);
        c
    };
    // A missing directory: refused at once (exit 2), before the command ever runs.
    let bad = dir.path().join("nonexistent/x.json");
    let started = Instant::now();
    let o = run(&mut record(&["--json".as_ref(), bad.as_os_str()]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("nonexistent"), "{}", text(&o));
    assert!(!text(&o).contains("probe points live"), "{}", text(&o));
    assert!(started.elapsed() < Duration::from_secs(5));
    // A symlink planted where the JSON goes: replaced by the file, its target untouched.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let json = dir.path().join("run.json");
    std::os::unix::fs::symlink(&victim, &json).unwrap();
    let o = run(&mut record(&["--json".as_ref(), json.as_os_str()]));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(std::fs::symlink_metadata(&json)
        .unwrap()
        .file_type()
        .is_file());
    assert_eq!(u(node(&read_json(&json), &["write_record"]), "count"), 20);
    // An --out directory another user made (in a world-writable place, with a planted
    // tree.txt): refused.
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let o = run(&mut record(&["--out".as_ref(), theirs.as_os_str()]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("belongs to uid 65534"), "{}", text(&o));
    // No temporary file is left next to the outputs.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_zombie_is_said_to_have_exited_and_a_function_probed_twice_is_warned_of() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    // The background `sleep 0.2` ends after the shell has become `sleep 5` (exec), which never
    // reaps it: a zombie.
    let mut parent = Command::new("sh")
        .args(["-c", "sleep 0.2 & echo $!; exec sleep 5"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(parent.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let zombie = line.trim().to_string();
    std::thread::sleep(Duration::from_millis(700));
    expect_error(
        wprof().args(["attach", "--target", "fixture", "--pid", &zombie]),
        1,
        &["has exited", "zombie"],
    );
    let _ = parent.kill();
    let _ = parent.wait();
    let dir = tempdir();
    let p = write_profile(
        dir.path(),
        "name = \"x\"\nobject = \"exe\"\n[[phase]]\nname = \"a\"\nsymbol = \"wal_sync\"\n\
         [[phase]]\nname = \"b\"\nsymbol = \"wal_s*\"\n",
    );
    let o = run(wprof()
        .args(["probes", "--target", &p, "--binary"])
        .arg(fixture("writepath")));
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("phase 'b' probes wal_sync, which phase 'a' probes too"),
        "{}",
        text(&o)
    );
}
