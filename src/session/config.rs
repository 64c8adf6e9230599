//! The plan of one `attach` or `record` run, built once from its command line (as ripgrep
//! turns its low-level flags into `HiArgs`).
//!
//! In: the parsed [`AttachArgs`] or [`RecordArgs`]. Out: a [`TraceConfig`] of typed values,
//! every default applied and every option checked against the others and against the profile
//! (usage errors, exit 2), before anything touches the host. No session module reads the clap
//! structs after this.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;

use crate::args::{
    AggregateMode, AttachArgs, Cli, Command, OutputArgs, RecordArgs, TargetArgs, TraceArgs,
};
use crate::attach::TracerOptions;
use crate::error::WprofError;
use crate::model::profile::{Measure, Profile};

/// CPU samples a second per CPU that measure the sampled phases when the command line asks
/// for no rate (`--cpu-sample`): ~0.5 ms between samples, so a phase taking 1% of a parent
/// open one second gets ~20 samples.
pub(super) const SAMPLED_PHASES_HZ: u64 = 1999;

/// What a run traces, as the command line names it (checked against the host later, by
/// [`super::Checked::of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// `attach`: running processes.
    Pids {
        /// The processes (`--pid`, at least one).
        pids: Vec<u32>,
        /// `--follow-forks`: also the processes they fork from now on.
        follow_forks: bool,
    },
    /// `record`: a command to start with the probes already live.
    Command {
        /// The command and its arguments.
        argv: Vec<String>,
        /// `--as-root`: keep root for the command even under sudo.
        as_root: bool,
    },
}

impl TargetSpec {
    /// What the command line of a wprof process (`argv`, its program name first) traces:
    /// None unless it parses as `attach` or `record`.
    pub fn of_command_line(argv: &[String]) -> Option<TargetSpec> {
        match Cli::try_parse_from(argv).ok()?.command {
            Command::Attach(a) => Some(TargetSpec::Pids {
                pids: a.pid,
                follow_forks: a.follow_forks,
            }),
            Command::Record(r) => Some(TargetSpec::Command {
                argv: r.command,
                as_root: r.as_root,
            }),
            _ => None,
        }
    }
}

/// `--interval` snapshots: where, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotPlan {
    /// The JSON-lines file (`--snapshots`).
    pub path: PathBuf,
    /// How often a line is appended (`--interval`).
    pub every: Duration,
}

/// `--serve`: where, and how many per-process series at most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServePlan {
    /// The address to listen on.
    pub addr: std::net::SocketAddr,
    /// `--serve-max-series`.
    pub max_series: usize,
}

/// Everything one run does, decided before it starts.
#[derive(Debug, Clone)]
pub struct TraceConfig {
    /// What to trace.
    pub target: TargetSpec,
    /// The profile: loaded, with `--all-matches` and `--return` applied.
    pub profile: Profile,
    /// Where calls are aggregated (`--aggregate`).
    pub aggregate: AggregateMode,
    /// The options asked for that need every call as a span (what keeps `--aggregate auto`
    /// per event), as the user wrote them.
    pub per_call_options: Vec<&'static str>,
    /// `--split-by`: the id of the phase that splits the root calls.
    pub split_phase: Option<u32>,
    /// `--per-pid`: one tree per process too.
    pub per_pid: bool,
    /// `--duration`: when the run ends on its own.
    pub duration: Option<Duration>,
    /// `--skip`: calls that start this early in the run are left out.
    pub skip: Option<Duration>,
    /// `--max-calls`: the per-call table's length.
    pub max_calls: usize,
    /// `--interval` and `--snapshots`, when both are given.
    pub snapshots: Option<SnapshotPlan>,
    /// `--max-overhead`: the budget, % of the probed threads' CPU time.
    pub max_overhead: Option<f64>,
    /// `--in-situ`: light epochs check the probe correction.
    pub in_situ: bool,
    /// CPU samples a second (`--cpu-sample`, or the rate sampled phases need).
    pub cpu_sample_hz: Option<u64>,
    /// Whether `--cpu-sample` set that rate (else `--max-overhead` may lower it to fit).
    pub cpu_sample_fixed: bool,
    /// `--off-cpu`: time off the CPU, and where threads block.
    pub off_cpu: bool,
    /// Whether the probes' cost is measured before attaching (not `--no-calibrate`).
    pub calibrate: bool,
    /// Whether it is measured again every second during the run (not `--calibrate-once`).
    pub recalibrate: bool,
    /// Whether the traced threads' preempted time is followed (sched:sched_switch), so the
    /// correction can take the probes' share of it out: `--off-cpu`, or a corrected run per
    /// event without `--keep-preemptions`.
    pub preemption: bool,
    /// `--ring-size`, bytes as given (the tracer rounds it up).
    pub ring_size: u32,
    /// `--quiet`: no tree on stdout, fewer notes on stderr.
    pub quiet: bool,
    /// The files to write (`--out`, `--json`, ...).
    pub outputs: OutputArgs,
    /// `--serve`: the Prometheus endpoint.
    pub serve: Option<ServePlan>,
}

