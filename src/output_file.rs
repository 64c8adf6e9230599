//! Writing output files safely in any directory, a world-writable one included: a file is
//! written whole or not at all, never through a symlink someone planted at its path, never
//! into a file someone else made there. Every file wprof writes goes through here.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// Writes `bytes` to `path`, naming the file in the error.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, bytes).with_context(|| format!("write {}", path.display()))
}

/// Writes `bytes` to `path` through an exclusive temporary file in its directory and a rename
/// (a symlink at `path` is replaced, not followed); an existing regular file keeps its
/// permissions, a new one gets 0644. A full disk leaves the old file, or none.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = dir_of(path);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}.wprof-{}.tmp",
        name.as_deref().unwrap_or("out"),
        std::process::id()
    ));
    let mode = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_file())
        .map_or(0o644, |m| m.permissions().mode() & 0o7777);
    let _ = std::fs::remove_file(&tmp); // our own leftover from a killed run, if any
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Opens `path` for a file written while a run goes on (`--snapshots`): a symlink there is
/// replaced by a new file, and an existing file is reused only when it is this user's.
pub fn create_streaming(path: &Path) -> Result<File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let what = || format!("create {}", path.display());
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::remove_file(path).with_context(what)?;
        }
        // SAFETY: geteuid has no preconditions.
        Ok(m) if m.is_file() && m.uid() != unsafe { libc::geteuid() } => {
            return Err(crate::error::WprofError::Usage(format!(
                "{} exists and belongs to another user: not writing into it",
                path.display()
            ))
            .into());
        }
        _ => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(what)
}

/// The directory a file path is in (`.` for a bare name).
pub fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}
