//! The run as data: provenance, per-phase attach facts, counters, probe cost and the tree.
//!
//! Built by the session at the end of `attach`/`record`, consumed by render (text, JSON,
//! folded, SVG). `--json` writes exactly this (schema v1, docs/json.md), and `report` reads it
//! back, so everything printed about a run comes from this one value.

use serde::{Deserialize, Serialize};

use super::calls::{CallTable, SpanLog};
use super::cost::ClassCost;
use super::insitu::InSituCheck;
use super::stacks::StackProfile;
use super::tree::{PhaseTree, SplitTrees, TreeNode};

/// One traced process of a run made with `--per-pid`.
#[derive(Debug, Clone, Default)]
pub struct ProcessRun {
    /// Process id.
    pub pid: u32,
    /// What it was: its command line or process title (`postgres: user db [local] INSERT`)
    /// as last read while it ran.
    pub label: String,
    /// The traced process it was forked from (`--follow-forks`), None for a `--pid` target.
    pub parent: Option<u32>,
    /// The parent's label (e.g. a postmaster's command line, which names its data directory:
    /// tells the segments of a multi-server host apart).
    pub parent_label: Option<String>,
    /// The host it ran on, in a merged run (`wprof merge`), where pids of different hosts may
    /// be equal; None in a run of one host.
    pub host: Option<String>,
    /// Its own tree.
    pub tree: PhaseTree,
}

/// JSON schema version written and accepted.
pub const SCHEMA_VERSION: u32 = 1;

/// Where and how the run was made.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Provenance {
    /// wprof's version.
    pub wprof_version: String,
    /// Host name.
    pub host: String,
    /// Kernel release (uname -r).
    pub kernel: String,
    /// Start time, seconds since the epoch.
    pub started_unix: u64,
    /// Wall time probes were live and events read (attach/detach excluded), seconds.
    pub duration_s: f64,
    /// Traced pids (the `--pid`s, or `record`'s child).
    pub pids: Vec<u32>,
    /// Whether children of the traced processes were traced too (`--follow-forks`).
    #[serde(default)]
    pub follow_forks: bool,
    /// Processes that got traced by following forks, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forked: Vec<u32>,
    /// The command, for `record`.
    pub command: Option<Vec<String>>,
    /// Profile name.
    pub profile_name: String,
    /// Where the profile came from (builtin:NAME or a path).
    pub profile_origin: String,
    /// Short hash of the profile text.
    pub profile_hash: String,
    /// Probed objects with their build ids.
    pub objects: Vec<ObjectInfo>,
    /// Why the run ended (duration, signal, target exit).
    pub end_reason: String,
    /// Where the calls were aggregated (`--aggregate`).
    // Absent in runs recorded before `--aggregate`: those aggregated per event.
    #[serde(default)]
    pub aggregation: Aggregation,
    /// Share of the run the probes were live when `--max-overhead` had them live only part
    /// of each second (counts are then those of the live windows); None: always live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes_live_fraction: Option<f64>,
    /// When the probes were live under that duty cycle, `[start, end]` in ns since the Unix
    /// epoch (CLOCK_REALTIME): the first from the attach, the last to the end of the run.
    /// A program's own timestamped log split by them gives its pace with the probes live and
    /// paused. Empty: always live.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live_windows: Vec<[u64; 2]>,
    /// The runs a merged run was made from (`wprof merge`), in the order given; empty for a
    /// run of one host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceRun>,
}

/// One of the runs a merged run was made from (`wprof merge`): what it said about itself,
/// kept whole so that every host's figures stay on record.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SourceRun {
    /// The file it was read from, as given to `wprof merge`.
    pub file: String,
    /// Its provenance (host, kernel, start, duration, pids, profile hash, objects...); its
    /// own `sources` are always empty (a merged input contributes its sources instead).
    pub provenance: Provenance,
    /// Its run-wide counters.
    pub counters: Counters,
    /// Its probe cost, with the host calibration its times were corrected with.
    pub probe_cost: ProbeCost,
}

/// Where a run's calls were aggregated (`--aggregate`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregation {
    /// In wprof, from one span per call: the per-call table, traces and per-pid trees too.
    #[default]
    Event,
    /// In BPF maps (per-node summaries and histograms): the tree only.
    Kernel,
}

