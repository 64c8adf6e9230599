//! The stack side of a run (`--cpu-sample`, `--off-cpu`): records in, folded profiles out.
//!
//! During the run each new process's mappings are snapshotted at once (a traced command may
//! have exited by the time its stacks are named) and refreshed every second (libraries
//! loaded later). At the end the stacks are read from BPF, uretprobe trampolines restored,
//! frames named with blazesym, and each stack put under its phase path.

use std::time::{Duration, Instant};

use anyhow::Result;
use wprof_common::{counter, MAX_PENDING_RETURNS};

use crate::aggregate::sampled::SampledCounts;
use crate::aggregate::stacks::{
    fold, in_uprobe_handling, profile, stack_of, FrameNamer, StackAggregator, StackCounts,
    UPROBE_HANDLING,
};
use crate::aggregate::Aggregator;
use crate::attach::Tracer;
use crate::collect::{read_stacks, EndState};
use crate::model::profile::Measure;
use crate::model::StackProfile;
use crate::resolve::ResolvedPhase;
use crate::symbolize::maps::MappingKind;
use crate::symbolize::{restore_uretprobe_returns, MapsCache, ProcessMaps, StackSymbolizer};
use std::borrow::Cow;
use std::collections::HashMap;

/// How often the mappings of traced processes are read again.
const MAPS_REFRESH: Duration = Duration::from_secs(1);

/// Stack records of a run and the process mappings needed to name them.
pub struct StackSink {
    /// The records, aggregated.
    pub agg: StackAggregator,
    maps: MapsCache,
    last_refresh: Instant,
    bpf_symbols: BpfSymbols,
    /// The functions of the phases that may be sampled, and the names of those that are.
    sampled_fns: SampledFns,
    sampled_names: Vec<String>,
}

impl StackSink {
    /// A sink for a run whose BPF programs are loaded now (their kernel symbols are read
    /// here: they leave /proc/kallsyms when wprof detaches, before stacks are named).
    pub fn new(taking_stacks: bool) -> StackSink {
        StackSink {
            agg: StackAggregator::default(),
            maps: MapsCache::new(),
            last_refresh: Instant::now(),
            bpf_symbols: if taking_stacks {
                BpfSymbols::read()
            } else {
                BpfSymbols::default()
            },
            sampled_fns: SampledFns::default(),
            sampled_names: Vec::new(),
        }
    }

    /// Has [`StackSink::finish`] count the CPU samples of the phases named `sampled` (measured
    /// by sampling), whose functions `fns` locates.
    pub fn sample_phases(&mut self, fns: SampledFns, sampled: Vec<String>) {
        self.sampled_fns = fns;
        self.sampled_names = sampled;
    }
}

/// The JIT-compiled BPF programs listed in /proc/kallsyms (`bpf_prog_TAG_NAME [bpf]`), so
/// kernel frames inside wprof's own programs get their names. blazesym's kallsyms source
/// reads the core kernel's symbols only and would name them after the last core symbol.
#[derive(Debug, Default)]
struct BpfSymbols {
    /// (start address, name), sorted.
    starts: Vec<(u64, String)>,
}

/// BPF function names are C identifiers: the BPF toolchain writes a Rust subprogram such as
/// `on_entry<aya_ebpf::programs::probe::ProbeContext>` as `on_entry_3C_aya_ebpf_3A__3A_...`
/// (`_XX_` = the character with hex code XX). Puts the characters back.
fn unescape_bpf_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('_') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let hex = tail
            .get(1..3)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(c) if tail.as_bytes().get(3) == Some(&b'_') && c.is_ascii_punctuation() => {
                out.push(c as char);
                rest = &tail[4..];
            }
            _ => {
                out.push('_');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// No JIT image of a BPF program is this large: an address further from the nearest
/// program start is not inside a program.
const MAX_BPF_IMAGE: u64 = 1 << 20;

impl BpfSymbols {
    fn read() -> BpfSymbols {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        let mut starts: Vec<(u64, String)> = text
            .lines()
            .filter(|l| l.ends_with("[bpf]"))
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let addr = u64::from_str_radix(f.next()?, 16).ok()?;
                let name = f.nth(1)?;
                (addr != 0).then(|| (addr, unescape_bpf_name(name)))
            })
            .collect();
        starts.sort();
        BpfSymbols { starts }
    }

    /// The program holding `addr`, as a kernel frame name.
    fn name(&self, addr: u64) -> Option<String> {
        let i = self.starts.partition_point(|(a, _)| *a <= addr);
        let (start, name) = self.starts.get(i.checked_sub(1)?)?;
        (addr - start < MAX_BPF_IMAGE).then(|| format!("{name}_[k]"))
    }
}

