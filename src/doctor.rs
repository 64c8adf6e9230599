//! `wprof doctor`: what this host can do, one check per line, each with its fix.
//!
//! In: nothing but the host (/proc, /sys, the kernel's BPF syscall). Out: [`Check`]s, printed
//! as text or JSON; the exit code is 1 when a required check failed (attach cannot work), 0
//! otherwise. Optional features (uprobe_multi, the uretprobe syscall, tracefs, a hardware PMU)
//! are reported with what their absence costs, never as failures.

use std::path::Path;

use serde::Serialize;

use crate::attach::{missing_capabilities, GuardWrites, Tracer, TracerOptions};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Present and working.
    Ok,
    /// Required and absent: attach cannot work.
    Missing,
    /// Optional and absent: a feature degrades or is unavailable.
    Warn,
    /// Facts worth knowing, no verdict.
    Info,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "OK",
            Verdict::Missing => "MISSING",
            Verdict::Warn => "WARN",
            Verdict::Info => "INFO",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: &'static str,
    /// The outcome.
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// What to do about it (empty when nothing).
    pub fix: String,
}

fn check(name: &'static str, verdict: Verdict, detail: impl Into<String>, fix: &str) -> Check {
    Check {
        name,
        verdict,
        detail: detail.into(),
        fix: fix.to_string(),
    }
}

/// Runs every check, required ones first.
pub fn run_checks() -> Vec<Check> {
    let mut out = vec![kernel_version(), uprobes(), capabilities()];
    let can_load = out.iter().all(|c| c.verdict != Verdict::Missing);
    out.push(bpf_programs(can_load));
    out.push(ring_buffer(can_load));
    out.push(uprobe_multi(can_load));
    out.push(uretprobe_syscall());
    out.push(unwind_guard(can_load));
    out.push(tracefs());
    out.push(pmu());
    out.push(perf_event_paranoid());
    out.push(btf());
    out.push(kprobes());
    out
}

/// Whether attach can work: no required check failed.
pub fn attach_works(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.verdict != Verdict::Missing)
}

/// The text report.
pub fn render(checks: &[Check]) -> String {
    let mut out = String::from("wprof doctor: can this host trace?\n");
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in checks {
        out.push_str(&format!(
            "  {:<7}  {:<width$}  {}\n",
            c.verdict.label(),
            c.name,
            c.detail
        ));
        if !c.fix.is_empty() {
            out.push_str(&format!("  {:<7}  {:<width$}  fix: {}\n", "", "", c.fix));
        }
    }
    out.push_str(if attach_works(checks) {
        "verdict: attach works here\n"
    } else {
        "verdict: attach cannot work here (see MISSING above)\n"
    });
    out
}

