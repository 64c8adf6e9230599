//! The command line (clap derive). The `///` comments are the `--help` text.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::model::profile::ReturnMode;

/// Attribute a program's write-path latency to its phases, from the outside, with eBPF.
#[derive(Debug, Parser)]
#[command(name = "wprof", version, about, long_about = None)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// wprof's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Attach to running processes and print the phase tree when the run ends
    /// (Ctrl-C, SIGTERM, --duration, or the exit of the last traced process).
    Attach(AttachArgs),
    /// Start a command with the probes already live, trace it to its exit, print the tree.
    /// Exits with the command's status.
    Record(RecordArgs),
    /// Dry run: show what each phase of a profile resolves to, and what its probes cost.
    Probes(ProbesArgs),
    /// List the built-in attach profiles.
    Targets,
    /// Re-render a saved run (--json output).
    Report(ReportArgs),
    /// Compare two runs node by node: deltas, significance, thresholds (exit 3 on failure).
    Compare(CompareArgs),
    /// Test hypotheses against a run: SUPPORTED / REFUTED / INCONCLUSIVE (exit 3 if refuted).
    Check(CheckArgs),
    /// Merge runs of one profile from many hosts into one run (JSON on stdout): counts and
    /// histograms add, every host's provenance is kept; report, compare and check read it.
    Merge(MergeArgs),
    /// Write a profile as a bpftrace script or as `perf probe` commands (same probe sites as
    /// wprof), for hosts where wprof cannot run or to compare with the peers.
    Export(ExportArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (wprof.1), or write every page (one per subcommand) into --dir.
    Man {
        /// Write wprof.1 and wprof-SUBCOMMAND.1 here.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Check what this host can do (kernel, capabilities, BPF, uprobe_multi, tracefs...);
    /// exit 1 when attach cannot work here.
    Doctor(DoctorArgs),
}

/// `wprof export`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("format").required(true).args(["bpftrace", "perf_probe"])))]
pub struct ExportArgs {
    /// Profile.
    #[command(flatten)]
    pub target: TargetArgs,
    /// What to resolve against.
    #[command(flatten)]
    pub resolve: ResolveArgs,
    /// Write a bpftrace script (run it as `bpftrace FILE PID`).
    #[arg(long)]
    pub bpftrace: bool,
    /// Write a shell script of `perf probe` commands (`sh FILE add`, then perf record -e 'wprof:*').
    #[arg(long)]
    pub perf_probe: bool,
    /// Write to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `wprof doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the checks as JSON (`attach_works` and one object per check).
    #[arg(long)]
    pub json: bool,
}

/// Which profile to use.
#[derive(Debug, Args, Clone)]
pub struct TargetArgs {
    /// A built-in profile name (see `wprof targets`) or a path to a profile TOML.
    #[arg(long, short = 't', value_name = "NAME|FILE.toml")]
    pub target: String,
    /// Take every function a phase's pattern matches, for every phase (as `all_matches = true`
    /// on each): without it a pattern that matches several functions is an error listing them.
    #[arg(long)]
    pub all_matches: bool,
}

impl TargetArgs {
    /// The profile, with `--all-matches` applied.
    pub fn load(&self) -> Result<crate::model::profile::Profile, crate::error::WprofError> {
        let mut profile = crate::model::profile::Profile::load(&self.target)?;
        if self.all_matches {
            profile.phases.iter_mut().for_each(|p| p.all_matches = true);
        }
        Ok(profile)
    }
}

/// Tracing options shared by attach and record.
#[derive(Debug, Args, Clone)]
pub struct TraceArgs {
    /// Stop after this long (e.g. 500ms, 30s, 2m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Force the return detection of every phase (default: each phase's own, `auto` picks
    /// RET-site probes for C++/Rust/Go and uretprobes for C).
    #[arg(long = "return", value_enum, value_name = "MODE")]
    pub return_mode: Option<ReturnArg>,
    /// Ring buffer size (e.g. 64K, 8M). Too small a buffer loses events: they are counted.
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value = "8M")]
    pub ring_size: u32,
    /// Do not print the tree on stdout (outputs still written).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Keep at most this many root calls in the per-call table (JSON, --events); further calls
    /// are counted and still aggregated into the tree.
    #[arg(long, value_name = "N", default_value_t = crate::aggregate::DEFAULT_MAX_CALLS)]
    pub max_calls: usize,
    /// Leave out calls that started during the first DURATION (warm-up).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub skip: Option<Duration>,
    /// Append a snapshot of every node (JSON lines) to --snapshots each DURATION, so a long run
    /// can be watched and cut.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "snapshots")]
    pub interval: Option<Duration>,
    /// Where --interval writes its JSON lines.
    #[arg(long, value_name = "FILE.jsonl")]
    pub snapshots: Option<PathBuf>,
    /// Sample the traced threads' stacks HZ times a second (software cpu-clock; user and
    /// kernel stacks, each prefixed by the phase open at that moment).
    #[arg(long, value_name = "HZ", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub cpu_sample: Option<u64>,
    /// Track the time traced threads spend off the CPU, per phase, and where they block
    /// (sched:sched_switch).
    #[arg(long)]
    pub off_cpu: bool,
    /// Also keep one tree per process (JSON `processes`) and print those instead of the
    /// merged tree.
    #[arg(long)]
    pub per_pid: bool,
    /// Show the tree twice: over the root calls in which PHASE was called (at any depth) and
    /// over the others, each with its own counts, means and percentiles (e.g. `--split-by
    /// block_persist`: the writes that persisted a block apart from the rest). PHASE is a
    /// phase name of the profile.
    #[arg(long, value_name = "PHASE", conflicts_with = "per_pid")]
    pub split_by: Option<String>,
    /// Where calls are aggregated: `event` sends every call to wprof (per-call CSV, traces,
    /// per-pid trees); `kernel` keeps per-node counts and log-linear histograms in BPF maps and
    /// reads only those (for paths with hundreds of thousands of calls a second); `auto`
    /// starts per event and switches to the kernel above 200,000 calls a second, or, with
    /// --max-overhead, as the budget's first step once the probes go over it. Default: `auto`
    /// with --max-overhead, `event` otherwise.
    #[arg(long, value_enum, value_name = "MODE")]
    pub aggregate: Option<AggregateMode>,
    /// Keep the probes' share of the CPU time of the threads that run probed code under PCT
    /// (e.g. 5%), checked after 0.1 s, then every 0.25 s while over: with `--aggregate auto`
    /// (its default) the calls are first aggregated in the kernel (wprof stops reading each
    /// one; not when an option needs every call), then the costliest hot leaves move to CPU
    /// sampling (roots stay exact), then what stays probed is live only part of each 2 s
    /// cycle, and only when even 2% of the time is too much does wprof detach (cleanly,
    /// outputs written, exit 5). Until a cycle has read the program's own slowdown, the
    /// probes' figure is held to half of PCT (a trap also slows the code after it).
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    pub max_overhead: Option<f64>,
    /// Check the probe correction where the probes run: every 2 s, for 0.25 s, the probes are
    /// live only down to one level of the tree (one root alone every other time, the deeper
    /// levels in turn between);
    /// each parent's calls then, against those made with every probe live, give what its
    /// descendants' probes really cost, and the correction is scaled to it (footer and JSON
    /// `in_situ`). Per-event aggregation only; not with --max-overhead.
    #[arg(long, conflicts_with = "max_overhead")]
    pub in_situ: bool,
    /// Skip measuring the probes' cost on this host before attaching: times are then not
    /// corrected, and the cost figures are the fixed estimates.
    #[arg(long)]
    pub no_calibrate: bool,
    /// Measure the probes' cost only before the run (and again at its end), not every second
    /// during it. By default the calibration target stays up and is timed again each second
    /// (~15 ms of CPU), and the calls after each measurement are corrected with the lower
    /// median of the last minute's: the price follows the host when its traps slow down for
    /// a while. Not with --max-overhead or in-kernel aggregation.
    #[arg(long, conflicts_with = "no_calibrate")]
    pub calibrate_once: bool,
    /// Keep every preemption in the corrected times. By default a corrected run follows the
    /// traced threads off the CPU (sched:sched_switch, no stacks: a few map operations a
    /// context switch, host-wide) to take out the preemptions the probes' own time brought
    /// on; --off-cpu does that too. In-kernel aggregation keeps them anyway.
    #[arg(long)]
    pub keep_preemptions: bool,
    /// While tracing, serve per-phase latency on ADDR (e.g. 127.0.0.1:9464) as Prometheus
    /// metrics at /metrics: native histograms over the protobuf format (text for other
    /// clients), one series per phase path, with `--per-pid` one per process (a PostgreSQL
    /// backend's is its server's DATADIR:PORT). Runs until Ctrl-C/SIGTERM without --duration
    /// (docs/fleet.md).
    #[arg(long, value_name = "ADDR")]
    pub serve: Option<std::net::SocketAddr>,
    /// With --serve --per-pid: keep about N series at most; processes that would add more are
    /// served as process="other" (said once on stderr).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4096,
        requires = "serve",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub serve_max_series: usize,
}

