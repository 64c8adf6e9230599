//! `record`'s child: forked, held at a gate until the probes are live, then exec'd with the
//! credentials its [`Launch`] says (the sudo user's, or no_new_privs; crate::privilege).
//!
//! std's `Command::spawn` waits for the exec to happen, so it cannot hold a child before
//! exec while the parent attaches; this is the small fork/exec that can.
//!
//! In: the executable, its argv and the [`Launch`] credentials. Out: a [`GatedChild`] to
//! release, signal and wait for (its exit status).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::error::WprofError;
use crate::privilege::command::Launch;

/// A forked child waiting at the gate (a pipe) before exec.
pub struct GatedChild {
    pid: libc::pid_t,
    gate: Option<libc::c_int>,
    status: Option<i32>,
}

/// Finds a command like the shell does: a path with a `/` as is, else the first executable
/// match in $PATH.
pub fn find_executable(cmd: &str) -> Result<PathBuf> {
    let found = if cmd.contains('/') {
        Some(PathBuf::from(cmd)).filter(|p| is_executable(p))
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(cmd))
                .find(|p| is_executable(p))
        })
    };
    let exe = found.ok_or_else(|| {
        WprofError::Usage(format!(
            "command '{cmd}' not found or not executable (check $PATH)"
        ))
    })?;
    exe.canonicalize()
        .with_context(|| format!("resolve {}", exe.display()))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

impl GatedChild {
    /// Forks; the child blocks until [`GatedChild::release`], then takes on the credentials
    /// of `launch` and execs `exe` with `argv`.
    pub fn spawn(exe: &Path, argv: &[String], launch: &Launch) -> Result<GatedChild> {
        let path =
            CString::new(exe.as_os_str().as_bytes()).context("command path has a NUL byte")?;
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .context("command argument has a NUL byte")?;
        let mut argp: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argp.push(std::ptr::null());
        let groups: Vec<libc::gid_t> = launch
            .user
            .as_ref()
            .map(|u| u.groups.clone())
            .unwrap_or_default();
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: fds is a valid 2-element array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error()).context("pipe for the record gate");
        }
        let (rd, wr) = (fds[0], fds[1]);
        // SAFETY: the child only calls async-signal-safe functions (close, read, setgroups,
        // setgid, setuid, prctl, execv, write, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error()).context("fork the command");
        }
        if pid == 0 {
            // SAFETY: see above; every pointer was built before fork and outlives exec.
            unsafe {
                libc::close(wr);
                let mut b = 0u8;
                // Returns when the parent writes the go byte, or 0 when it closed the pipe
                // without releasing (attach failed): then exit without running anything.
                if libc::read(rd, (&raw mut b).cast(), 1) != 1 {
                    libc::_exit(127);
                }
                // Groups first: after setuid the child may no longer change them.
                if let Some(u) = &launch.user {
                    if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                        || libc::setgid(u.gid) != 0
                        || libc::setuid(u.uid) != 0
                    {
                        let msg = b"wprof: cannot switch the command to the sudo user\n";
                        libc::write(2, msg.as_ptr().cast(), msg.len());
                        libc::_exit(127);
                    }
                }
                if launch.no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    let msg = b"wprof: cannot set no_new_privs for the command\n";
                    libc::write(2, msg.as_ptr().cast(), msg.len());
                    libc::_exit(127);
                }
                libc::execv(path.as_ptr(), argp.as_ptr());
                let msg = b"wprof: exec of the command failed\n";
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::_exit(127);
            }
        }
        // SAFETY: closing our copy of the read end.
        unsafe { libc::close(rd) };
        Ok(GatedChild {
            pid,
            gate: Some(wr),
            status: None,
        })
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Lets the child exec the command.
    pub fn release(&mut self) -> Result<()> {
        if let Some(wr) = self.gate.take() {
            let b = 1u8;
            // SAFETY: wr is our open write end; one byte from a valid buffer.
            let n = unsafe { libc::write(wr, (&raw const b).cast(), 1) };
            // SAFETY: closing our fd once.
            unsafe { libc::close(wr) };
            if n != 1 {
                return Err(std::io::Error::last_os_error()).context("release the command");
            }
        }
        Ok(())
    }

    /// Ends a child that never ran the command (attach failed).
    pub fn abort(&mut self) {
        if let Some(wr) = self.gate.take() {
            // SAFETY: closing our fd once; the child sees EOF and exits without exec.
            unsafe { libc::close(wr) };
        }
        let _ = self.wait(true);
    }

    /// Reaps the child if it has exited (or waits for it when `block`); returns its status
    /// as an exit code (128 + signal for a killed child).
    pub fn wait(&mut self, block: bool) -> Option<i32> {
        if self.status.is_some() {
            return self.status;
        }
        let mut st = 0;
        let flags = if block { 0 } else { libc::WNOHANG };
        // SAFETY: waiting for our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(self.pid, &mut st, flags) };
        if r == self.pid {
            let code = if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st)
            } else if libc::WIFSIGNALED(st) {
                128 + libc::WTERMSIG(st)
            } else {
                return None;
            };
            self.status = Some(code);
        } else if r < 0 {
            // ECHILD: someone else reaped it; report a generic failure rather than hang.
            self.status = Some(1);
        }
        self.status
    }

    /// Sends a signal to the child.
    pub fn signal(&self, sig: libc::c_int) {
        if self.status.is_none() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.pid, sig) };
        }
    }
}
