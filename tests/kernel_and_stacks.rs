//! Privileged tests of the kernel side of a run on real probes: a `syscall` phase nested in
//! the user phase that makes the call, on-CPU/off-CPU time per phase (`--off-cpu`), CPU
//! samples attributed to phases (`--cpu-sample`), and the CPU/off-CPU flamegraphs.

mod common;

use common::*;

const ITERATIONS: u64 = 200;

/// The fixture's write path with the fdatasync syscall as a kernel phase.
const PROFILE: &str = r#"
name = "fixture-kernel"
object = "exe"
[[phase]]
name = "write_record"
symbol = "write_record"
[[phase]]
name = "persist_block"
symbol = "persist_block"
[[phase]]
name = "flush_block"
symbol = "flush_block"
[[phase]]
name = "wal_sync"
symbol = "wal_sync"
[[phase]]
name = "fdatasync"
syscall = "fdatasync"
"#;

/// `(stack, weight)` of a profile in a run JSON.
fn stacks(run: &serde_json::Value, profile: &str) -> Vec<(String, u64)> {
    run[profile]["stacks"]
        .as_array()
        .unwrap_or_else(|| panic!("no {profile} in the run"))
        .iter()
        .map(|s| (s[0].as_str().unwrap().to_string(), s[1].as_u64().unwrap()))
        .collect()
}

fn weight_under(stacks: &[(String, u64)], prefix: &str) -> u64 {
    stacks
        .iter()
        .filter(|(s, _)| s.starts_with(prefix))
        .map(|s| s.1)
        .sum()
}

