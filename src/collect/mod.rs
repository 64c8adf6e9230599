//! Collect: the BPF side's output -> plain values.
//!
//! In: the tracer's `EVENTS` ring buffer and, at the end of a run, its counter and stack maps.
//! Out: [`Event`]s handed to a sink (the aggregator) as they arrive, then the end-of-run
//! [`EndState`] (per-node lost/abandoned/open counts, per-phase hit counts, global counters);
//! with in-kernel aggregation also the per-node summaries and histograms ([`kernel`]).

pub mod kernel;
pub mod keys;

use std::os::fd::{AsRawFd, RawFd};

use anyhow::{Context, Result};
use aya::maps::{MapData, RingBuf};
use wprof_common::{counter, CpuSampleEvent, Event, EventKind, NodeKey, PhaseCounters, StackEvent};

use crate::aggregate::EndCounters;
use crate::attach::copied_stacks::SharedStacks;
use crate::attach::Tracer;

/// The longest one [`Collector::drain`] reads before it returns.
pub const DRAIN_BUDGET: std::time::Duration = std::time::Duration::from_millis(100);

/// Reads span and node events from the ring buffer.
pub struct Collector {
    ring: RingBuf<MapData>,
    /// Grouped nodes' strings read since the last [`Collector::take_keys`].
    keys: Vec<(u64, String)>,
    /// Where the stacks CPU samples carry go (the tracer's).
    copied: SharedStacks,
}

/// Counters read from BPF when the run ends.
#[derive(Debug, Clone, Default)]
pub struct EndState {
    /// Per-node counters for the tree.
    pub nodes: EndCounters,
    /// Per-phase hit counters, indexed by phase id.
    pub phases: Vec<PhaseCounters>,
    /// Global counters, indexed by `wprof_common::counter`.
    pub global: Vec<u64>,
    /// Where the calls were aggregated (set by the session: BPF does not say).
    pub aggregation: crate::model::Aggregation,
}

impl EndState {
    /// A global counter by index.
    pub fn counter(&self, index: u32) -> u64 {
        self.global.get(index as usize).copied().unwrap_or(0)
    }
}

/// Decodes one node-definition record, or the first span of a span record. Other records
/// are ignored (None).
#[inline]
pub fn decode(bytes: &[u8]) -> Option<Event> {
    match record_kind(bytes) {
        Some(k) if k == EventKind::Span as u32 || k == EventKind::NodeDef as u32 => read(bytes),
        _ => None,
    }
}

/// Every record type starts with its kind as a u32.
#[inline]
fn record_kind(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?))
}

#[inline]
fn read<T: aya::Pod>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: the length was checked, T is plain integers (any bit pattern is valid) and
    // read_unaligned copes with the ring buffer's 8-byte alignment.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

impl Collector {
    /// Takes the ring buffer out of the tracer.
    pub fn new(tracer: &mut Tracer) -> Result<Collector> {
        Ok(Collector {
            ring: tracer.take_events()?,
            keys: Vec::new(),
            copied: tracer.copied_stacks(),
        })
    }

    /// The strings of the grouped nodes (`group_by`) defined since the last call: (node,
    /// folded text). Hand them to the aggregator after each drain.
    pub fn take_keys(&mut self) -> Vec<(u64, String)> {
        std::mem::take(&mut self.keys)
    }

    /// File descriptor to poll for readability.
    pub fn fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Hands every available span, node definition and fork to `sink` and every stack record to
    /// `stacks`, for at most [`DRAIN_BUDGET`]; returns how many records were read.
    pub fn drain(
        &mut self,
        mut sink: impl FnMut(&Event),
        mut stacks: impl FnMut(&StackEvent),
    ) -> usize {
        let mut n = 0;
        const SPAN: u32 = EventKind::Span as u32;
        const NODE_DEF: u32 = EventKind::NodeDef as u32;
        const CPU_SAMPLE: u32 = EventKind::CpuSample as u32;
        const OFF_CPU: u32 = EventKind::OffCpu as u32;
        const FORK: u32 = EventKind::Fork as u32;
        const MAPS_CHANGED: u32 = EventKind::MapsChanged as u32;
        const NODE_KEY: u32 = EventKind::NodeKey as u32;
        let started = std::time::Instant::now();
        while let Some(item) = self.ring.next() {
            match record_kind(&item) {
                // A thread's queued spans come as one record (`span_queue` in probes/).
                Some(SPAN) => item
                    .as_chunks::<{ std::mem::size_of::<Event>() }>()
                    .0
                    .iter()
                    .filter_map(|c| read(c))
                    .for_each(|e| sink(&e)),
                Some(NODE_DEF | FORK | MAPS_CHANGED) => read(&item).iter().for_each(&mut sink),
                Some(CPU_SAMPLE) => {
                    if let Some(s) = read::<CpuSampleEvent>(&item) {
                        stacks(&with_stack_ids(&self.copied, &s));
                    }
                }
                Some(OFF_CPU) => read(&item).iter().for_each(&mut stacks),
                Some(NODE_KEY) => {
                    if let Some(k) = read::<NodeKey>(&item) {
                        self.keys.push((k.node, keys::folded(&k)));
                    }
                }
                _ => {}
            }
            n += 1;
            // A program that writes faster than wprof reads never leaves the ring empty: the
            // caller must get back to its end conditions (duration, Ctrl-C) now and then.
            if n % 1024 == 0 && started.elapsed() >= DRAIN_BUDGET {
                break;
            }
        }
        n
    }
}

