//! The collect loop: read events until an end condition, with a progress line on a terminal.
//!
//! In: the collector, the aggregator, a [`Watch`] (signals, `--duration`, the traced
//! processes) and the [`Hooks`]. Out: the [`EndReason`]; the records read are in the
//! aggregator and the [`Sides`].

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::child::GatedChild;
use crate::aggregate::Aggregator;
use crate::attach::process_alive;
use crate::collect::Collector;

/// How long the loop sleeps between drains. BPF wakes it early only when the ring is a quarter
/// full, so this bounds the latency of small batches and of end conditions.
const POLL_MS: i32 = 20;

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// SIGINT (Ctrl-C).
    Interrupted,
    /// SIGTERM.
    Terminated,
    /// --duration elapsed.
    Duration,
    /// Every traced process exited.
    TargetExited,
    /// The probes' overhead went over `--max-overhead`.
    OverheadBudget,
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EndReason::Interrupted => "interrupted (SIGINT)",
            EndReason::Terminated => "terminated (SIGTERM)",
            EndReason::Duration => "duration elapsed",
            EndReason::TargetExited => "traced process exited",
            EndReason::OverheadBudget => "probe overhead above --max-overhead",
        })
    }
}

/// What the loop watches for its end.
pub struct Watch {
    pids: Vec<u32>,
    child: Option<GatedChild>,
    deadline: Option<Instant>,
    sigint: Arc<AtomicBool>,
    sigterm: Arc<AtomicBool>,
    reason: Option<EndReason>,
    credentials: crate::privilege::CredentialWatch,
}

impl Watch {
    fn new(pids: Vec<u32>, child: Option<GatedChild>, duration: Option<Duration>) -> Watch {
        let sigint = Arc::new(AtomicBool::new(false));
        let sigterm = Arc::new(AtomicBool::new(false));
        // Registration only fails for signals that cannot be caught; these two can.
        let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, sigint.clone());
        let _ = signal_hook::flag::register(signal_hook::consts::SIGTERM, sigterm.clone());
        Watch {
            pids,
            child,
            deadline: duration.map(|d| Instant::now() + d),
            sigint,
            sigterm,
            reason: None,
            credentials: crate::privilege::CredentialWatch::new(),
        }
    }

    /// Watches running processes.
    pub fn pids(pids: Vec<u32>, duration: Option<Duration>) -> Watch {
        Watch::new(pids, None, duration)
    }

    /// Watches `record`'s child.
    pub fn child(child: GatedChild, duration: Option<Duration>) -> Watch {
        Watch::new(Vec::new(), Some(child), duration)
    }

    fn check(&mut self) -> Option<EndReason> {
        if self.sigint.load(Ordering::Relaxed) {
            return Some(EndReason::Interrupted);
        }
        if self.sigterm.load(Ordering::Relaxed) {
            return Some(EndReason::Terminated);
        }
        if let Some(c) = &mut self.child {
            if c.wait(false).is_some() {
                return Some(EndReason::TargetExited);
            }
        } else if !self.pids.iter().any(|&p| process_alive(p)) {
            return Some(EndReason::TargetExited);
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(EndReason::Duration);
        }
        None
    }

    /// With file capabilities, fails when an attached process (or one forked from it) may no
    /// longer be traced for the real user. `record`'s child is left out: it runs with
    /// no_new_privs, and before its exec it is wprof's own fork, with wprof's credentials.
    fn check_credentials(&self, forked: &[u32]) -> Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let pids: Vec<u32> = self.pids.iter().chain(forked).copied().collect();
        Ok(self.credentials.check(&pids)?)
    }

    /// After the loop: for `record`, passes a stop signal on to the child and waits for it;
    /// returns the exit code wprof should end with (the child's, or 0 for `attach`).
    pub fn finish(mut self) -> Result<i32> {
        let Some(mut child) = self.child.take() else {
            return Ok(0);
        };
        match self.reason {
            Some(EndReason::Terminated) => child.signal(libc::SIGTERM),
            // A terminal's Ctrl-C reached the child too; a SIGINT sent to wprof alone did not.
            Some(EndReason::Interrupted) => child.signal(libc::SIGINT),
            _ => {}
        }
        child.wait(true).context("wait for the command")
    }
}