#[test]
fn syscall_phase_off_cpu_and_cpu_samples_on_the_fixture() {
    if !bpf_available() {
        return;
    }
    let _lock = bpf_lock();
    let dir = tempdir();
    let profile = dir.path().join("kernel.toml");
    std::fs::write(&profile, PROFILE).unwrap();
    let out_dir = dir.path().join("out");
    let out = run(wprof()
        .args([
            "record",
            "-q",
            "--off-cpu",
            "--cpu-sample",
            "999",
            "--target",
        ])
        .arg(&profile)
        .arg("--out")
        .arg(&out_dir)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", &ITERATIONS.to_string()])
        // flush_block spins 1 ms; wal_sync writes + fdatasyncs a file, then sleeps 1 ms.
        .args([
            "--flush-us",
            "1000",
            "--sleep-phase-us",
            "1000",
            "--sync-file",
        ])
        .arg(dir.path().join("wal.dat")));
    let stdout = text(&out);
    assert!(out.status.success(), "wprof record failed:\n{stdout}");
    assert!(
        stdout.contains(&format!("fdatasyncs={ITERATIONS}")),
        "{stdout}"
    );
    let runj = read_json(&out_dir.join("run.json"));

    // The syscall phase nests inside the user phase that makes it, once per call.
    let sync = node(&runj, &["write_record", "wal_sync", "fdatasync"]);
    assert_eq!(u(sync, "count"), ITERATIONS, "{}", summary(&runj));
    assert_eq!(u(node(&runj, &["write_record"]), "count"), ITERATIONS);

    // On/off CPU per phase: the spinning phase runs, the sleeping one waits.
    let share_off = |path: &[&str]| {
        let n = node(&runj, path);
        u(n, "off_cpu_ns") as f64 / u(n, "total_ns") as f64
    };
    let flush_off = share_off(&["write_record", "persist_block", "flush_block"]);
    assert!(
        flush_off <= 0.10,
        "spinning flush_block off-CPU {flush_off:.3}"
    );
    let wal_off = share_off(&["write_record", "wal_sync"]);
    // A sleep is a wait, not a preemption: little of wal_sync's off-CPU time was spent
    // runnable (one thread on two CPUs), and none of any node's is more than its off-CPU.
    let wal = node(&runj, &["write_record", "wal_sync"]);
    assert!(
        u(wal, "preempted_ns") * 10 <= u(wal, "off_cpu_ns"),
        "sleeping wal_sync preempted {} of {} ns off the CPU",
        u(wal, "preempted_ns"),
        u(wal, "off_cpu_ns")
    );
    // Mostly asleep; its probe hits and the fdatasync's own CPU time are on-CPU (0.893 seen
    // once in a CI run on a busy host, 0.9+ usually), a spinning phase is under 0.10.
    assert!(
        wal_off >= 0.85,
        "sleeping wal_sync off-CPU only {wal_off:.3}"
    );
    // Both views of off-CPU time agree: the tree's (per call) and the stacks' (per switch).
    let off = stacks(&runj, "off_cpu_profile");
    let in_wal = weight_under(&off, "write_record;wal_sync;") as f64;
    let wal_node = u(node(&runj, &["write_record", "wal_sync"]), "off_cpu_ns") as f64;
    assert!(
        (in_wal / wal_node - 1.0).abs() < 0.02,
        "off-CPU stacks under wal_sync {in_wal} ns vs the tree's {wal_node} ns"
    );
    // Where it blocked: fdatasync's own kernel path, under the fdatasync phase.
    assert!(
        off.iter()
            .any(|(s, _)| s.starts_with("write_record;wal_sync;fdatasync;")
                && s.contains("fdatasync_[k]")),
        "no kernel fdatasync frame under the fdatasync phase: {off:#?}"
    );

    // CPU samples of the spinning phase land under its prefix, with its spin function on
    // top of the phase's own frame, and the uretprobe trampolines are restored.
    let cpu = stacks(&runj, "cpu_profile");
    assert!(
        !cpu.iter().any(|(s, _)| s.contains("[uprobes]")),
        "a uretprobe trampoline was left in a stack: {cpu:#?}"
    );
    let prefix = "write_record;persist_block;flush_block;";
    let in_flush: Vec<&(String, u64)> = cpu.iter().filter(|(s, _)| s.starts_with(prefix)).collect();
    let total: u64 = in_flush.iter().map(|s| s.1).sum();
    assert!(total >= 50, "only {total} samples in flush_block: {cpu:#?}");
    let spinning: u64 = in_flush
        .iter()
        .filter(|(s, _)| s.ends_with(";write_record;persist_block;flush_block;spin_ns"))
        .map(|s| s.1)
        .sum();
    assert!(
        spinning as f64 >= 0.7 * total as f64,
        "{spinning} of {total} flush_block samples end in flush_block;spin_ns: {in_flush:#?}"
    );

    // The folded files are the profiles; the SVGs parse and their widths are the weights.
    for (file, profile) in [("cpu.folded", &cpu), ("offcpu.folded", &off)] {
        let folded = std::fs::read_to_string(out_dir.join(file)).unwrap();
        let parsed: Vec<(String, u64)> = folded
            .lines()
            .map(|l| {
                let (s, w) = l.rsplit_once(' ').expect("stack weight");
                (s.to_string(), w.parse().expect("weight"))
            })
            .collect();
        assert_eq!(&parsed, profile, "{file}");
    }
    for (svg, profile) in [("cpu.svg", &cpu), ("offcpu.svg", &off)] {
        let frames = svg_frames(&out_dir.join(svg));
        // The phase frame at the bottom is the widest write_record frame (the user stacks
        // above it hold write_record again).
        let root = frames
            .iter()
            .filter(|f| f.title.starts_with("write_record ("))
            .map(|f| f.samples)
            .max()
            .unwrap_or_else(|| panic!("no write_record frame in {svg}"));
        // (A sample whose user stack could not be read folds to the phase frame alone.)
        let alone: u64 = profile
            .iter()
            .filter(|(s, _)| s == "write_record")
            .map(|s| s.1)
            .sum();
        assert_eq!(
            root,
            weight_under(profile, "write_record;") + alone,
            "{svg}"
        );
    }

    // Nothing of wprof is left in the kernel, tracepoints and perf events included.
    assert!(
        wprof_program_ids().is_empty(),
        "left behind: {:?}",
        wprof_leftovers(&[])
    );
}

/// Twice as many threads as this host has CPUs, as an argument.
fn twice_the_cpus() -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (2 * cpus).to_string()
}

