//! `wprof attach --serve`: a real Prometheus (Debian's 2.42, native histograms on, on
//! 127.0.0.1 with its data in a temp dir) scrapes wprof tracing the C fixture every second;
//! once the fixture's calls are done and scraped, Prometheus's `histogram_quantile(0.99, …)`,
//! `histogram_count` and the calls counter must agree with wprof's own JSON of the same run:
//! counts exactly, the 99th percentile within the native histogram's stated error. Per event
//! and with `--aggregate kernel`. Every process is killed at the end, also on failure.
//!
//! The same endpoint on a real PostgreSQL 15 whose backends come and go: their series carry
//! their server's `DATADIR:PORT`, and exited backends are forgotten.
//!
//! The privileged tests check their capability first (common::bpf_available) and run one at
//! a time (common::bpf_lock); without /usr/bin/prometheus they skip, except under
//! WPROF_REQUIRE_BPF=1 where that fails.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::http::{free_port, get};
use common::pg::{pg_and_bpf, Pg};
use common::*;
use wprof::serve::native::QUANTILE_ERROR;

const PROMETHEUS: &str = "/usr/bin/prometheus";

/// Root calls of the fixture: ~3 s of work, so several scrapes see the counts grow and
/// `rate()` has something to work on.
const ITER: u64 = 10_000;

/// Processes a test started; each still running is killed when it ends, passed or not.
#[derive(Default)]
struct Running(Vec<Child>);

