//! Native (sparse, exponential) histograms of call durations, in seconds, at schema
//! [`SCHEMA`]: bucket `i` holds the values in `(2^((i-1)/8), 2^(i/8)]`, so each bucket spans a
//! factor 2^(1/8) = 1.0905 and its geometric middle is within ±4.4% of every value in it.
//!
//! Filled from wprof's own histograms: an HDR histogram ([`NativeHistogram::add_hdr`]; its
//! buckets are at most 1/128 of their values wide, 0.78%) or the in-kernel log-linear
//! buckets (`record_n`, 0.4%), each bucket's calls going to the native bucket that holds the
//! bucket's middle. A call can so land one native bucket off only when it lies within 0.78% of
//! a native boundary: a quantile Prometheus computes from these buckets is within one native
//! bucket of the true one, i.e. within +9.05% / -8.3% (+0.78% for the HDR step), which is the
//! error `--serve` states.

use std::collections::BTreeMap;

use super::proto::{BucketSpan, Histogram, Timestamp};
use crate::model::LatencyHistogram;

/// The schema: 2^3 = 8 buckets per power of two (client_golang's default factor 1.1 gives the
/// same). Finer than this would only resolve HDR's own 0.78% steps at several times the
/// buckets per series.
pub const SCHEMA: i32 = 3;

/// Buckets per power of two.
const PER_OCTAVE: f64 = (1 << SCHEMA) as f64;

/// Values at or below this count as zero (client_golang's default, 2^-128): none of wprof's
/// durations, which are at least 1 ns.
pub const ZERO_THRESHOLD: f64 = 2.938735877055719e-39;

/// The largest relative distance between a quantile computed from these buckets and the true
/// one: one bucket (2^(1/8) - 1) plus the HDR histogram's bucket width (1/128).
pub const QUANTILE_ERROR: f64 = 0.0905 + 0.0078;

/// A native histogram being filled: calls per bucket index, their count and sum.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NativeHistogram {
    buckets: BTreeMap<i32, u64>,
    count: u64,
}

/// The index of the bucket that holds `seconds` (> 0).
pub fn bucket_index(seconds: f64) -> i32 {
    let mut i = (seconds.log2() * PER_OCTAVE).ceil() as i32;
    // log2 may round across a boundary: nudge into (upper(i-1), upper(i)].
    if seconds <= upper_bound(i - 1) {
        i -= 1;
    } else if seconds > upper_bound(i) {
        i += 1;
    }
    i
}

/// The upper bound of bucket `i`, seconds.
pub fn upper_bound(i: i32) -> f64 {
    (i as f64 / PER_OCTAVE).exp2()
}

impl NativeHistogram {
    /// An empty histogram.
    pub fn new() -> NativeHistogram {
        NativeHistogram::default()
    }

    /// Adds `n` calls of `ns` nanoseconds.
    pub fn record_n(&mut self, ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        *self
            .buckets
            .entry(bucket_index(ns.max(1) as f64 / 1e9))
            .or_default() += n;
        self.count += n;
    }

    /// Adds every call of an HDR histogram, each HDR bucket at its middle value.
    pub fn add_hdr(&mut self, h: &LatencyHistogram) {
        for v in h.iter_recorded() {
            self.record_n(
                h.median_equivalent(v.value_iterated_to()),
                v.count_at_value(),
            );
        }
    }

    /// Adds another histogram's calls.
    pub fn add(&mut self, other: &NativeHistogram) {
        for (&i, &n) in &other.buckets {
            *self.buckets.entry(i).or_default() += n;
        }
        self.count += other.count;
    }

    /// Calls recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Non-empty buckets: (index, calls), lowest first.
    pub fn buckets(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        self.buckets.iter().map(|(&i, &n)| (i, n))
    }

