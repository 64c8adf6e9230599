//! The phase tree in the JSON: nodes with their histograms written as recorded buckets (and
//! recorded again on reading, so a reloaded tree's figures equal the original's), plus derived
//! figures (mean, percentiles) for readers without an HDR library.

use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::model::{
    new_histogram, Corrected, LatencyHistogram, PhaseTree, SampledShare, TreeNode, Units,
};

#[derive(Serialize, Deserialize)]
pub(super) struct TreeJ {
    roots: Vec<NodeJ>,
    orphan_spans: u64,
    events: u64,
}

impl From<&PhaseTree> for TreeJ {
    fn from(t: &PhaseTree) -> Self {
        TreeJ {
            roots: t.roots.iter().map(NodeJ::from).collect(),
            orphan_spans: t.orphan_spans,
            events: t.events,
        }
    }
}

impl TreeJ {
    pub(super) fn into_tree(self) -> Result<PhaseTree> {
        let mut roots = Vec::with_capacity(self.roots.len());
        for r in self.roots {
            roots.push(r.into_node(&mut Vec::new())?);
        }
        Ok(PhaseTree {
            roots,
            orphan_spans: self.orphan_spans,
            events: self.events,
        })
    }
}

#[derive(Serialize, Deserialize)]
pub(super) struct NodeJ {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    phase: u32,
    role: Option<String>,
    count: u64,
    total_ns: u64,
    self_ns: u64,
    #[serde(flatten)]
    derived: DerivedJ,
    lost: u64,
    abandoned: u64,
    open: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    off_cpu_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    preempted_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    units: Option<Units>,
    histogram: HistJ,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    corrected: Option<CorrectedJ>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sampled: Option<SampledJ>,
    children: Vec<NodeJ>,
}

/// What CPU sampling found for a sampled phase (docs/json.md, "sampled").
#[derive(Serialize, Deserialize)]
pub(super) struct SampledJ {
    samples: u64,
    parent_samples: u64,
    /// Derived (samples / parent_samples); ignored on reading.
    #[serde(default)]
    share: f64,
    share_low: f64,
    share_high: f64,
}

/// A node's calls with the probes' time taken out (docs/json.md, "corrected").
#[derive(Serialize, Deserialize)]
pub(super) struct CorrectedJ {
    total_ns: u64,
    self_ns: u64,
    probe_ns: u64,
    probe_hits: u64,
    error_ns: u64,
    /// Absent in runs written before it was kept.
    #[serde(default)]
    preempted_ns: u64,
    #[serde(default)]
    wprof_ns: u64,
    #[serde(flatten)]
    derived: DerivedJ,
    histogram: HistJ,
}

/// Figures derived from a count, a total and a histogram, for readers without an HDR
/// library; ignored on reading.
#[derive(Serialize, Deserialize, Default)]
pub(super) struct DerivedJ {
    #[serde(default)]
    mean_ns: f64,
    #[serde(default)]
    p50_ns: u64,
    #[serde(default)]
    p90_ns: u64,
    #[serde(default)]
    p99_ns: u64,
    #[serde(default)]
    max_ns: u64,
}

impl DerivedJ {
    fn of(count: u64, total_ns: u64, h: &LatencyHistogram) -> DerivedJ {
        DerivedJ {
            mean_ns: if count == 0 {
                0.0
            } else {
                total_ns as f64 / count as f64
            },
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
        }
    }
}

impl HistJ {
    fn of(h: &LatencyHistogram) -> HistJ {
        HistJ {
            unit: "ns".to_string(),
            significant_digits: h.sigfig(),
            buckets: h
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        }
    }
}

#[derive(Serialize, Deserialize)]
pub(super) struct HistJ {
    unit: String,
    significant_digits: u8,
    /// `[value_ns, count]`: value is the highest value equivalent to the bucket.
    buckets: Vec<(u64, u64)>,
}

