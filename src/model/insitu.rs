//! What the in-situ check (`--in-situ`) found for a node of the tree.

/// What the in-situ check found for one parent node (written to and read from the run's JSON
/// as it is: docs/json.md, "in_situ").
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InSituCheck {
    /// The node's phase id.
    pub phase: u32,
    /// The node's phase name.
    pub name: String,
    /// The node's path, phase names from its root (runs before per-node checks: empty, the
    /// check was a root's).
    #[serde(default)]
    pub path: Vec<String>,
    /// Its calls made in light epochs with no descendant probe live.
    pub light_calls: u64,
    /// Its calls that began in a light epoch and are not in the tree (the light calls among
    /// them): with the tree's count, every call.
    #[serde(default)]
    pub kept_out: u64,
    /// Their mean with their preempted time and their own probe share taken out, ns.
    pub light_mean_ns: f64,
    /// Its calls in the tree (full epochs).
    pub full_calls: u64,
    /// Their raw mean less their preempted time and the own probe share, ns: the node with
    /// its descendants' probes.
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
    /// What one of its descendants' probe hits cost beyond the calibrated price, ns:
    /// `in_situ_ns - calibrated_ns` over their hits a call (0 when the factor is 1). Each node
    /// the check corrects also loses it once a call for its own entry, whose aftermath (the
    /// code after the trap) lies inside its window and which no epoch takes off.
    #[serde(default)]
    pub excess_per_hit_ns: f64,
    /// When its children's corrected times added up to more than it leaves them (checks at
    /// two depths disagreeing), or a node below it corrected by its factor's did: the
    /// smallest ratio their subtrees were scaled down by to fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children_fitted: Option<f64>,
}

impl InSituCheck {
    /// Whether the correction was scaled.
    pub fn applied(&self) -> bool {
        self.factor != 1.0
    }

    /// The node's path as the tree writes it (`write_impl/write_to_wal`); its name when the
    /// run has no path.
    pub fn path_label(&self) -> String {
        if self.path.is_empty() {
            self.name.clone()
        } else {
            self.path.join("/")
        }
    }
}