/// Where a run aggregates its calls (`--aggregate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AggregateMode {
    /// Every completed call is sent to wprof through the ring buffer.
    Event,
    /// BPF keeps per-node summaries and histograms; wprof reads them.
    Kernel,
    /// Per event, switching to the kernel once the traced calls pass 200,000 a second (never
    /// when an option that needs every call is given).
    Auto,
}

/// Parses `5%`, `5` or `0.5%` into a percentage in (0, 100].
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a percentage (e.g. 5%)"))?;
    if !(v > 0.0 && v <= 100.0) {
        return Err(format!("'{s}' must be above 0% and at most 100%"));
    }
    Ok(v)
}

/// Output files.
#[derive(Debug, Args, Clone, Default)]
pub struct OutputArgs {
    /// Write every output into this directory (run.json, tree.txt, phases.folded, phases.svg,
    /// calls.csv, trace.json; cpu.folded/cpu.svg and offcpu.folded/offcpu.svg when sampled).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Write the run as JSON (schema v1, docs/json.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write folded stacks of self time, in ns (flamegraph.pl / inferno format).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// Write a phase flamegraph (SVG) of wall time by phase path.
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
    /// Write one CSV row per root call: start, thread, total and each phase's time inside it.
    #[arg(long, value_name = "FILE.csv")]
    pub events: Option<PathBuf>,
    /// Write a Chrome/Perfetto trace (JSON) of the recorded spans.
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// Write the phase tree as a gzipped pprof profile (wall ns and calls per phase), for
    /// Pyroscope, Parca or `go tool pprof`.
    #[arg(long, value_name = "FILE.pb.gz")]
    pub pprof: Option<PathBuf>,
    /// Write the CPU samples as folded stacks (phase path, then user and kernel frames).
    #[arg(long, value_name = "FILE", requires = "cpu_sample")]
    pub cpu_folded: Option<PathBuf>,
    /// Write the CPU flamegraph (SVG) of the samples, each stack under its phase.
    #[arg(long, value_name = "FILE.svg", requires = "cpu_sample")]
    pub cpu_flamegraph: Option<PathBuf>,
    /// Write the CPU samples by phase as a gzipped pprof profile (samples and CPU ns).
    #[arg(long, value_name = "FILE.pb.gz", requires = "cpu_sample")]
    pub cpu_pprof: Option<PathBuf>,
    /// Write off-CPU time as folded stacks, in ns (phase path, then where the thread blocked).
    #[arg(long, value_name = "FILE", requires = "off_cpu")]
    pub off_cpu_folded: Option<PathBuf>,
    /// Write the off-CPU flamegraph (SVG).
    #[arg(long, value_name = "FILE.svg", requires = "off_cpu")]
    pub off_cpu_flamegraph: Option<PathBuf>,
}

