//! Shared helpers of the integration tests: fixtures built from source, the BPF capability
//! gate, running wprof and reading its JSON.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};

mod attach_run;
mod fixture_run;
pub mod http;
pub mod pg;

#[allow(unused_imports)] // not every test binary uses the fixture helpers
pub use attach_run::Attach;
#[allow(unused_imports)] // not every test binary uses the fixture helpers
pub use fixture_run::*;

/// The wprof binary under test. Without the caller's SUDO_UID/SUDO_GID: under `sudo cargo
/// test` (or `sudo ./scripts/test.sh`) `record` would otherwise run every traced command as
/// the sudo user (tests/privilege.rs sets them where it means to).
pub fn wprof() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wprof"));
    c.env_remove("SUDO_UID").env_remove("SUDO_GID");
    c
}

/// Builds tests/fixtures into a directory shared by the tests (once per test binary).
pub fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fixtures");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/build.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .output()
            .expect("run build.sh");
        assert!(
            out.status.success(),
            "fixture build failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

/// Path of a built fixture program.
pub fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// Whether this process can load BPF (CAP_BPF+CAP_PERFMON or CAP_SYS_ADMIN). Without it the
/// privileged tests return early — except under WPROF_REQUIRE_BPF=1 (CI), where that is a
/// failure, so CI can never pass a test that did not run.
pub fn bpf_available() -> bool {
    let caps = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .map(|h| h.trim().to_string())
        })
        .and_then(|h| u64::from_str_radix(&h, 16).ok())
        .unwrap_or(0);
    let ok = caps & (1 << 21) != 0 || (caps & (1 << 38) != 0 && caps & (1 << 39) != 0);
    wprof::testing::require(ok, "CAP_BPF/CAP_PERFMON (run as root)")
}

/// Serialises the privileged tests of one binary: they share the kernel's probe state and
/// two cores, and the cleanup checks count every wprof program on the host.
pub fn bpf_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs a command to completion and returns its output, panicking with the command line if
/// it cannot be started.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// The text of stdout and stderr, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A temp dir for a test's outputs.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// An `--events` CSV (no field holds a comma): its header and its rows, field by field.
pub struct EventsCsv {
    /// The file's text (for failure messages).
    pub text: String,
    /// Column names.
    pub header: Vec<String>,
    /// The rows, each as wide as the file has it.
    pub rows: Vec<Vec<String>>,
}

impl EventsCsv {
    /// Reads and splits the CSV at `path`.
    pub fn read(path: &Path) -> EventsCsv {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("read the CSV {}: {e}", path.display()));
        let split = |l: &str| l.split(',').map(str::to_string).collect::<Vec<_>>();
        let mut lines = text.lines();
        let header = split(lines.next().expect("a CSV header"));
        let rows = lines.map(split).collect();
        EventsCsv { text, header, rows }
    }

    /// The index of column `name`, or a panic listing the columns.
    pub fn col(&self, name: &str) -> usize {
        self.header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {:?}", self.header))
    }
}

/// `wprof report` of a run file, as text (the report must succeed).
pub fn report_text(json: &Path) -> String {
    let out = run(wprof().arg("report").arg(json));
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Reads a run JSON.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    wprof::model::json::parse_deep(&text)
        .unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// Finds a tree node in a run JSON by a path of names from a root.
pub fn node<'a>(run: &'a serde_json::Value, path: &[&str]) -> &'a serde_json::Value {
    let mut nodes = run["tree"]["roots"].as_array().expect("roots");
    let mut found = None;
    for name in path {
        let n = nodes
            .iter()
            .find(|n| n["name"] == *name)
            .unwrap_or_else(|| panic!("no node {path:?} (stuck at {name}) in {}", summary(run)));
        nodes = n["children"].as_array().expect("children");
        found = Some(n);
    }
    found.expect("empty path")
}

/// Asserts that no node of a run's corrected tree has children adding up to more than its
/// corrected time (within 0.2%, rounding).
#[allow(dead_code)] // not every test binary checks a corrected tree
pub fn assert_corrected_additive(run: &serde_json::Value) {
    fn walk(n: &serde_json::Value, path: &str) {
        let total = |n: &serde_json::Value| n["corrected"]["total_ns"].as_u64().unwrap_or(0);
        let kids = n["children"].as_array().cloned().unwrap_or_default();
        let sum: u64 = kids.iter().map(total).sum();
        let path = format!("{path}/{}", n["name"].as_str().unwrap_or("?"));
        assert!(
            sum <= total(n) + total(n) / 500,
            "{path}: children's corrected times add up to {sum} ns, more than its {} ns",
            total(n)
        );
        kids.iter().for_each(|k| walk(k, &path));
    }
    for r in run["tree"]["roots"].as_array().expect("roots") {
        walk(r, "");
    }
}

