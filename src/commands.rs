//! The subcommands that do not trace: `probes` (dry run), `targets`, `report`, `merge`,
//! `export`.

use std::io::Write;

use anyhow::Result;

use crate::args::{ExportArgs, MergeArgs, ProbesArgs, ReportArgs, ResolveArgs, TargetArgs};
use crate::error::WprofError;
use crate::model::profile::{Profile, BUILTIN};
use crate::probe_cost;
use crate::resolve::{self, Scope, Status};
use crate::session::{self, status_text};

/// `wprof targets`: the built-in profiles, one line each.
pub fn targets() -> Result<i32> {
    let mut out = crate::stdout::Stdout;
    for (name, text) in BUILTIN {
        let p = Profile::parse(text, name)?;
        writeln!(
            out,
            "{:<14} {:>3} phases  {}",
            p.name,
            p.phases.len(),
            p.description
        )?;
    }
    Ok(0)
}

/// `wprof probes`: one row per phase with what it resolved to; exit 4 if a required phase
/// did not resolve.
pub fn probes(a: ProbesArgs) -> Result<i32> {
    if a.estimate.is_some() && a.resolve.pid.is_none() {
        return Err(WprofError::Usage(
            "--estimate measures a running process: give its --pid".into(),
        )
        .into());
    }
    let (profile, mut phases) = load_and_resolve(&a.target, &a.resolve, "probes")?;
    // The mode a run would use: guarded returns only where this host loads the unwind guard.
    session::check_unwind_guard(&mut phases);
    let mut out = crate::stdout::Stdout;
    writeln!(
        out,
        "{:<18} {:<24} {:<44} {:>10} {:<10} {:>5} {:<11} {:>8}  status",
        "phase", "object", "symbol", "offset", "return", "exits", "entry cost", "pair µs"
    )?;
    for p in &phases {
        if let Some(k) = &p.kernel {
            writeln!(
                out,
                "{:<18} {:<24} {:<44} {:>10} {:<10} {:>5} {:<11} {:>8}  {}",
                p.phase.name,
                "[kernel]",
                format!("{} / {}", k.enter, k.exit),
                "-",
                "tracepoint",
                "-",
                "-",
                "-",
                status_text(&p.status)
            )?;
            continue;
        }
        if p.targets.is_empty() {
            writeln!(
                out,
                "{:<18} {:<24} {:<44} {:>10} {:<10} {:>5} {:<11} {:>8}  {}",
                p.phase.name,
                "-",
                p.phase
                    .symbol
                    .as_deref()
                    .or(p.phase.syscall.as_deref())
                    .unwrap_or("-"),
                "-",
                "-",
                "-",
                "-",
                "-",
                status_text(&p.status)
            )?;
            if let Status::Unresolved { nearest, .. } = &p.status {
                if !nearest.is_empty() {
                    writeln!(out, "{:<18} nearest: {}", "", nearest.join(", "))?;
                }
            }
            continue;
        }
        for t in &p.targets {
            let obj = std::path::Path::new(&t.display_object)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            writeln!(
                out,
                "{:<18} {:<24} {:<44} {:>#10x} {:<10} {:>5} {:<11} {:>8.1}  {}",
                p.phase.name,
                obj,
                entry_label(t, 44),
                t.entry.file_offset,
                if p.usdt.is_some() {
                    "usdt"
                } else {
                    p.return_mode.as_str()
                },
                if p.return_mode.uses_uretprobe() {
                    "-".to_string()
                } else {
                    t.exits.len().to_string()
                },
                crate::model::class_name(t.entry.cost),
                probe_cost::pair_ns(p) / 1000.0,
                match &t.debuginfo {
                    Some(dbg) => format!("{} (debuginfo: {dbg})", status_text(&p.status)),
                    None => status_text(&p.status),
                }
            )?;
        }
    }
    writeln!(out, "pair µs: {}", crate::model::MODEL)?;
    let moved = |go: bool| {
        phases
            .iter()
            .flat_map(|p| &p.targets)
            .any(|t| t.entry_offset > 0 && (t.language == crate::model::Language::Go) == go)
    };
    if moved(true) {
        writeln!(
            out,
            "Go name+N: entry probe after the function's stack check, so that a call whose \
             stack grows (runtime.morestack, then the function again from its start) is \
             counted once"
        )?;
    }
    if moved(false) {
        writeln!(
            out,
            "name+4: entry probe past the function's endbr64 (offset and entry cost are that \
             site's); {}=1 keeps it on the endbr64",
            resolve::ENTRY_AT_ENDBR_ENV
        )?;
    }
    out.flush()?;
    for w in phases.iter().flat_map(|p| &p.warnings) {
        eprintln!("wprof: warning: {w}");
    }
    if let Some(err) = resolve::unresolved_required(&phases, &profile) {
        return Err(err.into());
    }
    if let (Some(secs), Some(pid)) = (a.estimate, a.resolve.pid) {
        crate::attach::check_capabilities()?;
        eprintln!("wprof: attaching to pid {pid} for {secs} s to measure what the probes cost it");
        let e = session::estimate(&phases, pid, secs, a.max_overhead)?;
        write_estimate(&mut out, &phases, &e)?;
    }
    Ok(0)
}

