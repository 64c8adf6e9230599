//! Acting for the real user. A wprof given privileges its user lacks (the README's
//! `setcap cap_bpf,cap_perfmon+ep`, or a setuid install) must not lend them out: it traces
//! only processes that user may ptrace ([`check_may_trace`] at attach, [`CredentialWatch`]
//! during the run), runs `record`'s command so that it cannot gain privilege ([`command`]),
//! and reads profiles and runs with that user's permissions ([`read_to_string`]). Run as
//! root, wprof acts for root, except that `record` started through sudo runs its command as
//! the sudo user ([`command::launch_for`]).
//!
//! In: this process's credentials and /proc. Out: refusals ([`WprofError::Permission`],
//! exit 1) naming the process or file and why, and how `record`'s child is to be exec'd.

pub mod command;

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::WprofError;

/// The ids and capability sets of a process, from `/proc/PID/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Real, effective, saved and filesystem uid.
    pub uids: [u32; 4],
    /// Real, effective, saved and filesystem gid.
    pub gids: [u32; 4],
    /// Permitted capabilities (bit N = capability N).
    pub cap_permitted: u64,
    /// Effective capabilities.
    pub cap_effective: u64,
}

impl Credentials {
    /// Parses the text of a `/proc/PID/status` file; None when a field is missing.
    pub fn parse(status: &str) -> Option<Credentials> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let ids = |name: &str| -> Option<[u32; 4]> {
            let v: Vec<u32> = field(name)?
                .split_whitespace()
                .map(|t| t.parse().ok())
                .collect::<Option<_>>()?;
            v.try_into().ok()
        };
        let caps = |name: &str| u64::from_str_radix(field(name)?, 16).ok();
        Some(Credentials {
            uids: ids("Uid")?,
            gids: ids("Gid")?,
            cap_permitted: caps("CapPrm")?,
            cap_effective: caps("CapEff")?,
        })
    }

    /// A process's credentials; None when it is gone or its status cannot be read.
    pub fn of_pid(pid: u32) -> Option<Credentials> {
        Credentials::parse(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
    }

    /// This process's credentials.
    pub fn own() -> Option<Credentials> {
        Credentials::parse(&std::fs::read_to_string("/proc/self/status").ok()?)
    }
}

/// The user wprof acts for when it holds privileges that user does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealUser {
    /// Real uid.
    pub uid: u32,
    /// Real gid.
    pub gid: u32,
}

/// The real user, when wprof runs with more than that user's rights: a real uid other than
/// root with capabilities (file capabilities: the real user has none of their own), or an
/// effective or saved uid or gid that is not the real one (a setuid or setgid install). None
/// for root and for a plain unprivileged run (the kernel refuses that one BPF anyway). When
/// the capability sets cannot be read (no /proc), a real uid other than 0 counts as elevated:
/// the checks then refuse what they cannot verify rather than let it through.
pub fn elevated_real_user() -> Option<RealUser> {
    let (mut r, mut e, mut s) = (0, 0, 0);
    let (mut gr, mut ge, mut gs) = (0, 0, 0);
    // SAFETY: valid pointers to ids to fill; these calls cannot fail with them.
    unsafe {
        libc::getresuid(&mut r, &mut e, &mut s);
        libc::getresgid(&mut gr, &mut ge, &mut gs);
    }
    let user = RealUser { uid: r, gid: gr };
    let caps = Credentials::own().is_none_or(|c| c.cap_permitted | c.cap_effective != 0);
    let elevated = caps || e != r || s != r || ge != gr || gs != gr;
    (user.uid != 0 && elevated).then_some(user)
}

/// Refuses the processes the real user may not ptrace, when wprof acts for that user
/// ([`elevated_real_user`]); with no elevation, the kernel's own checks apply. Checked at
/// attach, and during the run by [`CredentialWatch`].
pub fn check_may_trace(pids: &[u32]) -> Result<(), WprofError> {
    let Some(user) = elevated_real_user() else {
        return Ok(());
    };
    match first_untraceable(&user, pids) {
        None => Ok(()),
        Some((pid, why)) => Err(WprofError::Permission(format!(
            "wprof may not trace pid {pid}: {why}. wprof runs with capabilities its user \
             (uid {}) does not have, so it traces only the processes that user may ptrace \
             (same real, effective and saved uid and gid, dumpable, no capabilities); run \
             wprof as root (sudo) to trace other processes",
            user.uid
        ))),
    }
}

/// The check of [`check_may_trace`] again while a run goes on: a traced process that execs a
/// setuid or file-capability program keeps its pid, and the kernel leaves uprobes filtered by
/// pid in place, so wprof itself must notice the change.
pub struct CredentialWatch {
    user: Option<RealUser>,
}

impl CredentialWatch {
    /// A watch for this process's real user (a no-op when wprof acts for no one but itself).
    pub fn new() -> CredentialWatch {
        CredentialWatch {
            user: elevated_real_user(),
        }
    }

    /// Fails when one of `pids` (the traced processes, and those forked from them) may no
    /// longer be traced for the real user: the run must end without writing what it saw.
    pub fn check(&self, pids: &[u32]) -> Result<(), WprofError> {
        let Some(user) = &self.user else {
            return Ok(());
        };
        match first_untraceable(user, pids) {
            None => Ok(()),
            Some((pid, why)) => Err(WprofError::Permission(format!(
                "traced pid {pid} changed credentials (a setuid or file-capability program?): \
                 {why}. wprof runs with capabilities its user (uid {}) does not have and may \
                 not show that process's data: it stopped and wrote no output",
                user.uid
            ))),
        }
    }
}

