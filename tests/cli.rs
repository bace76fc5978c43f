//! The `logstamp` binary: output, exit codes and messages.
//!
//! Every run starts from an empty environment so the caller's `LOGSTAMP__*` variables and
//! `RUST_LOG` cannot change the outcome. Expected values are computed here from the layout's
//! definition (`seconds << 32 | service << (32 - n) | counter`) and chrono.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use assert_cmd::Command;
use chrono::{DateTime, FixedOffset, TimeZone, Utc};
use predicates::prelude::*;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_logstamp");

fn logstamp() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear().timeout(Duration::from_secs(60));
    cmd
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.assert().success().get_output().stdout.clone();
    String::from_utf8(out).unwrap()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .collect()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `stderr` is exactly one line, an error containing every needle.
fn assert_one_line_error(stderr: &[u8], needles: &[&str]) {
    let text = String::from_utf8_lossy(stderr);
    assert_eq!(text.lines().count(), 1, "not one line: {text:?}");
    assert!(text.starts_with("error"), "{text}");
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} not in {text:?}");
    }
}

fn at_plus8(y: i32, m: u32, d: u32) -> i64 {
    FixedOffset::east_opt(8 * 3600)
        .unwrap()
        .with_ymd_and_hms(y, m, d, 0, 0, 0)
        .single()
        .unwrap()
        .timestamp()
}

// ---------------------------------------------------------------------------------------------
// id gen
// ---------------------------------------------------------------------------------------------

#[test]
fn id_gen_prints_increasing_ids_one_json_object_per_line() {
    let before = now();
    let out = stdout_of(logstamp().args(["id", "gen", "--no-lease", "--count", "5"]));
    let after = now();
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 5, "{out}");
    let ids: Vec<u64> = lines
        .iter()
        .map(|v| {
            assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
            v["id"].as_u64().unwrap()
        })
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    for id in &ids {
        let seconds = id >> 32;
        // May borrow a few seconds ahead; never behind the clock.
        assert!(
            before <= seconds && seconds <= after + 5,
            "{id}: {seconds} not near {before}..{after}"
        );
        assert_eq!((id >> 22) & 0x3ff, 0, "default service ID 0");
    }
}

#[test]
fn id_gen_default_count_is_one_and_zero_prints_nothing() {
    let out = stdout_of(logstamp().args(["id", "gen", "--no-lease"]));
    assert_eq!(json_lines(&out).len(), 1);
    let out = stdout_of(logstamp().args(["id", "gen", "--no-lease", "--count", "0"]));
    assert_eq!(out, "");
}