/// `probes --estimate`: per phase what its probes cost the process, and what
/// `--max-overhead` would do.
fn write_estimate(
    out: &mut impl Write,
    phases: &[resolve::ResolvedPhase],
    e: &session::Estimate,
) -> Result<()> {
    let (b, d) = (e.probes_budget_pct, e.decision_pct);
    writeln!(
        out,
        "\nestimate: {:.1} s attached; the process used {:.0} ms of CPU a second",
        e.secs,
        e.cpu_ns_per_s / 1e6
    )?;
    writeln!(
        out,
        "{:<18} {:>10} {:>9} {:>9}  under --max-overhead {}%",
        "phase", "calls/s", "µs/call", "overhead", e.budget_pct
    )?;
    for l in &e.loads {
        let fate = if e.plan.moves.contains(&l.id) {
            "moves to CPU sampling"
        } else if !phases
            .iter()
            .any(|p| p.id == l.id && p.phase.measure == crate::model::profile::Measure::Auto)
        {
            "stays probed (measure = \"probe\")"
        } else if l.movable {
            "stays probed"
        } else {
            "stays probed (a root or a parent)"
        };
        writeln!(
            out,
            "{:<18} {:>10.0} {:>9.2} {:>8.1}%  {fate}",
            l.name,
            l.calls_per_s,
            l.pair_ns / 1e3,
            if e.cpu_ns_per_s > 0.0 {
                l.cost_ns_per_s() / e.cpu_ns_per_s * 100.0
            } else {
                0.0
            }
        )?;
    }
    writeln!(
        out,
        "every phase probed: {:.1}% of the probed threads' CPU time; after the moves: {:.1}%{}",
        e.all_pct(),
        e.plan.projected_pct,
        match e.duty {
            None => String::new(),
            Some(Some(f)) => format!(
                "; still over {d:.2}% (half of {b:.2}% until a run reads the program's own \
                 pace): what stays probed would start live {:.0}% of each cycle (then what its \
                 own slowdown allows)",
                f * 100.0
            ),
            Some(None) => format!(
                "; still over {b:.2}% even if live 2% of the time: the run would detach (exit 5)"
            ),
        }
    )?;
    if let Some((hz, pct)) = e.sampler {
        writeln!(
            out,
            "CPU sampling for the moved phases: {hz} Hz, {pct:.2}% of the process's CPU time; \
             the probes get the other {b:.2}% of --max-overhead {}%",
            e.budget_pct
        )?;
    }
    writeln!(
        out,
        "µs/call: {} (record and attach calibrate on the host)",
        crate::model::MODEL
    )?;
    Ok(())
}

/// The symbol column: the function's name, with `+N` when its entry probe is N bytes past the
/// start (after a leading `endbr64`); the name is truncated, never the `+N`.
fn entry_label(t: &resolve::ResolvedSymbol, width: usize) -> String {
    if t.entry_offset == 0 {
        return truncate(&t.demangled, width);
    }
    let tail = format!("+{}", t.entry_offset);
    format!(
        "{}{tail}",
        truncate(&t.demangled, width.saturating_sub(tail.len()).max(1))
    )
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n - 1).collect();
        format!("{t}…")
    }
}

/// Loads `target` and resolves it as `--pid` / `--binary` / `--return` say, for the commands
/// that resolve without attaching (`cmd` names the command in errors).
fn load_and_resolve(
    target: &TargetArgs,
    r: &ResolveArgs,
    cmd: &str,
) -> Result<(Profile, Vec<resolve::ResolvedPhase>)> {
    let profile = target.load()?;
    let scope = match (r.pid, &r.binary) {
        (Some(pid), _) => Scope::Pids(vec![pid]),
        (None, Some(b)) => Scope::Binary(b.clone()),
        (None, None) => {
            return Err(WprofError::Usage(format!("{cmd} needs --pid PID or --binary PATH")).into())
        }
    };
    let profile = session::override_returns(&profile, r.return_mode.map(Into::into));
    let phases = resolve::resolve_profile(&profile, &scope)?;
    Ok((profile, phases))
}

/// `wprof export`: the profile as a bpftrace script or `perf probe` commands. Unresolved
/// phases are left out with a comment; a required one is exit 4, as for attach.
pub fn export(a: ExportArgs) -> Result<i32> {
    let (profile, phases) = load_and_resolve(&a.target, &a.resolve, "export")?;
    if let Some(err) = resolve::unresolved_required(&phases, &profile) {
        return Err(err.into());
    }
    let text = if a.bpftrace {
        crate::export::bpftrace(&profile, &phases)?
    } else {
        crate::export::perf_probe(&profile, &phases)?
    };
    match &a.output {
        Some(path) => crate::output_file::write(path, text.as_bytes())?,
        None => crate::stdout::print(&text)?,
    }
    Ok(0)
}

