//! Writing a run's outputs: the tree on stdout and the files the user asked for.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::args::OutputArgs;
use crate::model::{Aggregation, Run};
use crate::render::{self, StackKind};

/// Prints the tree (unless `quiet`) and writes every requested file. Each file is written
/// even if an earlier one failed; the first error is returned.
pub fn write_outputs(run: &Run, out: &OutputArgs, quiet: bool) -> Result<()> {
    let text = render::render_tree(run, &render::TextOptions::default());
    if !quiet {
        // A failing terminal must not cost the files below: reported once they are written.
        if let Err(e) = crate::stdout::print(&text) {
            eprintln!("wprof: warning: printing the tree failed: {e}");
        }
    }
    let mut jobs: Vec<(std::path::PathBuf, Kind)> = Vec::new();
    if let Some(dir) = &out.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("create output directory {}", dir.display()))?;
        jobs.push((dir.join("run.json"), Kind::Json));
        jobs.push((dir.join("tree.txt"), Kind::Tree));
        jobs.push((dir.join("phases.folded"), Kind::Folded));
        jobs.push((dir.join("phases.svg"), Kind::Svg));
        if run.provenance.aggregation == Aggregation::Kernel {
            eprintln!(
                "wprof: {} has no calls.csv or trace.json: they need every call (--aggregate event)",
                dir.display()
            );
        } else {
            jobs.push((dir.join("calls.csv"), Kind::Csv));
            jobs.push((dir.join("trace.json"), Kind::Trace));
        }
        if run.cpu.is_some() {
            jobs.push((dir.join("cpu.folded"), Kind::CpuFolded));
            jobs.push((dir.join("cpu.svg"), Kind::CpuSvg));
        }
        if run.off_cpu.is_some() {
            jobs.push((dir.join("offcpu.folded"), Kind::OffCpuFolded));
            jobs.push((dir.join("offcpu.svg"), Kind::OffCpuSvg));
        }
    }
    if let Some(p) = &out.json {
        jobs.push((p.clone(), Kind::Json));
    }
    if let Some(p) = &out.folded {
        jobs.push((p.clone(), Kind::Folded));
    }
    if let Some(p) = &out.flamegraph {
        jobs.push((p.clone(), Kind::Svg));
    }
    if let Some(p) = &out.events {
        jobs.push((p.clone(), Kind::Csv));
    }
    if let Some(p) = &out.trace {
        jobs.push((p.clone(), Kind::Trace));
    }
    for (path, kind) in [
        (&out.cpu_folded, Kind::CpuFolded),
        (&out.cpu_flamegraph, Kind::CpuSvg),
        (&out.off_cpu_folded, Kind::OffCpuFolded),
        (&out.off_cpu_flamegraph, Kind::OffCpuSvg),
    ] {
        if let Some(p) = path {
            jobs.push((p.clone(), kind));
        }
    }
    let mut first_err = None;
    for (path, kind) in jobs {
        if let Err(e) = write_one(run, &text, &path, kind) {
            eprintln!("wprof: {e:#}");
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// An output format.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// JSON schema v1.
    Json,
    /// The text tree.
    Tree,
    /// Folded self-time stacks.
    Folded,
    /// Phase flamegraph.
    Svg,
    /// Per-root-call CSV.
    Csv,
    /// Chrome/Perfetto trace JSON.
    Trace,
    /// CPU samples as folded stacks under their phases.
    CpuFolded,
    /// CPU flamegraph.
    CpuSvg,
    /// Off-CPU time as folded stacks under their phases.
    OffCpuFolded,
    /// Off-CPU flamegraph.
    OffCpuSvg,
}

/// Renders `run` in `kind` into `w`.
pub fn render_to(run: &Run, kind: Kind, w: &mut dyn Write) -> Result<()> {
    match kind {
        Kind::Json => {
            serde_json::to_writer_pretty(&mut *w, &crate::model::json::to_json(run))?;
            writeln!(w)?;
        }
        Kind::Tree => {
            w.write_all(render::render_tree(run, &render::TextOptions::default()).as_bytes())?
        }
        Kind::Folded => w.write_all(render::folded(&run.tree).as_bytes())?,
        Kind::Svg => {
            let title = format!("wprof: {} phases (wall time)", run.provenance.profile_name);
            let mut buf = Vec::new();
            render::flamegraph_svg(&render::folded(&run.tree), &title, &mut buf)?;
            w.write_all(&buf)?;
        }
        Kind::Csv => w.write_all(render::calls_csv(run).as_bytes())?,
        Kind::Trace => {
            serde_json::to_writer(&mut *w, &render::chrome_trace(run))?;
            writeln!(w)?;
        }
        Kind::CpuFolded | Kind::CpuSvg | Kind::OffCpuFolded | Kind::OffCpuSvg => {
            let (profile, stack_kind, what, flag) = match kind {
                Kind::CpuFolded | Kind::CpuSvg => {
                    (&run.cpu, StackKind::Cpu, "CPU samples", "--cpu-sample HZ")
                }
                _ => (&run.off_cpu, StackKind::OffCpu, "off-CPU time", "--off-cpu"),
            };
            let Some(profile) = profile else {
                return Err(crate::error::WprofError::Usage(format!(
                    "this run has no {what}: record it with {flag}"
                ))
                .into());
            };
            if matches!(kind, Kind::CpuFolded | Kind::OffCpuFolded) {
                w.write_all(profile.folded().as_bytes())?;
            } else {
                let title = format!("wprof: {} — {what} by phase", run.provenance.profile_name);
                let mut buf = Vec::new();
                render::stack_flamegraph_svg(profile, stack_kind, &title, &mut buf)?;
                w.write_all(&buf)?;
            }
        }
    }
    Ok(())
}

/// Renders one output, then writes it whole or not at all: a new file next to `path`, created
/// exclusively (never through a symlink planted there, never onto a file someone else made),
/// renamed over `path` once complete (a symlink at `path` is replaced, not followed). A full
/// disk leaves the old file, or none, and an error naming the file.
fn write_one(run: &Run, text: &str, path: &Path, kind: Kind) -> Result<()> {
    let mut buf = Vec::new();
    match kind {
        Kind::Tree => buf.extend_from_slice(text.as_bytes()),
        _ => render_to(run, kind, &mut buf)?,
    }
    crate::output_file::write(path, &buf)
}

/// Refuses, before anything is attached, output paths a run could not write at its end: a
/// file whose directory is missing or not writable, a path that is a directory, an `--out`
/// directory that exists as something else or belongs to another user (in a world-writable
/// place it may hold planted files).
pub fn check_output_paths(out: &OutputArgs) -> Result<()> {
    let usage = |m: String| -> anyhow::Error { crate::error::WprofError::Usage(m).into() };
    let files = [
        &out.json,
        &out.folded,
        &out.flamegraph,
        &out.events,
        &out.trace,
        &out.cpu_folded,
        &out.cpu_flamegraph,
        &out.off_cpu_folded,
        &out.off_cpu_flamegraph,
    ];
    for p in files.into_iter().flatten() {
        if p.is_dir() {
            return Err(usage(format!("output {} is a directory", p.display())));
        }
        let dir = crate::output_file::dir_of(p);
        writable_dir(dir).map_err(|why| usage(format!("cannot write {}: {why}", p.display())))?;
    }
    if let Some(dir) = &out.out {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if !m.is_dir() => {
                return Err(usage(format!(
                    "--out {} exists and is not a directory",
                    dir.display()
                )))
            }
            Ok(m) => {
                use std::os::unix::fs::MetadataExt;
                // SAFETY: geteuid has no preconditions.
                let me = unsafe { libc::geteuid() };
                if m.uid() != me {
                    return Err(usage(format!(
                        "--out {} belongs to uid {}, not to this user (uid {me}): choose a \
                         directory of your own",
                        dir.display(),
                        m.uid()
                    )));
                }
                writable_dir(dir)
                    .map_err(|why| usage(format!("cannot write into {}: {why}", dir.display())))?;
            }
            Err(_) => {
                let parent = crate::output_file::dir_of(dir);
                if parent.exists() {
                    writable_dir(parent)
                        .map_err(|why| usage(format!("cannot create {}: {why}", dir.display())))?;
                }
            }
        }
    }
    Ok(())
}

/// Why `dir` is no directory this process can create files in, if it is not.
fn writable_dir(dir: &Path) -> std::result::Result<(), String> {
    if !dir.is_dir() {
        return Err(format!("{} is not an existing directory", dir.display()));
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| "the path holds a NUL byte".to_string())?;
    // SAFETY: `c` is a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(format!(
            "{} is not writable: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
