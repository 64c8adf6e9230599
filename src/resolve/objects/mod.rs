//! Finding a phase's object file, for a live process or a binary on disk.
//!
//! In: a [`Scope`] and an `object` string from a profile: `"exe"`, an absolute path, or a file
//! name (`"libc"`, `"libc.so"` and `"libc.so.6"` all find libc.so.6). Out: a [`Located`] with the
//! path wprof opens and attaches to (through /proc/PID/root for processes, so containers work)
//! and the path as the target sees it. A name is looked up in the process's mappings first
//! (exact basename, or the name followed by `.` or `-`), then as the dynamic loader would for a
//! later dlopen: the exe's DT_RPATH, LD_LIBRARY_PATH (from /proc/PID/environ), DT_RUNPATH
//! ($ORIGIN expanded), /etc/ld.so.conf.d, then the usual library directories. Errors list what
//! was tried. How the loader searches a directory list for a name is [`libpath`]'s.

pub mod libpath;

use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::error::WprofError;
use crate::resolve::Scope;
use libpath::{name_match, under_root};

/// How the reason of a phase whose object is nowhere to be found starts (see
/// [`crate::resolve::ResolvedPhase::object_missing`]).
pub const OBJECT_NOT_FOUND: &str = "cannot find object";

/// An object found for a phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Path wprof can open (under /proc/PID/root for a process).
    pub host_path: PathBuf,
    /// The path as the target sees it.
    pub target_path: String,
}

/// The process or binary whose objects are looked up.
#[derive(Debug, Clone)]
pub struct Target {
    /// The pid looked into (the first of the scope), if any.
    pid: Option<u32>,
    /// `/proc/PID/root`, or `/` for a binary.
    root: PathBuf,
    /// The main executable.
    exe: Located,
    /// LD_LIBRARY_PATH the target runs (or will run) with.
    ld_library_path: Option<String>,
}

impl Target {
    /// Checks the scope (the pids exist and can be read) and finds the main executable.
    pub fn new(scope: &Scope) -> anyhow::Result<Target> {
        match scope {
            Scope::Pids(pids) => {
                let Some(&first) = pids.first() else {
                    return Err(WprofError::Usage("no pid given".into()).into());
                };
                for &pid in pids {
                    if !Path::new(&format!("/proc/{pid}")).exists() {
                        return Err(WprofError::NoProcess(format!(
                            "no process with pid {pid} (is it running? check `ps -p {pid}`)"
                        ))
                        .into());
                    }
                }
                Target::for_pid(first)
            }
            Scope::Binary(path) => Target::for_binary(path),
        }
    }