impl Aggregation {
    /// `event` or `kernel`, as in the JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregation::Event => "event",
            Aggregation::Kernel => "kernel",
        }
    }
}

/// A probed object file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectInfo {
    /// Path as the target sees it.
    pub path: String,
    /// GNU build id, hex.
    pub build_id: Option<String>,
}

/// What was attached for a phase and what its probes saw.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PhaseInfo {
    /// Phase id.
    pub id: u32,
    /// Phase name.
    pub name: String,
    /// Role tag.
    pub role: Option<String>,
    /// Object path (target's view); empty when unresolved.
    pub object: String,
    /// Symbol(s) as resolved (mangled).
    pub symbols: Vec<String>,
    /// Return mode used: "ret-sites" or "uretprobe" ("-" when not attached).
    pub return_mode: String,
    /// Cost class of the entry instruction ("nop", "emulated", "single-step").
    pub entry_cost: String,
    /// Bytes past the function's start the entry probe sits (4 past a leading `endbr64`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub entry_offset: u64,
    /// Number of RET/tail-JMP sites probed (ret-sites mode).
    pub exit_sites: u32,
    /// "attached", "unresolved: ...", "unsupported: ...".
    pub status: String,
    /// Entry probe hits.
    pub entries: u64,
    /// Return probe hits.
    pub returns: u64,
    /// Returns that matched no open call.
    pub unmatched_returns: u64,
    /// Entries dropped because the thread's stack was full.
    pub overflow: u64,
    /// Calls left out because they were not made inside the phase's `under` phase.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outside_under: u64,
    /// Cost of one entry+return pair of this phase's probes, ns (calibrated, or estimated).
    pub probe_pair_ns: f64,
    /// The part of it inside the call's own window, ns (0 when not calibrated).
    #[serde(default)]
    pub probe_own_ns: f64,
}

/// Run-wide counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counters {
    /// Ring-buffer events read.
    pub events: u64,
    /// Spans lost to a full ring buffer.
    pub lost_spans: u64,
    /// Node definitions lost (retried; spans of a never-defined node are orphans).
    pub lost_node_defs: u64,
    /// Spans whose node was never defined.
    pub orphan_spans: u64,
    /// Returns that matched no open call.
    pub unmatched_returns: u64,
    /// Calls left without a seen return.
    pub abandoned: u64,
    /// Calls still open at the end.
    pub open_at_end: u64,
    /// Entries dropped: stack deeper than the BPF limit.
    pub overflow: u64,
    /// Entries dropped: no stack could be allocated.
    pub no_stack: u64,
    /// Spans left out because they started during `--skip`.
    #[serde(default)]
    pub skipped_spans: u64,
    /// The unwind guard's work (guarded uretprobes; all 0 without it).
    #[serde(flatten)]
    pub unwind: UnwindCounters,
}

/// What the unwind guard did: unwinds (exceptions, panics, forced unwinds) that began on a
/// thread with open phases, and the return addresses it put back and re-armed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnwindCounters {
    /// Unwinder entries on threads with open phases (a throw, each cleanup's resume, ...).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unwinds: u64,
    /// Frames whose original return address the guard put back for the unwinder.
    #[serde(rename = "unwind_restored", default, skip_serializing_if = "is_zero")]
    pub restored: u64,
    /// Frames the catch found still live and gave the trampoline back.
    #[serde(rename = "unwind_rearmed", default, skip_serializing_if = "is_zero")]
    pub rearmed: u64,
    /// Frames whose return slot held something unexpected, left alone.
    #[serde(rename = "unwind_foreign", default, skip_serializing_if = "is_zero")]
    pub foreign: u64,
    /// Requests to write the slots that wprof did not answer in time (the guard written by
    /// wprof, where the kernel refuses BPF's writes): those unwinds went on unguarded.
    #[serde(rename = "unwind_late", default, skip_serializing_if = "is_zero")]
    pub late: u64,
}