impl TraceConfig {
    /// The plan of `wprof attach`.
    pub fn attach(a: AttachArgs) -> Result<TraceConfig> {
        let target = TargetSpec::Pids {
            pids: a.pid,
            follow_forks: a.follow_forks,
        };
        TraceConfig::new(target, &a.target, a.trace, a.outputs)
    }

    /// The plan of `wprof record`.
    pub fn record(r: RecordArgs) -> Result<TraceConfig> {
        let target = TargetSpec::Command {
            argv: r.command,
            as_root: r.as_root,
        };
        TraceConfig::new(target, &r.target, r.trace, r.outputs)
    }

    /// Checks, in the order the user has always seen the errors: what in-kernel aggregation
    /// refuses, the profile, `--split-by`, the output paths.
    fn new(
        target: TargetSpec,
        profile: &TargetArgs,
        t: TraceArgs,
        outputs: OutputArgs,
    ) -> Result<TraceConfig> {
        let per_call = per_call_options(&t, &outputs);
        // Under a budget, aggregating in the kernel is the cheapest step that keeps every
        // phase exact: it comes first unless the user chose.
        let aggregate = t.aggregate.unwrap_or(if t.max_overhead.is_some() {
            AggregateMode::Auto
        } else {
            AggregateMode::Event
        });
        check_aggregate(aggregate, &per_call)?;
        let loaded = profile.load()?;
        let cpu_sample_hz = cpu_sample_rate(&loaded, &t);
        let split_phase = split_phase(&loaded, t.split_by.as_deref())?;
        super::outputs::check_output_paths(&outputs)?;
        Ok(TraceConfig {
            target,
            profile: override_returns(&loaded, t.return_mode.map(Into::into)),
            aggregate,
            per_call_options: per_call,
            split_phase,
            per_pid: t.per_pid,
            duration: t.duration,
            skip: t.skip,
            max_calls: t.max_calls,
            snapshots: match (t.snapshots, t.interval) {
                (Some(path), Some(every)) => Some(SnapshotPlan { path, every }),
                _ => None,
            },
            max_overhead: t.max_overhead,
            in_situ: t.in_situ,
            cpu_sample_hz,
            cpu_sample_fixed: t.cpu_sample.is_some(),
            off_cpu: t.off_cpu,
            calibrate: !t.no_calibrate,
            recalibrate: !t.no_calibrate && !t.calibrate_once,
            preemption: t.off_cpu
                || (!t.no_calibrate && !t.keep_preemptions && aggregate != AggregateMode::Kernel),
            ring_size: t.ring_size,
            quiet: t.quiet,
            outputs,
            serve: t.serve.map(|addr| ServePlan {
                addr,
                max_series: t.serve_max_series,
            }),
        })
    }

    /// How the BPF side is loaded for this run.
    pub fn tracer_options(&self) -> TracerOptions {
        TracerOptions {
            ring_bytes: self.ring_size,
            stacks: self.off_cpu,
            kernel_aggregate: self.aggregate == AggregateMode::Kernel,
            kernel_maps: self.aggregate != AggregateMode::Event,
        }
    }

    /// Whether the run takes stacks (CPU samples or off-CPU records).
    pub fn takes_stacks(&self) -> bool {
        self.cpu_sample_hz.is_some() || self.off_cpu
    }

    /// Whether every probed phase needs links of its own: `--max-overhead` may move it to
    /// sampling or have it live only part of each second, `--in-situ` takes it off in light
    /// epochs.
    pub fn moves_probes(&self) -> bool {
        self.max_overhead.is_some() || self.in_situ
    }

    /// The phase names of the profile, by phase id.
    pub fn phase_names(&self) -> Vec<String> {
        phase_names(&self.profile)
    }
}