impl Default for CredentialWatch {
    fn default() -> CredentialWatch {
        CredentialWatch::new()
    }
}

/// The first of `pids` that `user` may not ptrace, and why. Pids that are gone are skipped
/// (callers report them as such).
fn first_untraceable(user: &RealUser, pids: &[u32]) -> Option<(u32, String)> {
    pids.iter().find_map(|&pid| {
        let creds = Credentials::of_pid(pid)?;
        // The kernel gives a non-dumpable process's /proc files to root (all but the
        // world-readable directories, such as /proc/PID itself, which keep the euid).
        let dump_owner = std::fs::metadata(format!("/proc/{pid}/status"))
            .ok()
            .map(|m| m.uid());
        why_not_traceable(user, &creds, dump_owner).map(|why| (pid, why))
    })
}

/// Why `user` may not ptrace a process with `creds`, whose /proc/PID/status is owned by
/// `dump_owner`, or None.
fn why_not_traceable(
    user: &RealUser,
    creds: &Credentials,
    dump_owner: Option<u32>,
) -> Option<String> {
    let [r, e, s, _] = creds.uids;
    if [r, e, s].iter().any(|&u| u != user.uid) {
        return Some(format!(
            "it runs as uid {r} (effective {e}, saved {s}), not as uid {}",
            user.uid
        ));
    }
    let [r, e, s, _] = creds.gids;
    if [r, e, s].iter().any(|&g| g != user.gid) {
        return Some(format!(
            "it runs as gid {r} (effective {e}, saved {s}), not as gid {}",
            user.gid
        ));
    }
    if creds.cap_permitted != 0 {
        return Some(format!(
            "it holds capabilities (CapPrm {:016x})",
            creds.cap_permitted
        ));
    }
    if dump_owner.is_some_and(|o| o != user.uid) {
        return Some(
            "it is not dumpable (it changed credentials, or set PR_SET_DUMPABLE to 0)".into(),
        );
    }
    None
}

/// Reads a file named on the command line (a profile, a run, a hypothesis file) with the
/// real user's permissions when wprof acts for that user, else as `std::fs::read_to_string`.
///
/// The check is access(2) (which uses the real uid and gid and, for a real uid other than 0,
/// no capabilities) on the name, then faccessat2(AT_EMPTY_PATH) on the file actually opened.
/// Setting the fsuid instead would not do: with file capabilities the fsuid already is the
/// real user's, and capabilities such as CAP_DAC_READ_SEARCH stay in force whatever it is.
/// Checking the name walks every directory as the user; checking the open file closes the
/// window in which the name could be swapped for another file between check and open.
pub fn read_to_string(path: &Path) -> io::Result<String> {
    use std::io::Read;
    if elevated_real_user().is_none() {
        return std::fs::read_to_string(path);
    }
    user_may_read_path(path)?;
    let mut file = std::fs::File::open(path)?;
    user_may_read_fd(&file)?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// The error of a file the real user may not read (callers name the file).
fn denied() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "permission denied (wprof reads files with the permissions of the user running it)",
    )
}

/// access(2) on the name, with the real ids.
fn user_may_read_path(path: &Path) -> io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path has a NUL byte"))?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::R_OK) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::PermissionDenied => Err(denied()),
        _ => Err(e),
    }
}

/// faccessat2(fd, "", R_OK, AT_EMPTY_PATH) on the open file, with the real ids.
fn user_may_read_fd(file: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: an open fd and a static empty C string; faccessat2 only reads them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::R_OK,
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => Err(denied()),
        // Kernels before 5.8 have no faccessat2; the name was checked.
        Some(libc::ENOSYS) => Ok(()),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsleep\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\n\
                          CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
                          CapEff:\t0000000000000000\n";

    fn user() -> RealUser {
        RealUser {
            uid: 1000,
            gid: 100,
        }
    }

    #[test]
    fn a_process_of_the_same_user_is_traceable_and_others_are_not() {
        let c = Credentials::parse(STATUS).unwrap();
        assert_eq!(c.uids, [1000; 4]);
        assert_eq!(why_not_traceable(&user(), &c, Some(1000)), None);
        let setuid = Credentials {
            uids: [1000, 0, 0, 0],
            ..c.clone()
        };
        let why = why_not_traceable(&user(), &setuid, Some(0)).unwrap();
        assert!(why.contains("effective 0"), "{why}");
        let setgid = Credentials {
            gids: [100, 42, 42, 42],
            ..c.clone()
        };
        assert!(why_not_traceable(&user(), &setgid, Some(1000))
            .unwrap()
            .contains("gid 100 (effective 42"));
        let capable = Credentials {
            cap_permitted: 1 << 13,
            ..c.clone()
        };
        assert!(why_not_traceable(&user(), &capable, Some(1000))
            .unwrap()
            .contains("capabilities"));
        let nondumpable = why_not_traceable(&user(), &c, Some(0)).unwrap();
        assert!(nondumpable.contains("not dumpable"), "{nondumpable}");
    }

    #[test]
    fn own_credentials_parse_and_a_plain_read_works() {
        let me = Credentials::own().unwrap();
        // SAFETY: getuid has no preconditions.
        assert_eq!(me.uids[0], unsafe { libc::getuid() });
        assert!(Credentials::parse("Name:\tx\n").is_none());
        let text = read_to_string(Path::new("/proc/self/status")).unwrap();
        assert!(text.contains("CapEff"));
    }
}