    /// The exposition message: spans of consecutive non-empty buckets and their counts as
    /// deltas, with `sum_s` (seconds) as the sample sum.
    pub fn to_proto(&self, sum_s: f64, created: Option<Timestamp>) -> Histogram {
        let mut spans: Vec<BucketSpan> = Vec::new();
        let mut deltas = Vec::with_capacity(self.buckets.len());
        let (mut prev_index, mut prev_count) = (None::<i32>, 0i64);
        for (&i, &n) in &self.buckets {
            match prev_index {
                Some(p) if i == p + 1 => {
                    if let Some(s) = spans.last_mut() {
                        s.length += 1;
                    }
                }
                Some(p) => spans.push(BucketSpan {
                    offset: i - p - 1,
                    length: 1,
                }),
                None => spans.push(BucketSpan {
                    offset: i,
                    length: 1,
                }),
            }
            deltas.push(n as i64 - prev_count);
            prev_count = n as i64;
            prev_index = Some(i);
        }
        Histogram {
            sample_count: self.count,
            sample_sum: sum_s,
            created_timestamp: created,
            schema: SCHEMA,
            zero_threshold: ZERO_THRESHOLD,
            zero_count: 0,
            positive_span: spans,
            positive_delta: deltas,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::new_histogram;

    /// Expands spans and deltas back to (index, count).
    fn expand(h: &Histogram) -> Vec<(i32, u64)> {
        let mut out = Vec::new();
        let (mut index, mut count) = (0i32, 0i64);
        let mut deltas = h.positive_delta.iter();
        for (k, s) in h.positive_span.iter().enumerate() {
            index = if k == 0 {
                s.offset
            } else {
                index + 1 + s.offset
            };
            for j in 0..s.length {
                if j > 0 {
                    index += 1;
                }
                count += deltas.next().expect("a delta per bucket");
                out.push((index, count as u64));
            }
        }
        assert!(deltas.next().is_none(), "no delta left over");
        out
    }

    #[test]
    fn bucket_boundaries_follow_the_schema() {
        assert_eq!(bucket_index(1.0), 0, "1 is the upper bound of bucket 0");
        assert_eq!(bucket_index(1.0001), 1);
        assert_eq!(bucket_index(2.0), 8);
        assert_eq!(bucket_index(0.5), -8);
        for i in -300..40 {
            let b = upper_bound(i);
            assert_eq!(bucket_index(b), i, "upper bound of {i}");
            assert_eq!(bucket_index(b * 1.000_001), i + 1, "just above {i}");
        }
        // 1 µs, 100 µs, 1 ms.
        assert_eq!(bucket_index(1e-6), -159);
        assert_eq!(bucket_index(1e-4), -106);
        assert_eq!(bucket_index(1e-3), -79);
    }

    #[test]
    fn spans_and_deltas_encode_known_buckets() {
        let mut h = NativeHistogram::new();
        // 100 µs twice, 105 µs (next bucket) five times, 1 ms once: buckets -106, -105, -79.
        h.record_n(100_000, 2);
        h.record_n(105_000, 5);
        h.record_n(1_000_000, 1);
        let p = h.to_proto(0.000_726, None);
        assert_eq!(p.schema, 3);
        assert_eq!(p.sample_count, 8);
        assert_eq!(
            p.positive_span,
            [
                BucketSpan {
                    offset: -106,
                    length: 2
                },
                BucketSpan {
                    offset: 25,
                    length: 1
                }
            ]
        );
        assert_eq!(p.positive_delta, [2, 3, -4]);
        assert_eq!(expand(&p), [(-106, 2), (-105, 5), (-79, 1)]);
        assert!(p.zero_threshold > 0.0 && p.zero_count == 0);
    }

    #[test]
    fn an_hdr_histogram_keeps_its_count_and_lands_within_one_bucket() {
        let mut hdr = new_histogram();
        let mut want = NativeHistogram::new();
        // 1 µs .. 10 ms, geometrically.
        let mut v = 1_000.0f64;
        while v < 1e7 {
            hdr.record(v as u64).unwrap();
            want.record_n(v as u64, 1);
            v *= 1.013;
        }
        let mut got = NativeHistogram::new();
        got.add_hdr(&hdr);
        assert_eq!(got.count(), hdr.len());
        // Each call is at most one bucket off, and only near a boundary: the bucket totals
        // differ by a few calls, never by whole buckets.
        let moved: u64 = want
            .buckets()
            .map(|(i, n)| n.abs_diff(got.buckets.get(&i).copied().unwrap_or(0)))
            .sum();
        assert!(moved * 10 < got.count(), "{moved} of {} moved", got.count());
        assert!(got.buckets().all(|(i, _)| want.buckets.contains_key(&i)));
    }

    #[test]
    fn histograms_add_up() {
        let mut a = NativeHistogram::new();
        a.record_n(1_000, 3);
        let mut b = NativeHistogram::new();
        b.record_n(1_000, 1);
        b.record_n(2_000_000, 4);
        a.add(&b);
        assert_eq!(a.count(), 8);
        assert_eq!(
            a.buckets().collect::<Vec<_>>(),
            [(bucket_index(1e-6), 4), (bucket_index(2e-3), 4)]
        );
        let empty = NativeHistogram::new().to_proto(0.0, None);
        assert!(empty.positive_span.is_empty() && empty.zero_threshold > 0.0);
    }
}
