//! What the in-situ check (`--in-situ`) found for a root phase.

/// What the in-situ check found for one root phase (written to and read from the run's JSON
/// as it is: docs/json.md, "in_situ").
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InSituCheck {
    /// Root phase id.
    pub phase: u32,
    /// Root phase name.
    pub name: String,
    /// Root calls made in light epochs.
    pub light_calls: u64,
    /// Their mean, own probe share taken out, ns.
    pub light_mean_ns: f64,
    /// Root calls made in full epochs.
    pub full_calls: u64,
    /// Their raw mean less the own probe share, ns: the root with its descendants' probes.
    pub full_mean_ns: f64,
    /// Descendant probe time per call the calibration took out, ns.
    pub calibrated_ns: f64,
    /// Descendant probe time per call measured in situ (`full_mean_ns - light_mean_ns`), ns.
    pub in_situ_ns: f64,
    /// Standard error of `in_situ_ns`, ns.
    pub error_ns: f64,
    /// The factor the correction was scaled by (1 when the check agreed with the
    /// calibration within two standard errors, or could not tell).
    pub factor: f64,
}

impl InSituCheck {
    /// Whether the correction was scaled.
    pub fn applied(&self) -> bool {
        self.factor != 1.0
    }
}