/// The options asked for that need every call as a span (so no in-kernel aggregation).
fn per_call_options(t: &TraceArgs, out: &OutputArgs) -> Vec<&'static str> {
    [
        (out.events.is_some(), "--events (one CSV row per call)"),
        (out.trace.is_some(), "--trace (one span per call)"),
        (t.per_pid, "--per-pid (calls by process)"),
        (t.split_by.is_some(), "--split-by (calls by root call)"),
        (t.skip.is_some(), "--skip (calls by start time)"),
        (
            t.interval.is_some() || t.snapshots.is_some(),
            "--interval/--snapshots (figures during the run)",
        ),
        (t.in_situ, "--in-situ (root calls by epoch)"),
    ]
    .into_iter()
    .filter_map(|(on, what)| on.then_some(what))
    .collect()
}

/// With `--aggregate kernel`, refuses (usage error, exit 2) the options that need every call
/// or a call's start time (`per_call`), which in-kernel aggregation never sends to wprof.
fn check_aggregate(aggregate: AggregateMode, per_call: &[&str]) -> Result<()> {
    if aggregate != AggregateMode::Kernel || per_call.is_empty() {
        return Ok(());
    }
    let (them, need) = if per_call.len() == 1 {
        ("it", "it needs")
    } else {
        ("them", "they need")
    };
    Err(usage(format!(
        "--aggregate kernel cannot give {}: {need} every call, and in-kernel aggregation \
         keeps only per-node summaries; use --aggregate event (the default) for {them}",
        per_call.join(", ")
    )))
}

/// The CPU sampling rate: `--cpu-sample`, or [`SAMPLED_PHASES_HZ`] (said on stderr) when
/// phases are measured by sampling: `measure = "sample"` phases, or `--max-overhead` with
/// phases it may move there.
fn cpu_sample_rate(profile: &Profile, t: &TraceArgs) -> Option<u64> {
    if t.cpu_sample.is_some() {
        return t.cpu_sample;
    }
    let sampled = profile.phases.iter().any(|p| p.measure == Measure::Sample);
    let movable = t.max_overhead.is_some()
        && profile
            .phases
            .iter()
            .any(|p| p.measure == Measure::Auto && p.symbol.is_some());
    if !(sampled || movable) {
        return None;
    }
    // Under --max-overhead the session measures what a sample costs and says the rate it
    // picks (session/sampler_budget.rs).
    if !t.quiet && t.max_overhead.is_none() {
        eprintln!(
            "wprof: CPU sampling at {SAMPLED_PHASES_HZ} Hz for the phases measured by \
             sampling (--cpu-sample HZ sets the rate)"
        );
    }
    Some(SAMPLED_PHASES_HZ)
}

/// The phase id of `--split-by PHASE` (None without it); a usage error naming the profile's
/// phases when it has no such phase.
fn split_phase(profile: &Profile, split_by: Option<&str>) -> Result<Option<u32>> {
    match split_by {
        None => Ok(None),
        Some(p) => Ok(Some(crate::aggregate::split::phase_id(
            &phase_names(profile),
            p,
        )?)),
    }
}

/// Applies a global `--return` override to every symbol phase.
pub fn override_returns(
    profile: &Profile,
    mode: Option<crate::model::profile::ReturnMode>,
) -> Profile {
    let mut p = profile.clone();
    if let Some(m) = mode {
        for ph in &mut p.phases {
            ph.return_mode = m;
        }
    }
    p
}

/// The phase names of `profile`, by phase id.
pub(super) fn phase_names(profile: &Profile) -> Vec<String> {
    profile.phases.iter().map(|p| p.name.clone()).collect()
}

