//! A bounded fuzzing harness over what wprof reads from users: run files (`report`,
//! `compare`, `check`), hypothesis files (`check`) and attach profiles (`probes`). Each case is
//! a real input mutated (bytes flipped, spans cut or repeated, numbers swapped for extremes,
//! deep nesting, truncation); wprof must answer with a result or a clear error, never a panic,
//! an abort or a hang. Seeded, so a failure names a case that can be replayed: set
//! `WPROF_FUZZ_SEED` and `WPROF_FUZZ_CASES` to explore further. Privileged for the seed run
//! only (a real run of the C fixture); the mutations need nothing.

mod common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Cases per input kind in CI (each is one short wprof process).
const CASES: u64 = 150;

/// A wprof that runs longer than this on one small input is hung.
const LIMIT: Duration = Duration::from_secs(20);

/// xorshift64*: a test needs reproducible mutations, not a statistical generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const EXTREMES: &[&str] = &[
    "-1",
    "0",
    "18446744073709551616",
    "1e308",
    "-1e308",
    "NaN",
    "null",
    "\"\"",
    "\"\\u0000\\u001b[31m\"",
    "[]",
    "{}",
    "true",
    "9007199254740993",
];

/// One mutation of `text`.
fn mutate(text: &str, rng: &mut Rng) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    let n = b.len().max(1);
    match rng.below(7) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(n);
                if i < b.len() {
                    b[i] ^= 1 << rng.below(8);
                }
            }
        }
        1 => {
            let i = rng.below(n);
            let len = rng.below(200);
            b.drain(i.min(b.len())..(i + len).min(b.len()));
        }
        2 => {
            let i = rng.below(n);
            let len = rng.below(400);
            let piece = b[i.min(b.len())..(i + len).min(b.len())].to_vec();
            let at = rng.below(n).min(b.len());
            b.splice(at..at, piece);
        }
        3 => {
            // A number token swapped for an extreme value or another type.
            let digits: Vec<usize> = (0..b.len())
                .filter(|&i| b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_alphanumeric()))
                .collect();
            if let Some(&i) = digits.get(rng.below(digits.len())) {
                let end = (i..b.len())
                    .find(|&j| !(b[j].is_ascii_digit() || b[j] == b'.'))
                    .unwrap_or(b.len());
                let v = EXTREMES[rng.below(EXTREMES.len())].as_bytes().to_vec();
                b.splice(i..end, v);
            }
        }
        4 => b.truncate(rng.below(n)),
        5 => {
            let at = rng.below(n).min(b.len());
            let depth = 1000 + rng.below(60_000);
            let open = if rng.below(2) == 0 { "[" } else { "{\"a\":" };
            b.splice(at..at, open.repeat(depth).into_bytes());
        }
        _ => {
            // A line repeated (a duplicate key, a second table header).
            let lines: Vec<&[u8]> = b.split(|&c| c == b'\n').collect();
            let l = lines[rng.below(lines.len())].to_vec();
            let at = rng.below(n).min(b.len());
            let mut ins = l;
            ins.push(b'\n');
            b.splice(at..at, ins);
        }
    }
    b
}

/// Runs wprof with `args`, killing it past [`LIMIT`]. Its output goes to files, not pipes: a
/// large report must not block on a pipe nobody reads yet.
fn wprof_limited(args: &[&std::ffi::OsStr]) -> Output {
    let dir = tempdir();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = wprof()
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("start wprof");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "wprof {args:?} hung (> {LIMIT:?}): {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: std::fs::read(&out).unwrap_or_default(),
        stderr: std::fs::read(&err).unwrap_or_default(),
    }
}

/// Asserts wprof answered `case` with a result or a clear error.
fn assert_sane(out: &Output, case: &str, allowed: &[i32]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    assert!(
        code.is_some_and(|c| allowed.contains(&c)) && !stderr.contains("panicked"),
        "{case}: exit {:?} (allowed {allowed:?})\nstderr: {stderr}",
        out.status
    );
    // A clear error is a readable one: no line of it runs on for pages.
    assert!(
        stderr.lines().all(|l| l.len() <= 2_000),
        "{case}: an error line of {} bytes",
        stderr.lines().map(str::len).max().unwrap_or(0)
    );
}

