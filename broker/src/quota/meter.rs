//! Rate meters over recent one-second windows, as Kafka's quota sensors
//! measure (`quota.window.num` = 11 windows of `quota.window.size.seconds`
//! = 1): the client quotas and the replication throttles both judge rates
//! with them. Time is passed in, so the arithmetic is testable.

use std::collections::VecDeque;

use parking_lot::Mutex;

/// How many one-second windows a rate is measured over.
pub const WINDOWS: i64 = 11;

/// Amounts recorded per second over the last [`WINDOWS`] seconds.
#[derive(Debug, Default)]
pub struct RateMeter {
    /// `(second, amount)`, oldest first.
    windows: Mutex<VecDeque<(i64, f64)>>,
}

impl RateMeter {
    /// Counts `amount` at `now_ms`.
    pub fn record(&self, amount: f64, now_ms: i64) {
        let second = now_ms.div_euclid(1000);
        let mut w = self.windows.lock();
        match w.back_mut() {
            Some((s, a)) if *s == second => *a += amount,
            _ => w.push_back((second, amount)),
        }
        while w.front().is_some_and(|(s, _)| *s <= second - WINDOWS) {
            w.pop_front();
        }
    }

    /// `(rate per second, milliseconds measured over)`: the amount over the
    /// recent windows divided by the time since the oldest began — at
    /// least one second, so a first burst is not judged over a sliver.
    pub fn rate(&self, now_ms: i64) -> (f64, i64) {
        let second = now_ms.div_euclid(1000);
        let w = self.windows.lock();
        let recent = w.iter().filter(|(s, _)| *s > second - WINDOWS);
        let (oldest, total) = recent.fold((second, 0.0), |(o, t), (s, a)| (o.min(*s), t + a));
        let span_ms = (now_ms - oldest * 1000).max(1000);
        (total * 1000.0 / span_ms as f64, span_ms)
    }

    /// When something was last recorded (for forgetting idle meters).
    pub fn last_second(&self) -> Option<i64> {
        self.windows.lock().back().map(|(s, _)| *s)
    }
}

/// How long a client over `limit` must wait (Kafka's rule): long enough
/// that, had it sent nothing meanwhile, its rate over the measured span
/// would be back at the limit — `(rate − limit) / limit × span` — capped at
/// the whole window. 0 within the limit.
pub fn throttle_ms(rate: f64, limit: f64, span_ms: i64) -> i32 {
    if rate.is_nan() || rate <= limit || limit <= 0.0 {
        return 0;
    }
    let ms = (rate - limit) / limit * span_ms as f64;
    ms.min((WINDOWS * 1000) as f64).round() as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_the_amount_over_the_time_since_the_oldest_window() {
        let m = RateMeter::default();
        let t0 = 1_000_000;
        assert_eq!(m.rate(t0).0, 0.0);
        m.record(900.0, t0);
        assert_eq!(m.rate(t0 + 10), (900.0, 1000), "at least one second");
        m.record(300.0, t0 + 500);
        assert_eq!(m.rate(t0 + 2000).0, 600.0, "1200 over two seconds");
        // windows older than WINDOWS seconds no longer count
        assert_eq!(m.rate(t0 + WINDOWS * 1000).0, 0.0);
        m.record(5.0, t0 + WINDOWS * 1000);
        assert_eq!(m.rate(t0 + WINDOWS * 1000).0, 5.0);
        assert_eq!(m.last_second(), Some((t0 + WINDOWS * 1000) / 1000));
    }

    #[test]
    fn the_throttle_brings_the_rate_back_to_the_limit() {
        assert_eq!(throttle_ms(100.0, 100.0, 5000), 0);
        assert_eq!(throttle_ms(50.0, 100.0, 5000), 0);
        // twice the limit over 5 s: 5 s of silence halves it
        assert_eq!(throttle_ms(200.0, 100.0, 5000), 5000);
        assert_eq!(throttle_ms(150.0, 100.0, 2000), 1000);
        assert_eq!(
            throttle_ms(1e12, 1.0, 11_000),
            11_000,
            "capped at the window"
        );
        assert_eq!(throttle_ms(f64::NAN, 1.0, 1000), 0);
    }
}
