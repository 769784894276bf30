//! How the runtime joins several inputs: a merged watermark is the minimum
//! of the inputs' (each never going back), and a barrier passes once it has
//! come from every input.

use std::collections::HashMap;

/// The minimum watermark over a view's inputs; None until every input has one.
#[derive(Debug, Clone)]
pub struct WatermarkMerge {
    inputs: HashMap<String, Option<i64>>,
    merged: Option<i64>,
}

impl WatermarkMerge {
    pub fn new(inputs: &[String]) -> Self {
        WatermarkMerge {
            inputs: inputs.iter().map(|input| (input.clone(), None)).collect(),
            merged: None,
        }
    }

    /// Records `input`'s watermark; returns the merged one if it advanced.
    pub fn advance(&mut self, input: &str, watermark: i64) -> Option<i64> {
        let slot = self.inputs.get_mut(input)?;
        *slot = Some(slot.map_or(watermark, |current| current.max(watermark)));
        let minimum = self
            .inputs
            .values()
            .copied()
            .collect::<Option<Vec<i64>>>()?
            .into_iter()
            .min()?;
        if self.merged.is_some_and(|merged| merged >= minimum) {
            return None;
        }
        self.merged = Some(minimum);
        self.merged
    }
}

/// Lets a barrier through once it has arrived from every input.
#[derive(Debug, Clone)]
pub struct BarrierAlign {
    arrived: HashMap<String, u64>,
    passed: u64,
}

impl BarrierAlign {
    pub fn new(inputs: &[String]) -> Self {
        BarrierAlign {
            arrived: inputs.iter().map(|input| (input.clone(), 0)).collect(),
            passed: 0,
        }
    }

    /// Records the barrier; true when `epoch` is now complete on all inputs.
    pub fn arrive(&mut self, input: &str, epoch: u64) -> bool {
        if let Some(slot) = self.arrived.get_mut(input) {
            *slot = (*slot).max(epoch);
        }
        let complete = self.arrived.values().all(|arrived| *arrived >= epoch);
        if complete && epoch > self.passed {
            self.passed = epoch;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_watermark_is_the_minimum_and_never_goes_back() {
        let mut merge = WatermarkMerge::new(&["a".to_string(), "b".to_string()]);
        assert_eq!(merge.advance("a", 10), None);
        assert_eq!(merge.advance("b", 5), Some(5));
        assert_eq!(merge.advance("b", 20), Some(10));
        assert_eq!(merge.advance("a", 8), None);
        assert_eq!(merge.advance("a", 15), Some(15));
        assert_eq!(merge.advance("unknown", 100), None);
    }

    #[test]
    fn a_barrier_passes_once_every_input_has_it() {
        let mut align = BarrierAlign::new(&["a".to_string(), "b".to_string()]);
        assert!(!align.arrive("a", 1));
        assert!(align.arrive("b", 1));
        assert!(!align.arrive("b", 1), "an epoch passes once");
        assert!(!align.arrive("b", 2));
        assert!(align.arrive("a", 2));
    }
}