/// `wprof record --target fixture --off-cpu` of the writepath fixture with `args`: its
/// output (asserted successful) and its JSON run.
fn record_off_cpu(args: &[&str]) -> (std::process::Output, serde_json::Value) {
    record_with(&["--off-cpu"], args)
}

/// `wprof record --target fixture OPTIONS` of the writepath fixture with `args`: its output
/// (asserted successful) and its JSON run.
fn record_with(options: &[&str], args: &[&str]) -> (std::process::Output, serde_json::Value) {
    let dir = tempdir();
    let json = dir.path().join("run.json");
    let out = run(wprof()
        .args(["record", "--target", "fixture"])
        .args(options)
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg(fixture("writepath"))
        .args(args));
    assert!(out.status.success(), "{}", text(&out));
    let runj = read_json(&json);
    (out, runj)
}

/// Four threads spinning on two CPUs: whatever time a write spends off the CPU it spends
/// runnable, waiting for one, and the tree says so (`preempted_ns`, the footer's line).
#[test]
fn spinning_threads_on_too_few_cpus_are_off_the_cpu_preempted() {
    if !bpf_available() {
        return;
    }
    let _lock = bpf_lock();
    let threads = twice_the_cpus();
    let (out, runj) = record_off_cpu(&["--iterations", "300", "--threads", &threads]);
    for path in [
        &["write_record"][..],
        &["write_record", "persist_block", "flush_block"],
    ] {
        let n = node(&runj, path);
        let (off, preempted) = (u(n, "off_cpu_ns"), u(n, "preempted_ns"));
        // Twice as many spinning threads as CPUs: each is off about half the time (0.48-0.54
        // of the root's time in 8 runs here). The fixture's phases spin to a deadline, so a
        // preemption inside one shortens its spin, and a short child's share varies with where
        // the preemptions land (flush_block 0.09-0.25 here): it must only have some.
        let least = if path.len() == 1 { 5 } else { 1000 };
        assert!(
            off * least >= u(n, "total_ns"),
            "{path:?}: only {off} of {} ns off the CPU",
            u(n, "total_ns")
        );
        assert!(
            preempted * 10 >= off * 9 && preempted <= off,
            "{path:?}: {preempted} of {off} ns off the CPU preempted"
        );
    }
    assert!(
        text(&out).contains("preempted (runnable, waiting for a CPU): write_record"),
        "{}",
        text(&out)
    );
}

