//! The vocabulary of probe costs: what one probe hit costs by the instruction it lands on, and
//! what the calibration measured per combination of entry class and return mode.

use serde::{Deserialize, Serialize};

use super::profile::ReturnMode;

/// How expensive a uprobe hit on an instruction is (facts.md): the kernel emulates some
/// instructions and single-steps the rest out of line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CostClass {
    /// A NOP (e.g. the 5-byte nop of -fpatchable-function-entry): emulated, cheapest.
    Nop,
    /// `push reg` or a relative call/jmp/jcc: emulated.
    Emulated,
    /// Anything else (`endbr64`, `mov`, `lea`, `ret`...): single-stepped, a debug trap.
    SingleStep,
}

/// The label outputs carry for the fixed figures.
pub const MODEL: &str =
    "estimated (fixed per-class costs measured on the project's VMs; not calibrated on this host)";

/// The label outputs carry for figures calibrated on the host.
pub const MEASURED: &str = "calibrated on this host before the run";

/// The spelling of a cost class in outputs.
pub fn class_name(class: CostClass) -> &'static str {
    match class {
        CostClass::Nop => "nop",
        CostClass::Emulated => "emulated",
        CostClass::SingleStep => "single-step",
    }
}

/// The cost class spelled as in outputs, back.
pub fn class_from_name(name: &str) -> Option<CostClass> {
    match name {
        "nop" => Some(CostClass::Nop),
        "emulated" => Some(CostClass::Emulated),
        "single-step" => Some(CostClass::SingleStep),
        _ => None,
    }
}

/// One calibrated combination of entry class and return mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassCost {
    /// Class of the entry instruction.
    pub entry: CostClass,
    /// True for a uretprobe return, false for a probe on the RET instruction.
    #[serde(rename = "return_mode", with = "return_mode")]
    pub uretprobe: bool,
    /// Whole entry + return cost of one call, ns: what an enclosing call's window contains.
    pub pair_ns: f64,
    /// The part of it inside the call's own window, ns.
    pub own_ns: f64,
    /// Largest deviation of a calibration round from the median pair cost, ns.
    pub error_ns: f64,
}

impl ClassCost {
    /// The return mode as phases and JSON spell it: `uretprobe` or `ret-sites`.
    pub fn return_mode(&self) -> &'static str {
        if self.uretprobe {
            ReturnMode::Uretprobe.as_str()
        } else {
            ReturnMode::RetSites.as_str()
        }
    }

    /// How outputs name the combination, e.g. `emulated+uretprobe`, `single-step+ret-site`.
    pub fn label(&self) -> String {
        let ret = if self.uretprobe {
            "uretprobe"
        } else {
            "ret-site"
        };
        format!("{}+{ret}", class_name(self.entry))
    }
}

/// `ClassCost::uretprobe` in the JSON: the return mode as phases spell it.
mod return_mode {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::model::profile::ReturnMode;

    pub fn serialize<S: Serializer>(uretprobe: &bool, s: S) -> Result<S::Ok, S::Error> {
        let mode = if *uretprobe {
            ReturnMode::Uretprobe
        } else {
            ReturnMode::RetSites
        };
        s.serialize_str(mode.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        let text = String::deserialize(d)?;
        if text == ReturnMode::Uretprobe.as_str() {
            Ok(true)
        } else if text == ReturnMode::RetSites.as_str() {
            Ok(false)
        } else {
            Err(serde::de::Error::custom(format!(
                "calibration: unknown return mode {text:?}"
            )))
        }
    }
}
