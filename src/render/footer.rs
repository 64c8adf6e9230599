//! The footer under the text tree: how each phase was probed, what could not be measured and
//! what the probes cost.
//!
//! In: the [`Run`] and the nodes the tree flagged. Out: appended text — a column legend, the
//! `phases:` table, the counters line, a line per node with units (cost per unit, units/s), the
//! probe-cost line and the list of flagged phases.

use crate::model::profile::ReturnMode;
use crate::model::symbol::demangle;
use crate::model::{PhaseInfo, Run};

use super::text::{Flagged, TextOptions};
use super::units::format_ns;

/// One line per node with units (`unit` phases): what a unit cost its root call and the
/// throughput, e.g. `rows: copy_from/heap_multi_insert 3000 rows · copy_from 10.6 µs/row ·
/// 94.0 k rows/s inside copy_from · 2.3 k rows/s over the run`.
fn write_units(run: &Run, out: &mut String) {
    for root in &run.tree.roots {
        root.walk(&mut Vec::new(), &mut |path, node| {
            let Some(u) = &node.units else { return };
            if u.total == 0 || root.total_ns == 0 {
                return;
            }
            let one = super::units::singular(&u.name);
            let per_unit = root.total_ns as f64 / u.total as f64;
            let mut line = format!(
                "{}: {} {} {} · {} {}/{one} · {} {}/s inside {}",
                u.name,
                path.join("/"),
                u.total,
                u.name,
                root.name,
                format_ns(per_unit),
                format_rate(1e9 / per_unit),
                u.name,
                root.name
            );
            if run.provenance.duration_s > 0.0 {
                line.push_str(&format!(
                    " · {} {}/s over the run",
                    format_rate(u.total as f64 / run.provenance.duration_s),
                    u.name
                ));
            }
            out.push_str(&line);
            out.push('\n');
        });
    }
}

/// The calibration the run corrected with: per class its pair cost, the part inside a call,
/// and the error; only the classes the run's phases use.
fn write_calibration(run: &Run, c: &crate::model::Calibration, out: &mut String) {
    // A guarded phase returns through a uretprobe too, priced as a plain one.
    let uretprobe =
        |mode: &str| ReturnMode::from_name(mode).is_some_and(ReturnMode::uses_uretprobe);
    let used = |k: &crate::model::ClassCost| {
        let class = crate::model::class_name(k.entry);
        run.phases.iter().any(|p| {
            p.entry_cost == class && uretprobe(&p.return_mode) == k.uretprobe && p.entries > 0
        })
    };
    let start: Vec<String> = c
        .classes
        .iter()
        .filter(|k| used(k))
        .map(|k| {
            format!(
                "{} {} a call ({} inside it) ±{}",
                k.label(),
                format_ns(k.pair_ns),
                format_ns(k.own_ns),
                format_ns(k.error_ns)
            )
        })
        .collect();
    out.push_str(&format!(
        "  calibrated on this host ({} rounds × {} calls, {:.0} ms): {}\n",
        c.rounds,
        c.calls,
        c.elapsed_ms,
        if start.is_empty() {
            "no probed call".to_string()
        } else {
            start.join(" · ")
        }
    ));
    let again: Vec<String> = c
        .at_end
        .iter()
        .filter(|k| used(k))
        .map(|k| {
            let before = c
                .classes
                .iter()
                .find(|s| s.entry == k.entry && s.uretprobe == k.uretprobe)
                .map_or(k.pair_ns, |s| s.pair_ns);
            let moved = k.pair_ns - before;
            format!(
                "{} {} ({}{})",
                k.label(),
                format_ns(k.pair_ns),
                if moved < 0.0 { "−" } else { "+" },
                format_ns(moved.abs())
            )
        })
        .collect();
    if !again.is_empty() {
        out.push_str(&format!(
            "  again at the end of the run: {}; the errors cover the difference\n",
            again.join(" · ")
        ));
    } else if c.contended {
        out.push_str(&format!(
            "  host load {:.1} at the end of the run, above its CPU count: the stated errors are doubled\n",
            c.load_end
        ));
    }
    write_during(c, &used, out);
}

/// "  measured again during the run: 4 times, emulated+uretprobe 1.52-1.61 µs …": the range
/// of each used class's pair over the measurements made while the run went on.
fn write_during(
    c: &crate::model::Calibration,
    used: &dyn Fn(&crate::model::ClassCost) -> bool,
    out: &mut String,
) {
    if c.during.is_empty() {
        return;
    }
    let ranges: Vec<String> = (c.classes.iter().filter(|k| used(k)))
        .map(|k| {
            let pairs = (c.during.iter().flat_map(|d| d.classes.iter()))
                .filter(|d| d.entry == k.entry && d.uretprobe == k.uretprobe)
                .map(|d| d.pair_ns);
            let (lo, hi) = pairs.fold((k.pair_ns, k.pair_ns), |(lo, hi), p| (lo.min(p), hi.max(p)));
            format!("{} {}-{}", k.label(), format_ns(lo), format_ns(hi))
        })
        .collect();
    if !ranges.is_empty() {
        out.push_str(&format!(
            "  measured again during the run: {} times, {} a pair (with the one before it): \
             the calls after each were corrected with the lower median so far\n",
            c.during.len(),
            ranges.join(" · ")
        ));
    }
}