#[test]
fn id_gen_many_ids_are_all_distinct_and_increasing() {
    let out = stdout_of(logstamp().args(["id", "gen", "--no-lease", "--count", "20000"]));
    let ids: Vec<u64> = json_lines(&out)
        .iter()
        .map(|v| v["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 20_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn service_id_shows_up_in_id_decode() {
    let out = stdout_of(logstamp().args([
        "id",
        "gen",
        "--no-lease",
        "--count",
        "3",
        "--service-id",
        "777",
    ]));
    let ids: Vec<String> = json_lines(&out)
        .iter()
        .map(|v| v["id"].as_u64().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 3);
    let decoded = stdout_of(logstamp().args(["id", "decode"]).args(&ids));
    let decoded = json_lines(&decoded);
    assert_eq!(decoded.len(), 3);
    for (d, id) in decoded.iter().zip(&ids) {
        let id: u64 = id.parse().unwrap();
        assert_eq!(d["id"].as_u64(), Some(id));
        assert_eq!(d["service_id"], 777);
        assert_eq!(d["unix_seconds"].as_u64(), Some(id >> 32));
        assert_eq!(d["counter"].as_u64(), Some(id & ((1 << 22) - 1)));
    }
}

#[test]
fn service_id_from_the_environment_and_the_flag() {
    let out = stdout_of(
        logstamp()
            .env("LOGSTAMP__ID__SERVICE_BITS", "4")
            .env("LOGSTAMP__ID__SERVICE_ID", "9")
            .args(["id", "gen", "--no-lease"]),
    );
    let id = json_lines(&out)[0]["id"].as_u64().unwrap();
    assert_eq!((id >> 28) & 0xf, 9);
    // The flag wins over the environment.
    let out = stdout_of(
        logstamp()
            .env("LOGSTAMP__ID__SERVICE_BITS", "4")
            .env("LOGSTAMP__ID__SERVICE_ID", "9")
            .args(["id", "gen", "--no-lease", "--service-id", "15"]),
    );
    let id = json_lines(&out)[0]["id"].as_u64().unwrap();
    assert_eq!((id >> 28) & 0xf, 15);
}

#[test]
fn a_service_id_that_does_not_fit_is_a_usage_error() {
    let out = logstamp()
        .args(["id", "gen", "--service-id", "1024"])
        .assert()
        .code(2)
        .stdout("")
        .get_output()
        .clone();
    assert_one_line_error(&out.stderr, &["id.service_id", "command line"]);
}

/// Runs `args`, reads one line of stdout, closes the pipe (`| head -1`) and expects a clean exit.
/// Returns the line read.
fn run_into_closed_pipe(args: &[String]) -> String {
    let mut child = std::process::Command::new(BIN)
        .env_clear()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    drop(reader);
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {:?}: {stderr}", out.status);
    assert!(!stderr.contains("error"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    first
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    // Each prints far more than a pipe buffer holds, so it writes into the closed pipe.
    let first = run_into_closed_pipe(&strings(&["id", "gen", "--no-lease", "--count", "1000000"]));
    let v: Value = serde_json::from_str(&first).unwrap();
    assert!(v["id"].as_u64().is_some());

    let mut decode = strings(&["id", "decode"]);
    decode.extend((1..=20_000u64).map(|i| (i << 32).to_string()));
    let first = run_into_closed_pipe(&decode);
    let v: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["id"].as_u64(), Some(1 << 32));

    // About 8,000 partitions, as JSON lines and as DDL.
    let plan = strings(&[
        "partitions",
        "plan",
        "--from",
        "2000-01-01",
        "--to",
        "2022-01-01",
        "--period",
        "day",
    ]);
    let mut json = plan.clone();
    json.push("--json".into());
    let first = run_into_closed_pipe(&json);
    let v: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["name"], "pmin");
    let first = run_into_closed_pipe(&plan);
    assert!(first.starts_with("CREATE TABLE"), "{first}");
}

// ---------------------------------------------------------------------------------------------
// id decode
// ---------------------------------------------------------------------------------------------

fn utc_text(unix_seconds: u64) -> String {
    DateTime::<Utc>::from_timestamp(unix_seconds as i64, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[test]
fn id_decode_prints_exact_numbers_above_i64_max() {
    let ids = [u64::MAX, 1u64 << 63, (1u64 << 63) + 12_345, 0, 1];
    let args: Vec<String> = ids.iter().map(u64::to_string).collect();
    let out = stdout_of(logstamp().args(["id", "decode"]).args(&args));
    for id in ids {
        // Printed as exact integers, not floats.
        assert!(out.contains(&format!("\"id\":{id}")), "{id} in {out}");
        assert!(
            out.contains(&format!("\"unix_seconds\":{}", id >> 32)),
            "{out}"
        );
    }
    let lines = json_lines(&out);
    assert_eq!(lines.len(), ids.len());
    for (line, id) in lines.iter().zip(ids) {
        assert_eq!(line["id"].as_u64(), Some(id));
        assert_eq!(line["unix_seconds"].as_u64(), Some(id >> 32));
        assert_eq!(line["service_id"].as_u64(), Some((id >> 22) & 0x3ff));
        assert_eq!(line["counter"].as_u64(), Some(id & 0x3f_ffff));
        assert_eq!(line["time"], utc_text(id >> 32));
    }
    // Known values: all ones is the last second of 2^32, 2^63 is 2^31 seconds.
    assert_eq!(lines[0]["time"], "2106-02-07T06:28:15Z");
    assert_eq!(lines[0]["service_id"], 1023);
    assert_eq!(lines[0]["counter"], 4_194_303);
    assert_eq!(lines[1]["time"], "2038-01-19T03:14:08Z");
    assert_eq!(lines[1]["unix_seconds"], 2_147_483_648u64);
}

#[test]
fn id_decode_follows_the_configured_layout() {
    let epoch = Utc
        .with_ymd_and_hms(2020, 1, 1, 0, 0, 0)
        .unwrap()
        .timestamp() as u64;
    let id = (1000u64 << 32) | (5u64 << 28) | 77;
    let out = stdout_of(
        logstamp()
            .env("LOGSTAMP__ID__SERVICE_BITS", "4")
            .env("LOGSTAMP__ID__EPOCH", "2020-01-01")
            .args(["id", "decode", &id.to_string()]),
    );
    let d = &json_lines(&out)[0];
    assert_eq!(d["unix_seconds"].as_u64(), Some(epoch + 1000));
    assert_eq!(d["service_id"], 5);
    assert_eq!(d["counter"], 77);
    assert_eq!(d["time"], utc_text(epoch + 1000));
}

#[test]
fn id_decode_refuses_non_ids() {
    for bad in ["18446744073709551616", "-1", "abc", "1.5"] {
        logstamp()
            .args(["id", "decode", "--", bad])
            .assert()
            .code(2)
            .stdout("");
    }
    logstamp().args(["id", "decode"]).assert().code(2);
}

// ---------------------------------------------------------------------------------------------
// id range
// ---------------------------------------------------------------------------------------------

#[test]
fn id_range_in_utc_plus_8() {
    let start = (at_plus8(2020, 8, 5) as u64) << 32;
    let end = (at_plus8(2020, 8, 6) as u64) << 32;
    // UNIX_TIMESTAMP('2020-08-05 00:00:00') at +08:00 = 2020-08-04T16:00:00Z.
    assert_eq!(at_plus8(2020, 8, 5), 18_478 * 86_400 + 16 * 3600);
    let out = stdout_of(logstamp().args([
        "id",
        "range",
        "--from",
        "2020-08-05",
        "--to",
        "2020-08-06",
        "--tz",
        "+08:00",
    ]));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1);
    let r = &lines[0];
    assert_eq!(r["start_id"].as_u64(), Some(start));
    assert_eq!(r["end_id"].as_u64(), Some(end));
    assert_eq!(r["sql"], format!("id >= {start} AND id < {end}"));
    let from = DateTime::parse_from_rfc3339(r["from"].as_str().unwrap()).unwrap();
    assert_eq!(from.timestamp(), at_plus8(2020, 8, 5));
    let to = DateTime::parse_from_rfc3339(r["to"].as_str().unwrap()).unwrap();
    assert_eq!(to.timestamp(), at_plus8(2020, 8, 6));

    // --sql prints only the predicate.
    let out = stdout_of(logstamp().args([
        "id",
        "range",
        "--from",
        "2020-08-05",
        "--to",
        "2020-08-06",
        "--tz",
        "+08:00",
        "--sql",
    ]));
    assert_eq!(out, format!("id >= {start} AND id < {end}\n"));

    // The same day in Asia/Shanghai, and written as RFC 3339 (then --tz is not used).
    let out = stdout_of(logstamp().args([
        "id",
        "range",
        "--from",
        "2020-08-05",
        "--to",
        "2020-08-06",
        "--tz",
        "Asia/Shanghai",
        "--sql",
    ]));
    assert_eq!(out, format!("id >= {start} AND id < {end}\n"));
    let out = stdout_of(logstamp().args([
        "id",
        "range",
        "--from",
        "2020-08-05T00:00:00+08:00",
        "--to",
        "2020-08-05T16:00:00Z",
        "--tz",
        "America/New_York",
        "--sql",
    ]));
    assert_eq!(out, format!("id >= {start} AND id < {end}\n"));
}

#[test]
fn id_range_defaults_to_utc_and_rounds_outward() {
    let from = Utc
        .with_ymd_and_hms(2020, 8, 5, 10, 0, 0)
        .unwrap()
        .timestamp() as u64;
    let out = stdout_of(logstamp().args([
        "id",
        "range",
        "--from",
        "2020-08-05 10:00:00.900",
        "--to",
        "2020-08-05 10:00:01.100",
    ]));
    let r = &json_lines(&out)[0];
    assert_eq!(r["start_id"].as_u64(), Some(from << 32));
    assert_eq!(r["end_id"].as_u64(), Some((from + 2) << 32));
}

#[test]
fn id_range_after_2038_is_exact() {
    let from = Utc
        .with_ymd_and_hms(2100, 1, 1, 0, 0, 0)
        .unwrap()
        .timestamp() as u64;
    let to = from + 86_400;
    let out = stdout_of(logstamp().args([
        "id",
        "range",
        "--from",
        "2100-01-01",
        "--to",
        "2100-01-02",
        "--sql",
    ]));
    assert!(from << 32 > i64::MAX as u64);
    assert_eq!(out, format!("id >= {} AND id < {}\n", from << 32, to << 32));
}

#[test]
fn id_range_takes_times_relative_to_now() {
    // The hidden --now pins the clock: 2026-11-24T20:00:00Z, already the 25th in Shanghai.
    let pinned = Utc
        .with_ymd_and_hms(2026, 11, 24, 20, 0, 0)
        .unwrap()
        .timestamp() as u64;
    let range = |args: &[&str]| {
        let mut all = vec!["id", "range", "--now", "2026-11-24T20:00:00Z"];
        all.extend_from_slice(args);
        let r = json_lines(&stdout_of(logstamp().args(&all))).remove(0);
        (
            r["start_id"].as_u64().unwrap() >> 32,
            r["end_id"].as_u64().unwrap() >> 32,
        )
    };
    // --to defaults to now; --since D is --from -D.
    assert_eq!(range(&["--from", "-15m"]), (pinned - 900, pinned));
    assert_eq!(range(&["--since", "2h"]), (pinned - 7200, pinned));
    assert_eq!(
        range(&["--from", "2h ago", "--to", "-1h"]),
        (pinned - 7200, pinned - 3600)
    );
    assert_eq!(
        range(&["--from", "-1h", "--to", "now"]),
        (pinned - 3600, pinned)
    );
    let midnight_utc = pinned - 20 * 3600;
    assert_eq!(
        range(&["--from", "yesterday", "--to", "today"]),
        (midnight_utc - 86_400, midnight_utc)
    );
    // Today in Shanghai began at 16:00 UTC on the 24th.
    let shanghai_midnight = pinned - 4 * 3600;
    assert_eq!(
        range(&["--from", "today", "--tz", "Asia/Shanghai"]),
        (shanghai_midnight, pinned)
    );
    assert_eq!(
        range(&["--from", "yesterday", "--to", "today", "--tz", "+08:00"]),
        (shanghai_midnight - 86_400, shanghai_midnight)
    );
    // Without a pinned clock, "now" is the real time.
    let before = now();
    let out = stdout_of(logstamp().args(["id", "range", "--since", "10m"]));
    let after = now();
    let r = &json_lines(&out)[0];
    let end = r["end_id"].as_u64().unwrap() >> 32;
    assert!(
        (before..=after + 1).contains(&end),
        "{before} {end} {after}"
    );
    // The end is rounded up to a whole second, the start down.
    let start = r["start_id"].as_u64().unwrap() >> 32;
    assert!((600..=601).contains(&(end - start)), "{start} {end}");

    // No start, or both starts, are usage errors.
    let out = logstamp().args(["id", "range"]).assert().code(2);
    assert_one_line_error(&out.get_output().stderr, &["--from", "--since"]);
    logstamp()
        .args(["id", "range", "--from", "-1h", "--since", "1h"])
        .assert()
        .code(2);
    let out = logstamp()
        .args(["id", "range", "--since", "forever"])
        .assert()
        .code(2);
    assert_one_line_error(&out.get_output().stderr, &["--since", "forever"]);
}

#[test]
fn id_range_mistakes_are_usage_errors() {
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &[
                "--from",
                "2020-08-05",
                "--to",
                "2020-08-06",
                "--tz",
                "Mars/Base",
            ],
            &["--tz", "Mars/Base"],
        ),
        (
            &[
                "--from",
                "2020-08-05",
                "--to",
                "2020-08-06",
                "--tz",
                "+25:00",
            ],
            &["--tz"],
        ),
        (&["--from", "5 Aug 2020", "--to", "2020-08-06"], &["--from"]),
        (
            &["--from", "2020-08-05", "--to", "next week"],
            &["--to", "-DURATION"],
        ),
        (
            &["--from", "2020-08-06", "--to", "2020-08-05"],
            &["reversed"],
        ),
    ];
    for (args, needles) in cases {
        let out = logstamp()
            .args(["id", "range"])
            .args(args)
            .assert()
            .code(2)
            .stdout("")
            .get_output()
            .clone();
        assert_one_line_error(&out.stderr, needles);
    }
}

// ---------------------------------------------------------------------------------------------
// partitions plan
// ---------------------------------------------------------------------------------------------

#[test]
fn partitions_plan_prints_ddl_with_the_bounds() {
    let out = stdout_of(logstamp().args([
        "partitions",
        "plan",
        "--from",
        "2017-07",
        "--to",
        "2017-09",
        "--period",
        "month",
        "--tz",
        "+08:00",
    ]));
    assert!(out.starts_with("CREATE TABLE `logs` ("), "{out}");
    assert!(out.contains("`id` BIGINT UNSIGNED NOT NULL"), "{out}");
    assert!(out.contains("PARTITION BY RANGE (`id`)"), "{out}");
    // pmin holds what is older than July, so p201707 holds July only.
    let mut last = 0;
    for (name, (y, m)) in [
        ("pmin", (2017, 7)),
        ("p201707", (2017, 8)),
        ("p201708", (2017, 9)),
        ("p201709", (2017, 10)),
    ] {
        let bound = (at_plus8(y, m, 1) as u64) << 32;
        let line = format!("PARTITION `{name}` VALUES LESS THAN ({bound})");
        let at = out
            .find(&line)
            .unwrap_or_else(|| panic!("{line} not in {out}"));
        assert!(at > last);
        last = at;
    }
    assert!(out.contains("PARTITION `pmax` VALUES LESS THAN MAXVALUE"));
    assert_eq!(out.matches("PARTITION `").count(), 5);
}

#[test]
fn partitions_plan_json() {
    let out = stdout_of(logstamp().args([
        "partitions",
        "plan",
        "--from",
        "2017-07-15",
        "--to",
        "2017-09-01",
        "--period",
        "month",
        "--tz",
        "Asia/Shanghai",
        "--json",
    ]));
    let lines = json_lines(&out);
    let names: Vec<&str> = lines.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["pmin", "p201707", "p201708", "p201709", "pmax"]);
    for (line, (y, m)) in lines
        .iter()
        .zip([(2017, 7), (2017, 8), (2017, 9), (2017, 10)])
    {
        assert_eq!(
            line["less_than"].as_u64(),
            Some((at_plus8(y, m, 1) as u64) << 32)
        );
    }
    assert!(lines[4]["less_than"].is_null());
    assert!(lines[0]["period_start"].is_null());
    assert_eq!(lines[0]["ends_at"], "2017-06-30T16:00:00Z");
    assert_eq!(lines[1]["period_start"], "2017-07-01");
    assert_eq!(lines[1]["ends_at"], "2017-07-31T16:00:00Z");
}