/// Short phases doing fixed work, on twice as many threads as CPUs: the probes take about
/// half of each write's time on the CPU, so about half its preemptions are theirs, and the
/// correction takes those out (`corrected.preempted_ns`). Ground truth: the same fixture's own
/// mean write untraced, preempted as often as its work makes it, before and after.
#[test]
fn the_probes_share_of_the_preemptions_is_out_of_the_corrected_writes() {
    if !bpf_available() {
        return;
    }
    let _lock = bpf_lock();
    let threads = twice_the_cpus();
    let args = [
        "--write-us",
        "2",
        "--encode-us",
        "1",
        "--persist-us",
        "1",
        "--compress-us",
        "2",
        "--flush-us",
        "2",
        "--wal-us",
        "1",
        "--sync-us",
        "2",
        "--fixed-work",
        "--iterations",
        "20000",
        "--threads",
        &threads,
    ];
    let untraced = || {
        let out = run(std::process::Command::new(fixture("writepath")).args(args));
        assert!(out.status.success(), "{}", text(&out));
        write_mean_ns(&out.stdout)
    };
    let before = untraced();
    let (_, runj) = record_off_cpu(&args);
    let truth = (before + untraced()) / 2.0;
    // Stacks are restored with the frames' return addresses: calibrated with them too.
    assert_eq!(runj["probe_cost"]["calibration"]["return_addresses"], true);
    let w = node(&runj, &["write_record"]);
    let n = u(w, "count") as f64;
    let (off, preempted) = (u(w, "off_cpu_ns"), u(w, "preempted_ns"));
    assert!(
        preempted * 10 >= off * 9,
        "{preempted} of {off} ns preempted"
    );
    let taken = u(&w["corrected"], "preempted_ns");
    assert!(
        taken > 0 && taken < preempted,
        "{taken} of {preempted} ns taken out"
    );
    // wprof's reader, busy with ~0.5 M spans a second, took some of the CPUs from the writes.
    let for_wprof = u(&w["corrected"], "wprof_ns");
    assert!(
        for_wprof > 0 && for_wprof <= taken,
        "{for_wprof} of {taken} ns for wprof"
    );
    let corrected = u(&w["corrected"], "total_ns") as f64 / n;
    let kept_all = corrected + taken as f64 / n;
    // Here: untraced 20.3-22.0 µs; corrected 16.0-21.1 µs (the calibration's spread under
    // this load moves it), 28.8-31.9 µs with every preemption kept.
    assert!(
        (corrected - truth).abs() < (kept_all - truth).abs()
            && corrected > 0.6 * truth
            && corrected < 1.3 * truth,
        "corrected {corrected:.0} ns, {kept_all:.0} with all preemptions kept; untraced \
         {truth:.0} ns\n{}",
        summary(&runj)
    );
    // Each preemption is decided once and its parents follow: no node takes out less of it
    // than its children together (0.2% for rounding). Not the whole corrected additivity:
    // these 1-2 µs phases' self times are mostly probe, and a calibration a few percent high
    // leaves persist_block's self below 0 on some hosts (CI read 585 against 599 ms).
    fn parents_follow(n: &serde_json::Value) {
        let taken = |n: &serde_json::Value| n["corrected"]["preempted_ns"].as_u64().unwrap_or(0);
        let kids = n["children"].as_array().cloned().unwrap_or_default();
        let sum: u64 = kids.iter().map(taken).sum();
        assert!(
            sum <= taken(n) + taken(n) / 500,
            "{}: children took {sum} ns of preemption out, it {}",
            n["name"],
            taken(n)
        );
        kids.iter().for_each(parents_follow);
    }
    parents_follow(w);
}

/// A corrected run follows the traced threads off the CPU without `--off-cpu` (sched_switch,
/// no stacks): the same preempted time and the probes' share of it out of the corrected
/// times, but no off-CPU time or profile. `--keep-preemptions` leaves sched_switch alone.
#[test]
fn a_corrected_run_takes_the_probes_preemptions_out_without_off_cpu() {
    if !bpf_available() {
        return;
    }
    let _lock = bpf_lock();
    let threads = twice_the_cpus();
    let args = [
        "--write-us",
        "2",
        "--wal-us",
        "2",
        "--fixed-work",
        "--iterations",
        "5000",
        "--threads",
        &threads,
    ];
    let (out, runj) = record_with(&[], &args);
    let w = node(&runj, &["write_record"]);
    let (preempted, taken) = (u(w, "preempted_ns"), u(&w["corrected"], "preempted_ns"));
    // Twice as many spinning threads as CPUs: preempted about half the time.
    assert!(
        preempted * 5 >= u(w, "total_ns") && taken > 0 && taken <= preempted,
        "{taken} of {preempted} ns preempted taken out, of {} ns",
        u(w, "total_ns")
    );
    assert!(w.get("off_cpu_ns").is_none() && runj.get("off_cpu_profile").is_none());
    let err = text(&out);
    assert!(err.contains("preemptions followed"), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("preempted (runnable, waiting for a CPU): write_record"))
        .unwrap_or_else(|| panic!("no preempted line:\n{err}"));
    assert!(
        line.contains("the probes'") && !line.contains("off the CPU"),
        "{line}"
    );
    // A command wprof starts never ran untraced: no baseline, the draw's odds alone.
    assert!(runj["probe_cost"].get("preemption_baseline").is_none());
    assert!(!line.contains("untraced odds"), "{line}");

    let (out, runj) = record_with(&["--keep-preemptions"], &args);
    let w = node(&runj, &["write_record"]);
    assert!(
        w.get("preempted_ns").is_none() && u(&w["corrected"], "preempted_ns") == 0,
        "{w}"
    );
    assert!(!text(&out).contains("preemptions followed"));
}

