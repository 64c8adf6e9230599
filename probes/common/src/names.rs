//! The names userspace finds the BPF object's maps and programs by.
//!
//! On the BPF side a map's name is its static's name and a program's its function's
//! (`#[map]` and `#[uprobe]` take no constant), so these strings are tied to probes/ebpf by a
//! test in wprof's `attach` module instead: every name here must be in the built object, and
//! every program of the object here.

/// Maps userspace reads, writes or sizes.
pub mod map {
    /// The ring buffer of spans, node definitions and other records (sized at load).
    pub const EVENTS: &str = "EVENTS";
    /// Stacks of open phases per thread or goroutine.
    pub const STACKS: &str = "STACKS";
    /// Global counters, indexed by `counter`.
    pub const COUNTERS: &str = "COUNTERS";
    /// Counters per phase id.
    pub const PHASE_COUNTERS: &str = "PHASE_COUNTERS";
    /// Lost and abandoned calls per tree node.
    pub const NODE_COUNTERS: &str = "NODE_COUNTERS";
    /// The calibrated probe cost of each phase id.
    pub const PHASE_COSTS: &str = "PHASE_COSTS";
    /// Which string argument each `group_by` phase keys its calls by.
    pub const PHASE_KEYS: &str = "PHASE_KEYS";
    /// Settings, indexed by `config`.
    pub const CONFIG: &str = "CONFIG";
    /// Traced processes (tgid -> 1).
    pub const TRACED: &str = "TRACED";
    /// wprof's own threads (tid -> 1): a traced thread preempted for one of them waited for
    /// wprof.
    pub const OWN_THREADS: &str = "OWN_THREADS";
    /// Tracepoints that open or close a kernel phase, by event type id.
    pub const TP_PHASES: &str = "TP_PHASES";
    /// Syscall phases, by syscall number (`| SYS_EXIT_BIT` for exits).
    pub const SYS_PHASES: &str = "SYS_PHASES";
    /// User and kernel stacks of CPU samples and off-CPU records (sized at load).
    pub const STACK_TRACES: &str = "STACK_TRACES";
    /// In-kernel aggregation: per-node summaries.
    pub const NODE_SUMMARIES: &str = "NODE_SUMMARIES";
    /// In-kernel aggregation: histogram buckets (sized at load).
    pub const HIST_BUCKETS: &str = "HIST_BUCKETS";
    /// How each USDT start site reads its arguments.
    pub const USDT_SITES: &str = "USDT_SITES";
    /// The unwind guard's requests to wprof to write return slots (the kernel refusing).
    pub const GUARD_ASKS: &str = "GUARD_ASKS";
    /// wprof's answers to them, by thread.
    pub const GUARD_DONE: &str = "GUARD_DONE";
    /// Phases whose probes are coming off, by phase id (1: closing, as `config::CLOSING`).
    pub const CLOSING_PHASES: &str = "CLOSING_PHASES";

    /// Every map above.
    pub const ALL: [&str; 18] = [
        EVENTS,
        STACKS,
        COUNTERS,
        PHASE_COUNTERS,
        NODE_COUNTERS,
        PHASE_COSTS,
        PHASE_KEYS,
        CONFIG,
        TRACED,
        TP_PHASES,
        SYS_PHASES,
        STACK_TRACES,
        NODE_SUMMARIES,
        HIST_BUCKETS,
        USDT_SITES,
        GUARD_ASKS,
        GUARD_DONE,
        CLOSING_PHASES,
    ];
}

/// Programs userspace loads and attaches.
pub mod program {
    /// Entry of a function phase (one perf link per point).
    pub const ENTRY: &str = "wprof_entry";
    /// RET site of a function phase (one perf link per point).
    pub const RET_SITE: &str = "wprof_ret";
    /// Uretprobe of a function phase (one perf link per point).
    pub const URETPROBE: &str = "wprof_uret";
    /// [`ENTRY`] for uprobe_multi links.
    pub const MULTI_ENTRY: &str = "wprof_m_entry";
    /// [`RET_SITE`] for uprobe_multi links.
    pub const MULTI_RET_SITE: &str = "wprof_m_ret";
    /// [`URETPROBE`] for uprobe_multi links.
    pub const MULTI_URETPROBE: &str = "wprof_m_uret";
    /// The dynamic loader's `_dl_debug_state`: the loaded objects changed.
    pub const DL_STATE: &str = "wprof_dl_state";
    /// Enter or exit tracepoint of a kernel phase.
    pub const TRACEPOINT: &str = "wprof_tp";
    /// syscalls:sys_enter_* of a kernel phase.
    pub const SYS_ENTER: &str = "wprof_sys_enter";
    /// syscalls:sys_exit_* of a kernel phase.
    pub const SYS_EXIT: &str = "wprof_sys_exit";
    /// sched:sched_process_fork (`--follow-forks`).
    pub const FORK: &str = "wprof_fork";
    /// sched:sched_process_exit (`--follow-forks`).
    pub const EXIT: &str = "wprof_exit";
    /// sched:sched_switch (off-CPU time).
    pub const SCHED_SWITCH: &str = "wprof_sched_switch";
    /// The CPU sampling perf event.
    pub const CPU_SAMPLE: &str = "wprof_cpu_sample";
    /// A USDT start probe.
    pub const USDT_START: &str = "wprof_usdt_start";
    /// A USDT done probe.
    pub const USDT_DONE: &str = "wprof_usdt_done";
    /// The unwind guard at an unwinder's entry (one perf link per point).
    pub const UNWIND: &str = "wprof_unwind";
    /// The unwind guard at a catch (one perf link per point).
    pub const CATCH: &str = "wprof_catch";
    /// [`UNWIND`] for uprobe_multi links.
    pub const MULTI_UNWIND: &str = "wprof_m_unwind";
    /// [`CATCH`] for uprobe_multi links.
    pub const MULTI_CATCH: &str = "wprof_m_catch";
    /// [`UNWIND`] asking wprof to write the slots (the kernel refuses BPF's writes).
    pub const UNWIND_ASK: &str = "wprof_unwind_ask";
    /// [`CATCH`] asking wprof to write the slots.
    pub const CATCH_ASK: &str = "wprof_catch_ask";
    /// [`UNWIND_ASK`] for uprobe_multi links.
    pub const MULTI_UNWIND_ASK: &str = "wprof_m_unwind_ask";
    /// [`CATCH_ASK`] for uprobe_multi links.
    pub const MULTI_CATCH_ASK: &str = "wprof_m_catch_ask";

    /// Every program of the object.
    pub const ALL: [&str; 24] = [
        ENTRY,
        RET_SITE,
        URETPROBE,
        MULTI_ENTRY,
        MULTI_RET_SITE,
        MULTI_URETPROBE,
        DL_STATE,
        TRACEPOINT,
        SYS_ENTER,
        SYS_EXIT,
        FORK,
        EXIT,
        SCHED_SWITCH,
        CPU_SAMPLE,
        USDT_START,
        USDT_DONE,
        UNWIND,
        CATCH,
        MULTI_UNWIND,
        MULTI_CATCH,
        UNWIND_ASK,
        CATCH_ASK,
        MULTI_UNWIND_ASK,
        MULTI_CATCH_ASK,
    ];
}
