//! Snapshots of `/proc/PID/maps`: which file (and file offset) an address of a process maps to.
//!
//! A snapshot is taken while the process is alive so that stacks can still be symbolized after
//! it exited: symbolization then needs only the snapshot and the files on disk.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// What an executable mapping holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingKind {
    /// A file on disk, mapped from [`Mapping::offset`].
    File {
        /// The path as `/proc/PID/maps` shows it (in the process's mount namespace).
        path: PathBuf,
        /// The path to open it from this process: `/proc/PID/root/<path>` when the target has
        /// another root (a container) and that path existed at snapshot time, else `path`.
        open_path: PathBuf,
        /// The inode `/proc/PID/maps` reported (0 when unknown).
        inode: u64,
    },
    /// `[uprobes]`: the kernel's uprobe/uretprobe trampoline page ("XOL area").
    Uprobes,
    /// `[vdso]`: the kernel-provided virtual shared object.
    Vdso,
}

/// One executable mapping: `[start, end)` in the process's address space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address of the mapping.
    pub end: u64,
    /// File offset that `start` maps to (0 for the special mappings).
    pub offset: u64,
    /// What the mapping holds.
    pub kind: MappingKind,
}

impl Mapping {
    /// True when `addr` lies in `[start, end)`.
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    /// The file offset `addr` corresponds to (`addr - start + offset`); `addr` must be contained.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.start).wrapping_add(self.offset)
    }

    /// The file's base name (`libc.so.6`), or the special name (`[uprobes]`, `[vdso]`).
    pub fn name(&self) -> String {
        match &self.kind {
            MappingKind::File { path, .. } => path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            MappingKind::Uprobes => "[uprobes]".to_string(),
            MappingKind::Vdso => "[vdso]".to_string(),
        }
    }
}

/// The executable mappings of one process, sorted by start address and non-overlapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessMaps {
    /// The process the snapshot was taken of.
    pub pid: u32,
    mappings: Vec<Mapping>,
}

impl ProcessMaps {
    /// Snapshots `/proc/PID/maps` (executable mappings only). Fails if the process is gone or
    /// its maps are unreadable.
    pub fn read(pid: u32) -> Result<ProcessMaps> {
        let maps_path = format!("/proc/{pid}/maps");
        let text =
            fs::read_to_string(&maps_path).with_context(|| format!("reading {maps_path}"))?;
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let other_root = !same_file(&root, Path::new("/"));
        Ok(Self::parse_with(pid, &text, |path| {
            if other_root {
                let in_root = root.join(path.strip_prefix("/").unwrap_or(path));
                if in_root.exists() {
                    return in_root;
                }
            }
            path.to_path_buf()
        }))
    }

    /// Parses the text of a `/proc/PID/maps` file, opening files by their plain paths. Lines
    /// that do not parse, non-executable mappings, anonymous ones and ` (deleted)` files are
    /// skipped.
    pub fn parse(pid: u32, text: &str) -> ProcessMaps {
        Self::parse_with(pid, text, Path::to_path_buf)
    }

    fn parse_with(pid: u32, text: &str, open_path: impl Fn(&Path) -> PathBuf) -> ProcessMaps {
        let mut mappings: Vec<Mapping> = text
            .lines()
            .filter_map(|line| parse_line(line, &open_path))
            .collect();
        mappings.sort_by_key(|m| m.start);
        // The kernel never reports overlapping VMAs; drop any a malformed input would add.
        mappings.dedup_by(|later, earlier| later.start < earlier.end);
        ProcessMaps { pid, mappings }
    }

    /// Builds a snapshot from mappings (for tests and synthetic inputs); overlaps resolve in
    /// favour of the later entry.
    pub fn from_mappings(pid: u32, mappings: Vec<Mapping>) -> ProcessMaps {
        let mut maps = ProcessMaps {
            pid,
            mappings: Vec::new(),
        };
        for m in mappings {
            maps.insert(m);
        }
        maps
    }

