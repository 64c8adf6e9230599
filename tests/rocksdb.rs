//! RocksDB, a real C++ storage engine (Debian's librocksdb 7.8 and its db_bench, installed by
//! .ci/install.sh), traced with the built-in `rocksdb` profile and checked against RocksDB's own
//! figures: `--statistics=1` makes db_bench print `rocksdb.db.write.micros ... COUNT : N
//! SUM : S`, measured by a StopWatch inside DBImpl::WriteImpl, the profile's root.
//!
//! What must hold, same run: write_impl's count equals COUNT exactly; its raw mean (wprof's
//! window holds RocksDB's StopWatch, entry to return) is within 5% of SUM / COUNT, and its
//! raw p50 within 20% of RocksDB's P50 (RocksDB interpolates inside coarse buckets); the
//! background flush is a root of its own, with as many calls as `rocksdb.db.flush.micros`
//! COUNT; with `fillsync` every write syncs the WAL once (`rocksdb.wal.synced`). How far the
//! corrected mean lies from an untraced run's is the probes' distortion of a 4-170 µs write:
//! printed, and recorded in docs/benchmarks.md. With `--in-situ` the corrected tree stays
//! additive; with write_to_wal sampled instead of probed, its share of the write is RocksDB's
//! own (PerfContext's write_wal_time, untraced) within 5 points.
mod common;

use std::path::Path;

use common::*;

const DB_BENCH: &str = "/usr/bin/db_bench";

/// `rocksdb.NAME P50 : a P95 : b P99 : c P100 : d COUNT : n SUM : s` (histograms) or
/// `rocksdb.NAME COUNT : n` (tickers) from db_bench's statistics: field -> value.
fn stat(out: &str, name: &str) -> std::collections::HashMap<String, f64> {
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} in db_bench's output:\n{out}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(3)
        .filter(|w| w[1] == ":")
        .filter_map(|w| Some((w[0].to_string(), w[2].parse().ok()?)))
        .collect()
}

/// Runs db_bench untraced and under `wprof record --target rocksdb`; returns db_bench's
/// stdout of each and the run's JSON, or None where the test cannot run (see [`ready`]).
fn bench(args: &[&str]) -> Option<(String, String, serde_json::Value)> {
    if !ready() {
        return None;
    }
    let _g = bpf_lock();
    let tmp = tempdir();
    let dir = tmp.path();
    let db = |name: &str| format!("--db={}", dir.join(name).display());
    let untraced = run(std::process::Command::new(DB_BENCH)
        .args(args)
        .arg(db("untraced")));
    assert!(untraced.status.success(), "{}", text(&untraced));
    let json = dir.join("run.json");
    let traced = run(wprof()
        .args(["record", "--quiet", "--target", "rocksdb", "--json"])
        .arg(&json)
        .arg("--")
        .arg(DB_BENCH)
        .args(args)
        .arg(db("traced")));
    assert!(traced.status.success(), "{}", text(&traced));
    let s = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    Some((s(&untraced), s(&traced), read_json(&json)))
}

fn ready() -> bool {
    bpf_available()
        && wprof::testing::require(
            Path::new(DB_BENCH).exists(),
            "RocksDB's db_bench (apt install rocksdb-tools librocksdb-dev)",
        )
}

