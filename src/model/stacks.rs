//! Stacks sampled (CPU) or blocked (off-CPU) during a run, folded under their phase paths.

/// Stacks sampled or blocked during a run, each prefixed by the phase path open at the time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StackProfile {
    /// Unit of the weights: "samples" (CPU) or "ns" (off-CPU).
    pub unit: String,
    /// Sampling frequency per CPU, Hz (CPU profiles).
    pub frequency_hz: Option<u64>,
    /// Records received (samples, or off-CPU intervals).
    pub records: u64,
    /// Records dropped because the ring buffer was full.
    pub lost: u64,
    /// Folded stacks (`phase;...;user frames;kernel frames_[k]`), sorted, weights summed.
    pub stacks: Vec<FoldedStack>,
}

impl StackProfile {
    /// The stacks in the folded format (`stack weight` per line).
    pub fn folded(&self) -> String {
        let mut out = String::new();
        for s in &self.stacks {
            out.push_str(&s.stack);
            out.push(' ');
            out.push_str(&s.weight.to_string());
            out.push('\n');
        }
        out
    }

    /// Sum of all weights.
    pub fn total(&self) -> u64 {
        self.stacks.iter().map(|s| s.weight).sum()
    }
}

/// One folded stack and its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldedStack {
    /// Frames outermost first, joined by `;`.
    pub stack: String,
    /// Samples or ns.
    pub weight: u64,
}
