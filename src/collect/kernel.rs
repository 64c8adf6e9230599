//! In-kernel aggregation (`--aggregate kernel`): the BPF maps that replace the spans.
//!
//! In: the tracer's `NODE_SUMMARIES` (per node and CPU: count, total, self, off-CPU, argument
//! sum and the corrected figures) and `HIST_BUCKETS` (per node, bucket and raw/corrected flag:
//! calls, shared by the CPUs). Out: [`KernelSummaries`], every CPU added up, for
//! [`crate::aggregate::Aggregator::add_kernel_summaries`]. Read once, after the detach.

use anyhow::{Context, Result};
use wprof_common::{counter, HistKey, NodeSummary, MAX_HIST_BUCKETS, MAX_SUMMARY_NODES};

use super::EndState;
use crate::aggregate::Aggregator;
use crate::attach::Tracer;
use crate::model::Aggregation;

/// What BPF summed over a run.
#[derive(Debug, Clone, Default)]
pub struct KernelSummaries {
    /// Per node hash, its summary.
    pub nodes: Vec<(u64, NodeSummary)>,
    /// Histogram buckets: key and calls (non-zero).
    pub buckets: Vec<(HistKey, u64)>,
}

/// Reads both maps. Call after [`Tracer::detach`], so no call is half added.
pub fn read_kernel_summaries(tracer: &mut Tracer) -> Result<KernelSummaries> {
    let mut out = KernelSummaries::default();
    let nodes = tracer.node_summaries()?;
    for item in nodes.iter() {
        let (node, per_cpu) = item.context("read NODE_SUMMARIES")?;
        out.nodes.push((node, sum_summaries(per_cpu.iter())));
    }
    let buckets = tracer.hist_buckets()?;
    for item in buckets.iter() {
        let (key, calls) = item.context("read HIST_BUCKETS")?;
        if calls > 0 {
            out.buckets.push((key, calls));
        }
    }
    Ok(out)
}

/// Calls completed so far per node in the in-kernel summaries (empty when nothing is
/// aggregated in the kernel, or the map cannot be read): what the budget counts a phase's
/// parents and children by while the run goes on.
pub fn node_counts(tracer: &mut Tracer) -> std::collections::HashMap<u64, u64> {
    let Ok(nodes) = tracer.node_summaries() else {
        return Default::default();
    };
    nodes
        .iter()
        .filter_map(Result::ok)
        .map(|(node, per_cpu)| (node, sum_summaries(per_cpu.iter()).count))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The end of an in-kernel run: reads the maps into `agg`, marks `end` as aggregated in the
/// kernel, and warns when a map was full (those calls are counted as lost on their node, or
/// missing from its histogram).
pub fn finish_run(tracer: &mut Tracer, agg: &mut Aggregator, end: &mut EndState) -> Result<()> {
    let k = read_kernel_summaries(tracer).context("read the in-kernel summaries")?;
    agg.add_kernel_summaries(&k.nodes, &k.buckets);
    end.aggregation = Aggregation::Kernel;
    let full = end.counter(counter::SUMMARY_FULL);
    if full > 0 {
        eprintln!(
            "wprof: warning: {full} calls were not aggregated: the in-kernel summary map was full \
             ({MAX_SUMMARY_NODES} tree nodes); they are counted as lost"
        );
    }
    let hist_full = end.counter(counter::HIST_FULL);
    if hist_full > 0 {
        eprintln!(
            "wprof: warning: {hist_full} durations are missing from the histograms: the in-kernel \
             histogram map was full ({MAX_HIST_BUCKETS} buckets); counts and totals hold every \
             call, percentiles only the others (--aggregate event has no such limit)"
        );
    }
    Ok(())
}

/// Adds up one node's per-CPU summaries.
pub fn sum_summaries<'a>(per_cpu: impl IntoIterator<Item = &'a NodeSummary>) -> NodeSummary {
    per_cpu
        .into_iter()
        .fold(NodeSummary::default(), |mut s, c| {
            s.count += c.count;
            s.total_ns += c.total_ns;
            s.self_ns += c.self_ns;
            s.off_ns += c.off_ns;
            s.preempted_ns += c.preempted_ns;
            s.arg_sum = s.arg_sum.saturating_add(c.arg_sum);
            s.corrected_total_ns += c.corrected_total_ns;
            s.probe_ns += c.probe_ns;
            s.probe_hits += c.probe_hits;
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wprof_common::{hist_bucket, hist_bucket_mid, hist_bucket_range};

    /// Every value maps to a bucket that holds it, whose midpoint is within 1% of it (0.4% in
    /// fact: a bucket is at most 1/128 of its values wide): 1..10^12 sampled densely at the
    /// small end, geometrically (+0.1%, plus the neighbours of every power of two) above.
    #[test]
    fn every_value_lands_in_a_bucket_whose_midpoint_is_within_one_percent() {
        let check = |v: u64| {
            let b = hist_bucket(v);
            let (low, high) = hist_bucket_range(b);
            assert!(
                low <= v && v <= high,
                "{v} not in bucket {b} = {low}..={high}"
            );
            let mid = hist_bucket_mid(b) as f64;
            let err = (mid - v as f64).abs() / v as f64;
            assert!(
                err <= 0.004,
                "{v}: bucket {b} midpoint {mid} is {err:.4} off"
            );
        };
        (1..=100_000).for_each(check);
        let mut v = 100_000.0f64;
        while v <= 1e12 {
            check(v as u64);
            v *= 1.001;
        }
        for p in 7..=40 {
            let x = 1u64 << p;
            [x - 1, x, x + 1].into_iter().for_each(check);
        }
        check(1_000_000_000_000);
    }

    /// The index formula as specified: exact below 128, then `(msb - 6) * 128 + ((v >> (msb -
    /// 7)) & 127)`; buckets are contiguous and ascending, and the largest index is 7,423.
    #[test]
    fn bucket_index_follows_the_log_linear_formula() {
        for v in (0..128).chain([128, 255, 256, 1000, 123_456_789, u64::MAX]) {
            let want = if v < 128 {
                v as u32
            } else {
                let msb = 63 - v.leading_zeros();
                (msb - 6) * 128 + ((v >> (msb - 7)) & 127) as u32
            };
            assert_eq!(hist_bucket(v), want, "{v}");
        }
        assert_eq!(hist_bucket(u64::MAX), 7_423);
        assert_eq!(hist_bucket(0), 0);
        let mut next = 0;
        for b in 0..=7_423 {
            let (low, high) = hist_bucket_range(b);
            assert_eq!(low, next, "bucket {b} starts where {} ended", b.max(1) - 1);
            assert_eq!((hist_bucket(low), hist_bucket(high)), (b, b));
            next = high.wrapping_add(1);
        }
        assert_eq!(next, 0, "the last bucket ends at u64::MAX");
    }

    #[test]
    fn per_cpu_summaries_add_up() {
        let a = NodeSummary {
            count: 2,
            total_ns: 30,
            self_ns: 10,
            off_ns: 1,
            preempted_ns: 1,
            arg_sum: u64::MAX - 1,
            corrected_total_ns: 20,
            probe_ns: 10,
            probe_hits: 4,
        };
        let s = sum_summaries([&a, &a]);
        assert_eq!((s.count, s.total_ns, s.self_ns), (4, 60, 20));
        assert_eq!(
            (s.corrected_total_ns, s.probe_ns, s.probe_hits),
            (40, 20, 8)
        );
        assert_eq!(s.arg_sum, u64::MAX, "saturates as the per-event sum does");
        assert_eq!((s.off_ns, s.preempted_ns), (2, 2));
    }
}
