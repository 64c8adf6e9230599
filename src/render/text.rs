//! The text tree: what `attach`, `record` and `report` print.
//!
//! In: a [`Run`] and [`TextOptions`]. Out: one string — per root phase a box-drawn tree whose
//! first time column is the node's total divided by the root's calls (so sibling rows add up to
//! their parent), then the share of the parent, the node's own n, mean, p50 and p99, and the
//! estimated probe share, and with `--off-cpu` the on-CPU and off-CPU time per root call
//! (they add up to the first column); a `(self)` row under every node with children; rows for calls that
//! could not be timed; then the footer (see `footer.rs`). A run recorded with `--per-pid` shows
//! one tree per process instead, each headed by its pid and label; one recorded with
//! `--split-by PHASE` shows the tree twice, over the root calls that contained PHASE and over
//! the others, each headed by its share of the root calls. A merged run (`wprof merge`) is
//! headed by the runs it adds up (see `sources.rs`).

use std::collections::HashMap;

use crate::model::Run;
use crate::model::{PhaseTree, SplitTrees, TreeNode};

use super::footer;
use super::units::{calls, format_ns, format_ns_u64, format_share, per_root, ratio, singular};

/// How the text tree is drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct TextOptions {
    /// Use ANSI colors (bold roots, dim bookkeeping rows, red flags).
    pub color: bool,
    /// Probe share of a node's mean above which the node is flagged with `!` (0.10 = 10%).
    pub flag_probe_share: f64,
    /// Show the times as measured, probes' time included, even when the run has corrected
    /// ones (`report --raw`).
    pub raw: bool,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            color: false,
            flag_probe_share: 0.10,
            raw: false,
        }
    }
}

/// A node's figures as the tree shows them: corrected for the probes' time when the run has
/// corrected figures (and `--raw` is not asked for), else as measured.
struct Shown<'a> {
    total_ns: u64,
    self_ns: u64,
    hist: &'a crate::model::LatencyHistogram,
    /// The measured mean and the share of the measured total the probes made up, when the
    /// figures are corrected.
    raw: Option<(f64, f64)>,
}

impl<'a> Shown<'a> {
    fn of(node: &'a TreeNode, raw: bool) -> Shown<'a> {
        match &node.corrected {
            Some(c) if !raw => Shown {
                total_ns: c.total_ns,
                self_ns: c.self_ns,
                hist: &c.hist,
                raw: Some((node.mean_ns(), ratio(c.probe_ns, node.total_ns))),
            },
            _ => Shown {
                total_ns: node.total_ns,
                self_ns: node.self_ns,
                hist: &node.hist,
                raw: None,
            },
        }
    }

    fn mean_ns(&self, count: u64) -> f64 {
        if count == 0 {
            0.0
        } else {
            self.total_ns as f64 / count as f64
        }
    }
}

/// A node flagged because the probes make up too much of its measured time.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Flagged {
    /// Phase name.
    pub name: String,
    /// Estimated probe share of the phase's mean (largest over its tree nodes).
    pub share: f64,
}

/// Renders the whole run as text: the trees, then the footer.
pub fn render_tree(run: &Run, opts: &TextOptions) -> String {
    let pair: HashMap<u32, f64> = run.phases.iter().map(|p| (p.id, p.probe_pair_ns)).collect();
    let ctx = Ctx {
        pair,
        show_probe: run.phases.iter().any(|p| p.probe_pair_ns > 0.0),
        opts,
    };
    let mut rows = Vec::new();
    let mut flagged: Vec<Flagged> = Vec::new();
    // A run recorded with --per-pid shows one tree per process.
    if !run.processes.is_empty() {
        for p in &run.processes {
            let forked = match (p.parent, &p.parent_label) {
                (Some(q), Some(l)) => format!("  (forked by {q}: {l})"),
                (Some(q), None) => format!("  (forked by {q})"),
                _ => String::new(),
            };
            let host = p.host.as_ref().map_or(String::new(), |h| format!("{h} "));
            let mut head = vec![Row::Note {
                label: format!("── {host}pid {}: {}{forked}", p.pid, p.label),
                warn: false,
            }];
            for root in &p.tree.roots {
                root_rows(&ctx, root, &mut head, &mut flagged);
            }
            rows.push(head);
        }
    } else if let Some(split) = &run.split {
        split_rows(&ctx, run, split, &mut rows, &mut flagged);
    } else {
        for root in &run.tree.roots {
            let mut tree_rows = Vec::new();
            root_rows(&ctx, root, &mut tree_rows, &mut flagged);
            rows.push(tree_rows);
        }
    }

    let mut out = super::sources::header(run);
    if rows.is_empty() {
        out.push_str(&format!(
            "no phase call completed during the run ({} probe hits)\n",
            run.probe_cost.hits
        ));
    } else {
        let all = rows.iter().flatten();
        let width = all
            .clone()
            .filter(|r| !matches!(r, Row::Note { .. }))
            .map(|r| r.label().chars().count())
            .max()
            .unwrap_or(0);
        let n_width = all
            .filter_map(|r| match r {
                Row::Node { count, .. } => Some(count.to_string().len()),
                _ => None,
            })
            .max()
            .unwrap_or(1);
        for (i, tree) in rows.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            for row in tree {
                out.push_str(row.format(width, n_width, opts).trim_end());
                out.push('\n');
            }
        }
    }
    out.push('\n');
    footer::write_footer(run, opts, &flagged, &mut out);
    out
}