/// 94012.3 -> "94.0 k".
fn format_rate(per_s: f64) -> String {
    if per_s >= 1e6 {
        format!("{:.2} M", per_s / 1e6)
    } else if per_s >= 1e3 {
        format!("{:.1} k", per_s / 1e3)
    } else {
        format!("{per_s:.1}")
    }
}

/// Longest symbol shown in the phases table; longer ones end in `…`.
const SYMBOL_WIDTH: usize = 40;

/// Appends the footer to `out`.
pub(super) fn write_footer(run: &Run, opts: &TextOptions, flagged: &[Flagged], out: &mut String) {
    let corrected = !opts.raw && run.is_corrected();
    if !run.tree.roots.is_empty() && corrected {
        out.push_str(
            "columns: time per root call (rows add up to their parent) · share of the parent · \
             the phase's own calls: n, mean, p50, p99 — all corrected for the probes' time, call by \
             call · raw: the mean as measured · probe: share of the measured time that was the probes'\n",
        );
    } else if !run.tree.roots.is_empty() {
        out.push_str(
            "columns: time per root call (rows add up to their parent) · share of the parent · \
             the phase's own calls: n, mean, p50, p99 · probe: estimated probe share of the median call\n",
        );
    }
    write_phase_table(&run.phases, out);
    if let Some(live) = run.provenance.probes_live_fraction {
        out.push_str(&format!(
            "probes live {:.0}% of the run (--max-overhead: part of each second): the counts are \
             those of the live windows (about {:.1}× as many calls ran); times and shares are \
             exact within them\n",
            live * 100.0,
            1.0 / live.max(1e-9)
        ));
    }

    for c in &run.in_situ {
        out.push_str(&format!(
            "in-situ check: {}: {} calls with only its own probes live, {}; {} with every probe \
             live: its descendants' probes cost {} a call here (±{}), the calibration said {}: {}\n",
            c.path_label(),
            c.light_calls,
            format_ns(c.light_mean_ns),
            format_ns(c.full_mean_ns),
            format_ns(c.in_situ_ns),
            format_ns(c.error_ns),
            format_ns(c.calibrated_ns),
            if c.applied() {
                let x = c.excess_per_hit_ns;
                let (by, how) = if x >= 0.0 {
                    (x, "more")
                } else {
                    (-x, "less")
                };
                format!(
                    "the correction under it is scaled ×{:.2}; a hit cost {} {how} than its \
                     price, and its own entry's correction takes that too",
                    c.factor,
                    format_ns(by)
                )
            } else {
                "they agree within two standard errors, the correction stands".to_string()
            }
        ));
        if let Some(r) = c.children_fitted {
            out.push_str(&format!(
                "in-situ check: {}: children's corrected times under it added up to more than \
                 their parent leaves them (checks at two depths disagree: the program changed \
                 between their epochs); scaled ×{r:.2} to fit\n",
                c.path_label()
            ));
        }
    }

    let c = &run.counters;
    out.push_str(&format!(
        "events {} · lost spans {} · lost node defs {} · orphan spans {} · unmatched returns {} · \
         abandoned {} · open at end {} · overflow {}",
        c.events,
        c.lost_spans,
        c.lost_node_defs,
        c.orphan_spans,
        c.unmatched_returns,
        c.abandoned,
        c.open_at_end,
        c.overflow
    ));
    if c.unwind.unwinds > 0 {
        out.push_str(&format!(
            " · unwinds {} (returns restored {}, re-armed {}, foreign {})",
            c.unwind.unwinds, c.unwind.restored, c.unwind.rearmed, c.unwind.foreign
        ));
    }
    if c.no_stack > 0 {
        out.push_str(&format!(" · no stack {}", c.no_stack));
    }
    if run.provenance.aggregation == crate::model::Aggregation::Kernel {
        out.push_str(" · aggregated in the kernel (no per-call table)");
    }
    out.push('\n');
    if let Some(cpu) = &run.cpu {
        out.push_str(&format!(
            "cpu samples {} at {} Hz per CPU · lost {}\n",
            cpu.records,
            cpu.frequency_hz.unwrap_or(0),
            cpu.lost
        ));
    }
    if let Some(off) = &run.off_cpu {
        out.push_str(&format!(
            "off-cpu: {} switches, {} off the CPU · lost {}; \
             on-cpu/off-cpu columns: time per root call\n",
            off.records,
            format_ns(off.total() as f64),
            off.lost
        ));
    }
    write_preempted(run, out);

    write_units(run, out);

    let pc = &run.probe_cost;
    let traced: u64 = run.tree.roots.iter().map(|r| r.total_ns).sum();
    out.push_str(&format!(
        "probe cost ({}): {} hits ≈ {} added to the target",
        if pc.calibration.is_some() {
            "calibrated"
        } else if !run.provenance.sources.is_empty() {
            "per host"
        } else {
            "model"
        },
        pc.hits,
        format_ns(pc.added_ns)
    ));
    if traced > 0 {
        out.push_str(&format!(
            " ({:.1}% of the {} spent in root phases)",
            pc.added_ns / traced as f64 * 100.0,
            format_ns(traced as f64)
        ));
    }
    out.push('\n');
    match &pc.calibration {
        Some(c) => write_calibration(run, c, out),
        None if !pc.model.is_empty() => out.push_str(&format!("  model: {}\n", pc.model)),
        None => {}
    }
    if let Some(s) = &pc.in_situ {
        out.push_str(&format!(
            "  in situ: {:.1}% of the probed threads' CPU time in uprobe handling by {} CPU \
             samples ({})\n",
            s.share_pct,
            s.samples,
            if s.factor > 1.0 {
                format!(
                    "×{:.2} the calibration's price; --max-overhead counted that",
                    s.factor
                )
            } else {
                "within the calibration's price".to_string()
            }
        ));
    }
    if let Some(p) = &pc.progress {
        out.push_str(&format!(
            "  the program's pace: {:.0}% less work per CPU second with the probes live \
             ({} live, {} paused windows){}\n",
            p.slowdown_pct,
            p.live_windows,
            p.paused_windows,
            excess_phrase(p)
        ));
    }

    let limit = opts.flag_probe_share * 100.0;
    if flagged.is_empty() {
        out.push_str(&format!("flagged (probe share > {limit:.0}%): none\n"));
    } else {
        let list: Vec<String> = flagged
            .iter()
            .map(|f| format!("{} {:.0}%", f.name, f.share * 100.0))
            .collect();
        let why = if corrected {
            "corrected times rest on the calibration: see the JSON's error_ns"
        } else {
            "times inflated by the probes"
        };
        out.push_str(&format!(
            "flagged (probe share > {limit:.0}%, {why}): {}\n",
            list.join(", ")
        ));
        if corrected && !checked_in_the_run(run) {
            out.push_str(
                "  the calibration prices the traps on empty functions, not what they cost the \
                 code after them (caches, TLB): on short real phases that is more (db_bench's \
                 writes: ×1.4 the price). --in-situ measures it in the run\n",
            );
        }
    }
}