/// The C fixture's `write_mean_ns` from its result line (its own mean write time), ns.
#[allow(dead_code)] // not every test binary runs the fixture untraced
pub fn write_mean_ns(stdout: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(stdout);
    text.split_whitespace()
        .find_map(|f| f.strip_prefix("write_mean_ns="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no write_mean_ns in {text}"))
}

/// A node's integer field.
pub fn u(n: &serde_json::Value, field: &str) -> u64 {
    n[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer {field} in {n}"))
}

/// One line per node: path, count, mean — for failure messages.
pub fn summary(run: &serde_json::Value) -> String {
    fn walk(n: &serde_json::Value, path: &str, out: &mut String) {
        let p = format!("{path}/{}", n["name"].as_str().unwrap_or("?"));
        out.push_str(&format!(
            "{p} n={} mean={}ns lost={} abandoned={}\n",
            n["count"], n["mean_ns"], n["lost"], n["abandoned"]
        ));
        for c in n["children"].as_array().into_iter().flatten() {
            walk(c, &p, out);
        }
    }
    let mut out = String::new();
    for r in run["tree"]["roots"].as_array().into_iter().flatten() {
        walk(r, "", &mut out);
    }
    out
}

/// Starts a fixture that waits for a line on stdin before working (`--wait`), and returns
/// it once it printed `ready`.
pub fn spawn_waiting(program: &Path, args: &[&str]) -> Child {
    use std::io::BufRead;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    let stdout = child.stdout.take().expect("stdout");
    let mut reader = std::io::BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line).expect("read ready line");
    assert!(
        line.starts_with("ready"),
        "fixture printed {line:?} instead of ready"
    );
    child.stdout = Some(reader.into_inner());
    child
}

fn bpftool(what: &str) -> Vec<serde_json::Value> {
    let out = run(Command::new("bpftool").args(["-j", what, "list"]));
    assert!(
        out.status.success(),
        "bpftool {what} list failed: {}",
        text(&out)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool json");
    v.as_array().cloned().unwrap_or_default()
}

/// Ids of the wprof BPF programs loaded on the host.
pub fn wprof_program_ids() -> Vec<u64> {
    wprof_programs().into_keys().collect()
}

/// The wprof BPF programs loaded on the host: id -> name.
fn wprof_programs() -> std::collections::HashMap<u64, String> {
    bpftool("prog")
        .iter()
        .filter_map(|p| Some((p["id"].as_u64()?, p["name"].as_str()?.to_string())))
        .filter(|(_, n)| n.starts_with("wprof_"))
        .collect()
}

/// The names of the wprof programs that links point at now, one entry a link (a program
/// attached twice is named twice).
pub fn wprof_linked_programs() -> Vec<String> {
    let names = wprof_programs();
    bpftool("link")
        .iter()
        .filter_map(|l| names.get(&l["prog_id"].as_u64()?).cloned())
        .collect()
}

/// What of wprof is still loaded: its programs, and any link pointing at one of `prog_ids`.
pub fn wprof_leftovers(prog_ids: &[u64]) -> Vec<String> {
    let mut left: Vec<String> = wprof_program_ids()
        .iter()
        .map(|id| format!("prog {id}"))
        .collect();
    for l in bpftool("link") {
        if l["prog_id"]
            .as_u64()
            .is_some_and(|id| prog_ids.contains(&id))
        {
            left.push(format!("link {} -> prog {}", l["id"], l["prog_id"]));
        }
    }
    left
}

/// Starts `wprof attach --target TARGET --pid PID --json JSON` and returns once its probes
/// are live.
pub fn start_attach(target: &str, pid: u32, json: &Path) -> Child {
    start_attach_with(&[], target, pid, json, &[])
}

/// [`start_attach`] with `options` after `attach` and `env` set for wprof.
pub fn start_attach_with(
    options: &[&str],
    target: &str,
    pid: u32,
    json: &Path,
    env: &[(&str, &str)],
) -> Child {
    let mut w = wprof()
        .envs(env.iter().copied())
        .arg("attach")
        .args(options)
        .args(["--target", target, "--pid", &pid.to_string(), "--json"])
        .arg(json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wprof");
    wait_attached(&mut w);
    w
}

/// Lets a fixture started with `--wait` go on (a line on its stdin).
pub fn release(fixture: &mut Child) {
    use std::io::Write;
    fixture
        .stdin
        .as_mut()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("release the fixture");
}

/// Reads wprof's stderr until its "attached" line, then keeps draining it in a thread so wprof
/// never blocks on a full pipe.
pub fn wait_attached(w: &mut Child) {
    use std::io::{BufRead, BufReader};
    let mut reader = BufReader::new(w.stderr.take().expect("stderr"));
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).expect("read wprof stderr") == 0 {
            panic!("wprof ended before attaching:\n{seen}");
        }
        seen.push_str(&line);
        if line.contains("wprof: attached") {
            break;
        }
    }
    std::thread::spawn(move || {
        let mut sink = String::new();
        while reader.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {}
    });
}

#[path = "../../src/render/svg_frames.rs"]
mod svg;
pub use svg::SvgFrame;

/// Every frame of an SVG flamegraph file, which must parse as XML (inferno writes a DOCTYPE).
pub fn svg_frames(path: &Path) -> Vec<SvgFrame> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    svg::svg_frames(&text)
}

/// Sum of `count` over every node of phase `name`, anywhere in the run's trees.
pub fn count_anywhere(run: &serde_json::Value, name: &str) -> u64 {
    fn walk(n: &serde_json::Value, name: &str) -> u64 {
        let own = if n["name"] == name {
            n["count"].as_u64().unwrap_or(0)
        } else {
            0
        };
        own + n["children"]
            .as_array()
            .map(|c| c.iter().map(|k| walk(k, name)).sum())
            .unwrap_or(0)
    }
    run["tree"]["roots"]
        .as_array()
        .expect("roots")
        .iter()
        .map(|r| walk(r, name))
        .sum()
}

/// The return mode C++ and Rust phases get by default on this host: `guarded` where `wprof
/// doctor` says the unwind guard loads (its BPF programs writing the stacks, or wprof writing
/// them for it under lockdown), else `ret-sites`.
pub fn cxx_default_return_mode() -> &'static str {
    let o = run(wprof().args(["doctor", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}\n{}", text(&o)));
    let guard = v["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "unwind guard"))
        .unwrap_or_else(|| panic!("doctor has no unwind guard check: {v}"));
    if guard["verdict"] == "ok" {
        "guarded"
    } else {
        "ret-sites"
    }
}