struct Ctx<'a> {
    /// Probe pair cost by phase id, ns.
    pair: HashMap<u32, f64>,
    /// False when no phase has a cost estimate (the probe column would be all zeros).
    show_probe: bool,
    opts: &'a TextOptions,
}

impl Ctx<'_> {
    fn pair_ns(&self, phase: u32) -> f64 {
        self.pair.get(&phase).copied().unwrap_or(0.0)
    }

    /// Σ over descendants of count × pair cost, ns.
    fn descendant_cost(&self, node: &TreeNode) -> f64 {
        node.children
            .iter()
            .map(|c| c.count as f64 * self.pair_ns(c.phase) + self.descendant_cost(c))
            .sum()
    }

    /// Estimated share of the node's median call that its own and its descendants' probes
    /// add: half of its own pair (the entry probe's work after the timestamp and the return
    /// probe's before it fall inside the span) plus every descendant call's whole pair. The
    /// median, not the mean, so that a few preempted calls on a busy host do not hide it.
    fn probe_share(&self, node: &TreeNode) -> Option<f64> {
        let typical = node.hist.value_at_quantile(0.5) as f64;
        if node.count == 0 || typical <= 0.0 {
            return None;
        }
        let per_call =
            0.5 * self.pair_ns(node.phase) + self.descendant_cost(node) / node.count as f64;
        Some(per_call / typical)
    }
}

enum Row {
    Node {
        label: String,
        is_root: bool,
        per_root: String,
        share: String,
        count: u64,
        /// mean, p50, p99 — absent when no call completed.
        stats: Option<[String; 3]>,
        probe: Option<f64>,
        /// The measured mean, when the shown times are corrected for the probes.
        raw_mean: Option<String>,
        /// On-CPU and off-CPU time per root call (runs with `--off-cpu`).
        on_off: Option<[String; 2]>,
        /// Units of a `unit` phase and its time per unit, e.g. `20000 rows  1.52 µs/row`;
        /// for a sampled phase, what the samples found.
        tail: Option<String>,
        /// A sampled phase (its count is unknown).
        sampled: bool,
    },
    SelfTime {
        label: String,
        per_root: String,
        share: String,
    },
    Note {
        label: String,
        warn: bool,
    },
}

impl Row {
    fn label(&self) -> &str {
        match self {
            Row::Node { label, .. } | Row::SelfTime { label, .. } | Row::Note { label, .. } => {
                label
            }
        }
    }

    fn format(&self, width: usize, n_width: usize, opts: &TextOptions) -> String {
        let pad = |label: &str| " ".repeat(width.saturating_sub(label.chars().count()));
        match self {
            Row::Node {
                label,
                is_root,
                per_root,
                share,
                count,
                stats,
                probe,
                raw_mean,
                on_off,
                tail,
                sampled,
            } => {
                let name = if *is_root {
                    paint(label, BOLD, opts.color)
                } else {
                    label.clone()
                };
                if *sampled {
                    // No count: sampling sees time, not calls.
                    return format!(
                        "{name}{}  {per_root:>8}  {share:>6}  n={:<n_width$}  {}",
                        pad(label),
                        "~",
                        tail.as_deref().unwrap_or("")
                    );
                }
                let mut s = format!(
                    "{name}{}  {per_root:>8}  {share:>6}  n={count:<n_width$}",
                    pad(label)
                );
                if let Some([mean, p50, p99]) = stats {
                    s.push_str(&format!("  mean {mean:>8}  p50 {p50:>8}  p99 {p99:>8}"));
                }
                if let Some([on, off]) = on_off {
                    s.push_str(&format!("  on-cpu {on:>8}  off-cpu {off:>8}"));
                }
                if let Some(p) = probe {
                    // "0%" would read as "no probes here".
                    let pct = if *p > 0.0 && *p < 0.005 {
                        "<1".to_string()
                    } else {
                        format!("{:.0}", p * 100.0)
                    };
                    let text = match raw_mean {
                        Some(m) => format!("raw {m:>8}  probe {pct:>3}%"),
                        None => format!("probe {pct:>3}%"),
                    };
                    if *p > opts.flag_probe_share {
                        s.push_str(&format!(
                            "  {}",
                            paint(&format!("{text} !"), RED, opts.color)
                        ));
                    } else {
                        s.push_str(&format!("  {text}"));
                    }
                }
                if let Some(u) = tail {
                    s.push_str(&format!("  {u}"));
                }
                s
            }
            Row::SelfTime {
                label,
                per_root,
                share,
            } => {
                format!(
                    "{}{}  {per_root:>8}  {share:>6}",
                    paint(label, DIM, opts.color),
                    pad(label)
                )
            }
            Row::Note { label, warn } => paint(label, if *warn { YELLOW } else { DIM }, opts.color),
        }
    }
}

