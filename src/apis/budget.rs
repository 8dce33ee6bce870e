//! A NodePool disruption budget's rules, as methods on [`Budget`]: how many of the pool's nodes
//! it lets be disrupted at once, and whether its cron window is active now (upstream's
//! `Budget.GetAllowedDisruptions` and `Budget.IsActive`), with the small cron parser the window
//! needs. The disruption controller and `explain` share them.

use super::Budget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

fn duration_of(text: &str) -> Option<SignedDuration> {
    let d = super::parse_duration(text).ok()?;
    SignedDuration::try_from(d).ok()
}

impl Budget {
    /// How many nodes the budget's `nodes` allows out of `count`: an integer, or a percentage
    /// rounded up.
    pub fn nodes_allowed(&self, count: usize) -> Option<u64> {
        let nodes = self.nodes.as_str();
        match nodes.strip_suffix('%') {
            Some(pct) => {
                let pct: u64 = pct.parse().ok()?;
                Some((pct * count as u64).div_ceil(100))
            }
            None => nodes.parse().ok(),
        }
    }

    /// Whether the budget applies at `now`: always without a schedule; with one, when the
    /// schedule hit within the last `duration` (upstream: the next hit after `now - duration` is
    /// not after `now`).
    pub fn is_active(&self, now: Timestamp) -> Result<bool, String> {
        let (Some(schedule), Some(duration)) = (&self.schedule, &self.duration) else {
            return Ok(true);
        };
        let schedule = cron::Schedule::parse(schedule)?;
        let duration =
            duration_of(duration).ok_or_else(|| format!("duration {duration:?} not understood"))?;
        let start = now.checked_sub(duration).map_err(|e| e.to_string())?;
        Ok(schedule.hits_between(start, now))
    }
}