    fn for_pid(pid: u32) -> anyhow::Result<Target> {
        let link = format!("/proc/{pid}/exe");
        let exe = match std::fs::read_link(&link) {
            Ok(p) => p
                .to_string_lossy()
                .trim_end_matches(" (deleted)")
                .to_string(),
            Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                return Err(WprofError::Permission(format!(
                    "cannot read {link}: permission denied (run wprof as root, or as the \
                     process's user with ptrace allowed)"
                ))
                .into())
            }
            Err(e) => {
                return Err(WprofError::NoProcess(format!(
                    "pid {pid} has no executable to probe ({link}: {e}); is it a kernel thread \
                     or a zombie?"
                ))
                .into())
            }
        };
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let mut host = under_root(&root, &exe);
        // A binary replaced or deleted since the process started: attach to the running one.
        let same = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        };
        if !same(&host, Path::new(&link)) {
            host = PathBuf::from(&link);
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let ld_library_path = environ
            .split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(b"LD_LIBRARY_PATH="))
            .map(|v| String::from_utf8_lossy(v).into_owned());
        Ok(Target {
            pid: Some(pid),
            root,
            exe: Located {
                host_path: host,
                target_path: exe,
            },
            ld_library_path,
        })
    }

    fn for_binary(path: &Path) -> anyhow::Result<Target> {
        let usage = |m: String| anyhow::Error::from(WprofError::Usage(m));
        let found = if path.components().count() == 1 && !path.is_absolute() {
            // A bare command name, as `record -- postgres ...` would run it: look in PATH.
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths)
                .map(|d| d.join(path))
                .find(|p| p.is_file())
                .ok_or_else(|| usage(format!("{} is not in PATH", path.display())))?
        } else {
            path.to_path_buf()
        };
        let canonical = std::fs::canonicalize(&found)
            .map_err(|e| usage(format!("cannot open binary {}: {e}", found.display())))?;
        let shown = canonical.to_string_lossy().into_owned();
        Ok(Target {
            pid: None,
            root: PathBuf::from("/"),
            exe: Located {
                host_path: canonical,
                target_path: shown,
            },
            ld_library_path: std::env::var("LD_LIBRARY_PATH").ok(),
        })
    }

    /// The root the target's paths are resolved under (`/proc/PID/root`, or `/`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The main executable.
    pub fn exe(&self) -> &Located {
        &self.exe
    }

    /// Finds `object` ("exe", an absolute path, or a file name).
    pub fn locate(&self, object: &str) -> anyhow::Result<Located> {
        if object == "exe" {
            return Ok(self.exe.clone());
        }
        if object.starts_with('/') {
            let host = under_root(&self.root, object);
            if !host.exists() {
                bail!(
                    "object {object} does not exist (looked at {})",
                    host.display()
                );
            }
            return Ok(Located {
                host_path: host,
                target_path: object.to_string(),
            });
        }
        if object.is_empty() || object.contains('/') {
            bail!("object '{object}' must be \"exe\", an absolute path, or a file name");
        }
        let mut tried = Vec::new();
        if let Some(found) = self.in_maps(object, &mut tried)? {
            return Ok(found);
        }
        for dir in libpath::search_dirs(&self.root, &self.exe, self.ld_library_path.as_deref()) {
            if let Some(found) = libpath::in_dir(&self.root, &dir, object)? {
                return Ok(found);
            }
            tried.push(dir);
        }
        bail!("{OBJECT_NOT_FOUND} '{object}': tried {}", tried.join(", "))
    }

    /// A mapped file of the process whose basename matches `name`.
    fn in_maps(&self, name: &str, tried: &mut Vec<String>) -> anyhow::Result<Option<Located>> {
        let Some(pid) = self.pid else { return Ok(None) };
        let maps_path = format!("/proc/{pid}/maps");
        let maps = std::fs::read_to_string(&maps_path)
            .with_context(|| format!("cannot read {maps_path}"))?;
        tried.push(format!("{maps_path} (not mapped yet)"));
        let mut best: Vec<(u8, String)> = Vec::new();
        for line in maps.lines() {
            // address perms offset dev inode path (the path may hold spaces)
            let Some(path) = line.splitn(6, ' ').nth(5).map(str::trim_start) else {
                continue;
            };
            let path = path.trim_end_matches(" (deleted)");
            let Some(base) = path.rsplit('/').next().filter(|_| path.starts_with('/')) else {
                continue;
            };
            let score = name_match(base, name);
            if score > 0 && !best.iter().any(|(_, p)| p == path) {
                best.push((score, path.to_string()));
            }
        }
        let top = best.iter().map(|(s, _)| *s).max().unwrap_or(0);
        let paths: Vec<&String> = best
            .iter()
            .filter(|(s, _)| *s == top)
            .map(|(_, p)| p)
            .collect();
        match paths.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(Located {
                host_path: under_root(&self.root, one),
                target_path: (*one).clone(),
            })),
            many => bail!(
                "object '{name}' matches several files mapped by pid {pid}: {}; name one",
                many.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::libpath::{dynamic_paths, is_elf};
    use super::*;
    use crate::resolve::testutil::build;

    fn me() -> Target {
        Target::new(&Scope::Pids(vec![std::process::id()])).unwrap()
    }

    #[test]
    fn own_process_exe_and_libc() {
        let t = me();
        let exe = t.locate("exe").unwrap();
        assert_eq!(
            exe.target_path,
            std::env::current_exe().unwrap().to_string_lossy()
        );
        assert!(exe
            .host_path
            .starts_with(format!("/proc/{}/", std::process::id())));
        for name in ["libc", "libc.so", "libc.so.6"] {
            let libc = t.locate(name).unwrap();
            assert!(libc.target_path.ends_with("/libc.so.6"), "{libc:?}");
            assert!(libc
                .host_path
                .starts_with(format!("/proc/{}/root/", std::process::id())));
            assert!(is_elf(&libc.host_path));
        }
        // Not mapped, found in the library directories as the loader would.
        let z = t.locate("libz").unwrap();
        assert!(z.target_path.contains("libz.so"), "{z:?}");
        let e = format!("{:#}", t.locate("libdoesnotexist").unwrap_err());
        assert!(
            e.contains("/proc/") && e.contains("/usr/lib/x86_64-linux-gnu"),
            "{e}"
        );
        assert!(t.locate("/no/such/file.so").is_err());
        assert!(t.locate("lib/x.so").is_err());
    }

    #[test]
    fn missing_pid_is_no_process() {
        let e = Target::new(&Scope::Pids(vec![999_999_999])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no process with pid 999999999 (is it running? check `ps -p 999999999`)"
        );
        assert!(matches!(
            e.downcast_ref::<WprofError>(),
            Some(WprofError::NoProcess(_))
        ));
    }

    #[test]
    fn missing_binary_is_a_usage_error() {
        for p in ["/no/such/binary", "no-such-command-wprof"] {
            let e = Target::new(&Scope::Binary(p.into())).unwrap_err();
            assert!(
                matches!(e.downcast_ref::<WprofError>(), Some(WprofError::Usage(_))),
                "{e}"
            );
            assert!(e.to_string().contains(p), "{e}");
        }
        let sh = Target::new(&Scope::Binary("sh".into())).unwrap();
        assert!(sh.exe().target_path.starts_with('/'));
    }

    #[test]
    fn binary_runpath_with_origin() {
        let dir = tempfile::tempdir().unwrap();
        let libdir = dir.path().join("lib");
        std::fs::create_dir(&libdir).unwrap();
        build(
            &libdir,
            "libfix.so.1",
            "int fix(int x){return x+1;}",
            false,
            &["-shared", "-fPIC"],
        );
        let bin = build(
            dir.path(),
            "app",
            "int main(void){return 0;}",
            false,
            &["-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib"],
        );
        let data = std::fs::read(&bin).unwrap();
        assert_eq!(
            dynamic_paths(&data).unwrap().1.as_deref(),
            Some("$ORIGIN/lib")
        );
        let t = Target::new(&Scope::Binary(bin.clone())).unwrap();
        let found = t.locate("libfix").unwrap();
        let canon = std::fs::canonicalize(&libdir).unwrap();
        assert_eq!(
            found.target_path,
            format!("{}/libfix.so.1", canon.display())
        );
        assert_eq!(
            t.locate("exe").unwrap().host_path,
            std::fs::canonicalize(&bin).unwrap()
        );
    }
}
