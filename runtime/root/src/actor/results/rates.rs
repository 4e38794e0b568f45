//! Completion rates for `status`: the last few seconds (`rate`) and the last minute
//! (`rate_minute`), both measured up to the moment they are asked for, so an idle
//! pilot's rates fall to zero instead of keeping the last busy figure.

use std::collections::VecDeque;
use std::time::Duration;

use saker_core::Time;

/// The window of `rate`.
const WINDOW: Duration = Duration::from_secs(5);
const MINUTE: Duration = Duration::from_secs(60);

/// Completions of the last [`WINDOW`]: a sample per durable batch of results, and the
/// newest one older than the window as the baseline.
#[derive(Debug, Default)]
pub(crate) struct RateWindow {
    samples: VecDeque<(Time, u64)>,
}

impl RateWindow {
    pub(super) fn record(&mut self, now: Time, done: u64) {
        self.samples.push_back((now, done));
        // Keep one sample at or beyond the window's edge: the baseline.
        while self
            .samples
            .get(1)
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= WINDOW)
        {
            self.samples.pop_front();
        }
    }

    /// Per second over the window ending `now`, given `done` results by then.
    pub(super) fn rate(&self, now: Time, done: u64) -> f64 {
        // Samples at or beyond the edge come first (time order). The newest of them
        // is exact: no result ended between it and the edge, or a newer sample
        // would be there.
        let old = self
            .samples
            .partition_point(|(t, _)| now.saturating_duration_since(*t) >= WINDOW);
        if let Some(&(_, then)) = old.checked_sub(1).and_then(|k| self.samples.get(k)) {
            return done.saturating_sub(then) as f64 / WINDOW.as_secs_f64();
        }
        // A pilot younger than the window: since its first sample.
        match self.samples.front() {
            Some(&(first, then)) => {
                let span = now.saturating_duration_since(first);
                if span.is_zero() {
                    0.0
                } else {
                    done.saturating_sub(then) as f64 / span.as_secs_f64()
                }
            }
            None => 0.0,
        }
    }
}

/// Results over the last minute, for `status`: at most one sample a second, and the
/// last one from over a minute ago as the baseline.
#[derive(Debug, Default)]
pub(crate) struct MinuteRate {
    samples: VecDeque<(Time, u64)>,
}

impl MinuteRate {
    pub(super) fn record(&mut self, now: Time, done: u64) {
        let second = Duration::from_secs(1);
        if self
            .samples
            .back()
            .is_none_or(|(t, _)| now.saturating_duration_since(*t) >= second)
        {
            self.samples.push_back((now, done));
        }
        while self
            .samples
            .get(1)
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= MINUTE)
        {
            self.samples.pop_front();
        }
    }

    /// Per second, given `done` results by `now`.
    pub(super) fn rate(&self, now: Time, done: u64) -> f64 {
        let Some(&(first, done_then)) = self.samples.front() else {
            return 0.0;
        };
        let span = now.saturating_duration_since(first).min(MINUTE);
        if span.is_zero() {
            return 0.0;
        }
        // Less than a minute of history: since the first sample.
        done.saturating_sub(done_then) as f64 / span.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: f64) -> Time {
        Time::from_micros((seconds * 1e6) as u64)
    }

    #[test]
    fn the_rate_now_falls_to_zero_once_results_stop() {
        let mut window = RateWindow::default();
        // 100 results a second for 10 s, a sample every 10 ms.
        let mut done = 0;
        for k in 1..=1000u64 {
            done += 1;
            window.record(at(k as f64 / 100.0), done);
        }
        let busy = window.rate(at(10.0), done);
        assert!((busy - 100.0).abs() < 1.0, "{busy}");
        // Idle: half the window later, half the rate; a window later, none.
        let half = window.rate(at(12.5), done);
        assert!((half - 50.0).abs() < 1.0, "{half}");
        assert_eq!(window.rate(at(15.0), done), 0.0);
        assert_eq!(window.rate(at(600.0), done), 0.0);
    }

    #[test]
    fn a_young_pilot_measures_since_its_first_result() {
        let mut window = RateWindow::default();
        assert_eq!(window.rate(at(1.0), 0), 0.0);
        window.record(at(1.0), 10);
        window.record(at(2.0), 30);
        assert!((window.rate(at(2.0), 30) - 20.0).abs() < 1e-9);
    }
}