/// A node's figure in µs: raw (`mean_ns`, `p50_ns`...) or, under `corrected`, corrected.
fn us(n: &serde_json::Value, field: &str) -> f64 {
    n[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no {field} in {n}"))
        / 1e3
}

/// The write path's figures against RocksDB's own in the same run; prints the comparison.
fn check_writes(what: &str, untraced: &str, traced: &str, run: &serde_json::Value) {
    let own = stat(traced, "rocksdb.db.write.micros");
    let base = stat(untraced, "rocksdb.db.write.micros");
    let w = node(run, &["write_impl"]);
    assert_eq!(
        u(w, "count") as f64,
        own["COUNT"],
        "{what}: one write_impl per RocksDB write\n{}",
        summary(run)
    );
    let own_mean = own["SUM"] / own["COUNT"];
    let raw_mean = us(w, "mean_ns");
    let raw_p50 = us(w, "p50_ns");
    let corrected = &w["corrected"];
    eprintln!(
        "{what}: RocksDB's own mean {own_mean:.1} µs p50 {:.1} p99 {:.1} (untraced: mean {:.1} \
         p50 {:.1} p99 {:.1}); wprof raw mean {raw_mean:.1} p50 {raw_p50:.1}, corrected mean \
         {:.1} p50 {:.1} p99 {:.1}",
        own["P50"],
        own["P99"],
        base["SUM"] / base["COUNT"],
        base["P50"],
        base["P99"],
        us(corrected, "mean_ns"),
        us(corrected, "p50_ns"),
        us(corrected, "p99_ns"),
    );
    // wprof's interval also holds the part of write_impl's own probes that falls inside the
    // call (the entry trap's way back, the return trap's way in), which RocksDB's StopWatch,
    // started inside, does not: the calibration's `own_ns`, under 1 µs; against a ~4 µs write
    // traced with uretprobes (~16 µs with every probe inside) that is more than 5%.
    let inside = run["probe_cost"]["calibration"]["classes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["own_ns"].as_f64())
        .fold(0.0f64, f64::max)
        / 1e3;
    assert!(
        (raw_mean - own_mean).abs() <= 0.05 * own_mean + inside,
        "{what}: raw mean {raw_mean:.2} µs vs RocksDB's {own_mean:.2} µs (+ {inside:.2} µs of \
         the root's own probes)"
    );
    // The median moves by the same inside part as every call. RocksDB's own P50 is
    // interpolated in its histogram's buckets (2 µs wide at 16-20 µs): a CI run on a slow host
    // read 20.61 µs raw against RocksDB's 17.15, the means 20.2 and 19.2.
    assert!(
        (raw_p50 - own["P50"]).abs() <= 0.20 * own["P50"] + inside,
        "{what}: raw p50 {raw_p50:.2} µs vs RocksDB's {:.2} µs (+ {inside:.2} µs of the root's \
         own probes)",
        own["P50"]
    );
}

#[test]
fn fillrandom_counts_every_write_and_its_background_flushes_exactly() {
    let Some((untraced, traced, run)) = bench(&[
        "--benchmarks=fillrandom",
        "--num=20000",
        "--statistics=1",
        "--write_buffer_size=1048576",
    ]) else {
        return;
    };
    check_writes("fillrandom", &untraced, &traced, &run);
    // Every write goes through the WAL and the memtable once.
    for path in [
        &["write_impl", "write_to_wal"][..],
        &["write_impl", "write_to_wal", "wal_add_record"],
        &["write_impl", "memtable_insert"],
        &["write_impl", "memtable_insert", "memtable_add"],
    ] {
        assert_eq!(
            u(node(&run, path), "count"),
            20_000,
            "{path:?}\n{}",
            summary(&run)
        );
    }
    // The flushes ran on RocksDB's background thread: a root of their own, each building an
    // SST file key by key.
    let flushes = stat(&traced, "rocksdb.db.flush.micros")["COUNT"];
    let flush = node(&run, &["flush_job"]);
    assert!(flushes >= 1.0, "a 1 MiB write buffer must flush:\n{traced}");
    assert_eq!(u(flush, "count") as f64, flushes, "{}", summary(&run));
    assert!(
        u(node(&run, &["flush_job", "table_add"]), "count") > 0,
        "{}",
        summary(&run)
    );
}

#[test]
fn fillsync_syncs_the_wal_once_per_write() {
    // fillsync writes --num keys, each synced.
    let Some((untraced, traced, run)) =
        bench(&["--benchmarks=fillsync", "--num=2000", "--statistics=1"])
    else {
        return;
    };
    check_writes("fillsync", &untraced, &traced, &run);
    let synced = stat(&traced, "rocksdb.wal.synced")["COUNT"];
    let sync = node(&run, &["write_impl", "write_to_wal", "file_sync"]);
    assert_eq!(synced, 2000.0, "{traced}");
    assert_eq!(u(sync, "count") as f64, synced, "{}", summary(&run));
}

#[test]
fn in_situ_checks_at_every_depth_keep_the_corrected_tree_additive() {
    // With `--in-situ` each parent's check comes from its own light epochs, and between them a
    // memtable fills and flushes: checks at two depths disagree on db_bench (write_impl's
    // children corrected by theirs came to 6.1 µs inside its 4.2, wal_add_record to 134% of
    // write_to_wal, before checked parents fitted their children). The tree must stay whole.
    if !ready() {
        return;
    }
    let _g = bpf_lock();
    let tmp = tempdir();
    let json = tmp.path().join("run.json");
    let out = run(wprof()
        .args([
            "record",
            "--quiet",
            "--target",
            "rocksdb",
            "--in-situ",
            "--json",
        ])
        .arg(&json)
        .arg("--")
        .arg(DB_BENCH)
        .args([
            "--benchmarks=fillrandom",
            "--num=300000",
            "--write_buffer_size=4194304",
        ])
        .arg(format!("--db={}", tmp.path().join("db").display())));
    assert!(out.status.success(), "{}", text(&out));
    let run = read_json(&json);
    let checks = run["in_situ"].as_array().expect("in_situ");
    for path in [&["write_impl"][..], &["write_impl", "write_to_wal"]] {
        assert!(
            checks.iter().any(|c| c["path"] == serde_json::json!(path)),
            "no check of {path:?}: {checks:?}"
        );
    }
    assert_corrected_additive(&run);
}

/// The built-in `rocksdb` profile with only write_impl, the flush thread's phases and the
/// two children the write spends its time in, measured by CPU samples.
fn sampled_children_profile() -> String {
    let builtin = include_str!("../attach-profiles/rocksdb.toml");
    let mut blocks = builtin.split("[[phase]]");
    let mut out = blocks.next().unwrap_or_default().to_string();
    for b in blocks {
        let name = b
            .lines()
            .find_map(|l| l.strip_prefix("name = "))
            .map(|n| n.trim_matches('"'))
            .unwrap_or_default();
        match name {
            "write_impl" | "flush_job" | "table_add" => out.push_str(&format!("[[phase]]{b}")),
            "write_to_wal" | "memtable_insert" => out.push_str(&format!(
                "[[phase]]{}\nmeasure = \"sample\"\n\n",
                b.trim_end()
            )),
            _ => {}
        }
    }
    out
}

#[test]
fn sampled_children_take_the_share_rocksdb_times_for_them() {
    // RocksDB times the WAL part of each write itself (PerfContext's write_wal_time, with
    // --perf_level=3): 33.9-34.0% of the write untraced on this host. Sampled at 1,999 Hz
    // under a probed write_impl, write_to_wal came to 33.4-33.5% (benchmarks §27); with the
    // samples' stacks in a 16,384-bucket stack map, whose collisions dropped ~5% of them,
    // 26-31%. Within 5 points, 95% interval included, of RocksDB's own figure.
    if !ready() {
        return;
    }
    let _g = bpf_lock();
    let tmp = tempdir();
    let dir = tmp.path();
    let args = [
        "--benchmarks=fillrandom",
        "--num=500000",
        "--statistics=1",
        "--write_buffer_size=4194304",
    ];
    let untraced = run(std::process::Command::new(DB_BENCH)
        .args(args)
        .arg("--perf_level=3")
        .arg(format!("--db={}", dir.join("untraced").display())));
    assert!(untraced.status.success(), "{}", text(&untraced));
    let out = String::from_utf8_lossy(&untraced.stdout);
    let perf = |name: &str| -> f64 {
        out.split([',', '\n'])
            .find_map(|f| f.trim().strip_prefix(&format!("{name} = ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in db_bench's output:\n{out}"))
    };
    let writes = stat(&out, "rocksdb.db.write.micros");
    let own_wal = 100.0 * perf("write_wal_time") / (writes["SUM"] * 1e3);
    let profile = dir.join("sampled.toml");
    std::fs::write(&profile, sampled_children_profile()).expect("write profile");
    let json = dir.join("run.json");
    let traced = run(wprof()
        .args(["record", "--quiet", "--cpu-sample", "1999", "--target"])
        .arg(&profile)
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg(DB_BENCH)
        .args(args)
        .arg(format!("--db={}", dir.join("traced").display())));
    assert!(traced.status.success(), "{}", text(&traced));
    let run = read_json(&json);
    let wal = &node(&run, &["write_impl", "write_to_wal"])["sampled"];
    let (share, low, high) = (
        100.0 * wal["share"].as_f64().expect("share"),
        100.0 * wal["share_low"].as_f64().expect("share_low"),
        100.0 * wal["share_high"].as_f64().expect("share_high"),
    );
    eprintln!(
        "write_to_wal: sampled {share:.1}% [{low:.1}, {high:.1}] of write_impl, RocksDB's own \
         {own_wal:.1}%; memtable_insert sampled {:.1}%",
        100.0
            * node(&run, &["write_impl", "memtable_insert"])["sampled"]["share"]
                .as_f64()
                .unwrap_or(0.0)
    );
    assert!(u(wal, "parent_samples") >= 2000, "too few samples: {wal}");
    assert!(
        low - 5.0 <= own_wal && own_wal <= high + 5.0,
        "sampled WAL share {share:.1}% [{low:.1}, {high:.1}] against RocksDB's own {own_wal:.1}%"
    );
}

/// Detaching from a program that keeps writing loses no return: each phase's entries less its
/// returns is at most its calls in flight when the run ended. Guarded uretprobes (the default
/// for C++) once lost 1.6-3.9% of db_bench's returns this way, 35-47% with one link per probe
/// point: the entries went on counting while the uretprobes came off. A call in flight when
/// the probes went live may still return unmatched (returns above entries): not checked.
#[test]
fn detaching_from_a_running_db_bench_loses_no_return() {
    if !ready() {
        return;
    }
    let _g = bpf_lock();
    let tmp = tempdir();
    let mut db_bench = std::process::Command::new(DB_BENCH)
        .args([
            "--benchmarks=fillrandom",
            "--num=100000000",
            "--duration=120",
            "--write_buffer_size=4194304",
        ])
        .arg(format!("--db={}", tmp.path().join("db").display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start db_bench");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let mode = cxx_default_return_mode();
    let mut failures = Vec::new();
    for (links, env) in [
        ("multi links", vec![]),
        ("per-point links", vec![("WPROF_PER_POINT_LINKS", "1")]),
    ] {
        let json = tmp.path().join("run.json");
        let w = start_attach_with(
            &["--quiet", "--calibrate-once", "--duration", "2s"],
            "rocksdb",
            db_bench.id(),
            &json,
            &env,
        );
        let out = w.wait_with_output().expect("wait for wprof");
        assert!(out.status.success(), "{links}: {}", text(&out));
        let run = read_json(&json);
        let phases = run["phases"].as_array().expect("phases");
        let write = phases
            .iter()
            .find(|p| p["name"] == "write_impl")
            .expect("write_impl");
        assert_eq!(write["return_mode"], mode, "{links}");
        assert!(
            u(write, "entries") > 1000,
            "{links}: too few writes: {write}"
        );
        for p in phases {
            let lost = u(p, "entries") as i64 - u(p, "returns") as i64;
            // One call in flight per thread: the writer and a flush or compaction or two.
            if lost > 4 {
                failures.push(format!(
                    "{links}: {} never returned {lost} of {}",
                    p["name"], p["entries"]
                ));
            }
        }
        let abandoned = u(&run["counters"], "abandoned");
        if abandoned > 10 {
            failures.push(format!("{links}: {abandoned} calls abandoned"));
        }
        eprintln!(
            "{links} ({mode}): write_impl entries {} returns {}, abandoned {abandoned}",
            write["entries"], write["returns"]
        );
    }
    let _ = db_bench.kill();
    let _ = db_bench.wait();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