#[test]
fn partitions_plan_takes_defaults_from_settings() {
    // Period, zone and table from the environment.
    let out = stdout_of(
        logstamp()
            .env("LOGSTAMP__PARTITIONS__PERIOD", "week")
            .env("LOGSTAMP__PARTITIONS__TIME_ZONE", "+08:00")
            .env("LOGSTAMP__STORE__TABLE", "app_logs")
            .args([
                "partitions",
                "plan",
                "--from",
                "2020-12-31",
                "--to",
                "2021-01-04",
            ]),
    );
    assert!(out.starts_with("CREATE TABLE `app_logs` ("), "{out}");
    // Weeks starting 2020-12-28 and 2021-01-04, ending at Monday midnight +08:00.
    for (name, (y, m, d)) in [("p2020w53", (2021, 1, 4)), ("p2021w01", (2021, 1, 11))] {
        let bound = (at_plus8(y, m, d) as u64) << 32;
        assert!(
            out.contains(&format!("PARTITION `{name}` VALUES LESS THAN ({bound})")),
            "{name} {bound} in {out}"
        );
    }
    // Built-in defaults: days in UTC; flags override settings.
    let out = stdout_of(logstamp().args([
        "partitions",
        "plan",
        "--from",
        "2020-02-28",
        "--to",
        "2020-03-01",
        "--table",
        "t2",
        "--json",
    ]));
    let names: Vec<String> = json_lines(&out)
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        ["pmin", "p20200228", "p20200229", "p20200301", "pmax"]
    );
    let first = json_lines(&out)[1]["less_than"].as_u64().unwrap();
    let feb29 = Utc
        .with_ymd_and_hms(2020, 2, 29, 0, 0, 0)
        .unwrap()
        .timestamp() as u64;
    assert_eq!(first, feb29 << 32);
}

