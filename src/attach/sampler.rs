//! CPU sampling with a jittered period: one software cpu-clock perf event per CPU, the BPF
//! sampling program attached to each, and a new random period every few milliseconds.
//!
//! A fixed period beats against a periodic workload: a write loop of 285 µs sampled every
//! 1,003 µs saw a 20 µs phase in 0.1% of its samples (7% of its time) and at 2,000 Hz in
//! 26%. Drawing each period again from [0.5, 1.5] × the mean keeps the rate and breaks the
//! lock-step. aya opens its perf events and keeps their file descriptors to itself (a
//! bpf_link holds the event), so these are opened here to keep `PERF_EVENT_IOC_PERIOD`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use anyhow::{Context, Result};
use perf_event_open_sys as sys;

/// CPU sampling events that can be given new periods.
#[derive(Debug)]
pub struct JitteredSampler {
    events: Vec<OwnedFd>,
    mean_period_ns: u64,
}

impl JitteredSampler {
    /// Opens a cpu-clock event on each of `cpus` at `hz` samples a second on average, with
    /// the BPF program `prog_fd` attached, and starts them.
    pub fn start(cpus: &[u32], hz: u64, prog_fd: RawFd) -> Result<JitteredSampler> {
        let mean_period_ns = 1_000_000_000 / hz.max(1);
        let mut events = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            let mut attr = sys::bindings::perf_event_attr {
                type_: sys::bindings::PERF_TYPE_SOFTWARE,
                size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
                config: u64::from(sys::bindings::PERF_COUNT_SW_CPU_CLOCK),
                ..Default::default()
            };
            attr.__bindgen_anon_1.sample_period = mean_period_ns;
            attr.set_disabled(1);
            // SAFETY: attr is a valid, initialised perf_event_attr; pid -1 with a cpu is
            // "every process on that CPU".
            let fd = unsafe {
                sys::perf_event_open(
                    &mut attr,
                    -1,
                    cpu as i32,
                    -1,
                    sys::bindings::PERF_FLAG_FD_CLOEXEC.into(),
                )
            };
            if fd < 0 {
                return Err(std::io::Error::last_os_error()).with_context(|| {
                    format!("open a cpu-clock perf event on CPU {cpu} (perf_event_paranoid?)")
                });
            }
            // SAFETY: perf_event_open returned a new descriptor we own.
            let event = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: valid perf event descriptor and BPF program descriptor.
            let attached = unsafe { sys::ioctls::SET_BPF(fd, prog_fd as u32) };
            if attached < 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("attach the CPU sampling program on CPU {cpu}"));
            }
            // SAFETY: as above.
            if unsafe { sys::ioctls::ENABLE(fd, 0) } < 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("start CPU sampling on CPU {cpu}"));
            }
            events.push(event);
        }
        Ok(JitteredSampler {
            events,
            mean_period_ns,
        })
    }

    /// Gives every event a new period drawn uniformly from [0.5, 1.5] × the mean (it takes
    /// effect after each event's next sample).
    pub fn jitter(&self) {
        for e in &self.events {
            let mut r = [0u8; 4];
            // SAFETY: r is a valid 4-byte buffer; getrandom(2) fills it without blocking
            // once the pool is initialised (long before wprof runs).
            unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), libc::GRND_NONBLOCK) };
            let u = f64::from(u32::from_ne_bytes(r)) / f64::from(u32::MAX);
            let period = (self.mean_period_ns as f64 * (0.5 + u)).round() as u64;
            // SAFETY: valid perf event descriptor; PERF_EVENT_IOC_PERIOD reads a u64 through
            // the pointer (the crate's typed wrapper passes the value itself).
            unsafe {
                libc::ioctl(
                    e.as_raw_fd(),
                    sys::bindings::PERIOD as _,
                    &period as *const u64,
                )
            };
        }
    }
}
