//! The run's budget ledger: whether one more model request may be sent (see
//! [`crate::ledger`]).

use crate::ledger::{LedgerDecision, LedgerLimits, LedgerSpend};

/// Whether a request estimated at `estimate` may be sent, given the run's `limits`, what it
/// has `spent` (settled by commits) and the `in_flight` reservations of the other agents'
/// requests (`in_flight_count` of them):
/// - [`LedgerDecision::Spent`] once a spent total has reached its limit (`spent >= limit`);
/// - [`LedgerDecision::Grant`] when spent, in flight and the estimate fit within every limit,
///   or when nothing else is in flight (the request goes alone: an estimate larger than what
///   is left must not stop a run that has not reached its limit);
/// - [`LedgerDecision::Wait`] otherwise: a settlement in flight may leave room, or reach
///   the limit.
///
/// So while a request granted alone is in flight nothing else is granted, and every other
/// grant fits: the run's spend ends below `limit` plus the actual usage of the last request
/// granted alone (when the estimates are upper bounds of the usage).
pub fn decide(
    limits: &LedgerLimits,
    spent: &LedgerSpend,
    in_flight: &LedgerSpend,
    in_flight_count: i64,
    estimate: &LedgerSpend,
) -> LedgerDecision {
    let pairs = [
        (limits.turns, spent.turns, in_flight.turns, estimate.turns),
        (
            limits.tokens,
            spent.tokens,
            in_flight.tokens,
            estimate.tokens,
        ),
        (
            limits.cost_nanos,
            spent.cost_nanos,
            in_flight.cost_nanos,
            estimate.cost_nanos,
        ),
    ];
    let limited = pairs
        .iter()
        .filter_map(|&(limit, spent, reserved, asked)| limit.map(|l| (l, spent, reserved, asked)));
    let mut fits = true;
    for (limit, spent, reserved, asked) in limited {
        if spent >= limit {
            return LedgerDecision::Spent;
        }
        let total = spent
            .saturating_add(reserved.max(0))
            .saturating_add(asked.max(0));
        fits &= total <= limit;
    }
    if fits || in_flight_count <= 0 {
        LedgerDecision::Grant
    } else {
        LedgerDecision::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LedgerDecision::{Grant, Spent, Wait};

    fn spend(turns: i64, tokens: i64, cost_nanos: i64) -> LedgerSpend {
        LedgerSpend {
            turns,
            tokens,
            cost_nanos,
        }
    }

    #[test]
    fn grants_what_fits_waits_beside_reservations_and_stops_once_spent() {
        let cost = LedgerLimits {
            cost_nanos: Some(100),
            ..LedgerLimits::default()
        };
        let turns = LedgerLimits {
            turns: Some(3),
            ..LedgerLimits::default()
        };
        let both = LedgerLimits {
            turns: Some(10),
            tokens: Some(1_000),
            cost_nanos: Some(100),
        };
        let none = LedgerLimits::default();
        // (limits, spent, in flight, count, estimate, decision, why)
        let table = [
            (
                none,
                spend(99, 9_999, 9_999),
                spend(5, 5, 5),
                5,
                spend(1, 1, 1),
                Grant,
                "no limits",
            ),
            (
                cost,
                spend(0, 0, 40),
                spend(0, 0, 0),
                0,
                spend(1, 10, 60),
                Grant,
                "fits exactly",
            ),
            (
                cost,
                spend(0, 0, 40),
                spend(1, 0, 30),
                1,
                spend(1, 10, 30),
                Grant,
                "fits beside one",
            ),
            (
                cost,
                spend(0, 0, 40),
                spend(1, 0, 30),
                1,
                spend(1, 10, 31),
                Wait,
                "one nano over",
            ),
            (
                cost,
                spend(0, 0, 40),
                spend(0, 0, 0),
                0,
                spend(1, 10, 500),
                Grant,
                "alone, too big",
            ),
            (
                cost,
                spend(0, 0, 99),
                spend(0, 0, 0),
                0,
                spend(1, 10, 500),
                Grant,
                "alone, a nano left",
            ),
            (
                cost,
                spend(0, 0, 100),
                spend(0, 0, 0),
                0,
                spend(1, 0, 0),
                Spent,
                "reached",
            ),
            (
                cost,
                spend(0, 0, 130),
                spend(2, 0, 50),
                2,
                spend(1, 0, 0),
                Spent,
                "passed, in flight",
            ),
            (
                turns,
                spend(2, 0, 0),
                spend(0, 0, 0),
                0,
                spend(1, 0, 0),
                Grant,
                "the last turn",
            ),
            (
                turns,
                spend(2, 0, 0),
                spend(1, 0, 0),
                1,
                spend(1, 0, 0),
                Wait,
                "last turn taken",
            ),
            (
                turns,
                spend(3, 0, 0),
                spend(0, 0, 0),
                0,
                spend(1, 0, 0),
                Spent,
                "turns reached",
            ),
            (
                both,
                spend(1, 900, 10),
                spend(1, 50, 10),
                1,
                spend(1, 60, 10),
                Wait,
                "tokens over",
            ),
            (
                both,
                spend(1, 900, 10),
                spend(1, 40, 10),
                1,
                spend(1, 60, 10),
                Grant,
                "all fit",
            ),
            (
                both,
                spend(1, 1_000, 10),
                spend(0, 0, 0),
                0,
                spend(1, 0, 0),
                Spent,
                "tokens reached",
            ),
        ];
        for (limits, spent, in_flight, count, estimate, want, why) in table {
            assert_eq!(
                decide(&limits, &spent, &in_flight, count, &estimate),
                want,
                "{why}"
            );
        }
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        let limits = LedgerLimits {
            cost_nanos: Some(i64::MAX),
            ..LedgerLimits::default()
        };
        let big = spend(1, 0, i64::MAX - 1);
        assert_eq!(decide(&limits, &spend(0, 0, 1), &big, 1, &big), Grant);
        let tight = LedgerLimits {
            cost_nanos: Some(i64::MAX - 1),
            ..LedgerLimits::default()
        };
        assert_eq!(decide(&tight, &spend(0, 0, 1), &big, 1, &big), Wait);
    }
}