impl From<&TreeNode> for NodeJ {
    fn from(n: &TreeNode) -> Self {
        let h = &n.hist;
        NodeJ {
            name: n.name.clone(),
            key: n.key.clone(),
            phase: n.phase,
            role: n.role.clone(),
            count: n.count,
            total_ns: n.total_ns,
            self_ns: n.self_ns,
            derived: DerivedJ::of(n.count, n.total_ns, h),
            lost: n.lost,
            abandoned: n.abandoned,
            open: n.open,
            off_cpu_ns: n.off_cpu_ns,
            preempted_ns: n.preempted_ns,
            units: n.units.clone(),
            histogram: HistJ::of(h),
            corrected: n.corrected.as_ref().map(|c| CorrectedJ {
                total_ns: c.total_ns,
                self_ns: c.self_ns,
                probe_ns: c.probe_ns,
                probe_hits: c.probe_hits,
                error_ns: c.error_ns,
                preempted_ns: c.preempted_ns,
                wprof_ns: c.wprof_ns,
                derived: DerivedJ::of(n.count, c.total_ns, &c.hist),
                histogram: HistJ::of(&c.hist),
            }),
            sampled: n.sampled.map(|s| SampledJ {
                samples: s.samples,
                parent_samples: s.parent_samples,
                share: s.share(),
                share_low: s.share_low,
                share_high: s.share_high,
            }),
            children: n.children.iter().map(NodeJ::from).collect(),
        }
    }
}

impl NodeJ {
    /// The tree node back; `path` (names from the root) locates errors.
    pub(super) fn into_node(self, path: &mut Vec<String>) -> Result<TreeNode> {
        path.push(self.name.clone());
        let hist = self
            .histogram
            .into_histogram()
            .with_context(|| format!("node {}", path.join(" > ")))?;
        let corrected = match self.corrected {
            Some(c) => Some(Corrected {
                total_ns: c.total_ns,
                self_ns: c.self_ns,
                probe_ns: c.probe_ns,
                probe_hits: c.probe_hits,
                error_ns: c.error_ns,
                preempted_ns: c.preempted_ns,
                wprof_ns: c.wprof_ns,
                hist: c
                    .histogram
                    .into_histogram()
                    .with_context(|| format!("corrected figures of node {}", path.join(" > ")))?,
            }),
            None => None,
        };
        let mut children = Vec::with_capacity(self.children.len());
        for c in self.children {
            children.push(c.into_node(path)?);
        }
        path.pop();
        Ok(TreeNode {
            phase: self.phase,
            name: self.name,
            key: self.key,
            role: self.role,
            count: self.count,
            total_ns: self.total_ns,
            self_ns: self.self_ns,
            hist,
            lost: self.lost,
            abandoned: self.abandoned,
            open: self.open,
            off_cpu_ns: self.off_cpu_ns,
            preempted_ns: self.preempted_ns,
            corrected,
            sampled: self.sampled.map(|s| SampledShare {
                samples: s.samples,
                parent_samples: s.parent_samples,
                share_low: s.share_low,
                share_high: s.share_high,
            }),
            units: self.units,
            children,
        })
    }
}

impl HistJ {
    pub(super) fn into_histogram(self) -> Result<LatencyHistogram> {
        if self.unit != "ns" {
            bail!(
                "histogram unit is {:?}; schema v1 histograms are in \"ns\"",
                self.unit
            );
        }
        // Same range as the histograms aggregate builds; only the precision comes from the file.
        let template = new_histogram();
        let mut h: LatencyHistogram =
            Histogram::new_with_bounds(template.low(), template.high(), self.significant_digits)
                .map_err(|e| {
                    anyhow!(
                        "histogram significant_digits {} is not usable: {e:?}",
                        self.significant_digits
                    )
                })?;
        for (value, count) in self.buckets {
            h.record_n(value, count).map_err(|_| {
                anyhow!("histogram bucket {value} ns is outside the histogram range (0 ns..1 h)")
            })?;
        }
        Ok(h)
    }
}
