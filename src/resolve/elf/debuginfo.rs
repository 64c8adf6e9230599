//! Separate debug files: where the symbols and DWARF of a stripped object live.
//!
//! In: an object's GNU build id and `.gnu_debuglink` (file name + CRC32), its path as the
//! target sees it, the root it was found under (`/proc/PID/root` or `/`) and the extra debug
//! roots of `WPROF_DEBUG_DIRS`. Out: a [`Lookup`]: the debug file found (read, checked), or
//! none, with a note for each candidate that was there but rejected (CRC32 or build-id
//! mismatch, not an ELF file). The order is gdb's: first the build id in every debug root
//! (`ROOT/.build-id/xx/yyyy.debug`; in an extra root also debuginfod's cache layout
//! `ROOT/<build-id>/debuginfo`), then the debuglink name in the object's directory, in its
//! `.debug/` subdirectory, and in `ROOT/<object's directory>/` of every debug root. The debug
//! roots are the target's own `/usr/lib/debug` (under its root, so containers work), then the
//! `WPROF_DEBUG_DIRS` entries (host paths, colon-separated).

use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use object::Object;

use crate::resolve::objects::libpath::under_root;

/// Environment variable naming extra debug roots, colon-separated, searched like /usr/lib/debug.
pub const ENV: &str = "WPROF_DEBUG_DIRS";

/// The system's debug root, as the target sees it.
const SYSTEM_ROOT: &str = "/usr/lib/debug";

/// An object's `.gnu_debuglink`: the debug file's name and the CRC32 of its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// File name (no directory).
    pub name: String,
    /// CRC32 (IEEE, as gdb and objcopy compute it) of the whole debug file.
    pub crc: u32,
}

/// A debug file found and accepted.
#[derive(Debug)]
pub struct DebugFile {
    /// Path wprof read it from.
    pub path: PathBuf,
    /// Path for display: as the target sees it (or the host path, for a `WPROF_DEBUG_DIRS` root).
    pub shown: String,
    /// Its contents.
    pub data: Vec<u8>,
}

/// The outcome of a search.
#[derive(Debug, Default)]
pub struct Lookup {
    /// The debug file, if one was found and matches.
    pub file: Option<DebugFile>,
    /// One line per candidate that exists but was rejected, and why.
    pub notes: Vec<String>,
}

/// Where debug files are looked for, for one target.
#[derive(Debug, Clone)]
pub struct Search {
    /// The target's root (`/proc/PID/root`, or `/`).
    pub root: PathBuf,
    /// Extra debug roots (host paths), searched after the target's /usr/lib/debug.
    pub extra: Vec<PathBuf>,
}

/// A debug root: where to read it, and how to show paths under it.
struct DebugRoot {
    host: PathBuf,
    /// Prefix shown instead of `host` (the target's view), or None to show host paths.
    shown: Option<String>,
    /// An extra root also gets debuginfod's cache layout.
    extra: bool,
}

impl Search {
    /// The search for a target under `root`, with the extra roots of `WPROF_DEBUG_DIRS`.
    pub fn from_env(root: &Path) -> Search {
        let extra = std::env::var_os(ENV)
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Search {
            root: root.to_path_buf(),
            extra,
        }
    }

    fn roots(&self) -> Vec<DebugRoot> {
        let mut roots = vec![DebugRoot {
            host: under_root(&self.root, SYSTEM_ROOT),
            shown: Some(SYSTEM_ROOT.to_string()),
            extra: false,
        }];
        roots.extend(self.extra.iter().map(|d| DebugRoot {
            host: d.clone(),
            shown: None,
            extra: true,
        }));
        roots
    }

    /// Looks for the debug file of the object at `object` (the path wprof opened) that the
    /// target sees as `target_path`, given its build id and debuglink.
    pub fn find(
        &self,
        object: &Path,
        target_path: &str,
        build_id: Option<&[u8]>,
        link: Option<&Link>,
    ) -> Lookup {
        let mut lookup = Lookup::default();
        let mut seen: Vec<PathBuf> = Vec::new();
        let object_id = std::fs::metadata(object).ok().map(|m| (m.dev(), m.ino()));
        let mut candidates: Vec<(PathBuf, String, Want)> = Vec::new();
        let roots = self.roots();
        if let Some(id) = build_id.filter(|id| id.len() >= 2) {
            let hex = hex(id);
            let rel = format!(".build-id/{}/{}.debug", &hex[..2], &hex[2..]);
            for r in &roots {
                candidates.push((r.host.join(&rel), r.show(&rel), Want::BuildId));
                if r.extra {
                    let rel = format!("{hex}/debuginfo");
                    candidates.push((r.host.join(&rel), r.show(&rel), Want::BuildId));
                }
            }
        }
        if let Some(link) = link {
            let dir = Path::new(target_path)
                .parent()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_else(|| "/".into());
            let dir = dir.trim_end_matches('/');
            for sub in ["", "/.debug"] {
                let shown = format!("{dir}{sub}/{}", link.name);
                candidates.push((under_root(&self.root, &shown), shown, Want::Crc(link.crc)));
            }
            for r in &roots {
                let rel = format!("{}/{}", dir.trim_start_matches('/'), link.name);
                let rel = rel.trim_start_matches('/');
                candidates.push((r.host.join(rel), r.show(rel), Want::Crc(link.crc)));
            }
        }
        for (path, shown, want) in candidates {
            if seen.contains(&path) {
                continue;
            }
            seen.push(path.clone());
            let meta = match std::fs::metadata(&path) {
                Ok(m) if m.is_file() => m,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => {
                    lookup
                        .notes
                        .push(format!("cannot read debug file {shown}: {e}"));
                    continue;
                }
            };
            if object_id == Some((meta.dev(), meta.ino())) {
                continue;
            }
            let data = match std::fs::read(&path) {
                Ok(d) => d,
                Err(e) => {
                    lookup
                        .notes
                        .push(format!("cannot read debug file {shown}: {e}"));
                    continue;
                }
            };
            match check(&data, build_id, want) {
                Ok(()) => {
                    lookup.file = Some(DebugFile { path, shown, data });
                    break;
                }
                Err(why) => lookup
                    .notes
                    .push(format!("ignored debug file {shown}: {why}")),
            }
        }
        lookup
    }
}