/// The probe cost of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProbeCost {
    /// How the per-hit costs were obtained: calibrated on the host, or fixed estimates.
    pub model: String,
    /// Total probe hits (entries + returns).
    pub hits: u64,
    /// Time the probes added to the target, ns.
    pub added_ns: f64,
    /// The host calibration the times were corrected with (None: not corrected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
    /// What the traced processes' CPU samples said the probes took, in runs that sample
    /// (`--cpu-sample`, or `--max-overhead` with sampled phases); None: too few samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_situ: Option<InSituProbeTime>,
    /// The probed threads' own progress with the probes live against paused, under a duty
    /// cycle of `--max-overhead`; None: no duty cycle, or too little to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressCheck>,
    /// What one CPU sample cost the code it interrupted, ns, measured before attaching when a
    /// sampler runs under `--max-overhead`: every corrected node lost it once for each sample
    /// taken while it was open. None: not measured (no sampler, no budget, or it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_ns: Option<f64>,
    /// What the traced threads waited for a CPU before the probes went live and while they
    /// were (`wprof attach` with preemptions followed): the corrected times keep the
    /// program's preemptions only at the untraced odds. None: not measured (a command wprof
    /// starts, `--keep-preemptions`, or the processes ran too little in the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_baseline: Option<PreemptionBaseline>,
}

/// The traced threads' wait for a CPU, runnable (`session::untraced_wait`): before the
/// probes went live, from the kernel's per-thread schedstat, and while they were, from the
/// root calls (wprof's own threads' share left out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PreemptionBaseline {
    /// How long the untraced threads were watched, ms.
    pub window_ms: f64,
    /// Threads that ran in that window.
    pub threads: u32,
    /// Their time on the CPU in it, ns.
    pub cpu_ns: u64,
    /// Their time runnable, waiting for a CPU, in it, ns.
    pub wait_ns: u64,
    /// The traced root calls' time on the CPU (the probes' included), ns.
    pub traced_cpu_ns: u64,
    /// Their time preempted, ns (waits for wprof's own threads left out).
    pub traced_wait_ns: u64,
}

impl PreemptionBaseline {
    /// Untraced wait per ns on the CPU.
    pub fn untraced_rate(&self) -> f64 {
        self.wait_ns as f64 / self.cpu_ns.max(1) as f64
    }

    /// Traced wait per ns on the CPU (None before any traced call).
    pub fn traced_rate(&self) -> Option<f64> {
        (self.traced_cpu_ns > 0).then(|| self.traced_wait_ns as f64 / self.traced_cpu_ns as f64)
    }
}

/// The probed threads' work (read and write calls, waits) per CPU second in the duty cycle's
/// live and paused windows (`session::progress`): the program's own slowdown under the probes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressCheck {
    /// Work per CPU second while the probes were live.
    pub live_per_cpu_s: f64,
    /// Work per CPU second while they were paused.
    pub paused_per_cpu_s: f64,
    /// The share lost while live, %: what `--max-overhead` prices the live probes at when
    /// it is more than their calibrated and sampled price.
    pub slowdown_pct: f64,
    /// Live windows counted.
    pub live_windows: u32,
    /// Paused windows counted.
    pub paused_windows: u32,
    /// Probe hits (entries and returns) of the measured threads in the live windows.
    #[serde(default)]
    pub live_hits: u64,
    /// What each hit cost the traced code beyond its calibrated price, ns: the live windows'
    /// CPU time over what their work took at the paused rate, less the hits' price and the
    /// sampler's, per hit. The tree's corrected times take it out once for every hit inside
    /// a call's window (its own entry, its descendants' entries and returns). None: fewer
    /// than 1,000 live hits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excess_ns_per_hit: Option<f64>,
    /// The same per root phase, over the threads seen in its calls at the switches (each
    /// root's subtree is corrected by its own, the others by `excess_ns_per_hit`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excess_by_root: Vec<RootExcess>,
}

impl ProgressCheck {
    /// What a hit cost beyond its price under `root`: its own figure, else the one of every
    /// measured thread together.
    pub fn excess_of(&self, root: &str) -> Option<f64> {
        self.excess_by_root
            .iter()
            .find(|r| r.root == root)
            .map(|r| r.ns_per_hit)
            .or(self.excess_ns_per_hit)
    }
}

/// What a probe hit cost the code after it on the threads of one root phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RootExcess {
    /// The root phase's name.
    pub root: String,
    /// Beyond the hit's calibrated price, ns.
    pub ns_per_hit: f64,
    /// The live probe hits it was measured over.
    pub hits: u64,
}

