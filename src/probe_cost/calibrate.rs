//! Calibration: what one probed call costs on this host, measured before the run.
//!
//! wprof starts itself as a target (`wprof __calibrate`, see [`super::targets`]), times six
//! tiny functions there — one per entry cost class and return mode — without probes, then
//! attaches its real programs to them and times them again in rounds. Per combination:
//! - `pair_ns` = traced − untraced time per call, by the child thread's own CPU clock (a
//!   preemption in a round is not the probes'): the whole cost
//!   of one entry + return, which is what an enclosing phase's window contains;
//! - `own_ns` = the median span BPF measured for the (empty) function − its untraced time:
//!   the part of the cost inside the call's own window;
//! - `error_ns` = the largest deviation of a round from the median: wider on a busy host.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use wprof_common::{Event, EventKind, StackEvent, CALIBRATION_FIRST_PHASE};

use super::targets::{self, Start, Target, CHILD_ARG};
use crate::attach::{CalibrationPoint, Tracer};
use crate::collect::Collector;
use crate::model::ClassCost;
use crate::model::CostClass;
use crate::symbolize::maps::ProcessMaps;

/// Phase ids the calibration functions use: the top of the id space, never a profile's.
const FIRST_ID: u32 = CALIBRATION_FIRST_PHASE;

/// Timing rounds after the probes are attached.
pub const ROUNDS: usize = 21;

/// What a calibration measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// One entry per entry class and return mode.
    pub classes: Vec<ClassCost>,
    /// Calls per function per round (the most any function got).
    pub calls: u64,
    /// Rounds.
    pub rounds: u32,
    /// Wall time the calibration took, ms.
    pub elapsed_ms: f64,
    /// Whether the calibrated entries read their return address (as a guarded run's or one
    /// taking stacks do: ~90 ns more an entry).
    pub return_addresses: bool,
}

impl Measured {
    /// The calibration of a run with no probe cost class to calibrate (kernel phases only).
    pub fn nothing(return_addresses: bool) -> Measured {
        Measured {
            classes: Vec::new(),
            calls: 0,
            rounds: 0,
            elapsed_ms: 0.0,
            return_addresses,
        }
    }
}

/// Where a calibration made while a run goes on sends the run's own records it reads.
pub struct Forward<'a> {
    /// Spans, node definitions, forks.
    pub events: &'a mut dyn FnMut(&Event),
    /// CPU samples and off-CPU records.
    pub stacks: &'a mut dyn FnMut(&StackEvent),
}

/// Measures the probe costs of the `wanted` combinations (entry class, uretprobe) with
/// `tracer`'s programs, reading spans from `collector`. `ring_bytes` bounds the calls per
/// round so no span is lost to a small ring buffer. Before a run (`forward` None) the
/// counters are zeroed after it; at the end of one, the run's records read meanwhile go to
/// `forward` and the counters stay.
pub fn calibrate(
    tracer: &mut Tracer,
    collector: &mut Collector,
    ring_bytes: u32,
    wanted: &[(CostClass, bool)],
    forward: Option<Forward<'_>>,
) -> Result<Measured> {
    let (calibrator, measured) = calibrate_keeping(tracer, collector, ring_bytes, wanted, forward)?;
    if let Some(c) = calibrator {
        c.stop();
    }
    Ok(measured)
}

/// [`calibrate`], keeping the calibration target (None when no class is wanted) for later
/// measurements.
pub fn calibrate_keeping(
    tracer: &mut Tracer,
    collector: &mut Collector,
    ring_bytes: u32,
    wanted: &[(CostClass, bool)],
    mut forward: Option<Forward<'_>>,
) -> Result<(Option<Calibrator>, Measured)> {
    let before_run = forward.is_none();
    let result = Calibrator::start(
        tracer,
        collector,
        ring_bytes,
        wanted,
        reborrow(&mut forward),
    )
    .and_then(|c| match c {
        Some(mut c) => {
            let m = c.measure(collector, ROUNDS, reborrow(&mut forward))?;
            Ok((Some(c), m))
        }
        None => Ok((None, Measured::nothing(tracer.keeps_return_addresses()))),
    });
    if before_run {
        // Spans of the calibration lost to a small ring are not the run's.
        tracer.reset_counters()?;
    }
    result
}

/// A calibration target kept running with its probes attached, measured again on demand:
/// the run's calibration before it and at its end, and the short ones during it
/// (`session::recalibrate`).
pub struct Calibrator {
    child: CalibrationChild,
    /// Per calibration function: whether its class is calibrated.
    used: Vec<bool>,
    /// Per function: its untraced ns a call.
    base: Vec<f64>,
    /// Per function: calls a round.
    calls: Vec<u64>,
    /// Whether the entries read their return address.
    return_addresses: bool,
}