    /// The mapping containing `addr`, if any.
    pub fn lookup(&self, addr: u64) -> Option<&Mapping> {
        let idx = self.mappings.partition_point(|m| m.start <= addr);
        let m = self.mappings.get(idx.checked_sub(1)?)?;
        m.contains(addr).then_some(m)
    }

    /// True when `addr` lies in the `[uprobes]` trampoline mapping.
    pub fn is_trampoline(&self, addr: u64) -> bool {
        matches!(
            self.lookup(addr),
            Some(Mapping {
                kind: MappingKind::Uprobes,
                ..
            })
        )
    }

    /// All mappings, sorted by start address.
    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    /// Merges a newer snapshot of the same process: mappings that are gone from `newer`
    /// (a `dlclose`d library) are kept, so older stacks still resolve; new ones (a library
    /// `dlopen`ed later) are added. Where a new mapping overlaps an old one, the new one wins.
    pub fn merge(&mut self, newer: ProcessMaps) {
        for m in newer.mappings {
            self.insert(m);
        }
    }

    fn insert(&mut self, m: Mapping) {
        if m.start >= m.end {
            return;
        }
        if self.mappings.contains(&m) {
            return;
        }
        self.mappings
            .retain(|old| old.end <= m.start || old.start >= m.end);
        let idx = self.mappings.partition_point(|old| old.start < m.start);
        self.mappings.insert(idx, m);
    }
}

/// Parses one line of `/proc/PID/maps`:
/// `start-end perms offset dev inode [path]`.
fn parse_line(line: &str, open_path: &impl Fn(&Path) -> PathBuf) -> Option<Mapping> {
    let mut rest = line;
    let mut fields = [""; 5];
    for field in &mut fields {
        rest = rest.trim_start_matches([' ', '\t']);
        let end = rest.find([' ', '\t']).unwrap_or(rest.len());
        *field = &rest[..end];
        rest = &rest[end..];
    }
    let [range, perms, offset, _dev, inode] = fields;
    let name = rest.trim_start_matches([' ', '\t']);
    if !perms.contains('x') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let offset = u64::from_str_radix(offset, 16).ok()?;
    let inode = inode.parse::<u64>().ok()?;
    let kind = match name {
        "[uprobes]" => MappingKind::Uprobes,
        "[vdso]" => MappingKind::Vdso,
        _ if name.starts_with('/') && !name.ends_with(" (deleted)") => {
            let path = PathBuf::from(name);
            MappingKind::File {
                open_path: open_path(&path),
                path,
                inode,
            }
        }
        // Anonymous executable memory (JIT), [vsyscall], deleted files, memfd: not symbolizable.
        _ => return None,
    };
    (start < end).then_some(Mapping {
        start,
        end,
        offset: if kind == MappingKind::Uprobes || kind == MappingKind::Vdso {
            0
        } else {
            offset
        },
        kind,
    })
}

/// True when both paths name the same file (same device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        // Unreadable root (no ptrace access): treat as ours and use plain paths.
        _ => true,
    }
}

/// Maps snapshots keyed by pid: the first sight of a pid snapshots it; [`MapsCache::refresh`]
/// merges a newer snapshot when an address is not covered.
#[derive(Debug, Default)]
pub struct MapsCache {
    maps: HashMap<u32, ProcessMaps>,
}

impl MapsCache {
    /// An empty cache.
    pub fn new() -> MapsCache {
        MapsCache::default()
    }

    /// The snapshot of `pid`, taken now if this pid was not seen before. `None` if the process
    /// is gone (or its maps are unreadable) and no earlier snapshot exists.
    pub fn get(&mut self, pid: u32) -> Option<&ProcessMaps> {
        if let Entry::Vacant(slot) = self.maps.entry(pid) {
            slot.insert(ProcessMaps::read(pid).ok()?);
        }
        self.maps.get(&pid)
    }

    /// The snapshot of `pid` if one was taken, without reading `/proc`.
    pub fn cached(&self, pid: u32) -> Option<&ProcessMaps> {
        self.maps.get(&pid)
    }

