//! CPU sampling with a jittered period: one software cpu-clock perf event per CPU, the BPF
//! sampling program attached to each, and a new random period every [`JITTER_EVERY`], drawn
//! by a thread of wprof's pinned to that CPU.
//!
//! A fixed period beats against a periodic workload: a write loop of 285 µs sampled every
//! 1,003 µs saw a 20 µs phase in 0.1% of its samples (7% of its time) and at 2,000 Hz in
//! 26%. Drawing each period again from [0.5, 1.5] × the mean keeps the rate and breaks the
//! lock-step. aya opens its perf events and keeps their file descriptors to itself (a
//! bpf_link holds the event), so these are opened here to keep `PERF_EVENT_IOC_PERIOD`.
//!
//! Why a thread per CPU: the kernel changes an event's period on the event's own CPU. Asked
//! from another CPU, it sends that CPU an interrupt and the asking thread spins until it is
//! handled; on these VMs the target vCPU may first have to be woken or scheduled by the host.
//! Drawn from wprof's reading loop, the periods took 10-30% of a CPU in wprof at 874 Hz on
//! db_bench (4-5% without a sampler; docs/benchmarks.md §36). Asked on its own CPU, the change
//! is a plain function call.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use perf_event_open_sys as sys;

/// How often each event gets a new period.
pub const JITTER_EVERY: Duration = Duration::from_millis(20);

/// CPU sampling events that get new periods while they run.
#[derive(Debug)]
pub struct JitteredSampler {
    events: Vec<Arc<OwnedFd>>,
    /// Tells the drawing threads to stop.
    stop: Arc<AtomicBool>,
    drawers: Vec<JoinHandle<()>>,
}

impl JitteredSampler {
    /// Opens a cpu-clock event on each of `cpus` at `hz` samples a second on average, with
    /// the BPF program `prog_fd` attached, starts them, and starts a thread on each CPU that
    /// draws its event's period anew every [`JITTER_EVERY`].
    pub fn start(cpus: &[u32], hz: u64, prog_fd: RawFd) -> Result<JitteredSampler> {
        let mean_period_ns = 1_000_000_000 / hz.max(1);
        let mut sampler = JitteredSampler {
            events: Vec::with_capacity(cpus.len()),
            stop: Arc::new(AtomicBool::new(false)),
            drawers: Vec::with_capacity(cpus.len()),
        };
        for &cpu in cpus {
            let event = open_cpu_clock(-1, cpu as i32, mean_period_ns, prog_fd)
                .with_context(|| format!("CPU {cpu}"))?;
            switch(&event, true).with_context(|| format!("start CPU sampling on CPU {cpu}"))?;
            let event = Arc::new(event);
            let (e, stop) = (Arc::clone(&event), Arc::clone(&sampler.stop));
            let drawer = std::thread::Builder::new()
                .name(format!("wprof-jitter{cpu}"))
                .spawn(move || draw_periods(cpu, &e, mean_period_ns, &stop))
                .context("start a CPU sampling period thread")?;
            sampler.events.push(event);
            sampler.drawers.push(drawer);
        }
        Ok(sampler)
    }

    /// Starts (`on`) or stops every event.
    pub fn set_enabled(&self, on: bool) -> Result<()> {
        for e in &self.events {
            switch(e, on).context(if on {
                "start CPU sampling again"
            } else {
                "pause CPU sampling"
            })?;
        }
        Ok(())
    }
}

impl Drop for JitteredSampler {
    /// Stops the drawing threads before the events close.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for d in self.drawers.drain(..) {
            d.thread().unpark();
            let _ = d.join();
        }
    }
}

/// A drawing thread: on `cpu` (elsewhere if it may not run there: the change then costs an
/// interrupt, as from the reading loop), gives `event` a new period every [`JITTER_EVERY`]
/// until `stop`.
fn draw_periods(cpu: u32, event: &OwnedFd, mean_period_ns: u64, stop: &AtomicBool) {
    pin_to(cpu);
    while !stop.load(Ordering::Relaxed) {
        std::thread::park_timeout(JITTER_EVERY);
        if !stop.load(Ordering::Relaxed) {
            new_period(event, mean_period_ns);
        }
    }
}

/// Moves this thread to `cpu`; a refusal (a cpuset without it) leaves it where it is.
fn pin_to(cpu: u32) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it for cpu below
    // CPU_SETSIZE (checked); sched_setaffinity reads the set for this thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if (cpu as usize) < libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu as usize, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// Gives `event` a new period drawn uniformly from [0.5, 1.5] × `mean_period_ns` (it takes