impl DebugRoot {
    /// How `rel` (relative to this root) is shown.
    fn show(&self, rel: &str) -> String {
        match &self.shown {
            Some(prefix) => format!("{prefix}/{rel}"),
            None => self.host.join(rel).to_string_lossy().into_owned(),
        }
    }
}

/// What a candidate must satisfy.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Found by build id: it must carry the same build id.
    BuildId,
    /// Found by debuglink: its CRC32 must match (and its build id, when both have one).
    Crc(u32),
}

/// Whether `data` is the debug file wanted; the reason if not.
fn check(data: &[u8], build_id: Option<&[u8]>, want: Want) -> Result<(), String> {
    let file = object::File::parse(data).map_err(|_| "not an ELF object".to_string())?;
    if let Want::Crc(crc) = want {
        let got = crc32fast::hash(data);
        if got != crc {
            return Err(format!(
                "its CRC32 {got:08x} does not match the object's .gnu_debuglink ({crc:08x}): \
                 it belongs to another build"
            ));
        }
    }
    let theirs = file.build_id().ok().flatten();
    match (build_id, theirs, want) {
        (Some(ours), Some(theirs), _) if ours != theirs => Err(format!(
            "its build id {} is not the object's {}",
            hex(theirs),
            hex(ours)
        )),
        (_, None, Want::BuildId) => Err("it has no build id".into()),
        _ => Ok(()),
    }
}