/// `wprof doctor [--json]`: prints the report; exit 0 when attach can work, 1 otherwise.
pub fn run(json: bool) -> anyhow::Result<i32> {
    let checks = run_checks();
    if json {
        let doc = serde_json::json!({
            "attach_works": attach_works(&checks),
            "checks": checks,
        });
        crate::stdout::print(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
    } else {
        crate::stdout::print(&render(&checks))?;
    }
    Ok(if attach_works(&checks) { 0 } else { 1 })
}

/// (major, minor) of a release string such as `6.1.0-35-amd64`.
fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn kernel_version() -> Check {
    let rel = release();
    match parse_release(&rel) {
        Some(v) if v >= (5, 15) => check(
            "kernel",
            Verdict::Ok,
            format!("{rel} (5.15+ needed: ring buffer, attach cookies on uprobes)"),
            "",
        ),
        Some(_) => check(
            "kernel",
            Verdict::Missing,
            format!("{rel}: older than 5.15 (uprobe attach cookies and the BPF ring buffer)"),
            "boot a 5.15 or newer kernel (Debian 12: 6.1)",
        ),
        None => check(
            "kernel",
            Verdict::Warn,
            format!("cannot read the release ({rel:?})"),
            "",
        ),
    }
}

fn uprobes() -> Check {
    if Path::new("/sys/bus/event_source/devices/uprobe").exists() {
        check(
            "uprobes",
            Verdict::Ok,
            "the uprobe perf event source is there (CONFIG_UPROBE_EVENTS)",
            "",
        )
    } else {
        check(
            "uprobes",
            Verdict::Missing,
            "no /sys/bus/event_source/devices/uprobe: this kernel was built without uprobes",
            "use a kernel with CONFIG_UPROBES=y and CONFIG_UPROBE_EVENTS=y (every Debian kernel has them)",
        )
    }
}

/// Capabilities, not the uid: wprof works as a normal user once granted them.
fn capabilities() -> Check {
    let missing = missing_capabilities();
    if missing.is_empty() {
        let detail = match crate::privilege::elevated_real_user() {
            Some(u) => format!(
                "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) are effective, acting for uid {}: \
                 only processes that user may ptrace, no setuid programs in record \
                 (docs/security.md)",
                u.uid
            ),
            None => "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) are effective".to_string(),
        };
        check("capabilities", Verdict::Ok, detail, "")
    } else {
        check(
            "capabilities",
            Verdict::Missing,
            format!("this process lacks {}", missing.join(" and ")),
            "sudo setcap cap_bpf,cap_perfmon+ep \"$(command -v wprof)\" (then any user can \
             trace the processes it may ptrace), or run as root",
        )
    }
}

fn skipped(name: &'static str) -> Check {
    check(
        name,
        Verdict::Info,
        "not checked: needs the capabilities and uprobes above",
        "",
    )
}

/// The definitive test: wprof's own BPF object through the verifier (its programs use the
/// attach cookie helper, the ring buffer and per-CPU maps).
fn bpf_programs(can_load: bool) -> Check {
    if !can_load {
        return skipped("bpf programs");
    }
    let opts = TracerOptions::MINIMAL;
    match Tracer::load(opts) {
        Ok(t) => check(
            "bpf programs",
            Verdict::Ok,
            format!(
                "wprof's programs pass the verifier and load ({})",
                if t.uses_multi_links() {
                    "uprobe_multi set"
                } else {
                    "per-probe set"
                }
            ),
            "",
        ),
        Err(e) => check(
            "bpf programs",
            Verdict::Missing,
            format!("{e:#}"),
            "check `dmesg`; lockdown=confidentiality or kernel.unprivileged_bpf_disabled can refuse BPF",
        ),
    }
}

/// Whether the unwind guard loads: guarded uretprobes (cheap and safe returns for C++ and Rust
/// code) need it; without it those phases use RET-site probes.
fn unwind_guard(can_load: bool) -> Check {
    const NAME: &str = "unwind guard";
    if !can_load {
        return skipped(NAME);
    }
    match Tracer::unwind_guard_loads() {
        Ok(GuardWrites::Kernel) => check(
            NAME,
            Verdict::Ok,
            "C++ and Rust phases return through guarded uretprobes (~1 trap a return)",
            "",
        ),
        Ok(GuardWrites::Wprof(why)) => check(
            NAME,
            Verdict::Ok,
            format!(
                "C++ and Rust phases return through guarded uretprobes (~1 trap a return); the \
                 kernel refuses the guard's own writes to the stacks ({why}), so wprof makes \
                 them while an unwinding thread waits (~0.1 ms an exception)"
            ),
            "",
        ),
        Err(e) => check(
            NAME,
            Verdict::Warn,
            format!(
                "C++ and Rust phases use RET-site returns (safe, but a single-stepped trap each, \
                 several µs a call): {e:#}"
            ),
            "a kernel without lockdown (lockdown=integrity forbids bpf_probe_write_user), and \
             CAP_SYS_ADMIN",
        ),
    }
}

fn ring_buffer(can_load: bool) -> Check {
    if !can_load {
        return skipped("ring buffer");
    }
    match aya::sys::is_map_supported(aya::maps::MapType::RingBuf) {
        Ok(true) => check("ring buffer", Verdict::Ok, "BPF_MAP_TYPE_RINGBUF", ""),
        Ok(false) => check(
            "ring buffer",
            Verdict::Missing,
            "BPF_MAP_TYPE_RINGBUF is not supported",
            "kernel 5.8 or newer",
        ),
        Err(e) => check(
            "ring buffer",
            Verdict::Warn,
            format!("probe failed: {e}"),
            "",
        ),
    }
}

fn uprobe_multi(can_load: bool) -> Check {
    if !can_load {
        return skipped("uprobe_multi");
    }
    let feature = aya::sys::UProbeMultiFeature::ProcessScopedPidFilter;
    match aya::sys::is_uprobe_multi_supported(feature) {
        Ok(true) => check(
            "uprobe_multi",
            Verdict::Ok,
            "one link per object and program; detaching costs one RCU grace period",
            "",
        ),
        Ok(false) | Err(_) => check(
            "uprobe_multi",
            Verdict::Warn,
            "not available (6.6+): one perf link per probe point; attach works, detaching \
             many points takes longer (~100 ms per point)",
            "a 6.6 or newer kernel for fast attach/detach of many phases",
        ),
    }
}

/// The x86 `uretprobe` syscall (6.11+) makes each uretprobe return cheaper than the int3 trap.
fn uretprobe_syscall() -> Check {
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let has = kallsyms
        .lines()
        .any(|l| l.ends_with(" __x64_sys_uretprobe") || l.ends_with(" __do_sys_uretprobe"));
    if has {
        check(
            "uretprobe syscall",
            Verdict::Ok,
            "uretprobe returns go through the uretprobe syscall (cheaper than a trap)",
            "",
        )
    } else {
        check(
            "uretprobe syscall",
            Verdict::Warn,
            "absent (6.11+) or hidden by kptr_restrict: uretprobe returns use a trap",
            "",
        )
    }
}

fn tracefs() -> Check {
    match crate::resolve::kernel::tracefs() {
        Some(p) => check(
            "tracefs",
            Verdict::Ok,
            format!("{} (kernel phases, --off-cpu, --follow-forks)", p.display()),
            "",
        ),
        None if crate::resolve::kernel::tracefs_mounted() => check(
            "tracefs",
            Verdict::Warn,
            "mounted but not readable by this user: kernel phases (syscall/tracepoint), \
             --off-cpu and --follow-forks cannot attach; uprobe phases still work",
            "run as root, or make /sys/kernel/tracing readable (mount -o remount,mode=755)",
        ),
        None => check(
            "tracefs",
            Verdict::Warn,
            "not mounted: kernel phases (syscall/tracepoint), --off-cpu and --follow-forks \
             cannot attach; uprobe phases still work",
            "mount -t tracefs nodev /sys/kernel/tracing",
        ),
    }
}

fn pmu() -> Check {
    if Path::new("/sys/bus/event_source/devices/cpu").exists()
        || Path::new("/sys/bus/event_source/devices/cpu_core").exists()
    {
        check(
            "cpu PMU",
            Verdict::Info,
            "hardware PMU present; --cpu-sample still uses the software cpu-clock",
            "",
        )
    } else {
        check(
            "cpu PMU",
            Verdict::Info,
            "software clock only (no hardware PMU, usual in VMs): --cpu-sample uses cpu-clock",
            "",
        )
    }
}

fn perf_event_paranoid() -> Check {
    let v = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    check(
        "perf_event_paranoid",
        Verdict::Info,
        format!(
            "{v} (with CAP_PERFMON any value works; without it, uprobes and sampling are refused)"
        ),
        "",
    )
}

fn btf() -> Check {
    let present = Path::new("/sys/kernel/btf/vmlinux").exists();
    check(
        "BTF",
        Verdict::Info,
        if present {
            "/sys/kernel/btf/vmlinux present (not needed by wprof)"
        } else {
            "no kernel BTF (not needed by wprof)"
        },
        "",
    )
}

fn kprobes() -> Check {
    let present = crate::resolve::kernel::tracefs()
        .is_some_and(|t| t.join("kprobe_events").exists())
        || Path::new("/sys/bus/event_source/devices/kprobe").exists();
    check(
        "kprobes",
        Verdict::Info,
        if present {
            "available (not used: wprof attaches uprobes and tracepoints)"
        } else {
            "not available (not needed: wprof attaches uprobes and tracepoints)"
        },
        "",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse() {
        assert_eq!(parse_release("6.1.0-35-amd64"), Some((6, 1)));
        assert_eq!(parse_release("6.12.43+deb12-cloud-amd64"), Some((6, 12)));
        assert_eq!(parse_release("5.4.0"), Some((5, 4)));
        assert_eq!(parse_release("x"), None);
    }

    #[test]
    fn a_missing_requirement_fails_the_verdict_and_shows_its_fix() {
        let checks = vec![
            check("kernel", Verdict::Ok, "6.18", ""),
            check("capabilities", Verdict::Missing, "no CAP_BPF", "setcap ..."),
            check("uprobe_multi", Verdict::Warn, "absent", "newer kernel"),
        ];
        assert!(!attach_works(&checks));
        let text = render(&checks);
        assert!(
            text.contains("  MISSING  capabilities  no CAP_BPF\n"),
            "{text}"
        );
        assert!(text.contains("fix: setcap ..."), "{text}");
        assert!(text.ends_with("verdict: attach cannot work here (see MISSING above)\n"));
        assert!(attach_works(&checks[2..]), "a WARN alone does not fail");
    }
}