/// `wprof attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Profile.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Process to trace (repeatable).
    #[arg(long, short = 'p', value_name = "PID", required = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Vec<u32>,
    /// Also trace every process the traced ones fork from now on (e.g. the backends of a
    /// PostgreSQL postmaster), from their first instruction. The probes then sit on the
    /// probed objects for every process that maps them, and BPF drops the untraced ones:
    /// such a process pays one probe hit per call of a probed function (docs/profiles.md).
    #[arg(long)]
    pub follow_forks: bool,
    /// Tracing options.
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Outputs.
    #[command(flatten)]
    pub outputs: OutputArgs,
}

/// `wprof record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Profile.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Tracing options.
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Outputs.
    #[command(flatten)]
    pub outputs: OutputArgs,
    /// Run the command as root even when wprof was started through sudo. Without it, wprof
    /// run as root with SUDO_UID and SUDO_GID set runs the command as that user and group,
    /// with the user's supplementary groups, as the command would have run without sudo
    /// (docs/security.md).
    #[arg(long)]
    pub as_root: bool,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// What `probes` and `export` resolve a profile against, without attaching.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// Resolve against a running process.
    #[arg(long, short = 'p', conflicts_with = "binary", value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Option<u32>,
    /// Resolve against a binary on disk (the profile's "exe").
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Force the return detection of every phase (as for attach).
    #[arg(long = "return", value_enum, value_name = "MODE")]
    pub return_mode: Option<ReturnArg>,
}