const BOLD: &str = "1";
const DIM: &str = "2";
const RED: &str = "1;31";
const YELLOW: &str = "33";

fn paint(s: &str, code: &str, color: bool) -> String {
    if color {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

/// What goes under a node, in order: its children, `(self)`, then what could not be timed.
enum Under<'a> {
    Child(&'a TreeNode),
    SelfTime,
    Note(String, bool),
}

/// A run split by a phase (`--split-by`): each half under a heading that says how many root
/// calls it holds, then what is in neither half.
fn split_rows(
    ctx: &Ctx<'_>,
    run: &Run,
    split: &SplitTrees,
    rows: &mut Vec<Vec<Row>>,
    flagged: &mut Vec<Flagged>,
) {
    let roots_of = |t: &PhaseTree| t.roots.iter().map(|r| r.count).sum::<u64>();
    let total = roots_of(&split.with) + roots_of(&split.without);
    let note = |label: String, warn: bool| Row::Note { label, warn };
    for (tree, what) in [
        (&split.with, "contained"),
        (&split.without, "did not contain"),
    ] {
        let n = roots_of(tree);
        let share = if total == 0 {
            String::new()
        } else {
            format!(" ({:.1}%)", 100.0 * n as f64 / total as f64)
        };
        let mut group = vec![note(
            format!("── {n} of {total} root calls{share} {what} {}", split.phase),
            false,
        )];
        if tree.roots.is_empty() {
            group.push(note("(none)".to_string(), false));
        }
        for (i, root) in tree.roots.iter().enumerate() {
            if i > 0 {
                rows.push(std::mem::take(&mut group));
            }
            root_rows(ctx, root, &mut group, flagged);
        }
        rows.push(group);
    }
    let (mut lost, mut abandoned, mut open) = (0, 0, 0);
    for r in &run.tree.roots {
        r.walk(&mut Vec::new(), &mut |_, n| {
            lost += n.lost;
            abandoned += n.abandoned;
            open += n.open;
        });
    }
    let mut notes = Vec::new();
    if lost + abandoned + open > 0 {
        notes.push(note(
            format!(
                "(not split: {lost} lost, {abandoned} abandoned, {open} open at end — BPF \
                 counts them per node, not per root call; the merged tree in the JSON has them)"
            ),
            true,
        ));
    }
    if split.unattributed_spans > 0 {
        let oversized = match split.oversized_roots {
            0 => String::new(),
            n => format!(
                ", or it held more than {} calls ({n} root calls)",
                crate::model::MAX_HELD_SPANS
            ),
        };
        notes.push(note(
            format!(
                "(in neither half: {} whose root call did not complete in the run (its span \
                 lost, left without return, open at the end, or started during --skip){oversized})",
                calls(split.unattributed_spans)
            ),
            true,
        ));
    }
    if !notes.is_empty() {
        rows.push(notes);
    }
}

/// The rows of one root's tree.
fn root_rows(ctx: &Ctx<'_>, root: &TreeNode, rows: &mut Vec<Row>, flagged: &mut Vec<Flagged>) {
    let (label, child) = (String::new(), String::new());
    walk(ctx, root, root.count, None, label, child, rows, flagged);
}

#[allow(clippy::too_many_arguments)]
fn walk(
    ctx: &Ctx<'_>,
    node: &TreeNode,
    root_calls: u64,
    parent_total: Option<u64>,
    label_prefix: String,
    child_prefix: String,
    rows: &mut Vec<Row>,
    flagged: &mut Vec<Flagged>,
) {
    let shown = Shown::of(node, ctx.opts.raw);
    let probe = match shown.raw {
        _ if node.sampled.is_some() => None,
        // Corrected: the share of the measured time that was the probes'.
        Some((_, share)) => Some(share).filter(|s| s.is_finite()),
        None if ctx.show_probe => ctx.probe_share(node),
        None => None,
    };
    if let Some(p) = probe.filter(|p| *p > ctx.opts.flag_probe_share) {
        match flagged.iter_mut().find(|f| f.name == node.name) {
            Some(f) => f.share = f.share.max(p),
            None => flagged.push(Flagged {
                name: node.name.clone(),
                share: p,
            }),
        }
    }
    let stats = (node.count > 0).then(|| {
        [
            format_ns(shown.mean_ns(node.count)),
            format_ns_u64(shown.hist.value_at_quantile(0.5)),
            format_ns_u64(shown.hist.value_at_quantile(0.99)),
        ]
    });
    rows.push(Row::Node {
        label: format!("{label_prefix}{}", shown_name(node)),
        is_root: parent_total.is_none(),
        per_root: match node.sampled {
            Some(_) => format!("~{}", per_root(shown.total_ns, root_calls)),
            None => per_root(shown.total_ns, root_calls),
        },
        share: match parent_total {
            None => format_share(1.0),
            Some(p) => format_share(ratio(shown.total_ns, p)),
        },
        count: node.count,
        stats,
        probe,
        raw_mean: shown
            .raw
            .filter(|_| node.count > 0)
            .map(|(m, _)| format_ns(m)),
        on_off: node.off_cpu_ns.map(|off| {
            [
                per_root(node.total_ns.saturating_sub(off), root_calls),
                per_root(off, root_calls),
            ]
        }),
        tail: node
            .sampled
            .map(sampled_text)
            .or(node.units.as_ref().map(|u| {
                let per = if u.total == 0 {
                    "-".to_string()
                } else {
                    format_ns(shown.total_ns as f64 / u.total as f64)
                };
                format!("{} {}  {per}/{}", u.total, u.name, singular(&u.name))
            })),
        sampled: node.sampled.is_some(),
    });
    let (total_shown, self_shown) = (shown.total_ns, shown.self_ns);

    let mut under: Vec<Under<'_>> = node.children.iter().map(Under::Child).collect();
    if !node.children.is_empty() {
        under.push(Under::SelfTime);
    }
    if node.lost > 0 {
        under.push(Under::Note(
            format!("(lost {}: ring buffer full)", calls(node.lost)),
            true,
        ));
    }
    if node.abandoned > 0 {
        let text = format!("(abandoned {}: left without return)", calls(node.abandoned));
        under.push(Under::Note(text, true));
    }
    if node.open > 0 {
        under.push(Under::Note(format!("(open at end: {})", node.open), false));
    }
    let last = under.len().saturating_sub(1);
    for (i, u) in under.into_iter().enumerate() {
        let (branch, cont) = if i == last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        let label = format!("{child_prefix}{branch}");
        match u {
            Under::Child(c) => walk(
                ctx,
                c,
                root_calls,
                Some(total_shown),
                label,
                format!("{child_prefix}{cont}"),
                rows,
                flagged,
            ),
            Under::SelfTime => rows.push(Row::SelfTime {
                label: format!("{label}(self)"),
                per_root: per_root(self_shown, root_calls),
                share: format_share(ratio(self_shown, total_shown)),
            }),
            Under::Note(text, warn) => rows.push(Row::Note {
                label: format!("{label}{text}"),
                warn,
            }),
        }
    }
}

/// What the samples found for a sampled phase's row.
fn sampled_text(s: crate::model::SampledShare) -> String {
    format!(
        "sampled: {} of {} samples, {:.1}% of the parent's on-CPU time [{:.1}-{:.1}%]",
        s.samples,
        s.parent_samples,
        s.share() * 100.0,
        s.share_low * 100.0,
        s.share_high * 100.0
    )
}

/// Characters of a grouped node's string the tree shows (JSON has all of it).
const KEY_SHOWN: usize = 48;

/// A node's name in the tree: grouped nodes (`group_by`) with the start of their string,
/// sampled ones after a `~` (their times are estimates).
fn shown_name(node: &TreeNode) -> String {
    if node.sampled.is_some() {
        return format!("~{}", node.name);
    }
    match &node.key {
        Some(k) if k.chars().count() > KEY_SHOWN => {
            let cut: String = k.chars().take(KEY_SHOWN - 1).collect();
            crate::model::keyed_name(&node.name, &format!("{}…", cut.trim_end()))
        }
        _ => node.label().into_owned(),
    }
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
