//! `PartitionPlan::new` and the DDL built from it.
//!
//! Every bound is recomputed here as `(period start in the zone, as Unix seconds - epoch) << 32`
//! straight from chrono / chrono-tz.

use chrono::{
    DateTime, Datelike, Days, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc,
    Weekday,
};
use chrono_tz::Tz;
use proptest::prelude::*;

use logstamp::id::{IdError, Layout};
use logstamp::mysql::Ident;
use logstamp::store::schema::create_log_table_sql;
use logstamp::store::{PartitionBound, PartitionPlan, Period, PlanError};
use logstamp::time::Zone;

fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).unwrap()
}

fn midnight(d: NaiveDate) -> NaiveDateTime {
    d.and_hms_opt(0, 0, 0).unwrap()
}

fn zone(text: &str) -> Zone {
    text.parse().unwrap()
}

/// How the tests' own zone answers "when does this day start?" (no gap at midnight expected).
#[derive(Clone, Copy, Debug)]
enum TestZone {
    Fixed(i32),
    Named(Tz),
}

impl TestZone {
    fn name(self) -> String {
        match self {
            TestZone::Fixed(0) => "UTC".to_string(),
            TestZone::Fixed(east) => FixedOffset::east_opt(east).unwrap().to_string(),
            TestZone::Named(tz) => tz.name().to_string(),
        }
    }

    fn day_start(self, d: NaiveDate) -> Option<DateTime<Utc>> {
        match self {
            TestZone::Fixed(east) => FixedOffset::east_opt(east)
                .unwrap()
                .from_local_datetime(&midnight(d))
                .earliest()
                .map(|t| t.with_timezone(&Utc)),
            TestZone::Named(tz) => tz
                .from_local_datetime(&midnight(d))
                .earliest()
                .map(|t| t.with_timezone(&Utc)),
        }
    }
}

/// The period start after the one starting at `start`, by calendar arithmetic.
fn next_start(period: Period, start: NaiveDate) -> NaiveDate {
    match period {
        Period::Day => start + Days::new(1),
        Period::Week => start + Days::new(7),
        Period::Month => {
            let (y, m) = if start.month() == 12 {
                (start.year() + 1, 1)
            } else {
                (start.year(), start.month() + 1)
            };
            date(y, m, 1)
        }
    }
}

fn bound(instant: DateTime<Utc>, epoch: u64) -> u64 {
    let seconds = u64::try_from(instant.timestamp()).unwrap() - epoch;
    assert!(seconds <= u64::from(u32::MAX));
    seconds << 32
}

fn plan(from: NaiveDate, to: NaiveDate, period: Period, zone_text: &str) -> PartitionPlan {
    PartitionPlan::new(from, to, period, &zone(zone_text), &Layout::default())
        .unwrap_or_else(|e| panic!("{from}..{to} {period} {zone_text}: {e}"))
}

fn names(plan: &PartitionPlan) -> Vec<&str> {
    plan.partitions.iter().map(|p| p.name.as_str()).collect()
}

/// The partitions of the plan's periods: without `pmin` and `pmax`.
fn periods(plan: &PartitionPlan) -> &[PartitionBound] {
    let (_, bounded) = plan.partitions.split_last().unwrap();
    match bounded.split_first() {
        Some((first, rest)) if first.name == "pmin" => rest,
        _ => bounded,
    }
}