fn seed() -> u64 {
    std::env::var("WPROF_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0f0f)
}

fn cases() -> u64 {
    std::env::var("WPROF_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CASES)
}

/// A real run of the C fixture, with CPU samples and a sampled phase: every section of the
/// JSON has something in it.
fn seed_run(dir: &Path) -> String {
    let profile = dir.join("sampled.toml");
    let builtin = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("attach-profiles/fixture.toml"),
    )
    .expect("fixture.toml");
    std::fs::write(
        &profile,
        builtin.replacen(
            "symbol = \"compress_block\"",
            "symbol = \"compress_block\"\nmeasure = \"sample\"",
            1,
        ),
    )
    .expect("write profile");
    let json = dir.join("seed.json");
    let out = run(wprof()
        .args(["record", "--target"])
        .arg(&profile)
        .args(["--cpu-sample", "997", "--json"])
        .arg(&json)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", "300"]));
    assert!(out.status.success(), "{}", text(&out));
    std::fs::read_to_string(&json).expect("seed run")
}

#[test]
fn mutated_runs_and_hypotheses_get_results_or_clear_errors() {
    if !bpf_available() {
        return;
    }
    let dir = tempdir();
    let seed_text = {
        let _g = bpf_lock();
        seed_run(dir.path())
    };
    let good = dir.path().join("good.json");
    std::fs::write(&good, &seed_text).expect("write");
    let hyp_text = "[[hypothesis]]\nid = \"H1\"\nclaim = \"flush is most of persist\"\n\
                    phase = \"flush_block\"\nof = \"persist_block\"\nshare = \"50%..95%\"\n\n\
                    [[hypothesis]]\nid = \"H2\"\nphase = \"write_record\"\nmean = \"<1s\"\n";
    let hyp = dir.path().join("h.toml");
    std::fs::write(&hyp, hyp_text).expect("write");
    let mut rng = Rng(seed());
    let bad = dir.path().join("bad.json");
    let bad_hyp = dir.path().join("bad.toml");
    for case in 0..cases() {
        std::fs::write(&bad, mutate(&seed_text, &mut rng)).expect("write case");
        let what = format!("run case {case} (seed {})", seed());
        for args in [
            vec!["report".as_ref(), bad.as_os_str()],
            vec![
                "report".as_ref(),
                "--format".as_ref(),
                "json".as_ref(),
                bad.as_os_str(),
            ],
            vec![
                "report".as_ref(),
                "--format".as_ref(),
                "svg".as_ref(),
                bad.as_os_str(),
            ],
            vec!["compare".as_ref(), good.as_os_str(), bad.as_os_str()],
            vec![
                "check".as_ref(),
                "--hypotheses".as_ref(),
                hyp.as_os_str(),
                bad.as_os_str(),
            ],
        ] {
            // 0: a result; 2: a clear error; 3: check refuted / compare crossed; 1: runtime.
            assert_sane(&wprof_limited(&args), &what, &[0, 1, 2, 3]);
        }
        std::fs::write(&bad_hyp, mutate(hyp_text, &mut rng)).expect("write case");
        let args = [
            "check".as_ref(),
            "--hypotheses".as_ref(),
            bad_hyp.as_os_str(),
            good.as_os_str(),
        ];
        let what = format!("hypothesis case {case} (seed {})", seed());
        assert_sane(&wprof_limited(&args), &what, &[0, 2, 3]);
    }
}

#[test]
fn mutated_profiles_get_results_or_clear_errors() {
    let builtin = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("attach-profiles/fixture.toml"),
    )
    .expect("fixture.toml");
    let dir = tempdir();
    let bad = dir.path().join("bad.toml");
    let binary = fixture("writepath");
    let mut rng = Rng(seed() ^ 0xa5a5);
    for case in 0..cases() {
        std::fs::write(&bad, mutate(&builtin, &mut rng)).expect("write case");
        let args = [
            "probes".as_ref(),
            "--target".as_ref(),
            bad.as_os_str(),
            "--binary".as_ref(),
            binary.as_os_str(),
        ];
        // 0: resolved; 2: a malformed profile; 4: a required phase does not resolve.
        let what = format!("profile case {case} (seed {})", seed());
        assert_sane(&wprof_limited(&args), &what, &[0, 2, 4]);
    }
    // The same through export, whose output is a script run as root.
    let mut rng = Rng(seed() ^ 0x5a5a);
    for case in 0..cases() / 3 {
        std::fs::write(&bad, mutate(&builtin, &mut rng)).expect("write case");
        let args = [
            "export".as_ref(),
            "--bpftrace".as_ref(),
            "--target".as_ref(),
            bad.as_os_str(),
            "--binary".as_ref(),
            binary.as_os_str(),
        ];
        let what = format!("export case {case} (seed {})", seed());
        assert_sane(&wprof_limited(&args), &what, &[0, 2, 4]);
    }
}
