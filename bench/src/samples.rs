//! Latency samples and their percentiles.

use std::time::Duration;

#[derive(Debug, Default, Clone)]
pub struct Samples {
    millis: Vec<f64>,
}

impl Samples {
    pub fn push(&mut self, elapsed: Duration) {
        self.millis.push(elapsed.as_secs_f64() * 1000.0);
    }

    pub fn extend(&mut self, other: Samples) {
        self.millis.extend(other.millis);
    }

    pub fn len(&self) -> usize {
        self.millis.len()
    }

    /// The `q`-quantile (nearest rank), in milliseconds.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.millis.is_empty() {
            return None;
        }
        let mut sorted = self.millis.clone();
        sorted.sort_by(f64::total_cmp);
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        Some(sorted[rank - 1])
    }

    pub fn p50(&self) -> Option<f64> {
        self.quantile(0.50)
    }

    pub fn p99(&self) -> Option<f64> {
        self.quantile(0.99)
    }

    pub fn mean(&self) -> Option<f64> {
        (!self.millis.is_empty())
            .then(|| self.millis.iter().sum::<f64>() / self.millis.len() as f64)
    }
}

/// The median of some figures.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let mut samples = Samples::default();
        for ms in 1..=100 {
            samples.push(Duration::from_millis(ms));
        }
        assert_eq!(samples.p50(), Some(50.0));
        assert_eq!(samples.p99(), Some(99.0));
        assert_eq!(Samples::default().p50(), None);
        assert_eq!(samples.mean(), Some(50.5));
        assert_eq!(Samples::default().mean(), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
    }
}