impl StackSink {
    /// Call after each drain: snapshots new processes' mappings, refreshes the others'.
    pub fn after_drain(&mut self) {
        for pid in self.agg.take_new_pids() {
            self.maps.get(pid);
        }
        if self.last_refresh.elapsed() >= MAPS_REFRESH {
            self.last_refresh = Instant::now();
            let pids: Vec<u32> = self.agg.pids().collect();
            for pid in pids {
                self.maps.refresh(pid);
            }
        }
    }

    /// Builds the CPU and off-CPU profiles (None for a kind the run did not collect).
    pub fn finish(
        mut self,
        tracer: &mut Tracer,
        tree: &Aggregator,
        names: &[String],
        end: &EndState,
        cpu_hz: Option<u64>,
        off_cpu: bool,
    ) -> Result<(Option<StackProfile>, Option<StackProfile>, SampledCounts)> {
        self.after_drain();
        let stacks = read_stacks(tracer, self.agg.stack_ids())?;
        let mut namer = Namer {
            maps: self.maps,
            symbolizer: StackSymbolizer::new(),
            bpf_symbols: self.bpf_symbols,
        };
        let path_of = |node| tree.path_of(node, names);
        let owned_path = |node| path_of(node).into_iter().map(Cow::into_owned).collect();
        let counts = count_sampled(
            &self.agg.cpu,
            &stacks,
            owned_path,
            &mut namer,
            &self.sampled_fns,
            &self.sampled_names,
        );
        let cpu = cpu_hz.map(|hz| {
            let folded = fold(&self.agg.cpu, &stacks, path_of, &mut namer);
            let lost = end.counter(counter::LOST_CPU_SAMPLES);
            profile("samples", Some(hz), &self.agg.cpu, lost, folded)
        });
        let off = off_cpu.then(|| {
            let folded = fold(&self.agg.off_cpu, &stacks, path_of, &mut namer);
            let lost = end.counter(counter::LOST_OFF_CPU);
            profile("ns", None, &self.agg.off_cpu, lost, folded)
        });
        Ok((cpu, off, counts))
    }
}

/// Where the functions of the phases that may be measured by sampling lie: by the inode of
/// their object and their range of file offsets.
#[derive(Debug, Default)]
pub struct SampledFns {
    fns: Vec<SampledFn>,
}

/// One function of a sampled phase, by where it lies in its file.
#[derive(Debug)]
struct SampledFn {
    inode: u64,
    /// First file offset, and one past the last.
    start: u64,
    end: u64,
    /// Up to here from `start` the function has not set up its frame yet (endbr64, push
    /// %rbp, mov %rsp,%rbp): a frame-pointer walk from an instruction there skips its caller.
    frame_from: u64,
    /// Its RET sites, where the frame is already gone and the walk skips the caller too.
    rets: Vec<u64>,
    phase: String,
}

/// Bytes of the frame set-up after the entry site (`push %rbp` 1, `mov %rsp,%rbp` 3).
const FRAME_SETUP: u64 = 4;

impl SampledFns {
    /// The functions of `phases` that are sampled or may be moved to sampling.
    pub fn of(phases: &[ResolvedPhase]) -> SampledFns {
        use std::os::unix::fs::MetadataExt;
        let fns = phases
            .iter()
            .filter(|p| p.phase.measure != Measure::Probe && p.kernel.is_none())
            .flat_map(|p| p.targets.iter().map(move |t| (p, t)))
            .filter_map(|(p, t)| {
                let inode = std::fs::metadata(&t.object).ok()?.ino();
                let start = t.start_file_offset();
                Some(SampledFn {
                    inode,
                    start,
                    end: start + t.size.max(1),
                    frame_from: t.entry.file_offset + FRAME_SETUP,
                    rets: t.exits.iter().map(|e| e.file_offset).collect(),
                    phase: p.phase.name.clone(),
                })
            })
            .collect();
        SampledFns { fns }
    }

    /// Whether no function may be sampled.
    pub fn is_empty(&self) -> bool {
        self.fns.is_empty()
    }

    /// The sampled phase whose function holds `offset`, and whether a sample interrupted
    /// there (`leaf`) has a frame-pointer walk that skipped the function's caller.
    fn phase_at(&self, inode: u64, offset: u64, leaf: bool) -> Option<(&str, bool)> {
        let f = self
            .fns
            .iter()
            .find(|f| f.inode == inode && f.start <= offset && offset < f.end)?;
        let unwound = leaf && (offset < f.frame_from || f.rets.contains(&offset));
        Some((f.phase.as_str(), unwound))
    }
}

