//! Can this process trace? CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN), not "is it root".

use crate::error::WprofError;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process, from /proc/self/status.
fn effective_caps() -> Option<u64> {
    crate::privilege::Credentials::own().map(|c| c.cap_effective)
}

/// The capabilities wprof needs that this process lacks (empty when it has them, or when its
/// capability set cannot be read: the kernel then decides).
pub fn missing_capabilities() -> Vec<&'static str> {
    let Some(caps) = effective_caps() else {
        return Vec::new();
    };
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) {
        return Vec::new();
    }
    [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .iter()
        .filter(|(c, _)| !has(*c))
        .map(|(_, n)| *n)
        .collect()
}

/// Checks that wprof may load BPF programs and open uprobe perf events. The error names the
/// missing capabilities and how to grant them.
pub fn check_capabilities() -> Result<(), WprofError> {
    let missing = missing_capabilities();
    if missing.is_empty() {
        return Ok(());
    }
    Err(WprofError::Permission(format!(
        "wprof needs CAP_BPF and CAP_PERFMON to load probes (missing: {}); run it as root or \
         grant them once: sudo setcap cap_bpf,cap_perfmon+ep \"$(command -v wprof)\"",
        missing.join(", ")
    )))
}
