//! USDT phases attached with their semaphores.
//!
//! A USDT probe guarded by `TRACE_*_ENABLED()` fires only while its semaphore (a `short` in
//! the object's `.probes` section) is non-zero. The kernel keeps it for us when the uprobe is
//! created with the semaphore's file offset (`ref_ctr_offset`): it raises it in every process
//! mapping the object, in processes that map it later, and lowers it when the probe goes. aya
//! does not pass that offset, so these uprobes are opened here as perf events of the `uprobe`
//! PMU (config bits 32-63 hold the offset) and the per-point BPF programs are linked to them
//! with `BPF_LINK_CREATE`, which carries the attach cookie. Closing the link and the event
//! detaches the probe and lowers the semaphore.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use anyhow::{bail, Context, Result};
use aya::programs::UProbe;
use perf_event_open_sys as sys;
use wprof_common::names::program;
use wprof_common::usdt::{COOKIE_USDT_SITE_SHIFT, MAX_USDT_SITES};
use wprof_common::{
    cookie, cookie_with, SiteKind, UsdtSite, ARG_NONE, COOKIE_KEY_BIT, COOKIE_USDT_BIT,
};

use super::{process_alive, verified, Tracer};

use crate::error::WprofError;
use crate::model::profile::Capture;
use crate::resolve::{usdt, ResolvedPhase};

/// `BPF_LINK_CREATE`, from linux/bpf.h (`enum bpf_cmd`).
const BPF_LINK_CREATE: libc::c_long = 28;
/// `BPF_PERF_EVENT`, from linux/bpf.h (`enum bpf_attach_type`).
const BPF_PERF_EVENT: u32 = 41;
/// Where the uprobe PMU takes the semaphore's offset (its `format/ref_ctr_offset`:
/// `config:32-63`).
const REF_CTR_SHIFT: u64 = 32;

/// The `link_create` member of `union bpf_attr` for a perf event target: program, event,
/// attach type, flags, then the cookie. Bytes the kernel does not read stay zero.
#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    bpf_cookie: u64,
    _rest: [u64; 6],
}

/// One attached USDT site: the BPF link first (dropped first), then the uprobe event.
pub(super) struct UsdtLink {
    _link: OwnedFd,
    _event: OwnedFd,
}

impl Tracer {
    /// Attaches the USDT phases' done sites, then their start sites, in every pid (or once for
    /// every process mapping the object), each with its semaphore. Returns the number of probe
    /// points.
    pub(super) fn attach_usdt(
        &mut self,
        phases: &[&ResolvedPhase],
        pids: &[u32],
        every_process: bool,
    ) -> Result<usize> {
        if phases.is_empty() {
            return Ok(0);
        }
        let (entry_fd, done_fd) = self.per_point_programs()?;
        let mut starts = Vec::new();
        let mut dones = Vec::new();
        let mut sites: Vec<UsdtSite> = Vec::new();
        for rp in phases {
            let Some(u) = &rp.usdt else { continue };
            let Some(target) = rp.targets.first() else {
                continue;
            };
            let arg = match rp.phase.capture() {
                Some(Capture::Arg(n)) => Some(n),
                _ => None,
            };
            let keyed = if rp.phase.group_by.is_some() {
                COOKIE_KEY_BIT
            } else {
                0
            };
            for s in &u.starts {
                let index = sites.len() as u64;
                if index >= u64::from(MAX_USDT_SITES) {
                    bail!("more than {MAX_USDT_SITES} USDT start sites in the profile");
                }
                let mut site = UsdtSite::default();
                if let Some(n) = arg {
                    site.count = usdt::argument(&s.args, n.into())?;
                }
                if let Some(g) = rp.phase.group_by {
                    site.key = usdt::argument(&s.args, g.arg.into())?;
                }
                sites.push(site);
                let entry_arg = arg.map_or(ARG_NONE, |n| u64::from(n) + 1);
                let c = cookie_with(cookie(rp.id, SiteKind::Entry, false), entry_arg, 0)
                    | keyed
                    | COOKIE_USDT_BIT
                    | index << COOKIE_USDT_SITE_SHIFT;
                starts.push((target.object.clone(), s.clone(), c));
            }
            for s in &u.dones {
                let c = cookie(rp.id, SiteKind::RetSite, false) | COOKIE_USDT_BIT;
                dones.push((target.object.clone(), s.clone(), c));
            }
        }
        self.set_usdt_sites(&sites)?;
        let scopes: Vec<(i32, i32, u32)> = if every_process {
            vec![(-1, 0, pids.first().copied().unwrap_or(0))]
        } else {
            pids.iter().map(|&p| (p as i32, -1, p)).collect()
        };
        let mut points = 0;
        // Done sites first, as for returns: a call in flight shows as an unmatched done.
        for (prog_fd, list) in [(done_fd, &dones), (entry_fd, &starts)] {
            for (object, note, c) in list {
                for &(pid, cpu, shown) in &scopes {
                    let link = open_site(prog_fd, object, note, *c, pid, cpu).map_err(|e| {
                        if shown != 0 && !process_alive(shown) {
                            WprofError::NoProcess(format!(
                                "process {shown} exited while wprof was attaching USDT probe {}",
                                note.full_name()
                            ))
                            .into()
                        } else {
                            e
                        }
                    })?;
                    self.usdt_links.push(link);
                    points += 1;
                }
            }
        }
        Ok(points)
    }

