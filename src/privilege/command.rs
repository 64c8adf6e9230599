//! How `record` runs its command: as whom, and whether it may gain privilege.
//!
//! In: the resolved executable, `--as-root`, this process's credentials and SUDO_UID/SUDO_GID.
//! Out: a [`Launch`] that `session::GatedChild` applies in the child before exec, or a refusal.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::elevated_real_user;
use crate::error::WprofError;

/// What the child does to its credentials between fork and exec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launch {
    /// Set PR_SET_NO_NEW_PRIVS: no exec in the command's process tree gains privilege
    /// (setuid, setgid and file capabilities are ignored), so its calls stay the real user's.
    pub no_new_privs: bool,
    /// Run the command as this user instead of wprof's.
    pub user: Option<CommandUser>,
}

/// The user, group and supplementary groups a command runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandUser {
    /// uid.
    pub uid: u32,
    /// Primary gid.
    pub gid: u32,
    /// Supplementary groups (those of the uid's passwd entry, or just `gid` without one).
    pub groups: Vec<u32>,
}

/// How `record` launches `exe`:
/// - with privileges the real user lacks (file capabilities, setuid install), a setuid,
///   setgid or file-capability program is refused, and the command runs with no_new_privs;
/// - as root with SUDO_UID and SUDO_GID set (started through sudo) and without `as_root`,
///   the command runs as the sudo user, with that user's supplementary groups (as
///   initgroups(3) would set them);
/// - otherwise as wprof's own user.
pub fn launch_for(exe: &Path, as_root: bool) -> Result<Launch, WprofError> {
    if elevated_real_user().is_some() {
        check_no_privilege_gain(exe)?;
        return Ok(Launch {
            no_new_privs: true,
            user: None,
        });
    }
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    if !root || as_root {
        return Ok(Launch::default());
    }
    let Some(user) = sudo_user()? else {
        return Ok(Launch::default());
    };
    eprintln!(
        "wprof: running the command as uid {} gid {} (the sudo user, from SUDO_UID/SUDO_GID); \
         --as-root runs it as root",
        user.uid, user.gid
    );
    Ok(Launch {
        no_new_privs: false,
        user: Some(user),
    })
}

/// Refuses a program that would run with more than the real user's rights.
fn check_no_privilege_gain(exe: &Path) -> Result<(), WprofError> {
    let meta = std::fs::metadata(exe)
        .map_err(|e| WprofError::Usage(format!("cannot read {}: {e}", exe.display())))?;
    let mode = meta.permissions().mode();
    let what = if mode & libc::S_ISUID != 0 {
        Some("a setuid")
    } else if mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 {
        Some("a setgid")
    } else if has_file_capabilities(exe) {
        Some("a file-capability")
    } else {
        None
    };
    match what {
        None => Ok(()),
        Some(what) => Err(WprofError::Permission(format!(
            "{} is {what} program: wprof runs with capabilities its user does not have and will \
             not trace a program that gains privileges (it would show that program's data to \
             its user); run wprof as root (sudo) to trace it",
            exe.display()
        ))),
    }
}

/// Whether `exe` carries a `security.capability` extended attribute.
fn has_file_capabilities(exe: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(exe.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: valid C strings; a null buffer of size 0 asks only for the value's size.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n >= 0
}

/// The sudo user from SUDO_UID/SUDO_GID: None when either is unset; a usage error when one
/// is not a number.
fn sudo_user() -> Result<Option<CommandUser>, WprofError> {
    let (Ok(uid), Ok(gid)) = (std::env::var("SUDO_UID"), std::env::var("SUDO_GID")) else {
        return Ok(None);
    };
    let parse = |name: &str, v: &str| {
        v.trim().parse::<u32>().map_err(|_| {
            WprofError::Usage(format!(
                "{name}={v:?} is not a number; unset it, or pass --as-root to run the command \
                 as root"
            ))
        })
    };
    let (uid, gid) = (parse("SUDO_UID", &uid)?, parse("SUDO_GID", &gid)?);
    Ok(Some(CommandUser {
        uid,
        gid,
        groups: supplementary_groups(uid, gid),
    }))
}

/// The groups initgroups(3) would give `uid`: getgrouplist over its passwd entry's name, or
/// only `gid` when the uid has no entry.
fn supplementary_groups(uid: u32, gid: u32) -> Vec<u32> {
    // SAFETY: passwd is a C struct of pointers and integers; all-zero is a valid value.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf outlives the use of pw's strings.
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if r != 0 || found.is_null() {
        return vec![gid];
    }
    let mut groups = vec![0 as libc::gid_t; 256];
    let mut n = groups.len() as libc::c_int;
    // SAFETY: pw_name points into buf (alive); groups holds n entries.
    let r = unsafe { libc::getgrouplist(pw.pw_name, gid, groups.as_mut_ptr(), &mut n) };
    if r < 0 {
        return vec![gid];
    }
    groups.truncate(n.max(0) as usize);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setuid_program_is_refused_and_a_plain_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prog");
        std::fs::write(&p, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_no_privilege_gain(&p).is_ok());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let e = check_no_privilege_gain(&p).unwrap_err().to_string();
        assert!(e.contains("setuid program"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o2755)).unwrap();
        let e = check_no_privilege_gain(&p).unwrap_err().to_string();
        assert!(e.contains("setgid program"), "{e}");
        // setgid without group execute is mandatory locking, not a setgid program.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o2745)).unwrap();
        assert!(check_no_privilege_gain(&p).is_ok());
    }

    #[test]
    fn root_has_its_groups_and_an_unknown_uid_only_its_gid() {
        assert!(supplementary_groups(0, 0).contains(&0));
        assert_eq!(supplementary_groups(4_000_000_000, 77), vec![77]);
    }
}