/// Whether the run measured what the probes cost in place (an in-situ check, or a duty cycle's
/// reading of the program's own pace), beyond the calibration's empty functions.
fn checked_in_the_run(run: &Run) -> bool {
    !run.in_situ.is_empty() || run.probe_cost.progress.is_some()
}

/// "preempted: ROOT X a call of its Y off the CPU, the probes' Z …" for the roots that were:
/// the part of their off-CPU time their threads were runnable, waiting for a CPU, and the part
/// of that the correction took out as the probes' doing (`aggregate::preempted`). Without
/// `--off-cpu` (preemptions followed alone) the off-CPU time is left out.
fn write_preempted(run: &Run, out: &mut String) {
    let roots: Vec<String> = (run.tree.roots.iter())
        .filter_map(|r| {
            let p = r.preempted_ns?;
            (p > 0 && r.count > 0).then(|| {
                let per = |ns: u64| format_ns(ns as f64 / r.count as f64);
                let theirs = r.corrected.as_ref().map_or(String::new(), |c| {
                    format!(
                        ", the probes' {} of it taken out ({} of that waiting for wprof's \
                         own threads)",
                        per(c.preempted_ns),
                        per(c.wprof_ns)
                    )
                });
                let of_off = r.off_cpu_ns.map_or(String::new(), |off| {
                    format!(" of its {} off the CPU", per(off))
                });
                format!("{} {} a call{of_off}{theirs}", r.label(), per(p))
            })
        })
        .collect();
    if roots.is_empty() {
        return;
    }
    let odds = (run.probe_cost.preemption_baseline.as_ref()).map_or(String::new(), odds_phrase);
    out.push_str(&format!(
        "preempted (runnable, waiting for a CPU): {}. A preemption is the probes' with the \
         chance their time is of the time on the CPU where it landed{odds} (docs: user guide, \
         Probe cost)\n",
        roots.join(", ")
    ));
}