/// The `.gnu_debuglink` of a parsed object, if any.
pub fn debuglink<'d>(file: &impl Object<'d>) -> Option<Link> {
    let (name, crc) = file.gnu_debuglink().ok().flatten()?;
    let name = String::from_utf8_lossy(name).into_owned();
    // A name with a directory in it is not a debuglink gdb would follow either.
    (!name.is_empty() && !name.contains('/')).then_some(Link { name, crc })
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::testutil::{build_id, split_debug};
    use object::Object;

    /// The build id and debuglink of `obj`, as the resolver reads them.
    fn ids(obj: &Path) -> (Vec<u8>, Option<Link>) {
        let data = std::fs::read(obj).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let id = file.build_id().unwrap().unwrap().to_vec();
        (id, debuglink(&file))
    }

    fn search(root: &Path, extra: &[&Path]) -> Search {
        Search {
            root: root.to_path_buf(),
            extra: extra.iter().map(|p| p.to_path_buf()).collect(),
        }
    }

    #[test]
    fn by_build_id_in_an_extra_root_and_under_the_target_root() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (_full, stripped, debug) = split_debug(d, "app");
        let hex = build_id(&stripped);
        let (id, _) = ids(&stripped);
        assert_eq!(super::hex(&id), hex);
        // Moved away from its debuglink: only the build id can find it.
        let lone = d.join("elsewhere");
        std::fs::create_dir(&lone).unwrap();
        std::fs::copy(&stripped, lone.join("app")).unwrap();
        let extra = d.join("dbgroot");
        let by_id = extra.join(format!(".build-id/{}/{}.debug", &hex[..2], &hex[2..]));
        std::fs::create_dir_all(by_id.parent().unwrap()).unwrap();
        std::fs::copy(&debug, &by_id).unwrap();
        let target = lone.join("app").to_string_lossy().into_owned();
        let found =
            search(Path::new("/"), &[&extra]).find(&lone.join("app"), &target, Some(&id), None);
        let file = found.file.expect("found by build id");
        assert_eq!(file.path, by_id);
        assert_eq!(file.shown, by_id.to_string_lossy());
        assert!(found.notes.is_empty(), "{:?}", found.notes);
        // Nothing without the extra root.
        let none = search(Path::new("/"), &[]).find(&lone.join("app"), &target, Some(&id), None);
        assert!(none.file.is_none() && none.notes.is_empty());
        // debuginfod's cache layout in an extra root.
        let cache = d.join("cache");
        std::fs::create_dir_all(cache.join(&hex)).unwrap();
        std::fs::copy(&debug, cache.join(&hex).join("debuginfo")).unwrap();
        let found =
            search(Path::new("/"), &[&cache]).find(&lone.join("app"), &target, Some(&id), None);
        assert_eq!(found.file.unwrap().path, cache.join(&hex).join("debuginfo"));
        // A container: /usr/lib/debug under the target's root, shown as the target sees it.
        let root = d.join("root");
        let in_root = root.join(format!(
            "usr/lib/debug/.build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        ));
        std::fs::create_dir_all(in_root.parent().unwrap()).unwrap();
        std::fs::copy(&debug, &in_root).unwrap();
        let found = search(&root, &[]).find(&lone.join("app"), "/opt/app", Some(&id), None);
        let file = found.file.unwrap();
        assert_eq!(file.path, in_root);
        assert_eq!(
            file.shown,
            format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..])
        );
        // Another build's debug file under this build id: rejected, with a note.
        let (_, other, other_debug) = split_debug(d, "other");
        let (other_id, _) = ids(&other);
        assert_ne!(other_id, id);
        std::fs::copy(&other_debug, &by_id).unwrap();
        let found =
            search(Path::new("/"), &[&extra]).find(&lone.join("app"), &target, Some(&id), None);
        assert!(found.file.is_none());
        assert_eq!(found.notes.len(), 1, "{:?}", found.notes);
        assert!(found.notes[0].contains("build id"), "{:?}", found.notes);
    }

    #[test]
    fn by_debuglink_with_crc_in_gdbs_three_places() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // The target sees its binary as /opt/app/bin/app.
        let bindir = root.join("opt/app/bin");
        std::fs::create_dir_all(&bindir).unwrap();
        let (_full, stripped, debug) = split_debug(&bindir, "app");
        let (id, link) = ids(&stripped);
        let link = link.expect("objcopy added a debuglink");
        assert_eq!(link.name, "app.debug");
        assert_eq!(link.crc, crc32fast::hash(&std::fs::read(&debug).unwrap()));
        let s = search(root, &[]);
        let find = |s: &Search| s.find(&stripped, "/opt/app/bin/app", Some(&id), Some(&link));
        // 1. Next to the object.
        let f = find(&s).file.unwrap();
        assert_eq!(
            (f.path.as_path(), f.shown.as_str()),
            (debug.as_path(), "/opt/app/bin/app.debug")
        );
        // 2. In its .debug/ subdirectory.
        std::fs::create_dir(bindir.join(".debug")).unwrap();
        std::fs::rename(&debug, bindir.join(".debug/app.debug")).unwrap();
        assert_eq!(
            find(&s).file.unwrap().shown,
            "/opt/app/bin/.debug/app.debug"
        );
        // 3. Under /usr/lib/debug + the object's directory.
        let global = root.join("usr/lib/debug/opt/app/bin");
        std::fs::create_dir_all(&global).unwrap();
        std::fs::rename(bindir.join(".debug/app.debug"), global.join("app.debug")).unwrap();
        assert_eq!(
            find(&s).file.unwrap().shown,
            "/usr/lib/debug/opt/app/bin/app.debug"
        );
        // ... and in an extra root the same way.
        let extra = root.join("extra");
        std::fs::create_dir_all(extra.join("opt/app/bin")).unwrap();
        std::fs::rename(
            global.join("app.debug"),
            extra.join("opt/app/bin/app.debug"),
        )
        .unwrap();
        assert!(find(&s).file.is_none());
        let f = find(&search(root, &[&extra])).file.unwrap();
        assert_eq!(f.path, extra.join("opt/app/bin/app.debug"));
    }

    #[test]
    fn crc_mismatch_is_ignored_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (_full, stripped, debug) = split_debug(d, "app");
        let (_, link) = ids(&stripped);
        let link = link.unwrap();
        // Same name, other contents (another build's debug file, no build id to compare).
        let mut data = std::fs::read(&debug).unwrap();
        let last = data.len() - 1;
        data[last] ^= 0xff;
        std::fs::write(&debug, &data).unwrap();
        let target = stripped.to_string_lossy().into_owned();
        let found = search(Path::new("/"), &[]).find(&stripped, &target, None, Some(&link));
        assert!(found.file.is_none());
        assert_eq!(found.notes.len(), 1, "{:?}", found.notes);
        let note = &found.notes[0];
        assert!(
            note.starts_with(&format!(
                "ignored debug file {}: its CRC32",
                debug.display()
            )) && note.contains(&format!("{:08x}", link.crc)),
            "{note}"
        );
        // A debuglink naming the object itself is never taken for its debug file.
        let me = Link {
            name: "app".into(),
            crc: crc32fast::hash(&std::fs::read(&stripped).unwrap()),
        };
        let found = search(Path::new("/"), &[]).find(&stripped, &target, None, Some(&me));
        assert!(
            found.file.is_none() && found.notes.is_empty(),
            "{:?}",
            found.notes
        );
    }
}