/// `wprof attach` to a running program watches its threads for a quarter of a second before
/// the probes go live (the kernel's schedstat: time on the CPU, time runnable) and keeps the
/// program's own preemptions at those untraced odds (`aggregate::preempted`; the odds
/// themselves are held by its unit tests). Here: the fixture's short phases on as many
/// threads as CPUs, so the traced threads wait mostly for wprof's reader (taken out whole)
/// and, untraced, hardly at all (0.1-1.7% of their time on the CPU on this host).
#[test]
fn an_attach_keeps_preemptions_at_the_untraced_threads_odds() {
    if !bpf_available() {
        return;
    }
    let _lock = bpf_lock();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cpus.to_string();
    // Work of their own in the writes (~4 µs on the CPU), not only probes: the kept
    // preemption is then compared with time the program really ran.
    let args = [
        &["--wait", "--iterations", "100000000", "--threads", &threads][..],
        common::ZERO_SPINS,
        &["--write-us", "2", "--wal-us", "2", "--fixed-work"],
    ]
    .concat();
    let mut fx = spawn_waiting(&fixture("writepath"), &args);
    release(&mut fx);
    // Past the fixture's own 50 ms measurement of its work (--fixed-work).
    std::thread::sleep(std::time::Duration::from_millis(200));
    let dir = tempdir();
    let json = dir.path().join("attach.json");
    let out = run(wprof()
        .args(["attach", "--target", "fixture", "--duration", "2s", "--pid"])
        .arg(fx.id().to_string())
        .arg("--json")
        .arg(&json));
    let _ = fx.kill();
    let _ = fx.wait();
    assert!(out.status.success(), "{}", text(&out));
    let runj = read_json(&json);
    let b = &runj["probe_cost"]["preemption_baseline"];
    let window = b["window_ms"].as_f64().unwrap_or(0.0);
    assert!((240.0..1000.0).contains(&window), "{b}");
    // Every fixture thread ran through the window, busy: most of it on the CPU each.
    assert!(
        u(b, "threads") as usize >= cpus && u(b, "cpu_ns") as f64 >= 0.5e6 * window,
        "{b}"
    );
    let untraced = u(b, "wait_ns") as f64 / u(b, "cpu_ns") as f64;
    let w = node(&runj, &["write_record"]);
    let (preempted, taken) = (u(w, "preempted_ns"), u(&w["corrected"], "preempted_ns"));
    // What the root calls ran on the CPU, as the baseline's traced side counted it.
    assert!(
        u(b, "traced_cpu_ns") + preempted >= u(w, "total_ns") / 2,
        "{b} against {w}"
    );
    // The preemption the corrected writes kept, per ns they ran on the CPU: about the
    // untraced threads' rate. A few whole waits of a few ms decide it, so: up to 3× the rate,
    // plus 1% for a host whose untraced threads never waited in the window, plus five 4 ms
    // waits.
    let kept = (preempted - taken.min(preempted)) as f64;
    let on_cpu = u(&w["corrected"], "total_ns") as f64 - kept;
    assert!(
        kept <= (3.0 * untraced + 0.01) * on_cpu + 20e6,
        "kept {kept:.0} ns preempted of {on_cpu:.0} ns on the CPU; untraced the threads \
         waited {untraced:.4} ns a ns\n{}",
        summary(&runj)
    );
    let err = text(&out);
    assert!(
        err.contains("untraced odds: its threads waited"),
        "no baseline in the footer:\n{err}"
    );
}

#[test]
fn unknown_syscall_is_exit_4_with_the_nearest_names() {
    if !bpf_available() {
        return;
    }
    let dir = tempdir();
    let profile = dir.path().join("bad.toml");
    std::fs::write(
        &profile,
        "name = \"bad\"\n[[phase]]\nname = \"w\"\nsymbol = \"write_record\"\n\
         [[phase]]\nname = \"sync\"\nsyscall = \"fdatasyn\"\n",
    )
    .unwrap();
    let out = run(wprof()
        .args(["record", "-q", "--target"])
        .arg(&profile)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", "1"]));
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("no syscall 'fdatasyn'"), "{t}");
    assert!(t.contains("syscalls:sys_enter_fdatasync"), "{t}");
}