/// `wprof probes`.
#[derive(Debug, Args)]
pub struct ProbesArgs {
    /// Profile.
    #[command(flatten)]
    pub target: TargetArgs,
    /// What to resolve against.
    #[command(flatten)]
    pub resolve: ResolveArgs,
    /// Attach the probes to --pid for SECS seconds and say what they cost it, per phase, and
    /// what --max-overhead would do (the phases it would move to sampling).
    #[arg(long, value_name = "SECS", requires = "pid", value_parser = parse_estimate_secs)]
    pub estimate: Option<u64>,
    /// The budget --estimate plans for (default 5%).
    #[arg(long, value_name = "PCT", requires = "estimate", value_parser = parse_percent)]
    pub max_overhead: Option<f64>,
}

/// Seconds for `probes --estimate`: 1 to 600.
fn parse_estimate_secs(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if (1..=600).contains(&n) => Ok(n),
        _ => Err(format!("'{s}' is not a number of seconds from 1 to 600")),
    }
}

/// `wprof report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run saved with --json.
    pub run: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "tree")]
    pub format: crate::render::Format,
    /// Write to this file instead of stdout.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Split root calls at this percentile (e.g. p95) and show, per phase, where the slow
    /// calls' extra time went.
    #[arg(long, value_name = "pNN")]
    pub tail: Option<String>,
    /// Show the first N root calls (cold caches, plan building) apart from the rest.
    #[arg(long, value_name = "N")]
    pub first: Option<usize>,
    /// Require per-process trees (runs recorded with --per-pid show them anyway): exit 2
    /// when the run has none.
    #[arg(long)]
    pub per_pid: bool,
    /// Show the times as measured, the probes' own time included, instead of corrected.
    #[arg(long)]
    pub raw: bool,
    /// Require the tree split by PHASE (runs recorded with --split-by PHASE show it anyway):
    /// exit 2 when the run was not split by PHASE. A run holds the halves only for the phase
    /// it was recorded with.
    #[arg(long, value_name = "PHASE")]
    pub split_by: Option<String>,
}

