//! Who wprof acts for (issue 17, item 1; docs/security.md). A copy of wprof given the README's
//! `setcap cap_bpf,cap_perfmon+ep`, run as `nobody`, must not lend its capabilities out: it
//! refuses a setuid program in `record` (and the command it runs cannot gain privilege), it
//! attaches only to processes nobody may ptrace, and it reads files as nobody. Started through
//! sudo, `record` runs its command as the sudo user. A second tracer of a process is warned of.
//!
//! Needs root (setcap, setpriv) and BPF; skipped without, failed under WPROF_REQUIRE_BPF=1.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;

const SECRET: &str = "TOPSECRET-42";

/// A world-readable temp dir holding a copy of wprof with `caps` (setcap syntax).
struct CapWprof {
    dir: tempfile::TempDir,
    exe: PathBuf,
}

impl CapWprof {
    fn new(caps: &str) -> CapWprof {
        let dir = tempdir();
        chmod(dir.path(), 0o755);
        let exe = dir.path().join("wprof");
        std::fs::copy(env!("CARGO_BIN_EXE_wprof"), &exe).expect("copy wprof");
        let out = run(Command::new("setcap").arg(caps).arg(&exe));
        assert!(out.status.success(), "setcap {caps}: {}", text(&out));
        CapWprof { dir, exe }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs this wprof as nobody:nogroup with no supplementary groups, in its directory.
    fn as_nobody(&self, args: &[&str]) -> Output {
        run(nobody()
            .arg(&self.exe)
            .args(args)
            .current_dir(self.dir.path()))
    }
}

/// `setpriv` prefix that runs the rest of the command as nobody:nogroup.
fn nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]);
    c
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