impl Running {
    fn add(&mut self, c: Child) -> usize {
        self.0.push(c);
        self.0.len() - 1
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if c.try_wait().ok().flatten().is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Percent-encodes a query parameter.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of a PromQL instant query with one result, None when it has none.
fn query(prom: SocketAddr, q: &str) -> Option<f64> {
    let (status, body) = get(prom, &format!("/api/v1/query?query={}", encode(q)))?;
    assert_eq!(status, 200, "{q}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("query JSON");
    let result = v["data"]["result"].as_array()?;
    assert!(result.len() <= 1, "{q}: {body}");
    result.first()?["value"][1].as_str()?.parse().ok()
}

/// Starts Prometheus scraping `target` every second, data and config in `dir`; returns its
/// address once ready.
fn start_prometheus(dir: &Path, target: SocketAddr, running: &mut Running) -> SocketAddr {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: wprof\n    \
             static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .expect("write prometheus.yml");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("prometheus log");
    let child = Command::new(PROMETHEUS)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--enable-feature=native-histograms")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    running.add(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(addr, "/-/ready").map(|r| r.0) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "prometheus not ready:\n{}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    addr
}

/// The order statistics around the 99th percentile (ranks floor(0.99 n) and ceil(0.99 n)+1)
/// from a JSON histogram's buckets (`[highest value, count]`).
fn p99_bracket(hist: &serde_json::Value, n: u64) -> (f64, f64) {
    let buckets: Vec<(u64, u64)> = hist["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| (b[0].as_u64().unwrap(), b[1].as_u64().unwrap()))
        .collect();
    let at = |rank: u64| {
        let mut seen = 0;
        for &(v, c) in &buckets {
            seen += c;
            if seen >= rank.max(1) {
                return v as f64;
            }
        }
        buckets.last().map_or(0.0, |b| b.0 as f64)
    };
    let r = 0.99 * n as f64;
    (at(r.floor() as u64), at(r.ceil() as u64 + 1))
}

/// Traces the fixture with `wprof attach --serve` (plus `extra`) under a real Prometheus and
/// compares what Prometheus stored with the run's JSON.
fn prometheus_agrees_with_the_run(extra: &[&str]) {
    if !bpf_available()
        || !wprof::testing::require(
            Path::new(PROMETHEUS).exists(),
            "/usr/bin/prometheus (apt-get install prometheus; .ci/install.sh does)",
        )
    {
        return;
    }
    let _lock = bpf_lock();
    let dir = tempdir();
    let mut running = Running::default();
    let iterations = ITER.to_string();
    let fx = running.add(spawn_waiting(
        &fixture("writepath"),
        &["--wait", "--linger", "--iterations", &iterations],
    ));
    let serve: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let json = dir.path().join("run.json");
    let mut w = wprof()
        .args(["attach", "--target", "fixture", "--quiet", "--pid"])
        .arg(running.0[fx].id().to_string())
        .arg("--serve")
        .arg(serve.to_string())
        .arg("--json")
        .arg(&json)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wprof");
    wait_attached(&mut w);
    let wp = running.add(w);
    let prom = start_prometheus(dir.path(), serve, &mut running);
    let scrapes = r#"count_over_time(up{job="wprof"}[5m])"#;
    let deadline = Instant::now() + Duration::from_secs(60);
    while query(prom, scrapes).unwrap_or(0.0) < 1.0 {
        assert!(Instant::now() < deadline, "Prometheus never scraped wprof");
        std::thread::sleep(Duration::from_millis(200));
    }
    release(&mut running.0[fx]);

    // Every call done and scraped, and at least two scrapes.
    let calls = r#"wprof_phase_calls_total{phase="write_record"}"#;
    loop {
        let done = query(prom, calls) == Some(ITER as f64);
        if done && query(prom, scrapes).unwrap_or(0.0) >= 2.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never saw {ITER} calls: {:?} ({:?} scrapes, up = {:?})",
            query(prom, calls),
            query(prom, scrapes),
            query(prom, r#"up{job="wprof"}"#)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // docs/fleet.md's query: the p99 per phase across processes, from rates.
    let fleet = r#"histogram_quantile(0.99, sum by (phase) (rate(wprof_phase_duration_seconds{phase="write_record"}[5m])))"#;
    let fleet_p99 = query(prom, fleet);
    assert!(
        fleet_p99.is_some_and(|v| v.is_finite() && v > 0.0),
        "{fleet}: {fleet_p99:?}"
    );
    eprintln!("{fleet} = {:.1} µs", fleet_p99.unwrap_or(0.0) * 1e6);
    let mut seen = Vec::new();
    for path in WRITE_PATH {
        let sel = format!(
            r#"wprof_phase_duration_seconds{{profile="fixture",phase="{}"}}"#,
            path.join("/")
        );
        let q = |f: &str| {
            query(prom, &f.replace("SEL", &sel)).unwrap_or_else(|| panic!("no {f} for {path:?}"))
        };
        seen.push((
            path,
            q("histogram_quantile(0.99, SEL)"),
            q("histogram_count(SEL)"),
            q("histogram_sum(SEL)"),
            query(
                prom,
                &format!(r#"wprof_phase_calls_total{{phase="{}"}}"#, path.join("/")),
            ),
        ));
    }

    // SIGINT: wprof detaches and writes the run.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(running.0[wp].id() as i32, libc::SIGINT) };
    let status = running.0[wp].wait().expect("wait for wprof");
    assert!(status.success(), "wprof exited {status:?}");
    let run = read_json(&json);
    for (path, p99_s, count, sum_s, calls) in seen {
        let n = node(&run, path);
        let timed = if n["corrected"].is_object() {
            &n["corrected"]
        } else {
            n
        };
        assert_eq!(u(n, "count"), ITER, "{path:?}\n{}", summary(&run));
        assert_eq!(count, ITER as f64, "{path:?}: histogram_count");
        assert_eq!(calls, Some(ITER as f64), "{path:?}: calls counter");
        let total = u(timed, "total_ns") as f64;
        assert!(
            (sum_s * 1e9 - total).abs() <= total * 1e-6,
            "{path:?}: histogram_sum {sum_s} s against {total} ns"
        );
        let (lo, hi) = p99_bracket(&timed["histogram"], ITER);
        let p99_ns = p99_s * 1e9;
        let json_p99 = u(timed, "p99_ns") as f64;
        eprintln!(
            "{:<45} Prometheus p99 {:>9.1} µs  wprof p99 {:>9.1} µs  ({:+.1}%)  count {count}",
            path.join("/"),
            p99_ns / 1e3,
            json_p99 / 1e3,
            (p99_ns / json_p99 - 1.0) * 100.0
        );
        assert!(
            p99_ns >= lo * (1.0 - QUANTILE_ERROR) && p99_ns <= hi * (1.0 + QUANTILE_ERROR),
            "{path:?}: Prometheus's p99 {p99_ns:.0} ns is not within {:.1}% of wprof's \
             {lo:.0}..{hi:.0} ns (p99 {json_p99:.0})",
            QUANTILE_ERROR * 100.0
        );
    }
}

#[test]
fn prometheus_agrees_with_the_json_per_event() {
    prometheus_agrees_with_the_run(&[]);
}

#[test]
fn prometheus_agrees_with_the_json_in_kernel() {
    prometheus_agrees_with_the_run(&["--aggregate", "kernel"]);
}

/// A port in use is an error before anything is attached (no root needed: wprof binds first).
#[test]
fn a_port_in_use_fails_before_attaching() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().unwrap().to_string();
    let me = std::process::id().to_string();
    let out = run(wprof().args(["attach", "-t", "fixture", "-p", &me, "--serve", &addr]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(err.contains("cannot listen there"), "{err}");
    assert!(!err.contains("attached"), "{err}");
    let out = run(wprof().args(["attach", "-t", "fixture", "-p", &me, "--serve", "nohost"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// The Prometheus endpoint on a real server whose backends come and go (`--serve --follow-forks
/// --per-pid`): every series of a backend carries its server's `DATADIR:PORT`, so the backends of
/// one segment add up in one series; the exited backends are forgotten (the processes gauge
/// comes back down) and their calls stay in the series; the final counts are the JSON's.
#[test]
fn serve_labels_backends_with_their_server_and_forgets_the_exited_ones() {
    let Some(_g) = pg_and_bpf() else { return };
    let pg = Pg::start();
    pg.psql("CREATE TABLE s (id int PRIMARY KEY);");
    let postmaster = pg.postmaster_pid();
    let dir = tempdir();
    let json = dir.path().join("run.json");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let w = Attach::start(
        &[
            "--target",
            "postgres",
            "--pid",
            &postmaster.to_string(),
            "--follow-forks",
            "--per-pid",
            "--serve",
            &addr.to_string(),
        ],
        &json,
    );
    // Twenty backends, each forked after the attach, inserting one row and exiting.
    const BACKENDS: u64 = 20;
    for i in 0..BACKENDS {
        pg.psql(&format!("INSERT INTO s VALUES ({i});"));
    }
    let segment = format!("{}:{}", pg.dir().join("data").display(), pg.port);
    // Exited processes are retired within a fraction of a second after wprof sees them go.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (calls, live, body) = loop {
        let (status, body) = get(addr, "/metrics").expect("scrape wprof");
        assert_eq!(status, 200, "{body}");
        // `NAME{LABELS} VALUE` lines of the text exposition.
        let value = |name: &str, has: &[&str]| {
            body.lines().find_map(|l| {
                let (series, v) = l.rsplit_once(' ')?;
                let wanted = series.starts_with(name) && has.iter().all(|h| series.contains(h));
                wanted.then(|| v.parse::<f64>().ok()).flatten()
            })
        };
        let process = format!("process=\"{segment}\"");
        let calls = value(
            "wprof_phase_calls_total{",
            &["phase=\"executor_run/heap_insert\"", &process],
        );
        let live = value("wprof_serve_processes", &[]);
        if calls == Some(BACKENDS as f64) && live.is_some_and(|n| n <= 1.0) {
            break (calls, live, body);
        }
        assert!(
            Instant::now() < deadline,
            "calls {calls:?}, live {live:?}:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // No series names a backend by its own title: they all fold into the server's.
    assert!(
        body.lines()
            .filter(|l| l.starts_with("wprof_phase_calls_total{"))
            .all(|l| l.contains(&format!("process=\"{segment}\""))),
        "{body}"
    );
    let (_, stderr) = w.stop();
    let run = read_json(&json);
    assert_eq!(
        u(node(&run, &["executor_run", "heap_insert"]), "count"),
        BACKENDS,
        "{stderr}\n{}",
        summary(&run)
    );
    assert_eq!(calls, Some(BACKENDS as f64));
    assert!(live.is_some_and(|n| n <= 1.0));
}