/// Checks every bound of `plan` against the zone's own day starts, and the plan's shape:
/// `pmin` ending where the first period starts unless that is at or before the epoch, the
/// periods, `pmax`.
fn check_against(plan: &PartitionPlan, period: Period, tz: TestZone, epoch: u64) {
    let (last, bounded) = plan.partitions.split_last().unwrap();
    assert_eq!(last.name, "pmax");
    assert_eq!(last.less_than, None);
    assert_eq!(last.period_start, None);
    assert_eq!(last.ends_at, None);
    assert_eq!(plan.period, period);
    assert_eq!(plan.zone, tz.name());
    let real = periods(plan);
    let first_start = tz.day_start(real[0].period_start.unwrap()).unwrap();
    if first_start.timestamp() > epoch as i64 {
        let pmin = &bounded[0];
        assert_eq!(pmin.name, "pmin");
        assert_eq!(pmin.less_than, Some(bound(first_start, epoch)));
        assert_eq!(pmin.period_start, None);
        assert_eq!(
            pmin.ends_at.as_deref(),
            Some(
                first_start
                    .format("%Y-%m-%dT%H:%M:%SZ")
                    .to_string()
                    .as_str()
            )
        );
    } else {
        assert_eq!(real.len(), bounded.len(), "no pmin with a bound of 0");
    }
    for (i, p) in real.iter().enumerate() {
        let start = p.period_start.unwrap();
        if let Some(prev) = i.checked_sub(1) {
            assert_eq!(
                next_start(period, real[prev].period_start.unwrap()),
                start,
                "periods are consecutive"
            );
        }
        let ends = tz.day_start(next_start(period, start)).unwrap();
        assert_eq!(p.less_than, Some(bound(ends, epoch)), "{}", p.name);
        assert_eq!(
            p.ends_at.as_deref(),
            Some(ends.format("%Y-%m-%dT%H:%M:%SZ").to_string().as_str()),
            "{}",
            p.name
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Periods and names
// ---------------------------------------------------------------------------------------------

#[test]
fn monthly_utc_for_a_year() {
    let p = plan(date(2020, 1, 1), date(2020, 12, 31), Period::Month, "UTC");
    let expected: Vec<String> = ["pmin".to_string()]
        .into_iter()
        .chain((1..=12).map(|m| format!("p2020{m:02}")))
        .chain(["pmax".to_string()])
        .collect();
    assert_eq!(names(&p), expected);
    check_against(&p, Period::Month, TestZone::Fixed(0), 0);
    // pmin ends at 2020-01-01T00:00:00Z = 18262 days after 1970-01-01, January at 2020-02-01.
    assert_eq!(p.partitions[0].less_than, Some((18_262u64 * 86_400) << 32));
    assert_eq!(p.partitions[1].less_than, Some((18_293u64 * 86_400) << 32));
    assert_eq!(p.partitions[1].period_start, Some(date(2020, 1, 1)));
}

#[test]
fn from_and_to_inside_periods_cover_their_whole_periods() {
    let p = plan(date(2017, 7, 15), date(2017, 9, 2), Period::Month, "UTC");
    assert_eq!(names(&p), ["pmin", "p201707", "p201708", "p201709", "pmax"]);
    let p = plan(date(2021, 1, 6), date(2021, 1, 6), Period::Week, "UTC");
    assert_eq!(names(&p), ["pmin", "p2021w01", "pmax"]);
    assert_eq!(p.partitions[1].period_start, Some(date(2021, 1, 4)));
    let p = plan(date(2021, 1, 6), date(2021, 1, 6), Period::Day, "UTC");
    assert_eq!(names(&p), ["pmin", "p20210106", "pmax"]);
}

#[test]
fn the_briefs_example_utc8_monthly() {
    // `partitions plan --from 2017-07 --to 2017-09 --period month --tz +08:00`
    let p = plan(date(2017, 7, 1), date(2017, 9, 1), Period::Month, "+08:00");
    assert_eq!(names(&p), ["pmin", "p201707", "p201708", "p201709", "pmax"]);
    // Midnight at +08:00 is 16:00 UTC the day before: days since 1970-01-01, minus 8 hours.
    // 2017-07-01 is day 17348; July has 31 days, August 31, September 30.
    let plus8 = |days: u64| (days * 86_400 - 8 * 3600) << 32;
    let expected = [
        ("pmin", plus8(17_348)),
        ("p201707", plus8(17_348 + 31)),
        ("p201708", plus8(17_348 + 31 + 31)),
        ("p201709", plus8(17_348 + 31 + 31 + 30)),
    ];
    for ((name, bound), (y, m)) in
        expected
            .iter()
            .zip([(2017, 7), (2017, 8), (2017, 9), (2017, 10)])
    {
        // And by chrono, from the wall-clock time at +08:00.
        let start = FixedOffset::east_opt(8 * 3600)
            .unwrap()
            .with_ymd_and_hms(y, m, 1, 0, 0, 0)
            .single()
            .unwrap();
        assert_eq!((start.timestamp() as u64) << 32, *bound, "{name}");
        let partition = p.partitions.iter().find(|b| b.name == *name).unwrap();
        assert_eq!(partition.less_than, Some(*bound), "{name}");
        assert_eq!(
            partition.ends_at.as_deref(),
            Some(
                start
                    .with_timezone(&Utc)
                    .format("%Y-%m-%dT%H:%M:%SZ")
                    .to_string()
                    .as_str()
            )
        );
    }
    // p201707 holds July only: from pmin's bound to 2017-08-01 00:00:00 +08:00.
    assert_eq!(
        p.partitions[0].ends_at.as_deref(),
        Some("2017-06-30T16:00:00Z")
    );
    assert_eq!(
        p.partitions[1].ends_at.as_deref(),
        Some("2017-07-31T16:00:00Z")
    );
    assert_eq!(p.partitions[1].period_start, Some(date(2017, 7, 1)));
    check_against(&p, Period::Month, TestZone::Fixed(8 * 3600), 0);
}

#[test]
fn day_and_month_edges_with_leap_years() {
    let p = plan(date(2020, 2, 28), date(2020, 3, 1), Period::Day, "UTC");
    assert_eq!(
        names(&p),
        ["pmin", "p20200228", "p20200229", "p20200301", "pmax"]
    );
    check_against(&p, Period::Day, TestZone::Fixed(0), 0);

    // 2100 is not a leap year (divisible by 100, not by 400).
    let p = plan(date(2100, 2, 27), date(2100, 3, 1), Period::Day, "UTC");
    assert_eq!(
        names(&p),
        ["pmin", "p21000227", "p21000228", "p21000301", "pmax"]
    );
    check_against(&p, Period::Day, TestZone::Fixed(0), 0);

    // February's width in seconds: 29 days in 2020, 28 in 2100, 29 in 2000.
    for (year, days) in [(2020, 29u64), (2100, 28), (2000, 29), (2019, 28)] {
        let p = plan(date(year, 1, 1), date(year, 2, 1), Period::Month, "UTC");
        let jan = p.partitions[1].less_than.unwrap() >> 32;
        let feb = p.partitions[2].less_than.unwrap() >> 32;
        assert_eq!(feb - jan, days * 86_400, "February {year}");
    }
}

#[test]
fn iso_week_names_across_year_boundaries() {
    // (a day, its ISO week's Monday, the name)
    let cases = [
        (date(2020, 12, 31), date(2020, 12, 28), "p2020w53"),
        (date(2021, 1, 3), date(2020, 12, 28), "p2020w53"),
        (date(2021, 1, 4), date(2021, 1, 4), "p2021w01"),
        (date(2019, 12, 30), date(2019, 12, 30), "p2020w01"),
        (date(2020, 1, 1), date(2019, 12, 30), "p2020w01"),
        (date(2019, 12, 29), date(2019, 12, 23), "p2019w52"),
        (date(2015, 12, 31), date(2015, 12, 28), "p2015w53"),
        (date(2017, 7, 5), date(2017, 7, 3), "p2017w27"),
    ];
    for (day, monday, name) in cases {
        assert_eq!(monday.weekday(), Weekday::Mon);
        let p = plan(day, day, Period::Week, "UTC");
        assert_eq!(names(&p), ["pmin", name, "pmax"], "{day}");
        assert_eq!(p.partitions[1].period_start, Some(monday));
        check_against(&p, Period::Week, TestZone::Fixed(0), 0);
    }
    // A run across New Year has consecutive, unique weeks.
    let p = plan(date(2020, 12, 20), date(2021, 1, 12), Period::Week, "UTC");
    assert_eq!(
        names(&p),
        [
            "pmin", "p2020w51", "p2020w52", "p2020w53", "p2021w01", "p2021w02", "pmax"
        ]
    );
}

#[test]
fn periods_parse_and_print() {
    for (text, period) in [
        ("day", Period::Day),
        ("daily", Period::Day),
        ("Week", Period::Week),
        ("weekly", Period::Week),
        (" MONTH ", Period::Month),
        ("monthly", Period::Month),
    ] {
        assert_eq!(text.parse::<Period>().unwrap(), period);
    }
    for period in [Period::Day, Period::Week, Period::Month] {
        assert_eq!(period.to_string().parse::<Period>().unwrap(), period);
    }
    let err = "year".parse::<Period>().unwrap_err();
    assert!(err.contains("year"), "{err}");
    assert_eq!(Period::Week.start_of(date(2021, 1, 3)), date(2020, 12, 28));
    assert_eq!(Period::Month.start_of(date(2021, 1, 31)), date(2021, 1, 1));
    assert_eq!(Period::Day.start_of(date(2021, 1, 31)), date(2021, 1, 31));
}

// ---------------------------------------------------------------------------------------------
// Zones
// ---------------------------------------------------------------------------------------------

#[test]
fn shanghai_is_plus_eight() {
    let named = plan(
        date(2017, 1, 1),
        date(2018, 12, 1),
        Period::Month,
        "Asia/Shanghai",
    );
    let fixed = plan(date(2017, 1, 1), date(2018, 12, 1), Period::Month, "+08:00");
    assert_eq!(named.zone, "Asia/Shanghai");
    assert_eq!(fixed.zone, "+08:00");
    assert_eq!(named.partitions, fixed.partitions);
    check_against(
        &named,
        Period::Month,
        TestZone::Named(chrono_tz::Asia::Shanghai),
        0,
    );
}

#[test]
fn negative_and_half_hour_offsets() {
    for (text, east) in [("-05:30", -(5 * 3600 + 1800)), ("+05:45", 5 * 3600 + 2700)] {
        let p = plan(date(2021, 1, 1), date(2021, 3, 31), Period::Week, text);
        check_against(&p, Period::Week, TestZone::Fixed(east), 0);
    }
}

#[test]
fn berlin_days_across_dst_changes() {
    let berlin = TestZone::Named(chrono_tz::Europe::Berlin);
    // Spring: 2021-03-28 has 23 hours. Autumn: 2021-10-31 has 25.
    for (from, to, short_or_long_day, hours) in [
        (
            date(2021, 3, 26),
            date(2021, 3, 30),
            date(2021, 3, 28),
            23u64,
        ),
        (
            date(2021, 10, 29),
            date(2021, 11, 2),
            date(2021, 10, 31),
            25,
        ),
    ] {
        let p = plan(from, to, Period::Day, "Europe/Berlin");
        check_against(&p, Period::Day, berlin, 0);
        let at = p
            .partitions
            .iter()
            .position(|b| b.period_start == Some(short_or_long_day))
            .unwrap();
        let width =
            (p.partitions[at].less_than.unwrap() - p.partitions[at - 1].less_than.unwrap()) >> 32;
        assert_eq!(width, hours * 3600, "{short_or_long_day}");
        // Days either side are 24 hours.
        let before = (p.partitions[at - 1].less_than.unwrap()
            - p.partitions[at - 2].less_than.unwrap())
            >> 32;
        assert_eq!(before, 24 * 3600);
    }
    // Midnight in Berlin is 23:00 UTC in winter and 22:00 UTC in summer.
    let p = plan(
        date(2021, 3, 27),
        date(2021, 3, 28),
        Period::Day,
        "Europe/Berlin",
    );
    assert_eq!(
        p.partitions[1].ends_at.as_deref(),
        Some("2021-03-27T23:00:00Z")
    );
    assert_eq!(
        p.partitions[2].ends_at.as_deref(),
        Some("2021-03-28T22:00:00Z")
    );
}

#[test]
fn a_period_starting_in_a_gap_starts_when_the_day_begins() {
    // Sao Paulo skipped 2018-11-04 00:00..01:00 (-03 -> -02): day 2018-11-03 ends, and
    // 2018-11-04 begins, at 01:00 -02:00 = 03:00 UTC.
    let tz = chrono_tz::America::Sao_Paulo;
    assert_eq!(
        tz.from_local_datetime(&midnight(date(2018, 11, 4))),
        LocalResult::None
    );
    let begins = tz
        .with_ymd_and_hms(2018, 11, 4, 1, 0, 0)
        .single()
        .unwrap()
        .with_timezone(&Utc);
    let p = plan(
        date(2018, 11, 3),
        date(2018, 11, 4),
        Period::Day,
        "America/Sao_Paulo",
    );
    assert_eq!(names(&p), ["pmin", "p20181103", "p20181104", "pmax"]);
    assert_eq!(p.partitions[1].less_than, Some(bound(begins, 0)));
    assert_eq!(
        p.partitions[1].ends_at.as_deref(),
        Some("2018-11-04T03:00:00Z")
    );
    // 2018-11-04 itself lasts 23 hours: 01:00 -02:00 to 2018-11-05 00:00 -02:00.
    let day4 = (p.partitions[2].less_than.unwrap() - p.partitions[1].less_than.unwrap()) >> 32;
    assert_eq!(day4, 23 * 3600);
}

// ---------------------------------------------------------------------------------------------
// Layouts and limits
// ---------------------------------------------------------------------------------------------

#[test]
fn custom_epoch_shifts_every_bound() {
    let epoch = Utc
        .with_ymd_and_hms(2020, 1, 1, 0, 0, 0)
        .single()
        .unwrap()
        .timestamp() as u64;
    let layout = Layout::new(12, epoch).unwrap();
    let p = PartitionPlan::new(
        date(2020, 1, 1),
        date(2020, 6, 30),
        Period::Month,
        &zone("+08:00"),
        &layout,
    )
    .unwrap();
    check_against(&p, Period::Month, TestZone::Fixed(8 * 3600), epoch);
    // January at +08:00 starts 8 hours before the epoch: no pmin, whose bound would be 0. It
    // ends 2020-01-31T16:00:00Z: 30 days 16 hours after the epoch.
    assert_eq!(p.partitions[0].name, "p202001");
    assert_eq!(
        p.partitions[0].less_than,
        Some((30 * 86_400 + 16 * 3600) << 32)
    );
}

#[test]
fn service_bits_do_not_move_bounds() {
    let plans: Vec<PartitionPlan> = [1u8, 10, 22, 31]
        .into_iter()
        .map(|n| {
            PartitionPlan::new(
                date(2024, 1, 1),
                date(2024, 3, 1),
                Period::Week,
                &Zone::UTC,
                &Layout::new(n, 0).unwrap(),
            )
            .unwrap()
        })
        .collect();
    for p in &plans[1..] {
        assert_eq!(p, &plans[0]);
    }
}

#[test]
fn reversed_range_is_refused() {
    let err = PartitionPlan::new(
        date(2020, 2, 1),
        date(2020, 1, 31),
        Period::Day,
        &Zone::UTC,
        &Layout::default(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        PlanError::Reversed {
            from: date(2020, 2, 1),
            to: date(2020, 1, 31)
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("2020-02-01") && message.contains("2020-01-31"),
        "{message}"
    );
}

#[test]
fn periods_before_the_epoch_are_refused() {
    let epoch = Utc
        .with_ymd_and_hms(2020, 1, 1, 0, 0, 0)
        .single()
        .unwrap()
        .timestamp() as u64;
    let layout = Layout::new(10, epoch).unwrap();
    let month = |from, to| PartitionPlan::new(from, to, Period::Month, &Zone::UTC, &layout);
    // December 2019 ends exactly at the epoch: its bound would be 0.
    assert_eq!(
        month(date(2019, 12, 1), date(2019, 12, 31)).unwrap_err(),
        PlanError::BeforeEpoch(date(2019, 12, 1))
    );
    assert!(matches!(
        month(date(2019, 6, 1), date(2020, 3, 1)),
        Err(PlanError::BeforeEpoch(_))
    ));
    // January 2020 starts at the epoch and gets a positive bound, but no pmin.
    let jan = month(date(2020, 1, 1), date(2020, 1, 1)).unwrap();
    assert_eq!(names(&jan), ["p202001", "pmax"]);
    assert_eq!(jan.partitions[0].less_than, Some((31 * 86_400) << 32));
    // February starts after it: pmin ends where it starts.
    let feb = month(date(2020, 2, 1), date(2020, 2, 1)).unwrap();
    assert_eq!(names(&feb), ["pmin", "p202002", "pmax"]);
    assert_eq!(feb.partitions[0].less_than, Some((31 * 86_400) << 32));
    // A period that straddles the epoch still has a positive bound.
    let mid = Layout::new(10, epoch + 14 * 86_400).unwrap();
    let p = PartitionPlan::new(
        date(2020, 1, 1),
        date(2020, 1, 1),
        Period::Month,
        &Zone::UTC,
        &mid,
    )
    .unwrap();
    assert_eq!(p.partitions[0].less_than, Some((17 * 86_400) << 32));
    // The Unix epoch itself: a day east of Greenwich that ends before 1970 is refused.
    assert!(matches!(
        PartitionPlan::new(
            date(1969, 12, 31),
            date(1969, 12, 31),
            Period::Day,
            &zone("+14:00"),
            &Layout::default()
        ),
        Err(PlanError::BeforeEpoch(_))
    ));
}

#[test]
fn periods_past_the_layouts_last_second_are_refused() {
    // The default layout's last second is 2106-02-07T06:28:15Z.
    let ok = plan(date(2106, 2, 6), date(2106, 2, 6), Period::Day, "UTC");
    assert_eq!(
        ok.partitions[1].less_than,
        Some(((u64::from(u32::MAX) / 86_400) * 86_400) << 32)
    );
    let err = PartitionPlan::new(
        date(2106, 2, 6),
        date(2106, 2, 7),
        Period::Day,
        &Zone::UTC,
        &Layout::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, PlanError::OutOfRange(d, IdError::TimeOutOfRange { .. }) if d == date(2106, 2, 7)),
        "{err:?}"
    );
}

#[test]
fn at_most_8192_partitions_with_pmin_and_pmax() {
    let from = date(2000, 1, 1);
    let p = plan(from, from + Days::new(8189), Period::Day, "UTC");
    assert_eq!(p.partitions.len(), 8192);
    let days = |span, layout: &Layout| {
        PartitionPlan::new(
            from,
            from + Days::new(span),
            Period::Day,
            &Zone::UTC,
            layout,
        )
    };
    assert_eq!(
        days(8190, &Layout::default()).unwrap_err(),
        PlanError::TooMany
    );
    // Without pmin (the first day starts at the epoch) one more day fits.
    let epoch = Utc.from_utc_datetime(&midnight(from)).timestamp() as u64;
    let at_epoch = Layout::new(10, epoch).unwrap();
    assert_eq!(days(8190, &at_epoch).unwrap().partitions.len(), 8192);
    assert_eq!(days(8191, &at_epoch).unwrap_err(), PlanError::TooMany);
}

#[test]
fn bounds_above_i64_max_are_exact() {
    // After 2038-01-19 the seconds field uses the top bit: bounds exceed i64::MAX.
    let p = plan(date(2040, 1, 1), date(2040, 1, 1), Period::Month, "UTC");
    let expected = bound(
        Utc.with_ymd_and_hms(2040, 2, 1, 0, 0, 0).single().unwrap(),
        0,
    );
    assert!(expected > i64::MAX as u64);
    assert_eq!(p.partitions[1].less_than, Some(expected));
    let clause = p.partition_clause();
    assert!(
        clause.contains(&format!("VALUES LESS THAN ({expected})")),
        "{clause}"
    );
}

// ---------------------------------------------------------------------------------------------
// SQL text
// ---------------------------------------------------------------------------------------------

#[test]
fn partition_clause_lists_every_bound_and_pmax() {
    let p = plan(date(2017, 7, 1), date(2017, 9, 1), Period::Month, "+08:00");
    let clause = p.partition_clause();
    assert!(
        clause.starts_with("PARTITION BY RANGE (`id`) ("),
        "{clause}"
    );
    assert!(clause.ends_with(')'), "{clause}");
    let mut last_at = 0;
    for b in &p.partitions[..4] {
        let line = format!(
            "PARTITION `{}` VALUES LESS THAN ({})",
            b.name,
            b.less_than.unwrap()
        );
        let at = clause
            .find(&line)
            .unwrap_or_else(|| panic!("{line} missing: {clause}"));
        assert!(at > last_at, "partitions in order");
        last_at = at;
        assert!(clause.contains(b.ends_at.as_deref().unwrap()));
    }
    let pmax = clause
        .find("PARTITION `pmax` VALUES LESS THAN MAXVALUE")
        .unwrap();
    assert!(pmax > last_at);
    assert_eq!(clause.matches("PARTITION `").count(), 5);
    // The brief's bound literally.
    let aug1 = 1_501_516_800u64; // 2017-07-31T16:00:00Z
    assert!(clause.contains(&format!("({})", aug1 << 32)));
}

#[test]
fn create_table_has_the_id_key_and_the_partitions() {
    let p = plan(date(2024, 2, 28), date(2024, 3, 1), Period::Day, "UTC");
    let table = Ident::new("app_logs").unwrap();
    let settings = logstamp::config::Settings::defaults().unwrap();
    let sql = create_log_table_sql(&table, &settings.store.columns, true, &p);
    for column in &settings.store.columns {
        assert!(sql.contains(&format!("`{}` {} NULL", column.name, column.sql_type())));
    }
    assert!(sql.contains("`payload` JSON NULL"), "{sql}");
    assert!(!create_log_table_sql(&table, &[], false, &p).contains("payload"));
    assert!(sql.starts_with("CREATE TABLE `app_logs` ("), "{sql}");
    assert!(sql.contains("`id` BIGINT UNSIGNED NOT NULL"), "{sql}");
    assert!(sql.contains("PRIMARY KEY (`id`)"), "{sql}");
    assert!(sql.contains(&p.partition_clause()), "{sql}");
    assert!(sql.trim_end().ends_with(';'), "{sql}");
    for b in &p.partitions[..p.partitions.len() - 1] {
        assert!(sql.contains(&b.less_than.unwrap().to_string()));
        assert!(sql.contains(&format!("`{}`", b.name)));
    }
    assert!(sql.contains("p20240229"));
    assert!(sql.contains("`pmax` VALUES LESS THAN MAXVALUE"));
    assert_eq!(sql.matches(';').count(), 1, "one statement");
}

#[test]
fn plans_serialize_with_exact_numbers() {
    let p = plan(date(2040, 1, 1), date(2040, 2, 1), Period::Month, "UTC");
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["period"], "month");
    assert_eq!(json["zone"], "UTC");
    let parts = json["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 4);
    assert_eq!(parts[0]["name"], "pmin");
    assert!(parts[0]["period_start"].is_null());
    assert_eq!(parts[1]["less_than"].as_u64(), p.partitions[1].less_than);
    assert_eq!(parts[1]["period_start"], "2040-01-01");
    assert!(parts[3]["less_than"].is_null());
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

const ZONES: [TestZone; 8] = [
    TestZone::Fixed(0),
    TestZone::Fixed(8 * 3600),
    TestZone::Fixed(-(5 * 3600 + 1800)),
    TestZone::Fixed(14 * 3600),
    TestZone::Fixed(-12 * 3600),
    TestZone::Named(chrono_tz::Asia::Shanghai),
    TestZone::Named(chrono_tz::America::New_York),
    TestZone::Named(chrono_tz::Europe::Berlin),
];

fn period_strategy() -> impl Strategy<Value = Period> {
    prop_oneof![Just(Period::Day), Just(Period::Week), Just(Period::Month)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_date_falls_in_its_partition(
        from_days in 40u64..(130 * 365),
        span in 0u64..200,
        period in period_strategy(),
        which in 0usize..ZONES.len(),
        epoch_days in prop_oneof![Just(0u64), 0u64..30],
    ) {
        let tz = ZONES[which];
        let from = date(1970, 1, 1) + Days::new(from_days);
        let to = from + Days::new(span);
        let epoch = epoch_days * 86_400;
        let layout = Layout::new(10, epoch).unwrap();
        let z: Zone = tz.name().parse().unwrap();
        let plan = PartitionPlan::new(from, to, period, &z, &layout).unwrap();
        check_against(&plan, period, tz, epoch);

        let bounded = &plan.partitions[..plan.partitions.len() - 1];
        let real = periods(&plan);
        // Names unique, bounds strictly increasing.
        let mut seen = std::collections::HashSet::new();
        prop_assert!(plan.partitions.iter().all(|p| seen.insert(p.name.clone())));
        prop_assert!(bounded.windows(2).all(|w| w[0].less_than < w[1].less_than));
        prop_assert!(bounded.iter().all(|p| p.less_than.unwrap() > 0));
        // The first partition starts at or before `from`, the last ends after `to`.
        prop_assert!(real[0].period_start.unwrap() <= from);
        prop_assert!(next_start(period, real[real.len() - 1].period_start.unwrap()) > to);

        // Every date from `from` to `to`: its first and last second's IDs are in the partition
        // whose period contains it (above the previous bound, pmin's for the first period).
        let mut d = from;
        while d <= to {
            let i = real
                .iter()
                .rposition(|p| p.period_start.unwrap() <= d)
                .unwrap();
            let first_second = tz.day_start(d).unwrap().timestamp() as u64;
            let last_second = tz.day_start(d + Days::new(1)).unwrap().timestamp() as u64 - 1;
            let first_id = first_second.saturating_sub(epoch) << 32;
            let last_id = ((last_second - epoch) << 32) | u64::from(u32::MAX);
            prop_assert!(real[i].less_than.unwrap() > last_id, "{} {}", d, real[i].name);
            prop_assert!(real[i].less_than.unwrap() > first_id);
            let offset = bounded.len() - real.len();
            if let Some(previous) = (i + offset).checked_sub(1) {
                prop_assert!(bounded[previous].less_than.unwrap() <= first_id, "{} {}", d, real[i].name);
            }
            d = d + Days::new(1);
        }
    }

    #[test]
    fn period_names_match_the_calendar(days in 0u64..(130 * 365), period in period_strategy()) {
        let d = date(1970, 1, 1) + Days::new(days);
        let start = period.start_of(d);
        let expected = match period {
            Period::Day => format!("p{:04}{:02}{:02}", d.year(), d.month(), d.day()),
            Period::Week => {
                prop_assert_eq!(start.weekday(), Weekday::Mon);
                prop_assert!(start <= d && d < start + Days::new(7));
                let w = d.iso_week();
                format!("p{:04}w{:02}", w.year(), w.week())
            }
            Period::Month => {
                prop_assert_eq!(start, date(d.year(), d.month(), 1));
                format!("p{:04}{:02}", d.year(), d.month())
            }
        };
        prop_assert_eq!(period.partition_name(start), expected);
        prop_assert_eq!(period.next_start(start), Some(next_start(period, start)));
    }
}

#[test]
fn the_calendars_ends_are_errors_not_panics() {
    for period in [Period::Day, Period::Week, Period::Month] {
        let first = PartitionPlan::new(
            NaiveDate::MIN,
            NaiveDate::MIN,
            period,
            &Zone::UTC,
            &Layout::default(),
        );
        assert!(
            matches!(first, Err(PlanError::BeforeEpoch(_))),
            "{period}: {first:?}"
        );
        let last = PartitionPlan::new(
            NaiveDate::MAX,
            NaiveDate::MAX,
            period,
            &Zone::UTC,
            &Layout::default(),
        );
        assert!(
            matches!(
                last,
                Err(PlanError::DateOverflow(_) | PlanError::OutOfRange(..))
            ),
            "{period}: {last:?}"
        );
    }
}