impl Calibrator {
    /// Starts the calibration target, times its functions untraced, attaches `tracer`'s
    /// programs to them and sizes a round. None when no combination is wanted. Records of a
    /// run read meanwhile go to `forward`.
    pub fn start(
        tracer: &mut Tracer,
        collector: &mut Collector,
        ring_bytes: u32,
        wanted: &[(CostClass, bool)],
        forward: Option<Forward<'_>>,
    ) -> Result<Option<Calibrator>> {
        let targets = targets::targets();
        let used: Vec<bool> = targets
            .iter()
            .map(|t| wanted.contains(&(class_of(t.start), t.uretprobe)))
            .collect();
        let n_used = used.iter().filter(|&&u| u).count() as u64;
        if n_used == 0 {
            return Ok(None);
        }
        let mut child = CalibrationChild::start()?;
        // Every span of a round must fit in a quarter of the ring (the wakeup threshold).
        let per_span = std::mem::size_of::<wprof_common::Event>() as u64 + 8;
        let ring_calls = (ring_bytes as u64 / 4 / (per_span * n_used)).clamp(20, MAX_CALLS);
        let counts = |n: &dyn Fn(usize) -> u64| -> Vec<u64> {
            (0..targets.len())
                .map(|i| if used[i] { n(i) } else { 0 })
                .collect()
        };
        child.run(&counts(&|_| 200))?; // warm up: page in, settle the CPU frequency
        let base = child.run(&counts(&|_| ring_calls))?;
        let exe = std::env::current_exe().context("find wprof's own executable")?;
        let maps = ProcessMaps::read(child.pid())?;
        let mut points = Vec::new();
        for (i, (t, &addr)) in targets.iter().zip(&child.addrs).enumerate() {
            if !used[i] {
                continue;
            }
            let m = maps
                .lookup(addr)
                .context("calibration function not in the child's mappings")?;
            let entry = m.file_offset(addr);
            points.push(CalibrationPoint {
                phase: FIRST_ID + i as u32,
                entry,
                exit: (!t.uretprobe).then_some(entry + t.ret_offset),
            });
        }
        let outer = maps
            .lookup(child.outer)
            .context("calibration loop not in the child's mappings")?
            .file_offset(child.outer);
        points.push(CalibrationPoint {
            phase: FIRST_ID + targets.len() as u32,
            entry: outer,
            exit: None,
        });
        tracer.attach_calibration(&exe, child.pid(), &points)?;
        // A short first round sizes the others: ~ROUND_NS per function, the slow classes (a
        // single-stepped probe costs tens of µs on a VM) with fewer calls.
        let first = child.run(&counts(&|_| 20))?;
        let calls: Vec<u64> = counts(&|i| {
            let per_call = (first[i] - base[i]).max(100.0);
            ((ROUND_NS / per_call) as u64).clamp(20, ring_calls)
        });
        // The first round's spans are not used.
        drain(collector, forward, |_| {});
        Ok(Some(Calibrator {
            child,
            used,
            base,
            calls,
            return_addresses: tracer.keeps_return_addresses(),
        }))
    }

    /// `rounds` timing rounds: per class, the median pair over them, the median span inside
    /// the call, and the largest deviation of a round. Records of a run read meanwhile go to
    /// `forward`.
    pub fn measure(
        &mut self,
        collector: &mut Collector,
        rounds: usize,
        mut forward: Option<Forward<'_>>,
    ) -> Result<Measured> {
        let t0 = Instant::now();
        let targets = targets::targets();
        let mut times: Vec<Vec<f64>> = Vec::new();
        let mut spans: Vec<Vec<u64>> = vec![Vec::new(); targets.len()];
        for _ in 0..rounds.max(1) {
            times.push(self.child.run(&self.calls)?);
            drain(collector, reborrow(&mut forward), |ev| {
                let i = ev.phase.wrapping_sub(FIRST_ID) as usize;
                if ev.kind == EventKind::Span as u32 && i < spans.len() {
                    spans[i].push(ev.dur_ns);
                }
            });
        }
        if spans.iter().all(Vec::is_empty) {
            bail!("no span of the calibration functions reached wprof");
        }
        let base = &self.base;
        let classes = targets
            .iter()
            .enumerate()
            .filter(|(i, _)| self.used[*i])
            .map(|(i, t)| {
                let pairs: Vec<f64> = times.iter().map(|r| (r[i] - base[i]).max(0.0)).collect();
                let pair = median(&pairs);
                let error = pairs.iter().map(|p| (p - pair).abs()).fold(0.0, f64::max);
                let own = median_u64(&mut spans[i]).map_or(0.0, |s| (s as f64 - base[i]).max(0.0));
                class_cost(t, pair, own.min(pair), error)
            })
            .collect();
        Ok(Measured {
            classes,
            calls: self.calls.iter().copied().max().unwrap_or(0),
            rounds: times.len() as u32,
            elapsed_ms: t0.elapsed().as_secs_f64() * 1e3,
            return_addresses: self.return_addresses,
        })
    }