/// `report --split-by PHASE`: the run must hold the halves for PHASE. They need every root
/// call's spans, which the JSON does not keep, so a run is split only by the phase it was
/// recorded with.
fn check_split(run: &crate::model::Run, phase: &str, path: &std::path::Path) -> Result<()> {
    let why = match &run.split {
        Some(s) if s.phase == phase => return Ok(()),
        Some(s) => format!("it was recorded with --split-by {}", s.phase),
        None => "it was recorded without --split-by".to_string(),
    };
    let names: Vec<&str> = run.phases.iter().map(|p| p.name.as_str()).collect();
    let text = if names.contains(&phase) {
        format!(
            "{} is not split by {phase}: {why}; the two trees need every root call's spans, \
             which the JSON does not keep: record the run again with --split-by {phase}",
            path.display()
        )
    } else {
        format!(
            "{} has no phase '{phase}' to split by; its phases: {}",
            path.display(),
            names.join(", ")
        )
    };
    Err(WprofError::Usage(text).into())
}

/// A merged run (`wprof merge`) has no single timeline: its root calls' start times are each
/// host's own clock, and the span log was left out. What needs one is refused, naming it.
fn check_merged(run: &crate::model::Run, a: &ReportArgs) -> Result<()> {
    let what = match (a.first.is_some(), a.format) {
        _ if run.provenance.sources.is_empty() => return Ok(()),
        (true, _) => "--first (no first N of root calls timed by different clocks)",
        (_, crate::render::Format::Trace) => "--format trace (the span log is not merged)",
        _ => return Ok(()),
    };
    Err(WprofError::Usage(format!(
        "{} merges the runs of {}, whose timestamps are each host's own clock: no {what}; ask it \
         of one host's run",
        a.run.display(),
        run.provenance.host
    ))
    .into())
}

/// `wprof report RUN.json`: re-renders a saved run.
pub fn report(a: ReportArgs) -> Result<i32> {
    let mut run = crate::model::json::read_run_file(&a.run)?;
    if a.raw {
        run.drop_corrections();
    }
    if a.per_pid && run.processes.is_empty() {
        return Err(WprofError::Usage(format!(
            "{} has no per-process trees: record it with --per-pid",
            a.run.display()
        ))
        .into());
    }
    if let Some(phase) = &a.split_by {
        check_split(&run, phase, &a.run)?;
    }
    let per_call = a.format.needs_every_call() || a.tail.is_some() || a.first.is_some();
    if per_call && run.provenance.aggregation == crate::model::Aggregation::Kernel {
        return Err(WprofError::Usage(format!(
            "{} was aggregated in the kernel (--aggregate kernel): it has no per-call table, so \
             no CSV, trace, --tail or --first; record with --aggregate event for those",
            a.run.display()
        ))
        .into());
    }
    check_merged(&run, &a)?;
    if a.tail.is_some() || a.first.is_some() {
        use crate::analyze::tail;
        let mut text = String::new();
        if let Some(t) = &a.tail {
            text.push_str(&tail::tail_report(&run, tail::parse_percentile(t)?));
        }
        if let Some(n) = a.first {
            text.push_str(&tail::first_report(&run, n));
        }
        match &a.output {
            Some(p) => crate::output_file::write(p, text.as_bytes())?,
            None => crate::stdout::print(&text)?,
        }
        return Ok(0);
    }
    // Rendered first, so a run that lacks what was asked for leaves no empty file behind.
    let mut buf = Vec::new();
    crate::render::write(&run, a.format, &mut buf)?;
    match &a.output {
        Some(p) => crate::output_file::write(p, &buf)?,
        None => crate::stdout::Stdout.write_all(&buf)?,
    }
    Ok(0)
}

/// `wprof merge A.json B.json ...`: one run of the fleet (JSON, as `report --format json`
/// writes it), and on stderr what the merge left out.
pub fn merge(a: MergeArgs) -> Result<i32> {
    let inputs = (a.runs.iter())
        .map(|p| {
            Ok(crate::aggregate::merge::Input {
                file: p.display().to_string(),
                run: crate::model::json::read_run_file(p)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let merged = crate::aggregate::merge::merge(inputs)?;
    for w in &merged.warnings {
        eprintln!("wprof: warning: {w}");
    }
    let mut buf = Vec::new();
    crate::render::write(&merged.run, crate::render::Format::Json, &mut buf)?;
    match &a.output {
        Some(p) => crate::output_file::write(p, &buf)?,
        None => crate::stdout::Stdout.write_all(&buf)?,
    }
    Ok(0)
}