#[test]
fn partitions_plan_mistakes_are_usage_errors() {
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &[
                "--from",
                "2020-01",
                "--to",
                "2020-02",
                "--tz",
                "Nowhere/City",
            ],
            &["--tz"],
        ),
        (
            &["--from", "2020-01", "--to", "2020-02", "--period", "year"],
            &["--period"],
        ),
        (
            &["--from", "2020-01", "--to", "2020-02", "--table", "a-b"],
            &["--table"],
        ),
        (&["--from", "2020-13", "--to", "2021-02"], &["--from"]),
        (&["--from", "2020-03", "--to", "2020-02"], &["--from/--to"]),
        (
            &["--from", "1969-01", "--to", "1969-02", "--period", "month"],
            &["epoch"],
        ),
    ];
    for (args, needles) in cases {
        let out = logstamp()
            .args(["partitions", "plan"])
            .args(args)
            .assert()
            .code(2)
            .stdout("")
            .get_output()
            .clone();
        assert_one_line_error(&out.stderr, needles);
    }
}

// ---------------------------------------------------------------------------------------------
// plan
// ---------------------------------------------------------------------------------------------

/// The feasible `n` by the module docs' inequalities.
fn feasible_bits(a: f64, m: f64, q: f64, t: f64, k: f64) -> Vec<u8> {
    (1..=31u8)
        .filter(|&n| {
            let two_n = 2f64.powi(i32::from(n));
            a <= two_n && m / a < 2f64.powi(32 - i32::from(n)) && two_n * k / t > q
        })
        .collect()
}