/// The CPU samples counted against every node open when they were taken (what they
/// lengthened), and for the sampled phases: `sampled` are the phases measured by
/// sampling (a sample's path may end in one moved there during the run). Samples taken while
/// the kernel handled a probe are left out of every share: that time is the probes'.
fn count_sampled(
    counts: &StackCounts,
    stacks: &HashMap<u32, Vec<u64>>,
    path_of: impl Fn(u64) -> Vec<String>,
    namer: &mut Namer,
    fns: &SampledFns,
    sampled: &[String],
) -> SampledCounts {
    let mut out = SampledCounts::default();
    for (key, &weight) in &counts.weights {
        out.interrupt(&path_of(key.node), weight);
    }
    if fns.is_empty() || sampled.is_empty() {
        return out;
    }
    let is_sampled = |n: &str| sampled.iter().any(|s| s == n);
    let lookup = |id: i32| stack_of(stacks, id);
    for (key, &weight) in &counts.weights {
        if in_uprobe_handling(&namer.kernel_frames(lookup(key.kernel_stack))) {
            continue;
        }
        let pending = &key.pending[..key.npending as usize];
        let (user, maps) = match restored(&mut namer.maps, key.pid, lookup(key.user_stack), pending)
        {
            Ok(restored) => restored,
            Err(Unrestorable::AtTrampoline) => continue,
            Err(Unrestorable::NoStack | Unrestorable::Gone) => {
                out.add(&path_of(key.node), &[], weight, &is_sampled);
                continue;
            }
        };
        let mut chain: Vec<String> = Vec::new();
        // Outermost first; a return address points past its call, so look one byte back.
        for (i, &addr) in user.iter().enumerate().rev() {
            let pc = if i == 0 { addr } else { addr.saturating_sub(1) };
            let Some(m) = maps.lookup(pc) else { continue };
            let MappingKind::File { inode, .. } = m.kind else {
                continue;
            };
            if let Some((name, unwound)) = fns.phase_at(inode, m.file_offset(pc), i == 0) {
                if unwound {
                    // Interrupted before its frame was set up or at its RET: its caller is
                    // missing from the walk, so where it sits is unknown. Counted for the
                    // phases further out only (a few instructions of the function's time).
                    break;
                }
                if is_sampled(name) && !chain.iter().any(|c| c == name) {
                    chain.push(name.to_string());
                }
            }
        }
        out.add(&path_of(key.node), &chain, weight, &is_sampled);
    }
    out
}

/// Names frames from the mapping snapshots with blazesym.
struct Namer {
    maps: MapsCache,
    symbolizer: StackSymbolizer,
    bpf_symbols: BpfSymbols,
}

/// Why a sample's user stack cannot be read as code addresses.
enum Unrestorable {
    /// No user stack was taken.
    NoStack,
    /// The process left no mappings that cover it.
    Gone,
    /// Sampled at the uretprobe trampoline itself: the return is being handled.
    AtTrampoline,
}

/// Process `pid`'s user stack (innermost first) with the return addresses uretprobe
/// trampolines replaced (`pending`, innermost first) put back, and the mappings it lies in.
fn restored<'m>(
    maps: &'m mut MapsCache,
    pid: u32,
    stack: &[u64],
    pending: &[u64],
) -> Result<(Vec<u64>, &'m ProcessMaps), Unrestorable> {
    let first = *stack.first().ok_or(Unrestorable::NoStack)?;
    let maps = maps.covering(pid, first).ok_or(Unrestorable::Gone)?;
    if maps.is_trampoline(first) {
        return Err(Unrestorable::AtTrampoline);
    }
    let mut stack = stack.to_vec();
    let complete = pending.len() < MAX_PENDING_RETURNS;
    restore_uretprobe_returns(&mut stack, maps, pending, complete);
    Ok((stack, maps))
}

impl FrameNamer for Namer {
    fn user_frames(&mut self, pid: u32, stack: &[u64], pending: &[u64]) -> Vec<String> {
        match restored(&mut self.maps, pid, stack, pending) {
            Ok((stack, maps)) => self.symbolizer.user_frames(maps, &stack),
            Err(Unrestorable::NoStack) => Vec::new(),
            Err(Unrestorable::Gone) => vec![format!("[pid {pid} gone: no mappings]")],
            Err(Unrestorable::AtTrampoline) => vec![UPROBE_HANDLING.to_string()],
        }
    }

    fn kernel_frames(&mut self, stack: &[u64]) -> Vec<String> {
        let mut frames = self.symbolizer.kernel_frames(stack);
        // Outermost first out, innermost first in.
        for (frame, &addr) in frames.iter_mut().zip(stack.iter().rev()) {
            if let Some(name) = self.bpf_symbols.name(addr) {
                *frame = name;
            }
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::unescape_bpf_name;

    #[test]
    fn bpf_subprogram_names_are_unescaped() {
        assert_eq!(
            unescape_bpf_name(
                "bpf_prog_a57324b43113f5db_on_entry_3C_aya_ebpf_3A__3A_programs_3A__3A_probe_3A__3A_ProbeContext_3E_"
            ),
            "bpf_prog_a57324b43113f5db_on_entry<aya_ebpf::programs::probe::ProbeContext>"
        );
        assert_eq!(
            unescape_bpf_name("bpf_prog_37b29d5c85362ec8_wprof_m_entry"),
            "bpf_prog_37b29d5c85362ec8_wprof_m_entry"
        );
    }
}