/// A small cron matcher for budget schedules: five fields (minute hour day-of-month month
/// day-of-week) in UTC with `*`, lists, ranges, steps and names, or `@yearly` and friends, as
/// upstream's robfig/cron parser reads them.
pub mod cron {
    use k8s_openapi::jiff::tz::TimeZone;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    /// A parsed schedule: the allowed values of each field as a bit set.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Schedule {
        minutes: u64,
        hours: u64,
        days_of_month: u64,
        months: u64,
        days_of_week: u64,
        /// Day-of-month or day-of-week is `*`: both must match (else either may).
        day_star: bool,
    }

    const MONTHS: &[&str] = &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

    fn field(
        text: &str,
        min: u32,
        max: u32,
        names: &[&str],
        name_base: u32,
    ) -> Result<(u64, bool), String> {
        let mut bits = 0_u64;
        let mut star = false;
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => (
                    r,
                    s.parse::<u32>()
                        .map_err(|_| format!("bad step in {part:?}"))?,
                ),
                None => (part, 1),
            };
            if step == 0 {
                return Err(format!("zero step in {part:?}"));
            }
            let value = |v: &str| -> Result<u32, String> {
                if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
                    return Ok(i as u32 + name_base);
                }
                v.parse::<u32>()
                    .map_err(|_| format!("{v:?} is not a number"))
            };
            let (lo, hi) = if range == "*" || range == "?" {
                star = step == 1;
                (min, max)
            } else if let Some((a, b)) = range.split_once('-') {
                (value(a)?, value(b)?)
            } else {
                let v = value(range)?;
                (v, if part.contains('/') { max } else { v })
            };
            if lo < min || hi > max || lo > hi {
                return Err(format!("{part:?} is outside {min}-{max}"));
            }
            let mut v = lo;
            while v <= hi {
                bits |= 1 << v;
                v += step;
            }
        }
        Ok((bits, star))
    }

    impl Schedule {
        /// Parses a schedule.
        pub fn parse(text: &str) -> Result<Self, String> {
            let text = text.trim();
            let expanded = match text {
                "@yearly" | "@annually" => "0 0 1 1 *",
                "@monthly" => "0 0 1 * *",
                "@weekly" => "0 0 * * 0",
                "@daily" | "@midnight" => "0 0 * * *",
                "@hourly" => "0 * * * *",
                other => other,
            };
            let fields: Vec<&str> = expanded.split_whitespace().collect();
            let [minute, hour, dom, month, dow] = fields.as_slice() else {
                return Err(format!("schedule {text:?} does not have five fields"));
            };
            let (minutes, _) = field(minute, 0, 59, &[], 0)?;
            let (hours, _) = field(hour, 0, 23, &[], 0)?;
            let (days_of_month, dom_star) = field(dom, 1, 31, &[], 0)?;
            let (months, _) = field(month, 1, 12, MONTHS, 1)?;
            let (mut days_of_week, dow_star) = field(dow, 0, 7, DAYS, 0)?;
            // 7 is Sunday too.
            if days_of_week & (1 << 7) != 0 {
                days_of_week |= 1;
            }
            Ok(Self {
                minutes,
                hours,
                days_of_month,
                months,
                days_of_week,
                day_star: dom_star || dow_star,
            })
        }

        /// Whether the schedule fires in the minute holding `at` (UTC).
        pub fn matches(&self, at: Timestamp) -> bool {
            let t = TimeZone::UTC.to_datetime(at);
            let bit = |set: u64, v: i8| v >= 0 && set & (1 << v) != 0;
            let dom = bit(self.days_of_month, t.day());
            let dow = bit(self.days_of_week, t.weekday().to_sunday_zero_offset());
            let day = if self.day_star {
                dom && dow
            } else {
                dom || dow
            };
            bit(self.minutes, t.minute())
                && bit(self.hours, t.hour())
                && bit(self.months, t.month())
                && day
        }

        /// Whether it fires in some minute after `start` and no later than `end`.
        pub(crate) fn hits_between(&self, start: Timestamp, end: Timestamp) -> bool {
            // The first whole minute after `start`.
            let secs = start.as_second().div_euclid(60) * 60 + 60;
            let Ok(mut t) = Timestamp::from_second(secs) else {
                return false;
            };
            // At most a year of minutes; budget windows are hours or days.
            for _ in 0..(366 * 24 * 60) {
                if t > end {
                    return false;
                }
                if self.matches(t) {
                    return true;
                }
                match t.checked_add(SignedDuration::from_mins(1)) {
                    Ok(next) => t = next,
                    Err(_) => return false,
                }
            }
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    fn budget(nodes: &str) -> Budget {
        Budget {
            nodes: nodes.to_owned(),
            ..Budget::upstream_default_list().remove(0)
        }
    }

    #[test]
    fn a_percentage_budget_rounds_up() {
        assert_eq!(budget("10%").nodes_allowed(1), Some(1));
        assert_eq!(budget("10%").nodes_allowed(11), Some(2));
        assert_eq!(budget("3").nodes_allowed(100), Some(3));
    }

    #[test]
    fn cron_schedules_match_like_upstream() {
        let s = cron::Schedule::parse("*/15 9-17 * * mon-fri").expect("parse");
        assert!(s.matches(at("2026-03-02T09:15:00Z")));
        assert!(!s.matches(at("2026-03-02T09:16:00Z")));
        assert!(!s.matches(at("2026-03-01T09:15:00Z")), "a Sunday");
        // Day-of-month and day-of-week both restricted: either matches.
        let either = cron::Schedule::parse("0 0 1 * sun").expect("parse");
        assert!(
            either.matches(at("2026-03-01T00:00:00Z"))
                && either.matches(at("2026-04-01T00:00:00Z"))
                && either.matches(at("2026-03-08T00:00:00Z"))
        );
        assert!(
            cron::Schedule::parse("@daily")
                .expect("parse")
                .matches(at("2026-03-02T00:00:00Z"))
        );
        assert!(cron::Schedule::parse("0 0 * *").is_err());
        assert!(cron::Schedule::parse("61 * * * *").is_err());
        let daily = cron::Schedule::parse("@daily").expect("parse");
        assert!(daily.hits_between(at("2026-03-01T23:00:00Z"), at("2026-03-02T00:30:00Z")));
        assert!(
            !daily.hits_between(at("2026-03-02T00:00:00Z"), at("2026-03-02T10:00:00Z")),
            "the hit at the start is not after it"
        );
    }
}