const FLEET: [&str; 11] = [
    "plan",
    "--processes",
    "64",
    "--peak",
    "1000000",
    "--mean",
    "200000",
    "--insert-seconds",
    "0.002",
    "--concurrency",
    "8",
];

#[test]
fn plan_prints_json() {
    let out = stdout_of(logstamp().args(FLEET));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1);
    let p = &lines[0];
    let feasible = feasible_bits(64.0, 1e6, 2e5, 0.002, 8.0);
    assert_eq!(p["feasible"], true);
    assert_eq!(p["min_service_bits"].as_u64(), Some(u64::from(feasible[0])));
    assert_eq!(
        p["max_service_bits"].as_u64(),
        Some(u64::from(*feasible.last().unwrap()))
    );
    let rec = p["recommended_service_bits"].as_u64().unwrap() as u8;
    assert!(feasible.contains(&rec));
    assert_eq!(p["max_processes"].as_u64(), Some(1 << rec));
    assert_eq!(
        p["ids_per_second_per_process"].as_u64(),
        Some(1 << (32 - rec))
    );
}

#[test]
fn plan_human() {
    let feasible = feasible_bits(64.0, 1e6, 2e5, 0.002, 8.0);
    let out = stdout_of(logstamp().args(FLEET).arg("--human"));
    assert_eq!(out.lines().count(), 1);
    assert!(
        out.starts_with(&format!(
            "Feasible service bits: {} to {}.",
            feasible[0],
            feasible.last().unwrap()
        )),
        "{out}"
    );
    assert!(out.contains("Recommended"), "{out}");
}