/// `wprof compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline run (JSON).
    pub base: PathBuf,
    /// The new run (JSON).
    pub new: PathBuf,
    /// Align nodes by phase path (same profile) or by role path (different profiles).
    #[arg(long, value_enum, default_value = "phase")]
    pub by: crate::model::AlignBy,
    /// Smallest relative change reported as a difference, e.g. 5% (significance alone is not
    /// enough: with 10^5 calls everything is significant).
    #[arg(long, value_name = "PCT", default_value = "5%")]
    pub min_effect: String,
    /// Fail (exit 3) when a threshold is crossed, e.g. 'total.p99 > +10%' or
    /// 'write_record/wal_append.mean > +5%' (repeatable).
    #[arg(long, value_name = "EXPR")]
    pub fail_if: Vec<String>,
    /// Split the root calls of both runs at this percentile, as `report --tail`.
    #[arg(long, value_name = "pNN")]
    pub tail: Option<String>,
    /// Also write the comparison as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write a differential folded file (base and new self time per stack).
    #[arg(long, value_name = "FILE")]
    pub folded_diff: Option<PathBuf>,
    /// Also write a differential flamegraph SVG: widths are the new run's time per root call,
    /// colors the change of each frame's inclusive time (red grew, blue shrank).
    #[arg(long, value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,
    /// Also write a differential CPU flamegraph (both runs recorded with --cpu-sample): CPU
    /// time per root call by phase and stack.
    #[arg(long, value_name = "FILE.svg")]
    pub cpu_flamegraph: Option<PathBuf>,
    /// Also write a differential off-CPU flamegraph (both runs recorded with --off-cpu).
    #[arg(long, value_name = "FILE.svg")]
    pub off_cpu_flamegraph: Option<PathBuf>,
}

/// `wprof merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The runs to merge (--json files of one profile; a merged run may be merged again).
    #[arg(required = true, num_args = 2.., value_name = "RUN.json")]
    pub runs: Vec<PathBuf>,
    /// Write to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `wprof check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The hypothesis file (TOML, see docs/hypotheses.md).
    #[arg(long, value_name = "H.toml")]
    pub hypotheses: PathBuf,
    /// The run to test (JSON).
    pub run: PathBuf,
    /// A baseline run, for claims about a difference.
    pub base: Option<PathBuf>,
    /// Also write the verdicts as JSON (for CI annotations).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Fewer root calls than this make a verdict INCONCLUSIVE.
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub min_calls: usize,
    /// Confidence level of the intervals.
    #[arg(long, value_name = "LEVEL", default_value_t = 0.95)]
    pub confidence: f64,
}

/// `--return` values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReturnArg {
    /// Per phase: guarded uretprobes for C++/Rust (RET sites where the guard cannot attach),
    /// RET sites for Go, uretprobes for C.
    Auto,
    /// A uprobe on every RET instruction: safe with exceptions and panics.
    RetSites,
    /// Kernel uretprobes: cheaper; an exception through the frame kills the target.
    Uretprobe,
    /// Kernel uretprobes plus the unwind guard: as cheap, and safe with exceptions and panics.
    Guarded,
}

impl From<ReturnArg> for ReturnMode {
    fn from(r: ReturnArg) -> ReturnMode {
        match r {
            ReturnArg::Auto => ReturnMode::Auto,
            ReturnArg::RetSites => ReturnMode::RetSites,
            ReturnArg::Uretprobe => ReturnMode::Uretprobe,
            ReturnArg::Guarded => ReturnMode::Guarded,
        }
    }
}

/// Parses `500ms`, `30s`, `2m`, `1h` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(
        s.find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len()),
    );
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (try 500ms, 30s, 2m)"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit '{unit}' in '{s}' (use ms, s, m or h)"
            ))
        }
    };
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!("duration '{s}' must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses `4096`, `64K`, `8M`, `1G` into bytes (at most 1 GiB).
pub fn parse_size(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (try 64K or 8M)"))?;
    let bytes = n * mult;
    if bytes == 0 || bytes > 1 << 30 {
        return Err(format!("ring size '{s}' must be between 1 byte and 1G"));
    }
    Ok(bytes as u32)
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