    /// Takes a new snapshot of `pid` and merges it into the cached one (or caches it). Returns
    /// the merged snapshot; if the process is gone, the old snapshot (if any) stays as it was.
    pub fn refresh(&mut self, pid: u32) -> Option<&ProcessMaps> {
        if let Ok(newer) = ProcessMaps::read(pid) {
            match self.maps.get_mut(&pid) {
                Some(old) => old.merge(newer),
                None => {
                    self.maps.insert(pid, newer);
                }
            }
        }
        self.maps.get(&pid)
    }

    /// The snapshot of `pid`, refreshed first if it does not cover `addr` (a library loaded
    /// after the first snapshot).
    pub fn covering(&mut self, pid: u32, addr: u64) -> Option<&ProcessMaps> {
        let covered = self.get(pid).is_some_and(|m| m.lookup(addr).is_some());
        if covered {
            self.maps.get(&pid)
        } else {
            self.refresh(pid)
        }
    }

    /// Inserts (or replaces) a snapshot, e.g. one taken elsewhere before the process exited.
    pub fn insert(&mut self, maps: ProcessMaps) {
        self.maps.insert(maps.pid, maps);
    }

    /// Forgets a pid (its process exited and its stacks are symbolized).
    pub fn remove(&mut self, pid: u32) -> Option<ProcessMaps> {
        self.maps.remove(&pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
5609fd27c000-5609fd27e000 r--p 00000000 fe:00 247026                     /usr/bin/cat
5609fd27e000-5609fd283000 r-xp 00002000 fe:00 247026                     /usr/bin/cat
7f4ed51e2000-7f4ed5338000 r-xp 00026000 fe:00 326269                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f4ed5400000-7f4ed5401000 r-xp 00001000 fe:00 1234                       /tmp/my lib.so
7f4ed5500000-7f4ed5501000 r-xp 00001000 fe:00 1235                       /tmp/gone.so (deleted)
7f4ed5600000-7f4ed5601000 rwxp 00000000 00:00 0 
7ffd1b1f0000-7ffd1b1f2000 r-xp 00000000 00:00 0                          [vdso]
7fffffffe000-7ffffffff000 --xp 00000000 00:00 0                          [uprobes]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn parses_executable_mappings() {
        let maps = ProcessMaps::parse(1, MAPS);
        let names: Vec<String> = maps.mappings().iter().map(Mapping::name).collect();
        assert_eq!(
            names,
            ["cat", "libc.so.6", "my lib.so", "[vdso]", "[uprobes]"]
        );
        let libc = maps.lookup(0x7f4ed51e2000 + 0x10).unwrap();
        assert_eq!(libc.file_offset(0x7f4ed51e2000 + 0x10), 0x26010);
        assert!(maps.lookup(0x7f4ed5338000).is_none());
        assert!(maps.lookup(0x5609fd27c000).is_none());
        assert!(maps.is_trampoline(0x7fffffffe010));
        assert!(!maps.is_trampoline(0x7ffd1b1f0000));
        assert!(
            maps.lookup(0x7f4ed5500000).is_none(),
            "deleted files are skipped"
        );
    }

    #[test]
    fn merge_keeps_old_and_adds_new() {
        let mut maps = ProcessMaps::parse(1, MAPS);
        let newer = ProcessMaps::parse(
            1,
            "7f4ed51e2000-7f4ed5338000 r-xp 00026000 fe:00 326269 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
             7f4ed6000000-7f4ed6001000 r-xp 00000000 fe:00 99 /usr/lib/plugin.so\n",
        );
        maps.merge(newer);
        assert_eq!(maps.lookup(0x7f4ed6000010).unwrap().name(), "plugin.so");
        assert_eq!(maps.lookup(0x5609fd27e000).unwrap().name(), "cat");
        assert_eq!(maps.mappings().len(), 6);
    }

    #[test]
    fn reads_self() {
        let maps = ProcessMaps::read(std::process::id()).unwrap();
        let f = reads_self as fn() as *const () as usize as u64;
        assert!(maps.lookup(f).is_some());
        let mut cache = MapsCache::new();
        assert!(cache.covering(std::process::id(), f).is_some());
        assert!(cache.get(u32::MAX).is_none());
    }
}