#[test]
fn plan_exits_1_when_nothing_fits() {
    // 1024 processes need n >= 10; 2^23 IDs/s per process needs n <= 8.
    let args = [
        "plan",
        "--processes",
        "1024",
        "--peak",
        "8589934592",
        "--mean",
        "1000",
        "--insert-seconds",
        "0.001",
        "--concurrency",
        "1",
    ];
    assert!(feasible_bits(1024.0, 8_589_934_592.0, 1000.0, 0.001, 1.0).is_empty());
    let out = logstamp()
        .args(args)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let p = &json_lines(&String::from_utf8(out).unwrap())[0];
    assert_eq!(p["feasible"], false);
    assert!(p["recommended_service_bits"].is_null());
    assert!(p["reason"].as_str().unwrap().contains("at least 10"), "{p}");
    logstamp()
        .args(args)
        .arg("--human")
        .assert()
        .code(1)
        .stdout(predicate::str::starts_with("No service-bit count fits"));
}

#[test]
fn plan_refuses_nonsense_figures() {
    let base = FLEET.map(String::from);
    for (flag, value) in [
        ("--processes", "0"),
        ("--concurrency", "0"),
        ("--peak", "-5"),
        ("--peak", "NaN"),
        ("--mean", "2000000"),
        ("--insert-seconds", "0"),
    ] {
        // `--peak=-5`: a bare `-5` would read as a flag.
        let mut args = base.to_vec();
        let at = args.iter().position(|a| a == flag).unwrap();
        args.drain(at..at + 2);
        args.push(format!("{flag}={value}"));
        let out = logstamp()
            .args(&args)
            .assert()
            .code(2)
            .stdout("")
            .get_output()
            .clone();
        assert_one_line_error(
            &out.stderr,
            &[flag.trim_start_matches("--").split('-').next().unwrap()],
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration errors
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_config_from_the_environment_exits_2_naming_the_variable() {
    for args in [
        &["id", "gen"][..],
        &["id", "decode", "1"],
        &["id", "range", "--from", "2020-01-01", "--to", "2020-01-02"],
        &["partitions", "plan", "--from", "2020-01", "--to", "2020-02"],
    ] {
        let out = logstamp()
            .env("LOGSTAMP__ID__SERVICE_BITS", "40")
            .args(args)
            .assert()
            .code(2)
            .stdout("")
            .get_output()
            .clone();
        assert_one_line_error(
            &out.stderr,
            &["LOGSTAMP__ID__SERVICE_BITS", "id.service_bits", "40"],
        );
    }
}

#[test]
fn bad_config_file_exits_2_naming_the_file() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join(format!("cli-bad-{}.toml", std::process::id()));
    std::fs::write(&file, "[partitions]\ntime_zone = \"Atlantis/Capital\"\n").unwrap();
    let out = logstamp()
        .args(["--config", file.to_str().unwrap(), "id", "gen"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert_one_line_error(
        &out.stderr,
        &[
            "partitions.time_zone",
            file.to_str().unwrap(),
            "Atlantis/Capital",
        ],
    );
    // A file that does not exist.
    let missing = dir.join("cli-missing.toml");
    let out = logstamp()
        .args(["id", "gen", "--config", missing.to_str().unwrap()])
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert_one_line_error(&out.stderr, &[missing.to_str().unwrap()]);
}

#[test]
fn a_password_never_reaches_stderr() {
    let secret = "pw-Zq81x";
    for url in [
        format!("mysql://app:{secret}@/logstamp"),
        format!("postgres://app:{secret}@db/logstamp"),
    ] {
        let out = logstamp()
            .env("LOGSTAMP__MYSQL__URL", &url)
            .args(["id", "gen"])
            .assert()
            .code(2)
            .get_output()
            .clone();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains(secret), "{stderr}");
        assert_one_line_error(&out.stderr, &["mysql.url", "LOGSTAMP__MYSQL__URL"]);
    }
}

#[test]
fn bad_usage_exits_2() {
    logstamp().assert().code(2);
    logstamp().args(["id"]).assert().code(2);
    logstamp()
        .args(["id", "gen", "--count", "lots"])
        .assert()
        .code(2);
    logstamp().args(["nonsense"]).assert().code(2);
    logstamp()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("partitions"));
}

/// A rollup or table the settings do not define is a usage error naming what they do define,
/// before any database is reached.
#[test]
fn unknown_rollups_and_tables_are_usage_errors() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/examples/pipeline.toml");
    let range = ["--from", "2026-11-21", "--to", "2026-11-22"];
    logstamp()
        .args(["--config", example, "rollup", "rebuild", "nope"])
        .args(range)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "NAME: nope is not a rollup of the settings (logs_per_minute, http_per_hour)",
        ));
    logstamp()
        .args(["query", "--rollup", "nope"])
        .args(range)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--rollup: nope: the settings define no rollups",
        ));
    logstamp()
        .args(["--config", example, "query", "--table", "nope"])
        .args(range)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--table: nope is not a table of the settings (logs, log_errors, log_http)",
        ));
}

#[test]
fn query_by_event_time_and_follow_refuse_what_they_cannot_do() {
    // No event time in the settings: nothing to query by (before connecting anywhere).
    let out = logstamp()
        .args(["query", "--by", "event", "--since", "1h"])
        .assert()
        .code(2);
    assert_one_line_error(
        &out.get_output().stderr,
        &["--by event", "store.event_time"],
    );
    // An event time that is not a datetime column is a bad setting.
    let out = logstamp()
        .env("LOGSTAMP__STORE__EVENT_TIME", "level")
        .args(["query", "--by", "event", "--since", "1h"])
        .assert()
        .code(2);
    assert_one_line_error(
        &out.get_output().stderr,
        &["store.event_time", "not a datetime column", "event_time"],
    );
    // Following needs the writers' commit window.
    let out = logstamp()
        .env("LOGSTAMP__STORE__COMMIT_WINDOW", "off")
        .args(["query", "--follow"])
        .assert()
        .code(2);
    assert_one_line_error(
        &out.get_output().stderr,
        &["--follow", "store.commit_window"],
    );
    logstamp()
        .args(["query", "--follow", "--explain"])
        .assert()
        .code(2);
}
