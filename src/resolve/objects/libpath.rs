//! The dynamic loader's library search, for objects named by file name but not mapped yet.
//!
//! In: the target's root (`/proc/PID/root` or `/`), its main executable and LD_LIBRARY_PATH, and
//! a file name. Out: the directories the loader would search, in its order (DT_RPATH when there
//! is no DT_RUNPATH, LD_LIBRARY_PATH, DT_RUNPATH with `$ORIGIN` expanded, /etc/ld.so.conf.d,
//! the usual x86-64 directories), and the file a directory holds for that name: exactly the
//! name, or one distinct ELF file named `name` followed by `.` or `-` (`libz` -> `libz.so.1`).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::bail;
use object::elf;
use object::read::elf::{Dyn, ElfFile64};
use object::Endianness;

use super::Located;

/// The directories searched after the object's own paths, as on Debian x86-64.
const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib",
    "/lib",
    "/usr/local/lib",
];

/// `p` (an absolute path as the target sees it) under `root`.
pub fn under_root(root: &Path, p: &str) -> PathBuf {
    root.join(p.trim_start_matches('/'))
}

/// How well a file's basename matches a requested name: 2 exact, 1 name + `.` or `-`, 0 none.
pub fn name_match(basename: &str, name: &str) -> u8 {
    if basename == name {
        2
    } else if basename
        .strip_prefix(name)
        .is_some_and(|rest| rest.starts_with(['.', '-']))
    {
        1
    } else {
        0
    }
}

/// True if `path` starts with the ELF magic.
pub fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// `dir` (as the target sees it) holding `name` exactly, or one distinct ELF file whose
/// name is `name` followed by `.` or `-`.
pub fn in_dir(root: &Path, dir: &str, name: &str) -> anyhow::Result<Option<Located>> {
    let host_dir = under_root(root, dir);
    let exact = host_dir.join(name);
    if is_elf(&exact) {
        return Ok(Some(Located {
            host_path: exact,
            target_path: format!("{dir}/{name}"),
        }));
    }
    let Ok(entries) = std::fs::read_dir(&host_dir) else {
        return Ok(None);
    };
    let mut seen = HashSet::new();
    let mut hits: Vec<String> = Vec::new();
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort_by_key(|n| (n.len(), n.clone()));
    for file in names.into_iter().filter(|n| name_match(n, name) == 1) {
        let host = host_dir.join(&file);
        let Ok(meta) = std::fs::metadata(&host) else {
            continue;
        };
        if meta.is_file() && is_elf(&host) && seen.insert((meta.dev(), meta.ino())) {
            hits.push(file);
        }
    }
    match hits.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(Located {
            host_path: host_dir.join(one),
            target_path: format!("{dir}/{one}"),
        })),
        many => bail!(
            "object '{name}' matches several files in {dir}: {}; name one",
            many.join(", ")
        ),
    }
}

/// The dynamic loader's search order for a library the exe loads (as the target sees the
/// directories): DT_RPATH (when there is no DT_RUNPATH),
/// LD_LIBRARY_PATH, DT_RUNPATH, /etc/ld.so.conf.d, the default directories.
pub fn search_dirs(root: &Path, exe: &Located, ld_library_path: Option<&str>) -> Vec<String> {
    let (rpath, runpath) = std::fs::read(&exe.host_path)
        .ok()
        .and_then(|data| dynamic_paths(&data))
        .unwrap_or_default();
    let origin = Path::new(&exe.target_path)
        .parent()
        .map_or("/".into(), |p| p.to_string_lossy().into_owned());
    let expand = |list: &str| -> Vec<String> {
        list.split(':')
            .filter(|d| !d.is_empty())
            .map(|d| d.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin))
            .filter(|d| d.starts_with('/') && !d.contains('$'))
            .collect()
    };
    let mut dirs = Vec::new();
    if runpath.is_none() {
        dirs.extend(rpath.as_deref().map(expand).unwrap_or_default());
    }
    dirs.extend(ld_library_path.map(expand).unwrap_or_default());
    dirs.extend(runpath.as_deref().map(expand).unwrap_or_default());
    dirs.extend(ld_so_conf_dirs(root));
    dirs.extend(DEFAULT_DIRS.iter().map(|d| d.to_string()));
    // Where servers keep the plugins they dlopen by full path, so the loader's search never
    // sees them: PostgreSQL's pkglibdir (/usr/lib/postgresql/15/lib next to .../15/bin on
    // Debian, $GPHOME/lib/postgresql for Cloudberry/Greenplum). An extension not loaded yet
    // is then found, and its probes are live before its first call.
    if let Some(prefix) = Path::new(&exe.target_path).parent().and_then(Path::parent) {
        for sub in ["lib", "lib/postgresql"] {
            dirs.push(prefix.join(sub).to_string_lossy().into_owned());
        }
    }
    let mut seen = HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

/// Directories listed in the target's /etc/ld.so.conf.d/*.conf.
fn ld_so_conf_dirs(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(under_root(root, "/etc/ld.so.conf.d")) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "conf"))
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().map(|l| l.trim().to_string()).collect::<Vec<_>>())
        .filter(|l| l.starts_with('/'))
        .collect()
}

/// DT_RPATH and DT_RUNPATH of an ELF object, if it is one.
pub fn dynamic_paths(data: &[u8]) -> Option<(Option<String>, Option<String>)> {
    let elf = ElfFile64::<Endianness>::parse(data).ok()?;
    let endian = elf.endian();
    let sections = elf.elf_section_table();
    let (dyns, strtab) = sections.dynamic(endian, data).ok()??;
    let strings = sections.strings(endian, data, strtab).ok()?;
    let (mut rpath, mut runpath) = (None, None);
    for d in dyns {
        let text = || {
            d.string(endian, strings)
                .ok()
                .map(|s| String::from_utf8_lossy(s).into_owned())
        };
        match d.tag32(endian) {
            Some(elf::DT_RPATH) => rpath = text(),
            Some(elf::DT_RUNPATH) => runpath = text(),
            _ => {}
        }
    }
    Some((rpath, runpath))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_by_basename() {
        assert_eq!(name_match("libc.so.6", "libc"), 1);
        assert_eq!(name_match("libc.so.6", "libc.so"), 1);
        assert_eq!(name_match("libc.so.6", "libc.so.6"), 2);
        assert_eq!(name_match("libc-2.31.so", "libc"), 1);
        assert_eq!(name_match("libcrypto.so.3", "libc"), 0);
    }

    #[test]
    fn a_servers_plugin_dir_is_searched_after_the_loaders() {
        let exe = Located {
            host_path: PathBuf::from("/nonexistent/usr/lib/postgresql/15/bin/postgres"),
            target_path: "/usr/lib/postgresql/15/bin/postgres".into(),
        };
        let dirs = search_dirs(Path::new("/nonexistent-root"), &exe, None);
        let pos = |d: &str| dirs.iter().position(|x| x == d);
        let lib = pos("/usr/lib/postgresql/15/lib").expect("pkglibdir searched");
        assert!(pos("/usr/lib").is_some_and(|usr| usr < lib), "{dirs:?}");
        assert!(pos("/usr/lib/postgresql/15/lib/postgresql").is_some());
    }
}