    /// The USDT start and done programs' descriptors (loaded on first use).
    fn per_point_programs(&mut self) -> Result<(RawFd, RawFd)> {
        let mut fds = [0; 2];
        for (i, name) in [program::USDT_START, program::USDT_DONE]
            .into_iter()
            .enumerate()
        {
            let (prog, first) = self.extra_program::<UProbe>(name)?;
            if first {
                verified(name, prog.load())?;
            }
            fds[i] = prog.fd()?.as_fd().as_raw_fd();
        }
        Ok((fds[0], fds[1]))
    }

    fn set_usdt_sites(&mut self, sites: &[UsdtSite]) -> Result<()> {
        let mut map = self.usdt_sites_mut()?;
        for (i, s) in sites.iter().enumerate() {
            map.set(i as u32, s, 0)?;
        }
        Ok(())
    }
}

/// Opens a uprobe event on `note`'s site in `object` (with its semaphore) for `pid` on `cpu`
/// (-1, 0: every process) and links the program `prog_fd` to it with `cookie`.
fn open_site(
    prog_fd: RawFd,
    object: &std::path::Path,
    note: &usdt::UsdtNote,
    cookie: u64,
    pid: i32,
    cpu: i32,
) -> Result<UsdtLink> {
    let what = || format!("USDT probe {} in {}", note.full_name(), object.display());
    let path = CString::new(object.as_os_str().as_bytes()).context("object path has a NUL")?;
    let mut attr = sys::bindings::perf_event_attr {
        type_: uprobe_pmu()?,
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        config: note.semaphore << REF_CTR_SHIFT,
        ..Default::default()
    };
    attr.__bindgen_anon_3.config1 = path.as_ptr() as u64;
    attr.__bindgen_anon_4.config2 = note.file_offset;
    attr.__bindgen_anon_1.sample_period = 1;
    attr.__bindgen_anon_2.wakeup_events = 1;
    // SAFETY: attr is a valid, initialised perf_event_attr whose config1 points at `path`,
    // alive across the call.
    let event = unsafe { super::sampler::perf_event_open(&mut attr, pid, cpu) }
        .with_context(|| format!("open {}", what()))?;
    let attr = LinkCreate {
        prog_fd: prog_fd as u32,
        target_fd: event.as_raw_fd() as u32,
        attach_type: BPF_PERF_EVENT,
        bpf_cookie: cookie,
        ..Default::default()
    };
    // SAFETY: bpf(2) reads `size` bytes of a valid link_create attr; it returns a new fd or -1.
    let link = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            &attr as *const LinkCreate,
            std::mem::size_of::<LinkCreate>(),
        )
    };
    if link < 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("link the BPF program to {}", what()));
    }
    Ok(UsdtLink {
        // SAFETY: bpf(2) returned a new descriptor we own.
        _link: unsafe { OwnedFd::from_raw_fd(link as RawFd) },
        _event: event,
    })
}

/// The perf event type of the kernel's uprobe PMU.
fn uprobe_pmu() -> Result<u32> {
    let path = "/sys/bus/event_source/devices/uprobe/type";
    std::fs::read_to_string(path)
        .with_context(|| format!("read {path} (a kernel without the uprobe PMU?)"))?
        .trim()
        .parse()
        .with_context(|| format!("parse {path}"))
}