/// effect after the event's next sample).
fn new_period(event: &OwnedFd, mean_period_ns: u64) {
    let mut r = [0u8; 4];
    // SAFETY: r is a valid 4-byte buffer; getrandom(2) fills it without blocking once the
    // pool is initialised (long before wprof runs).
    unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), libc::GRND_NONBLOCK) };
    let u = f64::from(u32::from_ne_bytes(r)) / f64::from(u32::MAX);
    let period = (mean_period_ns as f64 * (0.5 + u)).round() as u64;
    // SAFETY: valid perf event descriptor; PERF_EVENT_IOC_PERIOD reads a u64 through the
    // pointer (the crate's typed wrapper passes the value itself).
    unsafe {
        libc::ioctl(
            event.as_raw_fd(),
            sys::bindings::PERIOD as _,
            &period as *const u64,
        )
    };
}

/// Opens a disabled cpu-clock event for `pid` on `cpu` (`-1, cpu`: every process on that CPU;
/// `0, -1`: this thread wherever it runs) sampling every `period_ns`, with the BPF program
/// `prog_fd` attached.
fn open_cpu_clock(pid: i32, cpu: i32, period_ns: u64, prog_fd: RawFd) -> Result<OwnedFd> {
    let mut attr = sys::bindings::perf_event_attr {
        type_: sys::bindings::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        config: u64::from(sys::bindings::PERF_COUNT_SW_CPU_CLOCK),
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = period_ns;
    attr.set_disabled(1);
    // SAFETY: attr is a valid, initialised perf_event_attr.
    let event = unsafe { perf_event_open(&mut attr, pid, cpu) }
        .context("open a cpu-clock perf event (perf_event_paranoid?)")?;
    // SAFETY: valid perf event descriptor and BPF program descriptor.
    if unsafe { sys::ioctls::SET_BPF(event.as_raw_fd(), prog_fd as u32) } < 0 {
        return Err(std::io::Error::last_os_error()).context("attach the CPU sampling program");
    }
    Ok(event)
}

/// What one CPU sample costs the code it interrupts here, ns: the timer interrupt, the
/// perf overflow and the BPF program (`prog_fd`), plus what they do to the caches.
/// Measured on this thread: a fixed-work loop in short windows, alternately with a cpu-clock
/// event sampling it every 50 µs and without, so that the interrupts' share of the loop's
/// time, times the period, is the cost of one. For the program to walk and send this thread's
/// stacks as it does a target's, the caller puts wprof in the traced set meanwhile.
pub fn sample_cost_ns(prog_fd: RawFd) -> Result<f64> {
    const PERIOD_NS: u64 = 50_000;
    const WINDOW: std::time::Duration = std::time::Duration::from_millis(10);
    const PAIRS: usize = 12;
    let event = open_cpu_clock(0, -1, PERIOD_NS, prog_fd)?;
    let (mut on, mut off) = (Vec::with_capacity(PAIRS), Vec::with_capacity(PAIRS));
    for i in 0..2 * PAIRS {
        let sampled = i % 2 == 1;
        switch(&event, sampled).context("switch the calibration event")?;
        let rate = work_rate(WINDOW);
        if sampled { &mut on } else { &mut off }.push(rate);
    }
    let (on, off) = (median(&mut on), median(&mut off));
    let stolen = if off > 0.0 {
        (1.0 - on / off).max(0.0)
    } else {
        0.0
    };
    Ok(stolen * PERIOD_NS as f64)
}

/// Iterations of a fixed-work loop per ns of wall time over `window`.
fn work_rate(window: std::time::Duration) -> f64 {
    let start = std::time::Instant::now();
    let mut x = 1u64;
    let mut n = 0u64;
    while start.elapsed() < window {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        n += 1000;
    }
    n as f64 / start.elapsed().as_nanos().max(1) as f64
}

/// The median of `v` (0 when empty).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// perf_event_open(2) for `pid` on `cpu`, close-on-exec, no group: the new descriptor.
///
/// # Safety
/// `attr` must be a valid, initialised perf_event_attr, and any pointer in it (a uprobe's
/// path) must stay valid across the call.
pub(super) unsafe fn perf_event_open(
    attr: &mut sys::bindings::perf_event_attr,
    pid: i32,
    cpu: i32,
) -> std::io::Result<OwnedFd> {
    // SAFETY: the caller's promise about attr; the other arguments are plain values.
    let fd = unsafe {
        sys::perf_event_open(
            attr,
            pid,
            cpu,
            -1,
            sys::bindings::PERF_FLAG_FD_CLOEXEC.into(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Enables (`on`) or disables a perf event.
fn switch(event: &OwnedFd, on: bool) -> std::io::Result<()> {
    // SAFETY: a valid perf event descriptor; the ioctls take no argument.
    let rc = unsafe {
        if on {
            sys::ioctls::ENABLE(event.as_raw_fd(), 0)
        } else {
            sys::ioctls::DISABLE(event.as_raw_fd(), 0)
        }
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
