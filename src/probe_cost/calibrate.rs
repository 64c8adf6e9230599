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
const ROUNDS: usize = 21;

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
    let t0 = Instant::now();
    let mut child = CalibrationChild::start()?;
    let before_run = forward.is_none();
    let result = match forward {
        Some(f) => measure(
            tracer, collector, ring_bytes, wanted, &mut child, f.events, f.stacks,
        ),
        None => measure(
            tracer,
            collector,
            ring_bytes,
            wanted,
            &mut child,
            &mut |_| {},
            &mut |_| {},
        ),
    };
    child.stop();
    if before_run {
        // Spans of the calibration lost to a small ring are not the run's.
        tracer.reset_counters()?;
    }
    let (classes, calls) = result?;
    Ok(Measured {
        classes,
        calls,
        rounds: ROUNDS as u32,
        elapsed_ms: t0.elapsed().as_secs_f64() * 1e3,
        return_addresses: tracer.keeps_return_addresses(),
    })
}

/// Calls per function per round at most, and the time a round of one function should take.
const MAX_CALLS: u64 = 1000;
const ROUND_NS: f64 = 3e6;

fn measure(
    tracer: &mut Tracer,
    collector: &mut Collector,
    ring_bytes: u32,
    wanted: &[(CostClass, bool)],
    child: &mut CalibrationChild,
    fwd_events: &mut dyn FnMut(&Event),
    fwd_stacks: &mut dyn FnMut(&StackEvent),
) -> Result<(Vec<ClassCost>, u64)> {
    let targets = targets::targets();
    let used: Vec<bool> = targets
        .iter()
        .map(|t| wanted.contains(&(class_of(t.start), t.uretprobe)))
        .collect();
    let n_used = used.iter().filter(|&&u| u).count() as u64;
    if n_used == 0 {
        return Ok((Vec::new(), 0));
    }
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
    let mut rounds: Vec<Vec<f64>> = Vec::new();
    let mut spans: Vec<Vec<u64>> = vec![Vec::new(); targets.len()];
    // The first round's spans are not used.
    collector.drain(
        |ev| {
            if !is_calibration(ev) {
                fwd_events(ev)
            }
        },
        &mut *fwd_stacks,
    );
    for _ in 0..ROUNDS {
        rounds.push(child.run(&calls)?);
        collector.drain(
            |ev| {
                let i = ev.phase.wrapping_sub(FIRST_ID) as usize;
                if !is_calibration(ev) {
                    fwd_events(ev);
                } else if ev.kind == EventKind::Span as u32 && i < spans.len() {
                    spans[i].push(ev.dur_ns);
                }
            },
            &mut *fwd_stacks,
        );
    }
    let classes = targets
        .iter()
        .enumerate()
        .filter(|(i, _)| used[*i])
        .map(|(i, t)| {
            let pairs: Vec<f64> = rounds.iter().map(|r| (r[i] - base[i]).max(0.0)).collect();
            let pair = median(&pairs);
            let error = pairs.iter().map(|p| (p - pair).abs()).fold(0.0, f64::max);
            let own = median_u64(&mut spans[i]).map_or(0.0, |s| (s as f64 - base[i]).max(0.0));
            class_cost(t, pair, own.min(pair), error)
        })
        .collect();
    if spans.iter().all(Vec::is_empty) {
        bail!("no span of the calibration functions reached wprof");
    }
    Ok((classes, calls.into_iter().max().unwrap_or(0)))
}

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
