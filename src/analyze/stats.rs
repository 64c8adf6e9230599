//! The statistics behind `wprof check`: a seeded RNG, the percentile bootstrap and the
//! distribution-free interval of a quantile. docs/hypotheses.md states what each computes.
//!
//! In: plain slices of per-root-call values. Out: point estimates and `(low, high)` intervals.

/// Resamples per bootstrap interval.
pub const RESAMPLES: usize = 2000;

/// A SplitMix64 generator (Steele, Lea and Flood, 2014).
///
/// Written by hand rather than taken from the `rand` crate: the bootstrap only needs uniform
/// indices, the generator must give the same stream on every platform and in every version
/// (a verdict must not change between two runs of `wprof check` on the same files), and
/// SplitMix64 is ten lines that pass BigCrush, with no dependency to keep in step.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// A generator seeded from a string (FNV-1a of its bytes): each hypothesis gets its own
    /// stream, fixed by its id.
    pub fn from_key(key: &str) -> SplitMix64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        SplitMix64::new(h)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform index in `0..n` (`n > 0`), by the multiply-shift method: the bias is at most
    /// `n / 2^64`, far below anything a bootstrap can see.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// The `q` quantile (0..=1) of `v`, linear interpolation between order statistics (R's type
/// 7). Reorders `v`. NaN when `v` is empty.
pub fn quantile_in_place(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let h = (v.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let k = h.floor() as usize;
    let (_, lo, rest) = v.select_nth_unstable_by(k, f64::total_cmp);
    let lo = *lo;
    let frac = h - k as f64;
    if frac == 0.0 || rest.is_empty() {
        return lo;
    }
    let hi = rest.iter().copied().fold(f64::INFINITY, f64::min);
    lo + frac * (hi - lo)
}

/// The `q` quantile of `v` without reordering it.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    quantile_in_place(&mut v.to_vec(), q)
}

/// The central `confidence` interval of bootstrap replicates (the percentile method).
/// Non-finite replicates (a resample where the statistic is undefined) are left out.
pub fn percentile_interval(mut reps: Vec<f64>, confidence: f64) -> (f64, f64) {
    reps.retain(|x| x.is_finite());
    let alpha = (1.0 - confidence) / 2.0;
    let lo = quantile_in_place(&mut reps, alpha);
    let hi = quantile_in_place(&mut reps, 1.0 - alpha);
    (lo, hi)
}

/// Bootstrap replicates of the ratio of sums `Σnum / Σden` over paired rows: each resample
/// draws `num.len()` row indices with replacement. Both slices have the same length.
pub fn bootstrap_ratio(num: &[f64], den: &[f64], rng: &mut SplitMix64) -> Vec<f64> {
    let n = num.len();
    let mut reps = Vec::with_capacity(RESAMPLES);
    if n == 0 {
        return reps;
    }
    for _ in 0..RESAMPLES {
        let (mut a, mut b) = (0.0, 0.0);
        for _ in 0..n {
            let i = rng.below(n);
            a += num[i];
            b += den[i];
        }
        reps.push(a / b);
    }
    reps
}

/// Bootstrap replicates of the mean of `v`.
pub fn bootstrap_mean(v: &[f64], rng: &mut SplitMix64) -> Vec<f64> {
    let ones = vec![1.0; v.len()];
    bootstrap_ratio(v, &ones, rng)
}

/// Bootstrap replicates of the `q` quantile of `v`.
pub fn bootstrap_quantile(v: &[f64], q: f64, rng: &mut SplitMix64) -> Vec<f64> {
    let n = v.len();
    let mut reps = Vec::with_capacity(RESAMPLES);
    if n == 0 {
        return reps;
    }
    let mut buf = vec![0.0; n];
    for _ in 0..RESAMPLES {
        for slot in buf.iter_mut() {
            *slot = v[rng.below(n)];
        }
        reps.push(quantile_in_place(&mut buf, q));
    }
    reps
}

/// The standard normal quantile (inverse CDF) at `p` in (0, 1), by Acklam's rational
/// approximation (relative error below 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// The distribution-free interval of the `q` quantile of `n` iid values, as a pair of ranks
/// (0-based, clamped to `0..n`): the order statistics whose binomial coverage is about
/// `confidence` (normal approximation to the binomial, with a continuity correction).
pub fn quantile_rank_interval(n: u64, q: f64, confidence: f64) -> (u64, u64) {
    if n == 0 {
        return (0, 0);
    }
    let z = normal_quantile(1.0 - (1.0 - confidence) / 2.0);
    let nf = n as f64;
    let sd = (nf * q * (1.0 - q)).sqrt();
    let lo = (nf * q - z * sd - 0.5).floor().max(0.0) as u64;
    let hi = ((nf * q + z * sd + 0.5).ceil() as u64).min(n - 1);
    (lo.min(n - 1), hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_deterministic_and_matches_the_reference() {
        // First output of SplitMix64 seeded with 0 (reference implementation).
        assert_eq!(SplitMix64::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
        let a: Vec<u64> = {
            let mut r = SplitMix64::from_key("H1");
            (0..5).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = SplitMix64::from_key("H1");
            (0..5).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        let mut r = SplitMix64::from_key("H2");
        assert_ne!(a[0], r.next_u64());
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = SplitMix64::new(7);
        let mut seen = [0usize; 5];
        for _ in 0..10_000 {
            seen[r.below(5)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 1800 && c < 2200), "{seen:?}");
    }

    #[test]
    fn bootstrap_is_deterministic() {
        let v: Vec<f64> = (0..100).map(|i| (i * 37 % 101) as f64).collect();
        let a = percentile_interval(bootstrap_mean(&v, &mut SplitMix64::from_key("x")), 0.95);
        let b = percentile_interval(bootstrap_mean(&v, &mut SplitMix64::from_key("x")), 0.95);
        assert_eq!(a, b);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!(a.0 < mean && mean < a.1, "{a:?} around {mean}");
        // The interval is roughly mean ± 1.96 sd/sqrt(n).
        assert!(a.1 - a.0 > 5.0 && a.1 - a.0 < 20.0, "{a:?}");
    }

    #[test]
    fn ratio_of_a_constant_ratio_has_no_width() {
        let num: Vec<f64> = (1..50).map(|i| i as f64 * 0.07).collect();
        let den: Vec<f64> = (1..50).map(|i| i as f64).collect();
        let (lo, hi) =
            percentile_interval(bootstrap_ratio(&num, &den, &mut SplitMix64::new(1)), 0.95);
        assert!((lo - 0.07).abs() < 1e-12 && (hi - 0.07).abs() < 1e-12);
    }

    #[test]
    fn quantiles() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 1.0), 5.0);
        assert_eq!(quantile(&v, 0.125), 1.5);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn normal_quantile_known_values() {
        assert!((normal_quantile(0.975) - 1.959_963_985).abs() < 1e-6);
        assert!((normal_quantile(0.5)).abs() < 1e-12);
        assert!((normal_quantile(0.01) + 2.326_347_874).abs() < 1e-6);
    }

    #[test]
    fn quantile_ranks_bracket_the_quantile() {
        let (lo, hi) = quantile_rank_interval(10_000, 0.99, 0.95);
        assert!(lo < 9900 && hi > 9900 && hi < 10_000, "{lo} {hi}");
        assert_eq!(quantile_rank_interval(1, 0.99, 0.95), (0, 0));
    }
}
