//! Writing a run's outputs: the tree on stdout and the files the user asked for.

use std::path::Path;

use anyhow::{Context, Result};

use crate::args::OutputArgs;
use crate::model::{Aggregation, Run};
use crate::render::{self, Format};

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
    let mut jobs: Vec<(std::path::PathBuf, Format)> = Vec::new();
    if let Some(dir) = &out.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("create output directory {}", dir.display()))?;
        jobs.push((dir.join("run.json"), Format::Json));
        jobs.push((dir.join("tree.txt"), Format::Tree));
        jobs.push((dir.join("phases.folded"), Format::Folded));
        jobs.push((dir.join("phases.svg"), Format::Svg));
        jobs.push((dir.join("phases.pb.gz"), Format::Pprof));
        if run.provenance.aggregation == Aggregation::Kernel {
            eprintln!(
                "wprof: {} has no calls.csv or trace.json: they need every call (--aggregate event)",
                dir.display()
            );
        } else {
            jobs.push((dir.join("calls.csv"), Format::Csv));
            jobs.push((dir.join("trace.json"), Format::Trace));
        }
        if run.cpu.is_some() {
            jobs.push((dir.join("cpu.folded"), Format::CpuFolded));
            jobs.push((dir.join("cpu.svg"), Format::CpuSvg));
            jobs.push((dir.join("cpu.pb.gz"), Format::CpuPprof));
        }
        if run.off_cpu.is_some() {
            jobs.push((dir.join("offcpu.folded"), Format::OffCpuFolded));
            jobs.push((dir.join("offcpu.svg"), Format::OffCpuSvg));
        }
    }
    if let Some(p) = &out.json {
        jobs.push((p.clone(), Format::Json));
    }
    if let Some(p) = &out.folded {
        jobs.push((p.clone(), Format::Folded));
    }
    if let Some(p) = &out.flamegraph {
        jobs.push((p.clone(), Format::Svg));
    }
    if let Some(p) = &out.events {
        jobs.push((p.clone(), Format::Csv));
    }
    if let Some(p) = &out.trace {
        jobs.push((p.clone(), Format::Trace));
    }
    if let Some(p) = &out.pprof {
        jobs.push((p.clone(), Format::Pprof));
    }
    for (path, kind) in [
        (&out.cpu_folded, Format::CpuFolded),
        (&out.cpu_flamegraph, Format::CpuSvg),
        (&out.cpu_pprof, Format::CpuPprof),
        (&out.off_cpu_folded, Format::OffCpuFolded),
        (&out.off_cpu_flamegraph, Format::OffCpuSvg),
    ] {
        if let Some(p) = path {
            jobs.push((p.clone(), kind));
        }
    }
    let mut first_err = None;
    for (path, format) in jobs {
        if let Err(e) = write_one(run, &text, &path, format) {
            eprintln!("wprof: {e:#}");
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Renders one output, then writes it whole or not at all: a new file next to `path`, created
/// exclusively (never through a symlink planted there, never onto a file someone else made),
/// renamed over `path` once complete (a symlink at `path` is replaced, not followed). A full
/// disk leaves the old file, or none, and an error naming the file.
fn write_one(run: &Run, text: &str, path: &Path, format: Format) -> Result<()> {
    let mut buf = Vec::new();
    match format {
        Format::Tree => buf.extend_from_slice(text.as_bytes()),
        _ => render::write(run, format, &mut buf)?,
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
        &out.pprof,
        &out.cpu_folded,
        &out.cpu_flamegraph,
        &out.cpu_pprof,
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
