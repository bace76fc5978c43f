//! `logstamp::time`: the times and zones users type.
//!
//! Expected instants are computed here from calendar facts with chrono / chrono-tz directly,
//! never copied from the code under test.

use chrono::{
    DateTime, Datelike, Duration, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, NaiveTime,
    TimeZone, Timelike, Utc, Weekday,
};
use chrono_tz::America::{New_York, Sao_Paulo};
use chrono_tz::Asia::Shanghai;
use chrono_tz::Europe::Berlin;
use chrono_tz::Pacific::Apia;
use chrono_tz::Tz;
use proptest::prelude::*;

use logstamp::time::{
    TimeError, Zone, ceil_seconds, floor_seconds, format_utc, parse_month_or_day, parse_time,
    parse_time_at,
};

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).single().unwrap()
}

fn naive(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> NaiveDateTime {
    NaiveDate::from_ymd_opt(y, mo, d)
        .unwrap()
        .and_hms_opt(h, mi, s)
        .unwrap()
}

fn zone(text: &str) -> Zone {
    text.parse()
        .unwrap_or_else(|e| panic!("zone {text:?} refused: {e}"))
}

fn parse(text: &str, zone_text: &str) -> DateTime<Utc> {
    parse_time(text, &zone(zone_text))
        .unwrap_or_else(|e| panic!("{text:?} in {zone_text} refused: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Forms of time
// ---------------------------------------------------------------------------------------------

#[test]
fn date_alone_is_midnight_in_the_zone() {
    assert_eq!(parse("2020-08-05", "UTC"), utc(2020, 8, 5, 0, 0, 0));
    // Midnight at +08:00 is 16:00 the day before in UTC.
    assert_eq!(parse("2020-08-05", "+08:00"), utc(2020, 8, 4, 16, 0, 0));
    assert_eq!(parse("2020-08-05", "-05:30"), utc(2020, 8, 5, 5, 30, 0));
}

#[test]
fn date_and_time_with_space_or_t() {
    let expected = utc(2020, 8, 5, 13, 14, 15);
    assert_eq!(parse("2020-08-05 13:14:15", "UTC"), expected);
    assert_eq!(parse("2020-08-05T13:14:15", "UTC"), expected);
    assert_eq!(
        parse("2020-08-05T13:14:15", "+08:00"),
        expected - Duration::hours(8)
    );
}

#[test]
fn fractional_seconds_are_kept() {
    let whole = utc(2020, 8, 5, 13, 14, 15);
    assert_eq!(
        parse("2020-08-05 13:14:15.250", "UTC"),
        whole + Duration::milliseconds(250)
    );
    assert_eq!(
        parse("2020-08-05T13:14:15.123456789", "UTC"),
        whole + Duration::nanoseconds(123_456_789)
    );
    assert_eq!(
        parse("2020-08-05 13:14:15.5", "+01:00"),
        whole - Duration::hours(1) + Duration::milliseconds(500)
    );
}

#[test]
fn surrounding_whitespace_is_ignored() {
    assert_eq!(parse("  2020-08-05 \n", "UTC"), utc(2020, 8, 5, 0, 0, 0));
    assert_eq!(zone(" +08:00 "), zone("+08:00"));
}

#[test]
fn rfc3339_uses_its_own_offset_and_ignores_the_zone() {
    // The brief's example: 08:00 at +08:00 is midnight UTC.
    let cases = [
        ("2017-07-01T08:00:00+08:00", utc(2017, 7, 1, 0, 0, 0)),
        ("2017-07-01T00:00:00Z", utc(2017, 7, 1, 0, 0, 0)),
        ("2017-07-01T00:00:00-05:30", utc(2017, 7, 1, 5, 30, 0)),
        (
            "2017-07-01T00:00:00.75+00:00",
            utc(2017, 7, 1, 0, 0, 0) + Duration::milliseconds(750),
        ),
    ];
    for (text, expected) in cases {
        for zone_text in [
            "UTC",
            "+08:00",
            "-05:30",
            "America/New_York",
            "Asia/Shanghai",
        ] {
            assert_eq!(
                parse(text, zone_text),
                expected,
                "{text} with --tz {zone_text}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Zones
// ---------------------------------------------------------------------------------------------

#[test]
fn fixed_offsets_in_every_spelling() {
    // (spelling, offset east of UTC in seconds)
    let cases = [
        ("UTC", 0),
        ("utc", 0),
        ("Z", 0),
        ("+00:00", 0),
        ("-00:00", 0),
        ("+08:00", 8 * 3600),
        ("+0800", 8 * 3600),
        ("+08", 8 * 3600),
        ("-05:30", -(5 * 3600 + 30 * 60)),
        ("-0530", -(5 * 3600 + 30 * 60)),
        ("+05:45", 5 * 3600 + 45 * 60),
        ("+14:00", 14 * 3600),
        ("-12", -12 * 3600),
    ];
    let local = naive(2020, 8, 5, 12, 0, 0);
    let as_if_utc = Utc.from_utc_datetime(&local);
    for (text, east) in cases {
        let z = zone(text);
        let expected = as_if_utc - Duration::seconds(i64::from(east));
        assert_eq!(parse("2020-08-05 12:00:00", text), expected, "{text}");
        assert_eq!(z.resolve(local), expected, "{text}");
        assert_eq!(z.offset_seconds(expected), east, "{text}");
        assert_eq!(z.local(expected), local, "{text}");
    }
}

#[test]
fn zones_display_in_a_form_they_parse_back_from() {
    for text in [
        "UTC",
        "+08:00",
        "-05:30",
        "Asia/Shanghai",
        "America/New_York",
        "Europe/Berlin",
    ] {
        let z = zone(text);
        assert_eq!(z.to_string(), text);
        assert_eq!(zone(&z.to_string()), z);
    }
    // Other spellings normalise.
    assert_eq!(zone("+0800").to_string(), "+08:00");
    assert_eq!(zone("+08").to_string(), "+08:00");
    assert_eq!(zone("Z"), Zone::UTC);
    assert_eq!(zone("utc"), Zone::UTC);
}

#[test]
fn iana_zones_follow_their_rules() {
    // (zone, local wall time, zone's own answer)
    let cases: [(&str, Tz, NaiveDateTime); 6] = [
        ("Asia/Shanghai", Shanghai, naive(2020, 1, 15, 9, 0, 0)),
        ("Asia/Shanghai", Shanghai, naive(2020, 7, 15, 9, 0, 0)),
        ("America/New_York", New_York, naive(2020, 1, 15, 9, 0, 0)),
        ("America/New_York", New_York, naive(2020, 7, 15, 9, 0, 0)),
        ("Europe/Berlin", Berlin, naive(2020, 1, 15, 9, 0, 0)),
        ("Europe/Berlin", Berlin, naive(2020, 7, 15, 9, 0, 0)),
    ];
    for (name, tz, local) in cases {
        let expected = tz
            .from_local_datetime(&local)
            .single()
            .unwrap()
            .with_timezone(&Utc);
        let text = local.format("%Y-%m-%d %H:%M:%S").to_string();
        assert_eq!(parse(&text, name), expected, "{text} in {name}");
    }
    // And the offsets themselves, as calendar facts.
    assert_eq!(
        parse("2020-07-15 09:00:00", "Asia/Shanghai"),
        utc(2020, 7, 15, 1, 0, 0)
    );
    assert_eq!(
        parse("2020-07-15 09:00:00", "America/New_York"),
        utc(2020, 7, 15, 13, 0, 0)
    ); // EDT, -4
    assert_eq!(
        parse("2020-01-15 09:00:00", "America/New_York"),
        utc(2020, 1, 15, 14, 0, 0)
    ); // EST, -5
    assert_eq!(
        parse("2020-07-15 09:00:00", "Europe/Berlin"),
        utc(2020, 7, 15, 7, 0, 0)
    ); // CEST, +2
    assert_eq!(
        parse("2020-01-15 09:00:00", "Europe/Berlin"),
        utc(2020, 1, 15, 8, 0, 0)
    ); // CET, +1
    let ny = zone("America/New_York");
    assert_eq!(ny.offset_seconds(utc(2020, 7, 15, 13, 0, 0)), -4 * 3600);
    assert_eq!(ny.offset_seconds(utc(2020, 1, 15, 14, 0, 0)), -5 * 3600);
    assert_eq!(
        ny.local(utc(2020, 7, 15, 13, 0, 0)),
        naive(2020, 7, 15, 9, 0, 0)
    );
}

#[test]
fn a_time_in_a_dst_gap_is_the_first_instant_after_the_gap() {
    // New York, 2021-03-14: clocks go from 02:00 EST to 03:00 EDT, so 03:00 EDT = 07:00 UTC is
    // the first instant after the gap; the last second before it is 01:59:59 EST = 06:59:59 UTC.
    assert_eq!(
        New_York.from_local_datetime(&naive(2021, 3, 14, 2, 30, 0)),
        LocalResult::None,
        "precondition: 02:30 does not exist"
    );
    let gap_end = utc(2021, 3, 14, 7, 0, 0);
    assert_eq!(
        New_York
            .with_ymd_and_hms(2021, 3, 14, 3, 0, 0)
            .single()
            .unwrap(),
        gap_end
    );
    // Minutes without seconds are not one of the forms.
    assert!(parse_time("2021-03-14 02:30", &zone("America/New_York")).is_err());
    for text in [
        "2021-03-14 02:00:00",
        "2021-03-14 02:30:00",
        "2021-03-14T02:30:00",
        "2021-03-14 02:30:30",
        "2021-03-14 02:59:59",
        "2021-03-14 02:59:59.999",
        "2021-03-14 02:00:00.5",
    ] {
        assert_eq!(parse(text, "America/New_York"), gap_end, "{text}");
    }
    // Either side of the gap is unaffected.
    assert_eq!(
        parse("2021-03-14 01:59:59", "America/New_York"),
        gap_end - Duration::seconds(1)
    );
    assert_eq!(
        parse("2021-03-14 03:00:01", "America/New_York"),
        gap_end + Duration::seconds(1)
    );

    // Berlin, 2021-03-28: 02:00 CET -> 03:00 CEST, i.e. at 01:00 UTC.
    assert_eq!(
        parse("2021-03-28 02:30:00", "Europe/Berlin"),
        utc(2021, 3, 28, 1, 0, 0)
    );
    assert_eq!(
        parse("2021-03-28 02:15:42.25", "Europe/Berlin"),
        utc(2021, 3, 28, 1, 0, 0)
    );
}

#[test]
fn a_day_starting_in_a_gap_starts_when_the_day_really_begins() {
    // Sao Paulo moved clocks from 00:00 to 01:00 (-03 -> -02) on 2018-11-04: that day has no
    // midnight and begins at 01:00 -02:00 = 03:00 UTC.
    assert_eq!(
        Sao_Paulo.from_local_datetime(&naive(2018, 11, 4, 0, 0, 0)),
        LocalResult::None,
        "precondition: midnight does not exist"
    );
    let expected = Sao_Paulo
        .with_ymd_and_hms(2018, 11, 4, 1, 0, 0)
        .single()
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(expected, utc(2018, 11, 4, 3, 0, 0));
    assert_eq!(parse("2018-11-04", "America/Sao_Paulo"), expected);
    // The second before is still 2018-11-03 (23:59:59 -03:00).
    let before = zone("America/Sao_Paulo").local(expected - Duration::seconds(1));
    assert_eq!(before, naive(2018, 11, 3, 23, 59, 59));
}

#[test]
fn a_day_long_gap_is_crossed() {
    // Samoa skipped 2011-12-30 entirely (-10 -> +14): any time that day is the start of
    // 2011-12-31 local, 2011-12-30T10:00:00Z.
    let expected = Apia
        .with_ymd_and_hms(2011, 12, 31, 0, 0, 0)
        .single()
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(expected, utc(2011, 12, 30, 10, 0, 0));
    for text in ["2011-12-30", "2011-12-30 12:34:56", "2011-12-30 23:59:59.9"] {
        assert_eq!(parse(text, "Pacific/Apia"), expected, "{text}");
    }
}

#[test]
fn an_ambiguous_time_is_its_earlier_instant() {
    // New York, 2021-11-07: 01:00-02:00 happens twice, first in EDT (-4) then EST (-5).
    assert!(matches!(
        New_York.from_local_datetime(&naive(2021, 11, 7, 1, 30, 0)),
        LocalResult::Ambiguous(..)
    ));
    assert_eq!(
        parse("2021-11-07 01:30:00", "America/New_York"),
        utc(2021, 11, 7, 5, 30, 0)
    );
    // Berlin, 2021-10-31: 02:00-03:00 twice, first CEST (+2).
    assert_eq!(
        parse("2021-10-31 02:30:00", "Europe/Berlin"),
        utc(2021, 10, 31, 0, 30, 0)
    );
    assert_eq!(
        parse("2021-10-31 02:30:00.5", "Europe/Berlin"),
        utc(2021, 10, 31, 0, 30, 0) + Duration::milliseconds(500)
    );
}

// ---------------------------------------------------------------------------------------------
// Mistakes
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_times_are_errors_that_quote_the_input() {
    let z = Zone::UTC;
    for bad in [
        "",
        "   ",
        "yesterday",
        "2020",
        "2020-08",
        "2020/08/05",
        "05-08-2020",
        "2020-13-01",
        "2020-02-30",
        "2021-02-29",
        "2020-08-05 24:00:00",
        "2020-08-05 12:60:00",
        "2020-08-05 12:00",
        "2020-08-05 12:00:00 +08:00 extra",
        "2020-08-05T12:00:00+25:00",
        "2020-08-05 12:00:00 Asia/Shanghai",
        "2020-08-05x",
        "1596585600",
    ] {
        match parse_time(bad, &z) {
            Err(TimeError::BadTime(quoted)) => {
                assert_eq!(quoted, bad.trim(), "error quotes the input");
                let message = TimeError::BadTime(quoted).to_string();
                assert!(message.contains("YYYY-MM-DD"), "{message}");
            }
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
}

#[test]
fn bad_zones_are_errors_that_quote_the_input() {
    for bad in [
        "",
        "Mars/Olympus",
        "asia/shanghai_x",
        "+",
        "-",
        "+8",
        "+008",
        "+08:0",
        "+080000",
        "+24:00",
        "+19",
        "+08:60",
        "+08:00x",
        "+0a:00",
        "08:00",
        "UTC+8",
    ] {
        match bad.parse::<Zone>() {
            Err(TimeError::UnknownZone(quoted)) => {
                assert_eq!(quoted, bad);
                let message = TimeError::UnknownZone(quoted).to_string();
                assert!(message.contains(&format!("{bad:?}")), "{message}");
            }
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
}

#[test]
fn month_or_day() {
    let date = |y, m, d| NaiveDate::from_ymd_opt(y, m, d).unwrap();
    assert_eq!(parse_month_or_day("2017-07").unwrap(), date(2017, 7, 1));
    assert_eq!(parse_month_or_day("2017-07-15").unwrap(), date(2017, 7, 15));
    assert_eq!(
        parse_month_or_day(" 2020-02-29 ").unwrap(),
        date(2020, 2, 29)
    );
    for bad in [
        "",
        "2017",
        "2017-13",
        "2017-00",
        "2017-07-32",
        "2021-02-29",
        "07-2017",
        "2017-7x",
    ] {
        assert!(
            matches!(parse_month_or_day(bad), Err(TimeError::BadDate(..))),
            "{bad:?} accepted"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Seconds and printing
// ---------------------------------------------------------------------------------------------

#[test]
fn floor_and_ceil_seconds() {
    let t = utc(2020, 8, 5, 0, 0, 0);
    let s = 1_596_585_600; // 2020-08-05T00:00:00Z, 18479 days after 1970-01-01
    assert_eq!(i64::from(18_479) * 86_400, s);
    assert_eq!(floor_seconds(t), s);
    assert_eq!(ceil_seconds(t), s);
    for nanos in [1, 500_000_000, 999_999_999] {
        let u = t + Duration::nanoseconds(nanos);
        assert_eq!(floor_seconds(u), s, "{nanos}");
        assert_eq!(ceil_seconds(u), s + 1, "{nanos}");
    }
    // Before 1970 rounding still goes down and up, not towards zero.
    let before = utc(1970, 1, 1, 0, 0, 0) - Duration::milliseconds(500);
    assert_eq!(floor_seconds(before), -1);
    assert_eq!(ceil_seconds(before), 0);
    let exact_before = utc(1969, 12, 31, 23, 59, 59);
    assert_eq!(floor_seconds(exact_before), -1);
    assert_eq!(ceil_seconds(exact_before), -1);
}

#[test]
fn format_utc_prints_rfc3339_whole_seconds() {
    assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
    assert_eq!(format_utc(86_400 + 3_661), "1970-01-02T01:01:01Z");
    // 2017-08-01T00:00:00+08:00
    let t = FixedOffset::east_opt(8 * 3600)
        .unwrap()
        .with_ymd_and_hms(2017, 8, 1, 0, 0, 0)
        .single()
        .unwrap();
    assert_eq!(
        format_utc(u64::try_from(t.timestamp()).unwrap()),
        "2017-07-31T16:00:00Z"
    );
    // The last second of 32-bit unsigned time.
    assert_eq!(format_utc(u64::from(u32::MAX)), "2106-02-07T06:28:15Z");
}

#[test]
fn format_utc_never_panics_on_huge_seconds() {
    for s in [i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX] {
        let shown = format_utc(s);
        assert!(shown.contains(&s.to_string()), "{s}: {shown}");
    }
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// The `n`th `weekday` of a month (1-based), or the last one when `n` is 0.
fn nth_weekday(year: i32, month: u32, weekday: Weekday, n: u8) -> NaiveDate {
    if n == 0 {
        let next_month = if month == 12 {
            NaiveDate::from_ymd_opt(year + 1, 1, 1)
        } else {
            NaiveDate::from_ymd_opt(year, month + 1, 1)
        }
        .unwrap();
        let mut d = next_month.pred_opt().unwrap();
        while d.weekday() != weekday {
            d = d.pred_opt().unwrap();
        }
        d
    } else {
        NaiveDate::from_weekday_of_month_opt(year, month, weekday, n).unwrap()
    }
}

fn any_local() -> impl Strategy<Value = NaiveDateTime> {
    // 1971 ..= 2099, any second and nanosecond.
    (0i64..(129 * 365 * 86_400), 0u32..1_000_000_000).prop_map(|(s, ns)| {
        DateTime::from_timestamp(31_536_000 + s, ns)
            .unwrap()
            .naive_utc()
    })
}

proptest! {
    #[test]
    fn fixed_offset_times_round_trip(local in any_local(), minutes in -(14i32 * 60)..=(14 * 60)) {
        let offset = FixedOffset::east_opt(minutes * 60).unwrap();
        let sign = if minutes < 0 { '-' } else { '+' };
        let text_zone = format!("{sign}{:02}:{:02}", minutes.abs() / 60, minutes.abs() % 60);
        let z: Zone = text_zone.parse().unwrap();
        let expected = offset.from_local_datetime(&local).single().unwrap().with_timezone(&Utc);
        let text = local.format("%Y-%m-%d %H:%M:%S%.9f").to_string();
        prop_assert_eq!(parse_time(&text, &z).unwrap(), expected);
        // The same instant written in RFC 3339 parses to itself whatever the zone argument.
        let rfc = expected.with_timezone(&offset).to_rfc3339();
        prop_assert_eq!(parse_time(&rfc, &Zone::UTC).unwrap(), expected);
        // Whole-second times print back as themselves.
        let whole = expected.with_nanosecond(0).unwrap();
        let printed = format_utc(u64::try_from(whole.timestamp()).unwrap());
        prop_assert_eq!(DateTime::parse_from_rfc3339(&printed).unwrap(), whole);
        prop_assert!(floor_seconds(expected) <= ceil_seconds(expected));
        prop_assert!(ceil_seconds(expected) - floor_seconds(expected) <= 1);
    }

    #[test]
    fn iana_times_resolve_as_the_zone_says(local in any_local(), which in 0usize..3) {
        let (name, tz) = [("America/New_York", New_York), ("Europe/Berlin", Berlin),
            ("Asia/Shanghai", Shanghai)][which];
        let z: Zone = name.parse().unwrap();
        let got = z.resolve(local);
        match tz.from_local_datetime(&local) {
            LocalResult::Single(t) => prop_assert_eq!(got, t.with_timezone(&Utc)),
            LocalResult::Ambiguous(earlier, _) => prop_assert_eq!(got, earlier.with_timezone(&Utc)),
            LocalResult::None => {
                // First instant after the gap: at or after it the wall clock is past `local`,
                // a nanosecond before it the wall clock had not reached `local`.
                prop_assert!(got.with_timezone(&tz).naive_local() > local);
                let just_before = got - Duration::nanoseconds(1);
                prop_assert!(just_before.with_timezone(&tz).naive_local() < local);
            }
        }
    }

    /// Every wall time in the spring-forward hour, to the nanosecond, maps to the gap's end.
    #[test]
    fn spring_forward_gap_maps_to_its_end(
        year in 2007i32..=2037,
        into_gap in 0i64..3_600_000_000_000,
        berlin in any::<bool>(),
    ) {
        let (name, day, utc_hour) = if berlin {
            // EU: last Sunday of March, 02:00 CET -> 03:00 CEST (01:00 UTC).
            ("Europe/Berlin", nth_weekday(year, 3, Weekday::Sun, 0), 1)
        } else {
            // US since 2007: second Sunday of March, 02:00 EST -> 03:00 EDT (07:00 UTC).
            ("America/New_York", nth_weekday(year, 3, Weekday::Sun, 2), 7)
        };
        let local = day.and_time(NaiveTime::from_hms_opt(2, 0, 0).unwrap())
            + Duration::nanoseconds(into_gap);
        let expected = Utc.from_utc_datetime(&day.and_hms_opt(utc_hour, 0, 0).unwrap());
        let z: Zone = name.parse().unwrap();
        prop_assert_eq!(z.resolve(local), expected);
        let text = local.format("%Y-%m-%d %H:%M:%S%.f").to_string();
        prop_assert_eq!(parse_time(&text, &z).unwrap(), expected);
    }

    /// Every wall time in the fall-back hour is its first (summer-time) occurrence.
    #[test]
    fn fall_back_hour_is_the_earlier_instant(
        year in 2007i32..=2037,
        into_hour in 0i64..3_600_000_000_000,
    ) {
        // US since 2007: first Sunday of November, 02:00 EDT -> 01:00 EST.
        let day = nth_weekday(year, 11, Weekday::Sun, 1);
        let local = day.and_time(NaiveTime::from_hms_opt(1, 0, 0).unwrap())
            + Duration::nanoseconds(into_hour);
        let expected = Utc.from_utc_datetime(&(local + Duration::hours(4)));
        let z: Zone = "America/New_York".parse().unwrap();
        prop_assert_eq!(z.resolve(local), expected);
    }
}

#[test]
fn nth_weekday_helper_matches_known_dates() {
    // Guards the test helper itself against the dates of the 2021 transitions.
    assert_eq!(
        nth_weekday(2021, 3, Weekday::Sun, 2),
        NaiveDate::from_ymd_opt(2021, 3, 14).unwrap()
    );
    assert_eq!(
        nth_weekday(2021, 3, Weekday::Sun, 0),
        NaiveDate::from_ymd_opt(2021, 3, 28).unwrap()
    );
    assert_eq!(
        nth_weekday(2021, 11, Weekday::Sun, 1),
        NaiveDate::from_ymd_opt(2021, 11, 7).unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// Relative times: now, today, yesterday, tomorrow, -DURATION, +DURATION, DURATION ago
// ---------------------------------------------------------------------------------------------

fn relative(text: &str, zone_text: &str, now: DateTime<Utc>) -> DateTime<Utc> {
    parse_time_at(text, &zone(zone_text), now).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

#[test]
fn durations_count_back_or_forward_from_now() {
    let now = utc(2026, 11, 24, 20, 0, 0);
    assert_eq!(relative("now", "UTC", now), now);
    assert_eq!(relative(" NOW ", "UTC", now), now);
    assert_eq!(relative("-15m", "UTC", now), utc(2026, 11, 24, 19, 45, 0));
    assert_eq!(relative("-2h", "UTC", now), utc(2026, 11, 24, 18, 0, 0));
    assert_eq!(
        relative("-2h 30m", "UTC", now),
        utc(2026, 11, 24, 17, 30, 0)
    );
    assert_eq!(relative("+1day", "UTC", now), utc(2026, 11, 25, 20, 0, 0));
    assert_eq!(relative("2h ago", "UTC", now), utc(2026, 11, 24, 18, 0, 0));
    assert_eq!(
        relative("90s ago", "UTC", now),
        utc(2026, 11, 24, 19, 58, 30)
    );
    // The explorer's URL form: `now-DURATION`, `now+DURATION`.
    for (text, want) in [
        ("now-15m", utc(2026, 11, 24, 19, 45, 0)),
        ("NOW-24h", utc(2026, 11, 23, 20, 0, 0)),
        ("now - 2h 30m", utc(2026, 11, 24, 17, 30, 0)),
        ("now+1day", utc(2026, 11, 25, 20, 0, 0)),
    ] {
        assert_eq!(relative(text, "UTC", now), want, "{text}");
    }
    // A zone does not change a duration.
    assert_eq!(
        relative("-15m", "Asia/Shanghai", now),
        utc(2026, 11, 24, 19, 45, 0)
    );
}

#[test]
fn today_and_yesterday_are_midnights_in_the_zone() {
    // 20:00 UTC is already the next day in Shanghai (04:00 on the 25th).
    let now = utc(2026, 11, 24, 20, 0, 0);
    assert_eq!(relative("today", "UTC", now), utc(2026, 11, 24, 0, 0, 0));
    assert_eq!(
        relative("yesterday", "UTC", now),
        utc(2026, 11, 23, 0, 0, 0)
    );
    assert_eq!(relative("tomorrow", "UTC", now), utc(2026, 11, 25, 0, 0, 0));
    assert_eq!(
        relative("today", "Asia/Shanghai", now),
        utc(2026, 11, 24, 16, 0, 0)
    );
    assert_eq!(
        relative("Yesterday", "+08:00", now),
        utc(2026, 11, 23, 16, 0, 0)
    );
    // New York on the day clocks go back: the day is 25 hours long, and starts at 04:00 UTC.
    let after_fall_back = utc(2026, 11, 1, 12, 0, 0);
    assert_eq!(
        relative("today", "America/New_York", after_fall_back),
        utc(2026, 11, 1, 4, 0, 0)
    );
    assert_eq!(
        relative("tomorrow", "America/New_York", after_fall_back),
        utc(2026, 11, 2, 5, 0, 0)
    );
}

#[test]
fn absolute_forms_still_parse_beside_relative_ones() {
    let now = utc(2026, 11, 24, 20, 0, 0);
    assert_eq!(
        relative("2024-05-01", "+08:00", now),
        parse("2024-05-01", "+08:00")
    );
    assert_eq!(
        relative("2024-05-01T00:00:00-05:00", "UTC", now),
        utc(2024, 5, 1, 5, 0, 0)
    );
    assert_eq!(
        relative("2024-05-01 08:00:00", "UTC", now),
        utc(2024, 5, 1, 8, 0, 0)
    );
}

#[test]
fn bad_relative_times_say_what_is_accepted() {
    let now = utc(2026, 11, 24, 20, 0, 0);
    for bad in [
        "-15",
        "-",
        "+",
        "ago",
        "-15 parsecs",
        "-5:00",
        "soon",
        "-999999999999years",
        "now-",
        "now-15",
        "nowadays",
    ] {
        match parse_time_at(bad, &Zone::UTC, now) {
            Ok(t) => panic!("{bad:?} read as {t}"),
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains(bad.trim()), "{bad:?}: {text}");
            }
        }
    }
    let e = parse_time_at("-15 parsecs", &Zone::UTC, now).unwrap_err();
    assert!(e.to_string().contains("-DURATION"), "{e}");
}