/// The probes' time seen in the traced processes' CPU samples, against the calibration's
/// price of their hits (`session::probe_time`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct InSituProbeTime {
    /// The samples of the last reading.
    pub samples: u64,
    /// Their share taken while the kernel handled a uprobe, as a share of the probed
    /// threads' CPU time (a sampler paused with the probes counts for the live part), %.
    pub share_pct: f64,
    /// That time ÷ the calibration's price of the same hits, at least 1: what
    /// `--max-overhead` multiplied the calibrated price by.
    pub factor: f64,
}

/// What the calibration before the run measured (`probe_cost::calibrate`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// One entry per entry cost class and return mode.
    pub classes: Vec<ClassCost>,
    /// Calls per calibration function per round.
    pub calls: u64,
    /// Timing rounds.
    pub rounds: u32,
    /// Wall time the calibration took, ms.
    pub elapsed_ms: f64,
    /// 1-minute load average when the run ended.
    pub load_end: f64,
    /// Whether the host had more runnable work than CPUs at the end of the run: without a
    /// recalibration at the end, the stated errors were doubled.
    pub contended: bool,
    /// The same measurement repeated at the end of the run (empty when it was not: budget
    /// exceeded, in-kernel aggregation, or it failed). How far it moved widens the errors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at_end: Vec<ClassCost>,
    /// Whether the calibrated entries read their return address, as the run's did (the
    /// unwind guard, stacks). False in runs recorded before it was said.
    #[serde(default)]
    pub return_addresses: bool,
    /// The same measurement made again while the run went on (`session::recalibrate`), in
    /// order: the calls after each were corrected with it. Empty when it was not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub during: Vec<DuringCalibration>,
}

/// One measurement of the probe costs during a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DuringCalibration {
    /// Seconds after the probes went live.
    pub at_s: f64,
    /// One entry per entry cost class and return mode.
    pub classes: Vec<ClassCost>,
}

/// A whole run.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Provenance.
    pub provenance: Provenance,
    /// One entry per profile phase.
    pub phases: Vec<PhaseInfo>,
    /// Counters.
    pub counters: Counters,
    /// Probe cost.
    pub probe_cost: ProbeCost,
    /// The phase tree.
    pub tree: PhaseTree,
    /// One row per root call (per-event mode), capped.
    pub calls: CallTable,
    /// Completed spans for the trace export, capped.
    pub spans: SpanLog,
    /// CPU samples folded under their phase paths (`--cpu-sample`).
    pub cpu: Option<StackProfile>,
    /// Off-CPU time folded under the phase paths and blocking stacks (`--off-cpu`).
    pub off_cpu: Option<StackProfile>,
    /// One tree per process (`--per-pid`), smallest pid first; empty otherwise.
    pub processes: Vec<ProcessRun>,
    /// The tree twice, over the root calls that contained a phase and over the others
    /// (`--split-by`).
    pub split: Option<SplitTrees>,
    /// What the in-situ check found per root phase (`--in-situ`); empty otherwise.
    pub in_situ: Vec<InSituCheck>,
}

impl Run {
    /// Forgets the corrected figures (`report --raw`): every output then shows the times as
    /// measured. The calibration record stays.
    pub fn drop_corrections(&mut self) {
        fn walk(n: &mut TreeNode) {
            n.corrected = None;
            n.children.iter_mut().for_each(walk);
        }
        self.tree.roots.iter_mut().for_each(walk);
        for p in &mut self.processes {
            p.tree.roots.iter_mut().for_each(walk);
        }
        if let Some(s) = &mut self.split {
            s.with.roots.iter_mut().for_each(walk);
            s.without.roots.iter_mut().for_each(walk);
        }
    }

    /// Whether the tree carries times corrected for the probes.
    pub fn is_corrected(&self) -> bool {
        self.tree.roots.iter().any(|r| r.corrected.is_some())
            || self
                .processes
                .iter()
                .any(|p| p.tree.roots.iter().any(|r| r.corrected.is_some()))
            || self.split.as_ref().is_some_and(|s| {
                (s.with.roots.iter().chain(&s.without.roots)).any(|r| r.corrected.is_some())
            })
    }
}

/// For `skip_serializing_if`: counters that are 0 are left out of the JSON.
fn is_zero(n: &u64) -> bool {
    *n == 0
}