    /// Ends the calibration target (its probes stay attached to the exited process, and go
    /// with wprof's links).
    pub fn stop(self) {
        self.child.stop();
    }
}

/// A shorter-lived `Forward` to the same sinks.
fn reborrow<'s>(f: &'s mut Option<Forward<'_>>) -> Option<Forward<'s>> {
    f.as_mut().map(|f| Forward {
        events: &mut *f.events,
        stacks: &mut *f.stacks,
    })
}

/// Reads what the ring holds: the calibration's spans to `calibration`, the run's records
/// (when there is a run) to `forward`.
fn drain(
    collector: &mut Collector,
    forward: Option<Forward<'_>>,
    mut calibration: impl FnMut(&Event),
) {
    match forward {
        Some(f) => collector.drain(
            |ev| {
                if is_calibration(ev) {
                    calibration(ev)
                } else {
                    (f.events)(ev)
                }
            },
            f.stacks,
        ),
        None => collector.drain(
            |ev| {
                if is_calibration(ev) {
                    calibration(ev)
                }
            },
            |_| {},
        ),
    };
}

/// Calls per function per round at most, and the time a round of one function should take.
const MAX_CALLS: u64 = 1000;
const ROUND_NS: f64 = 3e6;

/// Whether a record is the calibration's (its spans and node definitions; forks and
/// loader notices of the run carry phase 0).
fn is_calibration(ev: &Event) -> bool {
    (ev.kind == EventKind::Span as u32 || ev.kind == EventKind::NodeDef as u32)
        && ev.phase >= FIRST_ID
}

fn class_of(start: Start) -> CostClass {
    match start {
        Start::Nop5 => CostClass::Nop,
        Start::Push => CostClass::Emulated,
        Start::Mov => CostClass::SingleStep,
    }
}

fn class_cost(t: &Target, pair_ns: f64, own_ns: f64, error_ns: f64) -> ClassCost {
    ClassCost {
        entry: class_of(t.start),
        uretprobe: t.uretprobe,
        pair_ns,
        own_ns,
        error_ns,
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

fn median_u64(v: &mut [u64]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mid = v.len() / 2;
    Some(*v.select_nth_unstable(mid).1)
}

/// `wprof __calibrate` running as a child, spoken to over its stdin/stdout.
struct CalibrationChild {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    addrs: Vec<u64>,
    /// Address of the loop the functions are called from.
    outer: u64,
}

impl CalibrationChild {
    fn start() -> Result<CalibrationChild> {
        let exe = std::env::current_exe().context("find wprof's own executable")?;
        let mut child = Command::new(&exe)
            .arg(CHILD_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("start the calibration target {}", exe.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("calibration target has no pipes");
        };
        let mut c = CalibrationChild {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            addrs: Vec::new(),
            outer: 0,
        };
        let addrs = c.read_line("addr", 1)?;
        c.addrs = addrs.iter().map(|&v| v as u64).collect();
        c.outer = c.addrs.pop().unwrap_or(0);
        Ok(c)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Mean ns per call of function i over `n[i]` calls (0 for none).
    fn run(&mut self, n: &[u64]) -> Result<Vec<f64>> {
        let n: Vec<String> = n.iter().map(u64::to_string).collect();
        writeln!(self.stdin, "run {}", n.join(" ")).context("talk to the calibration target")?;
        self.stdin.flush()?;
        self.read_line("ns", 0)
    }

    /// A reply of `tag` and one number per function, plus `extra` more.
    fn read_line(&mut self, tag: &str, extra: usize) -> Result<Vec<f64>> {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .context("read from the calibration target")?;
        let mut words = line.split_whitespace();
        if words.next() != Some(tag) {
            bail!("calibration target said {line:?}, expected '{tag} ...'");
        }
        let v: Vec<f64> = words.filter_map(|w| w.parse().ok()).collect();
        if v.len() != targets::targets().len() + extra {
            bail!("calibration target said {line:?}");
        }
        Ok(v)
    }

    fn stop(mut self) {
        let _ = writeln!(self.stdin, "quit");
        drop(self.stdin);
        if self.child.wait().is_err() {
            let _ = self.child.kill();
        }
    }
}
