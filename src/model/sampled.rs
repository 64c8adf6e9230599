//! What CPU samples found for a sampled phase (`measure = "sample"`): its share of the probed
//! parent's samples with a 95% interval.

/// z for a two-sided 95% interval.
const Z95: f64 = 1.96;

/// What sampling found for one sampled node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampledShare {
    /// Samples whose stack held the phase (and its sampled ancestors) under the probed parent.
    pub samples: u64,
    /// All samples taken while the probed parent was open (its children's included).
    pub parent_samples: u64,
    /// Lower bound of the 95% interval on the share (Wilson score).
    pub share_low: f64,
    /// Upper bound of the 95% interval on the share.
    pub share_high: f64,
}

impl SampledShare {
    /// From `samples` out of `parent_samples`.
    pub fn new(samples: u64, parent_samples: u64) -> SampledShare {
        let (share_low, share_high) = wilson(samples, parent_samples);
        SampledShare {
            samples,
            parent_samples,
            share_low,
            share_high,
        }
    }

    /// The phase's share of its probed parent's on-CPU time (0..1).
    pub fn share(&self) -> f64 {
        if self.parent_samples == 0 {
            0.0
        } else {
            self.samples as f64 / self.parent_samples as f64
        }
    }
}

/// The Wilson score interval for `k` successes in `n` trials at 95%: unlike the normal
/// approximation it stays inside [0, 1] and is honest for a handful of samples.
fn wilson(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = Z95 * ((p * (1.0 - p) + z2 / (4.0 * n)) / n).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_interval_brackets_the_share_and_stays_in_bounds() {
        let (lo, hi) = wilson(20, 100);
        assert!(lo < 0.2 && hi > 0.2, "{lo} {hi}");
        assert!(
            (lo - 0.133).abs() < 0.005 && (hi - 0.289).abs() < 0.005,
            "{lo} {hi}"
        );
        assert_eq!(wilson(0, 100).0, 0.0);
        assert!(wilson(100, 100).1 > 0.999_999);
        assert_eq!(wilson(0, 0), (0.0, 1.0));
    }
}