/// ", and the program's own is kept at the untraced odds: …" (`wprof attach`: the threads'
/// wait for a CPU before it attached, `session::untraced_wait`).
fn odds_phrase(b: &crate::model::PreemptionBaseline) -> String {
    let traced = b
        .traced_rate()
        .map_or("unknown".to_string(), |r| format!("{:.1}%", r * 100.0));
    format!(
        ", and the program's own is kept at the untraced odds: its threads waited {:.1}% of \
         their time on the CPU before wprof attached, {traced} traced",
        b.untraced_rate() * 100.0
    )
}

/// "; each hit cost the code after it N beyond its price (per root) …", from the progress
/// reading's excess per hit.
fn excess_phrase(p: &crate::model::ProgressCheck) -> String {
    let roots: Vec<String> = p
        .excess_by_root
        .iter()
        .filter(|r| r.ns_per_hit > 0.0)
        .map(|r| format!("{} under {}", format_ns(r.ns_per_hit), r.root))
        .collect();
    match p.excess_ns_per_hit {
        Some(_) if !roots.is_empty() => format!(
            "; each hit cost the code after it {} beyond its price, taken out once per hit \
             inside a call",
            roots.join(", ")
        ),
        Some(_) => "; no hit cost more than its price".to_string(),
        None => String::new(),
    }
}

fn write_phase_table(phases: &[PhaseInfo], out: &mut String) {
    out.push_str("phases:\n");
    if phases.is_empty() {
        out.push_str("  (none)\n");
        return;
    }
    let header = [
        "name",
        "object",
        "symbol",
        "return",
        "entry",
        "exits",
        "entries/returns",
        "unmatched",
        "status",
    ];
    // Numbers are right-aligned; the last column (status) is free text and never padded.
    let right = [false, false, false, false, false, true, true, true, false];
    let mut table: Vec<[String; 9]> = vec![header.map(str::to_string)];
    for p in phases {
        table.push([
            p.name.clone(),
            dash(basename(&p.object)),
            dash(&with_offset(symbol_text(&p.symbols), p.entry_offset)),
            dash(&p.return_mode),
            dash(&p.entry_cost),
            if p.return_mode == "ret-sites" {
                p.exit_sites.to_string()
            } else {
                "-".into()
            },
            format!("{}/{}", p.entries, p.returns),
            p.unmatched_returns.to_string(),
            dash(&p.status),
        ]);
    }
    let mut widths = [0usize; 9];
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in &table {
        let mut line = String::from(" ");
        for (i, cell) in row.iter().enumerate() {
            let pad = " ".repeat(widths[i] - cell.chars().count());
            line.push(' ');
            if i == row.len() - 1 {
                line.push_str(cell);
            } else if right[i] {
                line.push_str(&format!("{pad}{cell} "));
            } else {
                line.push_str(&format!("{cell}{pad} "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `name+4` when the entry probe sits past the function's start (a leading `endbr64`).
fn with_offset(mut s: String, offset: u64) -> String {
    if offset > 0 && !s.is_empty() {
        s.push_str(&format!("+{offset}"));
    }
    s
}

/// The first symbol, demangled without parameters, truncated at the front (the function name
/// is at the end); `(+N)` when there are more.
fn symbol_text(symbols: &[String]) -> String {
    let Some(first) = symbols.first() else {
        return String::new();
    };
    let mut s = truncate_front(&demangle(first), SYMBOL_WIDTH);
    if symbols.len() > 1 {
        s.push_str(&format!(" (+{})", symbols.len() - 1));
    }
    s
}

fn truncate_front(s: &str, n: usize) -> String {
    let len = s.chars().count();
    if len <= n {
        s.to_string()
    } else {
        let t: String = s.chars().skip(len + 1 - n).collect();
        format!("…{t}")
    }
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_are_demangled_and_truncated() {
        assert_eq!(symbol_text(&[]), "");
        assert_eq!(
            symbol_text(&["_ZN2kv5Store11WriteRecordEPKcm".into()]),
            "kv::Store::WriteRecord"
        );
        let long = "a_very_long_c_function_name_that_goes_on_and_on_and_on".to_string();
        let s = symbol_text(&[long.clone(), long]);
        assert_eq!(s, "…unction_name_that_goes_on_and_on_and_on (+1)");
        let cxx = symbol_text(&[
            "_ZN2kv5codec10CompressorINS0_3Lz4EE8compressERKSt6vectorIhSaIhEE".into(),
        ]);
        assert_eq!(cxx, "…c::Compressor<kv::codec::Lz4>::compress");
    }

    #[test]
    fn basenames() {
        assert_eq!(
            basename("/usr/lib/x86_64-linux-gnu/libkv.so.1"),
            "libkv.so.1"
        );
        assert_eq!(basename("exe"), "exe");
    }
}