/// A CPU sample as a [`StackEvent`]: its copied stacks stored in `copied`, their ids in it.
fn with_stack_ids(copied: &SharedStacks, s: &CpuSampleEvent) -> StackEvent {
    let mut copied = copied.lock().unwrap_or_else(|e| e.into_inner());
    StackEvent {
        user_stack: copied.intern(s.user_frames()),
        kernel_stack: copied.intern(s.kernel_frames()),
        ..s.head
    }
}

/// Hands `sink` the completed calls still queued on the threads' stacks (BPF sends a thread's
/// queue when its root call returns: a call completed inside a root call still open at the
/// end waits there). Call after the probes are detached, so nothing is queued meanwhile.
pub fn drain_queued(tracer: &mut Tracer, mut sink: impl FnMut(&Event)) -> Result<()> {
    let stacks = tracer.stacks()?;
    for item in stacks.iter() {
        let (_, st) = item.context("read STACKS")?;
        st.queued().iter().for_each(&mut sink);
    }
    Ok(())
}

/// Reads the stacks the run's records refer to, from the samples' copies or the
/// `STACK_TRACES` map: id -> addresses, innermost first. Ids the map no longer holds are
/// left out.
pub fn read_stacks(
    tracer: &mut Tracer,
    ids: impl IntoIterator<Item = u32>,
) -> Result<std::collections::HashMap<u32, Vec<u64>>> {
    let copied = tracer.copied_stacks();
    let copied = copied.lock().unwrap_or_else(|e| e.into_inner());
    let map = tracer.stack_traces()?;
    let mut out = std::collections::HashMap::new();
    for id in ids {
        if let Some(frames) = copied.get(id) {
            out.insert(id, frames.to_vec());
        } else if let Ok(st) = map.get(&id, 0) {
            out.insert(id, st.frames().iter().map(|f| f.ip).collect());
        }
    }
    Ok(out)
}

/// BPF's counters of each phase id below `n` so far, every CPU added up.
pub fn read_phase_counters(tracer: &Tracer, n: usize) -> Result<Vec<PhaseCounters>> {
    let phases = tracer.phase_counters()?;
    Ok((0..n as u32)
        .map(|i| {
            let mut sum = PhaseCounters::default();
            if let Ok(vals) = phases.get(&i, 0) {
                for v in vals.iter() {
                    sum.entries += v.entries;
                    sum.returns += v.returns;
                    sum.unmatched_returns += v.unmatched_returns;
                    sum.overflow += v.overflow;
                    sum.outside_under += v.outside_under;
                }
            }
            sum
        })
        .collect())
}

/// BPF's global counters so far, every CPU added up, indexed by `wprof_common::counter`.
pub fn read_global_counters(tracer: &Tracer) -> Result<Vec<u64>> {
    let global = tracer.counters()?;
    Ok((0..counter::COUNT)
        .map(|i| global.get(&i, 0).map(|v| v.iter().sum()).unwrap_or(0))
        .collect())
}

/// BPF's lost and abandoned calls so far, per node, into `nodes` (nodes with none are left
/// out).
pub fn read_node_counters(tracer: &Tracer, nodes: &mut EndCounters) -> Result<()> {
    let map = tracer.node_counters()?;
    for item in map.iter() {
        let (node, vals) = item.context("read NODE_COUNTERS")?;
        let lost: u64 = vals.iter().map(|v| v.lost).sum();
        let abandoned: u64 = vals.iter().map(|v| v.abandoned).sum();
        if lost > 0 {
            nodes.lost.insert(node, lost);
        }
        if abandoned > 0 {
            nodes.abandoned.insert(node, abandoned);
        }
    }
    Ok(())
}

/// Reads the end-of-run counters. Call after [`Tracer::detach`] so nothing changes underneath.
pub fn read_end_state(tracer: &mut Tracer, nphases: usize) -> Result<EndState> {
    let mut end = EndState {
        global: read_global_counters(tracer)?,
        phases: read_phase_counters(tracer, nphases)?,
        ..EndState::default()
    };
    read_node_counters(tracer, &mut end.nodes)?;

    let stacks = tracer.stacks()?;
    for item in stacks.iter() {
        let (key, st) = item.context("read STACKS")?;
        // A call on a thread that no longer exists can never return: it was left without a
        // return we saw (e.g. the last exception before exit). On a live thread it is open.
        let (pid, tid) = (key >> 32, key as u32);
        let alive = if key & wprof_common::GOROUTINE_KEY_BIT != 0 {
            // A goroutine's stack: its process is in the stack, the thread does not matter.
            crate::attach::process_alive(st.tgid)
        } else {
            std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
                && crate::attach::process_alive(pid as u32)
        };
        let bucket = if alive {
            &mut end.nodes.open
        } else {
            &mut end.nodes.abandoned
        };
        // A call entered while the run closed was never counted (config::CLOSING).
        let counted = |f: &&wprof_common::Frame| f.uretprobe & wprof_common::FRAME_UNCOUNTED == 0;
        for f in st.frames.iter().take(st.len as usize).filter(counted) {
            *bucket.entry(f.node).or_default() += 1;
        }
    }
    Ok(end)
}