/// A usage error (exit 2).
pub(super) fn usage(message: String) -> anyhow::Error {
    WprofError::Usage(message).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(args: &[&str]) -> Result<TraceConfig> {
        let mut argv = vec!["wprof", "record", "-t", "fixture", "--quiet"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&["--", "prog", "--flag"]);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Record(r) => TraceConfig::record(r),
            _ => panic!("not record"),
        }
    }

    fn usage_text(e: anyhow::Error) -> String {
        match e.downcast::<WprofError>() {
            Ok(WprofError::Usage(m)) => m,
            other => panic!("not a usage error: {other:?}"),
        }
    }

    #[test]
    fn record_plan_carries_the_command_and_the_defaults() {
        let c = record(&[]).unwrap();
        assert_eq!(
            c.target,
            TargetSpec::Command {
                argv: vec!["prog".into(), "--flag".into()],
                as_root: false
            }
        );
        assert_eq!(c.ring_size, 8 << 20);
        assert_eq!(c.aggregate, AggregateMode::Event);
        assert!(c.calibrate && c.per_call_options.is_empty() && c.snapshots.is_none());
        assert_eq!(c.cpu_sample_hz, None);
        assert!(!c.tracer_options().stacks);
    }

    #[test]
    fn attach_plan_carries_the_pids() {
        let cli = Cli::try_parse_from([
            "wprof",
            "attach",
            "-t",
            "fixture",
            "-p",
            "12",
            "-p",
            "34",
            "--follow-forks",
            "--off-cpu",
        ])
        .unwrap();
        let Command::Attach(a) = cli.command else {
            panic!("not attach")
        };
        let c = TraceConfig::attach(a).unwrap();
        assert_eq!(
            c.target,
            TargetSpec::Pids {
                pids: vec![12, 34],
                follow_forks: true
            }
        );
        assert!(c.takes_stacks() && c.tracer_options().stacks);
    }

    #[test]
    fn another_wprofs_command_line_names_its_target() {
        let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            TargetSpec::of_command_line(&argv("wprof attach -t fixture -p 7 --follow-forks")),
            Some(TargetSpec::Pids {
                pids: vec![7],
                follow_forks: true
            })
        );
        assert_eq!(
            TargetSpec::of_command_line(&argv("wprof record -t fixture -- ls -l")),
            Some(TargetSpec::Command {
                argv: argv("ls -l"),
                as_root: false
            })
        );
        assert_eq!(TargetSpec::of_command_line(&argv("wprof targets")), None);
        assert_eq!(
            TargetSpec::of_command_line(&argv("wprof attach -t x")),
            None
        );
    }

    #[test]
    fn split_by_names_a_phase_of_the_profile() {
        let phase = phase_names(&record(&[]).unwrap().profile)[0].clone();
        let c = record(&["--split-by", &phase]).unwrap();
        assert_eq!(c.split_phase, Some(0));
        assert_eq!(c.per_call_options, ["--split-by (calls by root call)"]);
        let e = usage_text(record(&["--split-by", "no_such_phase"]).unwrap_err());
        assert!(e.contains("no_such_phase"), "{e}");
    }

    #[test]
    fn a_budget_aggregates_in_the_kernel_first_unless_told_otherwise() {
        assert_eq!(record(&[]).unwrap().aggregate, AggregateMode::Event);
        let c = record(&["--max-overhead", "5"]).unwrap();
        assert_eq!(c.aggregate, AggregateMode::Auto);
        assert!(c.tracer_options().kernel_maps && !c.tracer_options().kernel_aggregate);
        let c = record(&["--max-overhead", "5", "--aggregate", "event"]).unwrap();
        assert_eq!(c.aggregate, AggregateMode::Event);
    }

    #[test]
    fn kernel_aggregation_refuses_per_call_options_first() {
        // Refused before the profile is even looked at: the phase does not exist either.
        let e = usage_text(record(&["--split-by", "x", "--aggregate", "kernel"]).unwrap_err());
        assert!(e.contains("--split-by"), "{e}");
        let c = record(&["--aggregate", "kernel"]).unwrap();
        assert!(c.tracer_options().kernel_aggregate && c.tracer_options().kernel_maps);
    }

    #[test]
    fn return_override_and_snapshots_are_applied() {
        let c = record(&["--serve", "127.0.0.1:9464", "--serve-max-series", "10"]).unwrap();
        assert_eq!(
            c.serve,
            Some(ServePlan {
                addr: "127.0.0.1:9464".parse().unwrap(),
                max_series: 10
            })
        );
        let attach = |extra: &[&str]| {
            let mut argv = vec!["wprof", "attach", "-t", "fixture", "-p", "1"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map(|_| ())
        };
        assert!(attach(&["--serve", "[::1]:9464"]).is_ok());
        assert!(
            attach(&["--serve", "localhost"]).is_err(),
            "an IP address and a port"
        );
        assert!(
            attach(&["--serve-max-series", "5"]).is_err(),
            "needs --serve"
        );
        let c = record(&["--return", "uretprobe"]).unwrap();
        assert!(c
            .profile
            .phases
            .iter()
            .all(|p| p.return_mode == crate::model::profile::ReturnMode::Uretprobe));
        let c = record(&["--interval", "1s", "--snapshots", "/tmp/s.jsonl"]).unwrap();
        assert_eq!(
            c.snapshots,
            Some(SnapshotPlan {
                path: "/tmp/s.jsonl".into(),
                every: Duration::from_secs(1)
            })
        );
    }

    #[test]
    fn max_overhead_turns_sampling_on_for_movable_phases() {
        let c = record(&["--max-overhead", "5%"]).unwrap();
        assert_eq!(c.cpu_sample_hz, Some(SAMPLED_PHASES_HZ));
        assert!(c.moves_probes());
        let c = record(&["--max-overhead", "5%", "--cpu-sample", "99"]).unwrap();
        assert_eq!(c.cpu_sample_hz, Some(99));
    }
}