/// What the loop feeds besides the tree after each drain.
pub struct Sides<'a> {
    /// CPU samples and off-CPU records.
    pub stacks: &'a mut super::stacks::StackSink,
    /// `--interval` snapshots.
    pub snapshots: Option<&'a mut super::snapshots::Snapshots>,
    /// Labels of the traced processes, and forks.
    pub labels: &'a mut super::processes::ProcessLabels,
    /// What the loop calls back into (late attach, overhead watch).
    pub hooks: &'a mut dyn Hooks,
}

/// Calls from the loop into the rest of the session.
pub trait Hooks {
    /// A traced process's loader changed its objects (pid, CLOCK_MONOTONIC ns): late attach.
    fn maps_changed(&mut self, pid: u32, at_ns: u64);
    /// Called after every drain with the tree so far, the stack records and the traced
    /// processes; Some(reason) ends the run.
    fn tick(
        &mut self,
        agg: &mut Aggregator,
        stacks: &crate::aggregate::stacks::StackAggregator,
        traced: Vec<u32>,
    ) -> Option<EndReason>;
    /// Called after every drain: measures the probes' price again when due
    /// (`session::recalibrate`), the run's records read meanwhile into `agg` and `stacks`.
    fn recalibrate(
        &mut self,
        collector: &mut Collector,
        agg: &mut Aggregator,
        stacks: &mut crate::aggregate::stacks::StackAggregator,
    );
    /// Called after every drain: `--serve` publishes when a scrape waits.
    fn serve(
        &mut self,
        agg: &mut Aggregator,
        labels: &mut super::processes::ProcessLabels,
    ) -> Result<()>;
}

/// Reads events into `agg` until `watch` says the run is over.
pub fn run(
    collector: &mut Collector,
    agg: &mut Aggregator,
    sides: Sides<'_>,
    watch: &mut Watch,
    progress: bool,
) -> Result<EndReason> {
    let Sides {
        stacks,
        mut snapshots,
        labels,
        hooks,
    } = sides;
    let progress = progress && std::io::stderr().is_terminal();
    let slow = test_slow_reader();
    let start = Instant::now();
    let mut last_progress = start;
    let reason = loop {
        let mut pfd = libc::pollfd {
            fd: collector.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; EINTR (a signal) just ends this wait early.
        unsafe { libc::poll(&mut pfd, 1, POLL_MS) };
        collector.drain(
            |e| {
                if let Some(d) = slow {
                    std::thread::sleep(d);
                }
                agg.add(e)
            },
            |s| stacks.agg.add(s),
        );
        agg.add_keys(collector.take_keys());
        stacks.after_drain();
        labels.forks(&agg.take_forks());
        watch.check_credentials(&labels.forked())?;
        for (pid, at_ns) in agg.take_maps_changed() {
            hooks.maps_changed(pid, at_ns);
        }
        labels.refresh(agg.pids());
        if let Some(s) = snapshots.as_deref_mut() {
            s.tick(agg)?;
        }
        hooks.serve(agg, labels)?;
        hooks.recalibrate(collector, agg, &mut stacks.agg);
        if let Some(r) = watch
            .check()
            .or_else(|| hooks.tick(agg, &stacks.agg, labels.pids()))
        {
            break r;
        }
        if progress && last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            eprint!(
                "\r\x1b[Kwprof: {:.0} s  events {}",
                start.elapsed().as_secs_f64(),
                agg.events()
            );
            let _ = std::io::stderr().flush();
        }
    };
    if progress {
        eprint!("\r\x1b[K");
    }
    watch.reason = Some(reason);
    Ok(reason)
}

/// Test hook: `WPROF_TEST_SLOW_READER_US` makes the reader sleep that long for each record,
/// so the tests can show a program writing faster than wprof reads still lets a run end.
fn test_slow_reader() -> Option<Duration> {
    std::env::var("WPROF_TEST_SLOW_READER_US")
        .ok()?
        .parse()
        .ok()
        .map(Duration::from_micros)
}