/// Root, with setcap and setpriv: what these tests need besides BPF.
fn can_run() -> bool {
    if !bpf_available() {
        return false;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tools = ["setcap", "setpriv"].iter().all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    wprof::testing::require(
        root && tools,
        "root with setcap (libcap2-bin) and setpriv (util-linux)",
    )
}

fn cc(src: &str, out: &Path) {
    let c = out.with_extension("c");
    std::fs::write(&c, src).expect("write C source");
    let o = run(Command::new("cc").args(["-O2", "-o"]).arg(out).arg(&c));
    assert!(o.status.success(), "cc: {}", text(&o));
}

fn all_output(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A setuid-root program that reads a root-only secret and passes it to `handle_secret` (ten
/// times, then once a millisecond for as many ms as its argument says),
/// and a profile grouping that function's calls by its string argument (its object named
/// by path, so that it also resolves when a shell runs the program).
fn setuid_reader(w: &CapWprof) -> (PathBuf, PathBuf) {
    let secret = w.path("secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    chmod(&secret, 0o600);
    let prog = w.path("suidtest");
    cc(
        &format!(
            r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__attribute__((noinline)) void handle_secret(const char *s) {{ __asm__ volatile("" :: "r"(s) : "memory"); }}
int main(int argc, char **argv) {{
  char buf[64] = {{0}};
  int ms = argc > 1 ? atoi(argv[1]) : 0;
  FILE *f = fopen("{}", "r");
  if (!f) {{ perror("open secret"); return 1; }}
  if (!fgets(buf, sizeof buf, f)) return 1;
  fclose(f);
  buf[strcspn(buf, "\n")] = 0;
  for (int i = 0; i < 10; i++) handle_secret(buf);
  for (int i = 0; i < ms; i++) {{ handle_secret(buf); usleep(1000); }}
  return 0;
}}
"#,
            secret.display()
        ),
        &prog,
    );
    chmod(&prog, 0o4755);
    let profile = w.path("suid.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"suid\"\nobject = \"{}\"\n[[phase]]\nname = \"secret\"\n\
             symbol = \"handle_secret\"\ngroup_by = {{ arg = 0 }}\n",
            prog.display()
        ),
    )
    .unwrap();
    chmod(&profile, 0o644);
    (prog, profile)
}

#[test]
fn setcap_wprof_run_by_nobody_refuses_setuid_programs_and_leaks_no_secret() {
    if !can_run() {
        return;
    }
    let _g = bpf_lock();
    let w = CapWprof::new("cap_bpf,cap_perfmon+ep");
    let (prog, profile) = setuid_reader(&w);
    let profile = profile.to_str().unwrap();
    let record = ["record", "--no-calibrate", "--target", profile, "--"];

    // The probe does catch the secret when root traces the program: the test is not vacuous.
    let root = run(wprof().args(record).arg(&prog));
    assert!(root.status.success(), "{}", text(&root));
    assert!(all_output(&root).contains("TOPSECRET"), "{}", text(&root));

    // nobody: the setuid program is refused up front, naming why.
    let mut args = record.to_vec();
    args.push(prog.to_str().unwrap());
    let o = w.as_nobody(&args);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let all = all_output(&o);
    assert!(all.contains("is a setuid program"), "{}", text(&o));
    assert!(all.contains("run wprof as root"), "{}", text(&o));
    assert!(!all.contains("TOPSECRET"), "secret leaked: {}", text(&o));

    // A program that is not setuid but runs one: the command runs with no_new_privs, so the
    // setuid program gets no privilege and cannot read the secret.
    let script = format!("exec {}", prog.display());
    let mut args = record.to_vec();
    args.extend(["/bin/sh", "-c", &script]);
    let o = w.as_nobody(&args);
    let all = all_output(&o);
    assert!(!all.contains("TOPSECRET"), "secret leaked: {}", text(&o));
    assert!(
        all.contains("open secret: Permission denied"),
        "{}",
        text(&o)
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "the command's status: {}",
        text(&o)
    );

    // A program with file capabilities is refused too.
    let capped = w.path("capped");
    std::fs::copy("/bin/true", &capped).unwrap();
    let out = run(Command::new("setcap").arg("cap_net_raw+ep").arg(&capped));
    assert!(out.status.success(), "{}", text(&out));
    let mut args = record.to_vec();
    args.push(capped.to_str().unwrap());
    let o = w.as_nobody(&args);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        all_output(&o).contains("is a file-capability program"),
        "{}",
        text(&o)
    );
}

/// A profile on libc's clock_nanosleep, for attaching to `sleep`.
fn sleep_profile(w: &CapWprof) -> String {
    let p = w.path("sleep.toml");
    std::fs::write(
        &p,
        "name = \"sleep\"\nobject = \"libc.so.6\"\n[[phase]]\nname = \"nap\"\n\
         symbol = \"clock_nanosleep\"\n",
    )
    .unwrap();
    chmod(&p, 0o644);
    p.display().to_string()
}

#[test]
fn setcap_wprof_run_by_nobody_attaches_only_to_what_nobody_may_ptrace() {
    if !can_run() {
        return;
    }
    let _g = bpf_lock();
    let w = CapWprof::new("cap_bpf,cap_perfmon+ep");
    let profile = sleep_profile(&w);
    let attach = |pid: u32| {
        let pid = pid.to_string();
        w.as_nobody(&[
            "attach",
            "--no-calibrate",
            "--duration",
            "1s",
            "--target",
            &profile,
            "--pid",
            &pid,
        ])
    };
    let spawn = |cmd: &mut Command| {
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn")
    };

    // A root process.
    let mut root = spawn(Command::new("sleep").arg("60"));
    let o = attach(root.id());
    let _ = root.kill();
    let _ = root.wait();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("wprof may not trace pid {}", root.id())) && err.contains("uid 0"),
        "{}",
        text(&o)
    );

    // nobody's own process, made non-dumpable.
    let nd = w.path("nondumpable");
    cc(
        "#include <sys/prctl.h>\n#include <unistd.h>\n\
         int main(void) { prctl(PR_SET_DUMPABLE, 0); for (;;) sleep(1); }\n",
        &nd,
    );
    chmod(&nd, 0o755);
    let mut hidden = spawn(nobody().arg(&nd));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let o = attach(hidden.id());
    let _ = hidden.kill();
    let _ = hidden.wait();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not dumpable"),
        "{}",
        text(&o)
    );

    // nobody's own plain process: traced.
    let mut own = spawn(nobody().args(["sleep", "60"]));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let o = attach(own.id());
    let _ = own.kill();
    let _ = own.wait();
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn wprof_with_file_capabilities_reads_files_only_as_its_user() {
    if !can_run() {
        return;
    }
    let _g = bpf_lock();
    // An admin who also granted CAP_DAC_READ_SEARCH: the capability must not read for nobody.
    let w = CapWprof::new("cap_bpf,cap_perfmon,cap_dac_read_search+ep");
    let profile = sleep_profile(&w);
    let run_json = w.path("run.json");
    let o = run(wprof()
        .args([
            "record",
            "-q",
            "--no-calibrate",
            "--target",
            &profile,
            "--json",
        ])
        .arg(&run_json)
        .args(["--", "sleep", "0.1"]));
    assert!(o.status.success(), "{}", text(&o));
    let private = w.path("private.toml");
    std::fs::copy(&profile, &private).unwrap();
    for f in [&run_json, &private] {
        chmod(f, 0o600);
    }
    // Readable to nobody when the files are: what is refused below is the permission.
    chmod(&run_json, 0o644);
    let o = w.as_nobody(&["report", run_json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    chmod(&run_json, 0o600);

    let o = w.as_nobody(&["report", run_json.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("permission denied"),
        "{}",
        text(&o)
    );
    let o = w.as_nobody(&[
        "probes",
        "--target",
        private.to_str().unwrap(),
        "--binary",
        "/bin/sleep",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("permission denied"),
        "{}",
        text(&o)
    );
}

#[test]
fn through_sudo_record_runs_the_command_as_the_sudo_user_unless_as_root() {
    if !can_run() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let profile = dir.path().join("id.toml");
    std::fs::write(
        &profile,
        "name = \"id\"\nobject = \"libc.so.6\"\n[[phase]]\nname = \"getuid\"\nsymbol = \"getuid\"\n",
    )
    .unwrap();
    let id = |extra: &[&str], what: &str| {
        let o = run(wprof()
            .args(["record", "-q", "--no-calibrate", "--target"])
            .arg(&profile)
            .args(extra)
            .args(["--", "id", what])
            .env("SUDO_UID", "65534")
            .env("SUDO_GID", "65534"));
        assert!(o.status.success(), "{}", text(&o));
        (
            String::from_utf8_lossy(&o.stdout).trim().to_string(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (uid, err) = id(&[], "-u");
    assert_eq!(uid, "65534", "{err}");
    assert!(err.contains("--as-root"), "says how to keep root: {err}");
    let (gid, _) = id(&[], "-g");
    assert_eq!(gid, "65534");
    // nobody's supplementary groups are its passwd entry's (nogroup), not root's.
    let (groups, _) = id(&[], "-G");
    assert_eq!(groups, "65534");
    let (uid, err) = id(&["--as-root"], "-u");
    assert_eq!(uid, "0", "{err}");
}

#[test]
fn a_second_wprof_on_one_target_warns_naming_the_first() {
    if !can_run() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let mut fx = spawn_waiting(&fixture("writepath"), &["--wait", "--linger"]);
    let mut first = start_attach("fixture", fx.id(), &dir.path().join("first.json"));
    let second = run(wprof().args([
        "attach",
        "--no-calibrate",
        "--duration",
        "1s",
        "--target",
        "fixture",
        "--pid",
        &fx.id().to_string(),
    ]));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(first.id() as i32, libc::SIGINT) };
    let _ = first.wait();
    let _ = fx.kill();
    let _ = fx.wait();
    assert!(second.status.success(), "{}", text(&second));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(&format!("warning: pid {} (wprof attach)", first.id())),
        "{}",
        text(&second)
    );
}

#[test]
fn setcap_wprof_stops_without_output_when_a_traced_process_execs_a_setuid_program() {
    use std::io::{BufRead, BufReader, Read, Write};
    if !can_run() {
        return;
    }
    let _g = bpf_lock();
    let w = CapWprof::new("cap_bpf,cap_perfmon+ep");
    let (prog, profile) = setuid_reader(&w);
    let out = w.path("out");
    std::fs::create_dir(&out).unwrap();
    chmod(&out, 0o777);
    let json = out.join("run.json");
    // nobody's shell: traceable until it execs the setuid program (on a line on its stdin).
    let script = format!("read go; exec {} 3000", prog.display());
    let mut target = nobody()
        .args(["sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the target");
    let mut tracer = nobody()
        .arg(&w.exe)
        .args(["attach", "--no-calibrate", "--target"])
        .arg(&profile)
        .args(["--pid", &target.id().to_string(), "--json"])
        .arg(&json)
        .current_dir(w.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wprof");
    let mut err = BufReader::new(tracer.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("wprof: attached") {
        if err.read_line(&mut seen).unwrap() == 0 {
            let _ = target.kill();
            panic!("wprof ended before attaching:\n{seen}");
        }
    }
    target.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    err.read_to_string(&mut seen).unwrap();
    let mut stdout = String::new();
    tracer
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let status = tracer.wait().unwrap();
    let _ = target.kill();
    let _ = target.wait();
    let all = format!("{stdout}{seen}");
    assert!(!all.contains("TOPSECRET"), "secret leaked: {all}");
    assert_eq!(status.code(), Some(1), "{all}");
    assert!(all.contains("changed credentials"), "{all}");
    assert!(!json.exists(), "no output may be written: {all}");
}
