# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_wprof_global_optspecs
    string join \n h/help V/version
end

function __fish_wprof_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_wprof_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_wprof_using_subcommand
    set -l cmd (__fish_wprof_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c wprof -n "__fish_wprof_needs_command" -s h -l help -d 'Print help'
complete -c wprof -n "__fish_wprof_needs_command" -s V -l version -d 'Print version'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "attach" -d 'Attach to running processes and print the phase tree when the run ends (Ctrl-C, SIGTERM, --duration, or the exit of the last traced process)'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "record" -d 'Start a command with the probes already live, trace it to its exit, print the tree. Exits with the command\'s status'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "probes" -d 'Dry run: show what each phase of a profile resolves to, and what its probes cost'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "targets" -d 'List the built-in attach profiles'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "report" -d 'Re-render a saved run (--json output)'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "compare" -d 'Compare two runs node by node: deltas, significance, thresholds (exit 3 on failure)'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "check" -d 'Test hypotheses against a run: SUPPORTED / REFUTED / INCONCLUSIVE (exit 3 if refuted)'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "merge" -d 'Merge runs of one profile from many hosts into one run (JSON on stdout): counts and histograms add, every host\'s provenance is kept; report, compare and check read it'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "export" -d 'Write a profile as a bpftrace script or as `perf probe` commands (same probe sites as wprof), for hosts where wprof cannot run or to compare with the peers'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "completions" -d 'Print a shell completion script (bash, zsh, fish, elvish, powershell)'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "man" -d 'Print the man page (wprof.1), or write every page (one per subcommand) into --dir'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "doctor" -d 'Check what this host can do (kernel, capabilities, BPF, uprobe_multi, tracefs...); exit 1 when attach cannot work here'
complete -c wprof -n "__fish_wprof_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wprof -n "__fish_wprof_using_subcommand attach" -s t -l target -d 'A built-in profile name (see `wprof targets`) or a path to a profile TOML' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -s p -l pid -d 'Process to trace (repeatable)' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l duration -d 'Stop after this long (e.g. 500ms, 30s, 2m)' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l return -d 'Force the return detection of every phase (default: each phase\'s own, `auto` picks RET-site probes for C++/Rust/Go and uretprobes for C)' -r -f -a "auto\t'Per phase: guarded uretprobes for C++/Rust (RET sites where the guard cannot attach), RET sites for Go, uretprobes for C'
ret-sites\t'A uprobe on every RET instruction: safe with exceptions and panics'
uretprobe\t'Kernel uretprobes: cheaper; an exception through the frame kills the target'
guarded\t'Kernel uretprobes plus the unwind guard: as cheap, and safe with exceptions and panics'"
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l ring-size -d 'Ring buffer size (e.g. 64K, 8M). Too small a buffer loses events: they are counted' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l max-calls -d 'Keep at most this many root calls in the per-call table (JSON, --events); further calls are counted and still aggregated into the tree' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l skip -d 'Leave out calls that started during the first DURATION (warm-up)' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l interval -d 'Append a snapshot of every node (JSON lines) to --snapshots each DURATION, so a long run can be watched and cut' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l snapshots -d 'Where --interval writes its JSON lines' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l cpu-sample -d 'Sample the traced threads\' stacks HZ times a second (software cpu-clock; user and kernel stacks, each prefixed by the phase open at that moment)' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l split-by -d 'Show the tree twice: over the root calls in which PHASE was called (at any depth) and over the others, each with its own counts, means and percentiles (e.g. `--split-by block_persist`: the writes that persisted a block apart from the rest). PHASE is a phase name of the profile' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l aggregate -d 'Where calls are aggregated: `event` sends every call to wprof (per-call CSV, traces, per-pid trees); `kernel` keeps per-node counts and log-linear histograms in BPF maps and reads only those (for paths with hundreds of thousands of calls a second); `auto` starts per event and switches to the kernel above 200,000 calls a second, or, with --max-overhead, as the budget\'s first step once the probes go over it. Default: `auto` with --max-overhead, `event` otherwise' -r -f -a "event\t'Every completed call is sent to wprof through the ring buffer'
kernel\t'BPF keeps per-node summaries and histograms; wprof reads them'
auto\t'Per event, switching to the kernel once the traced calls pass 200,000 a second (never when an option that needs every call is given)'"
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l max-overhead -d 'Keep the probes\' share of the CPU time of the threads that run probed code under PCT (e.g. 5%), checked after 0.1 s, then every 0.25 s while over: with `--aggregate auto` (its default) the calls are first aggregated in the kernel (wprof stops reading each one; not when an option needs every call), then the costliest hot leaves move to CPU sampling (roots stay exact), then what stays probed is live only part of each 2 s cycle, and only when even 2% of the time is too much does wprof detach (cleanly, outputs written, exit 5). Until a cycle has read the program\'s own slowdown, the probes\' figure is held to half of PCT (a trap also slows the code after it)' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l serve -d 'While tracing, serve per-phase latency on ADDR (e.g. 127.0.0.1:9464) as Prometheus metrics at /metrics: native histograms over the protobuf format (text for other clients), one series per phase path, with `--per-pid` one per process (a PostgreSQL backend\'s is its server\'s DATADIR:PORT). Runs until Ctrl-C/SIGTERM without --duration (docs/fleet.md)' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l serve-max-series -d 'With --serve --per-pid: keep about N series at most; processes that would add more are served as process="other" (said once on stderr)' -r
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l out -d 'Write every output into this directory (run.json, tree.txt, phases.folded, phases.svg, calls.csv, trace.json; cpu.folded/cpu.svg and offcpu.folded/offcpu.svg when sampled)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l json -d 'Write the run as JSON (schema v1, docs/json.md)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l folded -d 'Write folded stacks of self time, in ns (flamegraph.pl / inferno format)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l flamegraph -d 'Write a phase flamegraph (SVG) of wall time by phase path' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l events -d 'Write one CSV row per root call: start, thread, total and each phase\'s time inside it' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l trace -d 'Write a Chrome/Perfetto trace (JSON) of the recorded spans' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l pprof -d 'Write the phase tree as a gzipped pprof profile (wall ns and calls per phase), for Pyroscope, Parca or `go tool pprof`' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l cpu-folded -d 'Write the CPU samples as folded stacks (phase path, then user and kernel frames)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l cpu-flamegraph -d 'Write the CPU flamegraph (SVG) of the samples, each stack under its phase' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l cpu-pprof -d 'Write the CPU samples by phase as a gzipped pprof profile (samples and CPU ns)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l off-cpu-folded -d 'Write off-CPU time as folded stacks, in ns (phase path, then where the thread blocked)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l off-cpu-flamegraph -d 'Write the off-CPU flamegraph (SVG)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l all-matches -d 'Take every function a phase\'s pattern matches, for every phase (as `all_matches = true` on each): without it a pattern that matches several functions is an error listing them'
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l follow-forks -d 'Also trace every process the traced ones fork from now on (e.g. the backends of a PostgreSQL postmaster), from their first instruction. The probes then sit on the probed objects for every process that maps them, and BPF drops the untraced ones: such a process pays one probe hit per call of a probed function (docs/profiles.md)'
complete -c wprof -n "__fish_wprof_using_subcommand attach" -s q -l quiet -d 'Do not print the tree on stdout (outputs still written)'
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l off-cpu -d 'Track the time traced threads spend off the CPU, per phase, and where they block (sched:sched_switch)'
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l per-pid -d 'Also keep one tree per process (JSON `processes`) and print those instead of the merged tree'
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l in-situ -d 'Check the probe correction where the probes run: every 2 s, for 0.25 s, the probes are live only down to one level of the tree (one root alone every other time, the deeper levels in turn between); each parent\'s calls then, against those made with every probe live, give what its descendants\' probes really cost, and the correction is scaled to it (footer and JSON `in_situ`). Per-event aggregation only; not with --max-overhead'
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l no-calibrate -d 'Skip measuring the probes\' cost on this host before attaching: times are then not corrected, and the cost figures are the fixed estimates'
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l calibrate-once -d 'Measure the probes\' cost only before the run (and again at its end), not every second during it. By default the calibration target stays up and is timed again each second (~15 ms of CPU), and the calls after each measurement are corrected with the lower median of the last minute\'s: the price follows the host when its traps slow down for a while. Not with --max-overhead or in-kernel aggregation'
complete -c wprof -n "__fish_wprof_using_subcommand attach" -l keep-preemptions -d 'Keep every preemption in the corrected times. By default a corrected run follows the traced threads off the CPU (sched:sched_switch, no stacks: a few map operations a context switch, host-wide) to take out the preemptions the probes\' own time brought on; --off-cpu does that too. In-kernel aggregation keeps them anyway'
complete -c wprof -n "__fish_wprof_using_subcommand attach" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wprof -n "__fish_wprof_using_subcommand record" -s t -l target -d 'A built-in profile name (see `wprof targets`) or a path to a profile TOML' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l duration -d 'Stop after this long (e.g. 500ms, 30s, 2m)' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l return -d 'Force the return detection of every phase (default: each phase\'s own, `auto` picks RET-site probes for C++/Rust/Go and uretprobes for C)' -r -f -a "auto\t'Per phase: guarded uretprobes for C++/Rust (RET sites where the guard cannot attach), RET sites for Go, uretprobes for C'
ret-sites\t'A uprobe on every RET instruction: safe with exceptions and panics'
uretprobe\t'Kernel uretprobes: cheaper; an exception through the frame kills the target'
guarded\t'Kernel uretprobes plus the unwind guard: as cheap, and safe with exceptions and panics'"
complete -c wprof -n "__fish_wprof_using_subcommand record" -l ring-size -d 'Ring buffer size (e.g. 64K, 8M). Too small a buffer loses events: they are counted' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l max-calls -d 'Keep at most this many root calls in the per-call table (JSON, --events); further calls are counted and still aggregated into the tree' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l skip -d 'Leave out calls that started during the first DURATION (warm-up)' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l interval -d 'Append a snapshot of every node (JSON lines) to --snapshots each DURATION, so a long run can be watched and cut' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l snapshots -d 'Where --interval writes its JSON lines' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l cpu-sample -d 'Sample the traced threads\' stacks HZ times a second (software cpu-clock; user and kernel stacks, each prefixed by the phase open at that moment)' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l split-by -d 'Show the tree twice: over the root calls in which PHASE was called (at any depth) and over the others, each with its own counts, means and percentiles (e.g. `--split-by block_persist`: the writes that persisted a block apart from the rest). PHASE is a phase name of the profile' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l aggregate -d 'Where calls are aggregated: `event` sends every call to wprof (per-call CSV, traces, per-pid trees); `kernel` keeps per-node counts and log-linear histograms in BPF maps and reads only those (for paths with hundreds of thousands of calls a second); `auto` starts per event and switches to the kernel above 200,000 calls a second, or, with --max-overhead, as the budget\'s first step once the probes go over it. Default: `auto` with --max-overhead, `event` otherwise' -r -f -a "event\t'Every completed call is sent to wprof through the ring buffer'
kernel\t'BPF keeps per-node summaries and histograms; wprof reads them'
auto\t'Per event, switching to the kernel once the traced calls pass 200,000 a second (never when an option that needs every call is given)'"
complete -c wprof -n "__fish_wprof_using_subcommand record" -l max-overhead -d 'Keep the probes\' share of the CPU time of the threads that run probed code under PCT (e.g. 5%), checked after 0.1 s, then every 0.25 s while over: with `--aggregate auto` (its default) the calls are first aggregated in the kernel (wprof stops reading each one; not when an option needs every call), then the costliest hot leaves move to CPU sampling (roots stay exact), then what stays probed is live only part of each 2 s cycle, and only when even 2% of the time is too much does wprof detach (cleanly, outputs written, exit 5). Until a cycle has read the program\'s own slowdown, the probes\' figure is held to half of PCT (a trap also slows the code after it)' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l serve -d 'While tracing, serve per-phase latency on ADDR (e.g. 127.0.0.1:9464) as Prometheus metrics at /metrics: native histograms over the protobuf format (text for other clients), one series per phase path, with `--per-pid` one per process (a PostgreSQL backend\'s is its server\'s DATADIR:PORT). Runs until Ctrl-C/SIGTERM without --duration (docs/fleet.md)' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l serve-max-series -d 'With --serve --per-pid: keep about N series at most; processes that would add more are served as process="other" (said once on stderr)' -r
complete -c wprof -n "__fish_wprof_using_subcommand record" -l out -d 'Write every output into this directory (run.json, tree.txt, phases.folded, phases.svg, calls.csv, trace.json; cpu.folded/cpu.svg and offcpu.folded/offcpu.svg when sampled)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l json -d 'Write the run as JSON (schema v1, docs/json.md)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l folded -d 'Write folded stacks of self time, in ns (flamegraph.pl / inferno format)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l flamegraph -d 'Write a phase flamegraph (SVG) of wall time by phase path' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l events -d 'Write one CSV row per root call: start, thread, total and each phase\'s time inside it' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l trace -d 'Write a Chrome/Perfetto trace (JSON) of the recorded spans' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l pprof -d 'Write the phase tree as a gzipped pprof profile (wall ns and calls per phase), for Pyroscope, Parca or `go tool pprof`' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l cpu-folded -d 'Write the CPU samples as folded stacks (phase path, then user and kernel frames)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l cpu-flamegraph -d 'Write the CPU flamegraph (SVG) of the samples, each stack under its phase' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l cpu-pprof -d 'Write the CPU samples by phase as a gzipped pprof profile (samples and CPU ns)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l off-cpu-folded -d 'Write off-CPU time as folded stacks, in ns (phase path, then where the thread blocked)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l off-cpu-flamegraph -d 'Write the off-CPU flamegraph (SVG)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand record" -l all-matches -d 'Take every function a phase\'s pattern matches, for every phase (as `all_matches = true` on each): without it a pattern that matches several functions is an error listing them'
complete -c wprof -n "__fish_wprof_using_subcommand record" -s q -l quiet -d 'Do not print the tree on stdout (outputs still written)'
complete -c wprof -n "__fish_wprof_using_subcommand record" -l off-cpu -d 'Track the time traced threads spend off the CPU, per phase, and where they block (sched:sched_switch)'
complete -c wprof -n "__fish_wprof_using_subcommand record" -l per-pid -d 'Also keep one tree per process (JSON `processes`) and print those instead of the merged tree'
complete -c wprof -n "__fish_wprof_using_subcommand record" -l in-situ -d 'Check the probe correction where the probes run: every 2 s, for 0.25 s, the probes are live only down to one level of the tree (one root alone every other time, the deeper levels in turn between); each parent\'s calls then, against those made with every probe live, give what its descendants\' probes really cost, and the correction is scaled to it (footer and JSON `in_situ`). Per-event aggregation only; not with --max-overhead'
complete -c wprof -n "__fish_wprof_using_subcommand record" -l no-calibrate -d 'Skip measuring the probes\' cost on this host before attaching: times are then not corrected, and the cost figures are the fixed estimates'
complete -c wprof -n "__fish_wprof_using_subcommand record" -l calibrate-once -d 'Measure the probes\' cost only before the run (and again at its end), not every second during it. By default the calibration target stays up and is timed again each second (~15 ms of CPU), and the calls after each measurement are corrected with the lower median of the last minute\'s: the price follows the host when its traps slow down for a while. Not with --max-overhead or in-kernel aggregation'
complete -c wprof -n "__fish_wprof_using_subcommand record" -l keep-preemptions -d 'Keep every preemption in the corrected times. By default a corrected run follows the traced threads off the CPU (sched:sched_switch, no stacks: a few map operations a context switch, host-wide) to take out the preemptions the probes\' own time brought on; --off-cpu does that too. In-kernel aggregation keeps them anyway'
complete -c wprof -n "__fish_wprof_using_subcommand record" -l as-root -d 'Run the command as root even when wprof was started through sudo. Without it, wprof run as root with SUDO_UID and SUDO_GID set runs the command as that user and group, with the user\'s supplementary groups, as the command would have run without sudo (docs/security.md)'
complete -c wprof -n "__fish_wprof_using_subcommand record" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wprof -n "__fish_wprof_using_subcommand probes" -s t -l target -d 'A built-in profile name (see `wprof targets`) or a path to a profile TOML' -r
complete -c wprof -n "__fish_wprof_using_subcommand probes" -s p -l pid -d 'Resolve against a running process' -r
complete -c wprof -n "__fish_wprof_using_subcommand probes" -l binary -d 'Resolve against a binary on disk (the profile\'s "exe")' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand probes" -l return -d 'Force the return detection of every phase (as for attach)' -r -f -a "auto\t'Per phase: guarded uretprobes for C++/Rust (RET sites where the guard cannot attach), RET sites for Go, uretprobes for C'
ret-sites\t'A uprobe on every RET instruction: safe with exceptions and panics'
uretprobe\t'Kernel uretprobes: cheaper; an exception through the frame kills the target'
guarded\t'Kernel uretprobes plus the unwind guard: as cheap, and safe with exceptions and panics'"
complete -c wprof -n "__fish_wprof_using_subcommand probes" -l estimate -d 'Attach the probes to --pid for SECS seconds and say what they cost it, per phase, and what --max-overhead would do (the phases it would move to sampling)' -r
complete -c wprof -n "__fish_wprof_using_subcommand probes" -l max-overhead -d 'The budget --estimate plans for (default 5%)' -r
complete -c wprof -n "__fish_wprof_using_subcommand probes" -l all-matches -d 'Take every function a phase\'s pattern matches, for every phase (as `all_matches = true` on each): without it a pattern that matches several functions is an error listing them'
complete -c wprof -n "__fish_wprof_using_subcommand probes" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wprof -n "__fish_wprof_using_subcommand targets" -s h -l help -d 'Print help'
complete -c wprof -n "__fish_wprof_using_subcommand report" -l format -d 'Output format' -r -f -a "tree\t'The text tree'
json\t'The JSON run (schema v1)'
folded\t'Folded stacks of self time (ns)'
svg\t'A phase flamegraph'
csv\t'One CSV row per root call'
trace\t'Chrome/Perfetto trace JSON'
cpu-folded\t'CPU samples as folded stacks (runs recorded with --cpu-sample)'
cpu-svg\t'The CPU flamegraph'
offcpu-folded\t'Off-CPU time as folded stacks (runs recorded with --off-cpu)'
offcpu-svg\t'The off-CPU flamegraph'
pprof\t'The phase tree as a gzipped pprof profile (wall ns and calls), for Pyroscope, Parca and `go tool pprof`'
cpu-pprof\t'The CPU samples by phase as a gzipped pprof profile (runs recorded with --cpu-sample)'"
complete -c wprof -n "__fish_wprof_using_subcommand report" -s o -l output -d 'Write to this file instead of stdout' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand report" -l tail -d 'Split root calls at this percentile (e.g. p95) and show, per phase, where the slow calls\' extra time went' -r
complete -c wprof -n "__fish_wprof_using_subcommand report" -l first -d 'Show the first N root calls (cold caches, plan building) apart from the rest' -r
complete -c wprof -n "__fish_wprof_using_subcommand report" -l split-by -d 'Require the tree split by PHASE (runs recorded with --split-by PHASE show it anyway): exit 2 when the run was not split by PHASE. A run holds the halves only for the phase it was recorded with' -r
complete -c wprof -n "__fish_wprof_using_subcommand report" -l per-pid -d 'Require per-process trees (runs recorded with --per-pid show them anyway): exit 2 when the run has none'
complete -c wprof -n "__fish_wprof_using_subcommand report" -l raw -d 'Show the times as measured, the probes\' own time included, instead of corrected'
complete -c wprof -n "__fish_wprof_using_subcommand report" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wprof -n "__fish_wprof_using_subcommand compare" -l by -d 'Align nodes by phase path (same profile) or by role path (different profiles)' -r -f -a "phase\t'By the path of phase names'
role\t'By the path of roles (phases without a role keep their name)'"
complete -c wprof -n "__fish_wprof_using_subcommand compare" -l min-effect -d 'Smallest relative change reported as a difference, e.g. 5% (significance alone is not enough: with 10^5 calls everything is significant)' -r
complete -c wprof -n "__fish_wprof_using_subcommand compare" -l fail-if -d 'Fail (exit 3) when a threshold is crossed, e.g. \'total.p99 > +10%\' or \'write_record/wal_append.mean > +5%\' (repeatable)' -r
complete -c wprof -n "__fish_wprof_using_subcommand compare" -l tail -d 'Split the root calls of both runs at this percentile, as `report --tail`' -r
complete -c wprof -n "__fish_wprof_using_subcommand compare" -l json -d 'Also write the comparison as JSON' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand compare" -l folded-diff -d 'Also write a differential folded file (base and new self time per stack)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand compare" -l flamegraph -d 'Also write a differential flamegraph SVG: widths are the new run\'s time per root call, colors the change of each frame\'s inclusive time (red grew, blue shrank)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand compare" -l cpu-flamegraph -d 'Also write a differential CPU flamegraph (both runs recorded with --cpu-sample): CPU time per root call by phase and stack' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand compare" -l off-cpu-flamegraph -d 'Also write a differential off-CPU flamegraph (both runs recorded with --off-cpu)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand compare" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wprof -n "__fish_wprof_using_subcommand check" -l hypotheses -d 'The hypothesis file (TOML, see docs/hypotheses.md)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand check" -l json -d 'Also write the verdicts as JSON (for CI annotations)' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand check" -l min-calls -d 'Fewer root calls than this make a verdict INCONCLUSIVE' -r
complete -c wprof -n "__fish_wprof_using_subcommand check" -l confidence -d 'Confidence level of the intervals' -r
complete -c wprof -n "__fish_wprof_using_subcommand check" -s h -l help -d 'Print help'
complete -c wprof -n "__fish_wprof_using_subcommand merge" -s o -l output -d 'Write to this file instead of stdout' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand merge" -s h -l help -d 'Print help'
complete -c wprof -n "__fish_wprof_using_subcommand export" -s t -l target -d 'A built-in profile name (see `wprof targets`) or a path to a profile TOML' -r
complete -c wprof -n "__fish_wprof_using_subcommand export" -s p -l pid -d 'Resolve against a running process' -r
complete -c wprof -n "__fish_wprof_using_subcommand export" -l binary -d 'Resolve against a binary on disk (the profile\'s "exe")' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand export" -l return -d 'Force the return detection of every phase (as for attach)' -r -f -a "auto\t'Per phase: guarded uretprobes for C++/Rust (RET sites where the guard cannot attach), RET sites for Go, uretprobes for C'
ret-sites\t'A uprobe on every RET instruction: safe with exceptions and panics'
uretprobe\t'Kernel uretprobes: cheaper; an exception through the frame kills the target'
guarded\t'Kernel uretprobes plus the unwind guard: as cheap, and safe with exceptions and panics'"
complete -c wprof -n "__fish_wprof_using_subcommand export" -s o -l output -d 'Write to this file instead of stdout' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand export" -l all-matches -d 'Take every function a phase\'s pattern matches, for every phase (as `all_matches = true` on each): without it a pattern that matches several functions is an error listing them'
complete -c wprof -n "__fish_wprof_using_subcommand export" -l bpftrace -d 'Write a bpftrace script (run it as `bpftrace FILE PID`)'
complete -c wprof -n "__fish_wprof_using_subcommand export" -l perf-probe -d 'Write a shell script of `perf probe` commands (`sh FILE add`, then perf record -e \'wprof:*\')'
complete -c wprof -n "__fish_wprof_using_subcommand export" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c wprof -n "__fish_wprof_using_subcommand completions" -s h -l help -d 'Print help'
complete -c wprof -n "__fish_wprof_using_subcommand man" -l dir -d 'Write wprof.1 and wprof-SUBCOMMAND.1 here' -r -F
complete -c wprof -n "__fish_wprof_using_subcommand man" -s h -l help -d 'Print help'
complete -c wprof -n "__fish_wprof_using_subcommand doctor" -l json -d 'Print the checks as JSON (`attach_works` and one object per check)'
complete -c wprof -n "__fish_wprof_using_subcommand doctor" -s h -l help -d 'Print help'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "attach" -d 'Attach to running processes and print the phase tree when the run ends (Ctrl-C, SIGTERM, --duration, or the exit of the last traced process)'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "record" -d 'Start a command with the probes already live, trace it to its exit, print the tree. Exits with the command\'s status'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "probes" -d 'Dry run: show what each phase of a profile resolves to, and what its probes cost'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "targets" -d 'List the built-in attach profiles'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "report" -d 'Re-render a saved run (--json output)'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "compare" -d 'Compare two runs node by node: deltas, significance, thresholds (exit 3 on failure)'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "check" -d 'Test hypotheses against a run: SUPPORTED / REFUTED / INCONCLUSIVE (exit 3 if refuted)'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "merge" -d 'Merge runs of one profile from many hosts into one run (JSON on stdout): counts and histograms add, every host\'s provenance is kept; report, compare and check read it'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "export" -d 'Write a profile as a bpftrace script or as `perf probe` commands (same probe sites as wprof), for hosts where wprof cannot run or to compare with the peers'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "completions" -d 'Print a shell completion script (bash, zsh, fish, elvish, powershell)'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "man" -d 'Print the man page (wprof.1), or write every page (one per subcommand) into --dir'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "doctor" -d 'Check what this host can do (kernel, capabilities, BPF, uprobe_multi, tracefs...); exit 1 when attach cannot work here'
complete -c wprof -n "__fish_wprof_using_subcommand help; and not __fish_seen_subcommand_from attach record probes targets report compare check merge export completions man doctor help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
