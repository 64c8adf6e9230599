//! The latency histogram every tree node carries.

use hdrhistogram::Histogram;

/// Durations in ns, log-linear buckets with 2 significant digits (≤ 1% error).
pub type LatencyHistogram = Histogram<u64>;

/// Longest duration a histogram records exactly: one hour. Longer calls saturate.
pub const MAX_TRACKED_NS: u64 = 3_600_000_000_000;

/// Significant digits kept: 2 gives at most 1% relative error per bucket.
pub const SIGNIFICANT_DIGITS: u8 = 2;

/// A new, empty latency histogram.
pub fn new_histogram() -> LatencyHistogram {
    // The bounds are constants that hdrhistogram accepts (1 <= low, high >= 2 * low, sigfig <= 5).
    Histogram::new_with_bounds(1, MAX_TRACKED_NS, SIGNIFICANT_DIGITS)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

/// `hist` with every recorded duration passed through `f` (at least 1 ns), counts kept: a
/// correction that scales or shifts a node's calls after aggregation.
pub fn map_histogram(hist: &LatencyHistogram, f: impl Fn(u64) -> u64) -> LatencyHistogram {
    let mut out = new_histogram();
    for v in hist.iter_recorded() {
        out.saturating_record_n(f(v.value_iterated_to()).max(1), v.count_at_value());
    }
    out
}
