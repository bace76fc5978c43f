//! `Settings::load`: layers, validation, error messages and secrecy.
//!
//! Every test passes its own environment (`Sources { env: Some(..) }`), so the process
//! environment never leaks in.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use serde_json::Value;

use logstamp::config::{ConfigError, DEFAULT_TOML, Settings, Sources, env_var};
use logstamp::id::settings::{AutoRange, ServiceIdSetting};
use logstamp::relay::settings::LoopFilterMode;
use logstamp::store::Period;
use logstamp::store::settings::{DurationOrOff, InsertMethod};
use logstamp::telemetry::LogFormat;
use logstamp::time::Zone;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sources(file: Option<&PathBuf>, vars: &[(&str, &str)], overrides: &[(&str, &str)]) -> Sources {
    Sources {
        file: file.cloned(),
        env: Some(env(vars)),
        overrides: overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn load(file: Option<&PathBuf>, vars: &[(&str, &str)], overrides: &[(&str, &str)]) -> Settings {
    Settings::load(&sources(file, vars, overrides)).unwrap_or_else(|e| panic!("{e}"))
}

fn load_err(
    file: Option<&PathBuf>,
    vars: &[(&str, &str)],
    overrides: &[(&str, &str)],
) -> ConfigError {
    match Settings::load(&sources(file, vars, overrides)) {
        Ok(s) => panic!("accepted: {vars:?} {overrides:?} -> {s:?}"),
        Err(e) => e,
    }
}

/// A TOML file under the test's scratch directory, unique per call.
fn toml_file(text: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("config-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("settings-{}-{n}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// An error's message is one line naming the key and where the value came from.
fn assert_names(error: &ConfigError, key: &str, origin: &str) {
    let message = error.to_string();
    assert!(!message.contains('\n'), "not one line: {message:?}");
    assert!(message.contains(key), "{key:?} not named in {message:?}");
    assert!(
        message.contains(origin),
        "{origin:?} not named in {message:?}"
    );
}

const SECRET: &str = "s3cr3t-Pa55";

// ---------------------------------------------------------------------------------------------
// Defaults and layers
// ---------------------------------------------------------------------------------------------

#[test]
fn defaults_load() {
    let s = Settings::defaults().unwrap();
    assert_eq!(
        s.id.layout.service_bits(),
        logstamp::id::DEFAULT_SERVICE_BITS
    );
    assert_eq!(s.id.layout.epoch_unix_seconds(), 0);
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(0));
    assert_eq!(s.mysql.url.database(), "logstamp");
    assert_eq!(s.kafka.topics, ["logs"]);
    assert_eq!(s.partitions.period, Period::Day);
    assert_eq!(s.partitions.time_zone, Zone::UTC);
    assert_eq!(s.partitions.retention, DurationOrOff(None));
    assert_eq!(s.store.table.as_str(), "logs");
    assert_eq!(s.store.insert_method, InsertMethod::Batch);
    assert_eq!(s.telemetry.log_format, LogFormat::Text);
    assert_eq!(s.batch.linger(), Duration::from_millis(s.batch.linger_ms));
    // An empty environment and no file or flags is the same as the defaults.
    let same = load(None, &[], &[]);
    assert_eq!(
        serde_json::to_value(&same).unwrap(),
        serde_json::to_value(&s).unwrap()
    );
}

#[test]
fn env_var_names() {
    assert_eq!(env_var("mysql.url"), "LOGSTAMP__MYSQL__URL");
    assert_eq!(env_var("id.service_bits"), "LOGSTAMP__ID__SERVICE_BITS");
    assert_eq!(env_var("kafka.topics"), "LOGSTAMP__KAFKA__TOPICS");
}

#[test]
fn env_sets_the_mysql_url() {
    let url = format!("mysql://app:{SECRET}@db.example.com:3307/app_logs");
    let s = load(None, &[("LOGSTAMP__MYSQL__URL", &url)], &[]);
    assert_eq!(s.mysql.url.expose(), url);
    assert_eq!(s.mysql.url.database(), "app_logs");
    assert_eq!(
        s.mysql.url.redacted(),
        "mysql://app:***@db.example.com:3307/app_logs"
    );
}

#[test]
fn env_topics_are_a_comma_separated_list() {
    let s = load(None, &[("LOGSTAMP__KAFKA__TOPICS", "a,b")], &[]);
    assert_eq!(s.kafka.topics, ["a", "b"]);
    let s = load(None, &[("LOGSTAMP__KAFKA__TOPICS", "only")], &[]);
    assert_eq!(s.kafka.topics, ["only"]);
    let s = load(None, &[("LOGSTAMP__KAFKA__TOPICS", "x,y,z")], &[]);
    assert_eq!(s.kafka.topics, ["x", "y", "z"]);
    // Other strings with commas stay whole.
    let s = load(
        None,
        &[("LOGSTAMP__KAFKA__BROKERS", "k1:9092,k2:9092")],
        &[],
    );
    assert_eq!(s.kafka.brokers, "k1:9092,k2:9092");
}

#[test]
fn env_values_of_every_type() {
    let s = load(
        None,
        &[
            ("LOGSTAMP__ID__SERVICE_BITS", "12"),
            ("LOGSTAMP__ID__SERVICE_ID", "4095"),
            ("LOGSTAMP__ID__EPOCH", "2020-01-01"),
            ("LOGSTAMP__PARTITIONS__PERIOD", "month"),
            ("LOGSTAMP__PARTITIONS__TIME_ZONE", "+08:00"),
            ("LOGSTAMP__PARTITIONS__RETENTION", "90days"),
            ("LOGSTAMP__STORE__TABLE", "app_logs"),
            ("LOGSTAMP__STORE__INSERT_METHOD", "load_data"),
            ("LOGSTAMP__BATCH__LINGER_MS", "50"),
            ("LOGSTAMP__TELEMETRY__LOG_FORMAT", "json"),
            ("LOGSTAMP__TELEMETRY__LISTEN", "0.0.0.0:9000"),
        ],
        &[],
    );
    assert_eq!(s.id.layout.service_bits(), 12);
    assert_eq!(s.id.layout.counter_bits(), 20);
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(4095));
    assert_eq!(
        s.id.layout.epoch_unix_seconds() as i64,
        Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0)
            .unwrap()
            .timestamp()
    );
    assert_eq!(s.partitions.period, Period::Month);
    assert_eq!(s.partitions.time_zone, "+08:00".parse::<Zone>().unwrap());
    assert_eq!(
        s.partitions.retention,
        DurationOrOff(Some(Duration::from_secs(90 * 86_400)))
    );
    assert_eq!(s.store.table.as_str(), "app_logs");
    assert_eq!(s.store.insert_method, InsertMethod::LoadData);
    assert_eq!(s.batch.linger(), Duration::from_millis(50));
    assert_eq!(s.telemetry.log_format, LogFormat::Json);
    assert_eq!(s.telemetry.listen, "0.0.0.0:9000".parse().unwrap());
}

#[test]
fn epoch_in_every_form() {
    let expected = Utc
        .with_ymd_and_hms(2020, 1, 1, 0, 0, 0)
        .unwrap()
        .timestamp() as u64;
    for (text, quoted) in [
        ("2020-01-01", true),
        ("2020-01-01T00:00:00Z", true),
        ("2020-01-01T08:00:00+08:00", true),
        ("2020-01-01 00:00:00", true),
        ("1577836800", false),
    ] {
        let value = if quoted {
            format!("\"{text}\"")
        } else {
            text.to_string()
        };
        let file = toml_file(&format!("[id]\nepoch = {value}\n"));
        let s = load(Some(&file), &[], &[]);
        assert_eq!(s.id.layout.epoch_unix_seconds(), expected, "{text}");
        let s = load(None, &[("LOGSTAMP__ID__EPOCH", text)], &[]);
        assert_eq!(
            s.id.layout.epoch_unix_seconds(),
            expected,
            "{text} from env"
        );
    }
    let e = load_err(None, &[("LOGSTAMP__ID__EPOCH", "1969-12-31")], &[]);
    assert_names(&e, "id.epoch", "environment variable LOGSTAMP__ID__EPOCH");
    let e = load_err(None, &[], &[("id.epoch", "last tuesday")]);
    assert_names(&e, "id.epoch", "the command line");
    // Negative, too large for exact integers, or so late the layout's seconds overflow.
    for bad in ["-5", "18446744073709551615"] {
        let e = load_err(None, &[("LOGSTAMP__ID__EPOCH", bad)], &[]);
        assert_names(&e, "id.epoch", "environment variable LOGSTAMP__ID__EPOCH");
    }
    let file = toml_file("[id]\nepoch = \"18446744073709551615\"\n");
    let e = load_err(Some(&file), &[], &[]);
    assert_names(&e, "id.epoch", &file.display().to_string());
}

#[test]
fn file_then_env_then_flags() {
    let file =
        toml_file("[id]\nservice_bits = 12\nservice_id = 1\n\n[kafka]\ngroup_id = \"from-file\"\n");
    // File alone: its values over the defaults, defaults elsewhere.
    let s = load(Some(&file), &[], &[]);
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(1));
    assert_eq!(s.id.layout.service_bits(), 12);
    assert_eq!(s.kafka.group_id, "from-file");
    assert_eq!(s.kafka.topics, ["logs"]);
    // Env over the file, for the keys it sets only.
    let s = load(Some(&file), &[("LOGSTAMP__ID__SERVICE_ID", "2")], &[]);
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(2));
    assert_eq!(s.id.layout.service_bits(), 12);
    assert_eq!(s.kafka.group_id, "from-file");
    // Flags over both.
    let s = load(
        Some(&file),
        &[("LOGSTAMP__ID__SERVICE_ID", "2")],
        &[("id.service_id", "3")],
    );
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(3));
    let s = load(Some(&file), &[], &[("id.service_id", "3")]);
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(3));
    // Sources::set is a flag.
    let s = Settings::load(
        &Sources {
            env: Some(env(&[("LOGSTAMP__ID__SERVICE_ID", "2")])),
            ..Sources::with_file(Some(file.clone()))
        }
        .set("id.service_id", 4),
    )
    .unwrap();
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(4));
    // A bad value in a lower layer is fine when a higher one replaces it.
    let bad_file = toml_file("[id]\nservice_bits = 40\n");
    let s = load(Some(&bad_file), &[("LOGSTAMP__ID__SERVICE_BITS", "8")], &[]);
    assert_eq!(s.id.layout.service_bits(), 8);
    let s = load(
        None,
        &[("LOGSTAMP__ID__SERVICE_BITS", "40")],
        &[("id.service_bits", "9")],
    );
    assert_eq!(s.id.layout.service_bits(), 9);
}

#[test]
fn a_missing_file_is_named() {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no-such-settings.toml");
    let e = load_err(Some(&path), &[], &[]);
    assert!(matches!(e, ConfigError::File { .. }), "{e:?}");
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
}

#[test]
fn a_broken_file_is_one_line_naming_the_file() {
    let file = toml_file("[id\nservice_bits = 10\n");
    let e = load_err(Some(&file), &[], &[]);
    let message = e.to_string();
    assert!(matches!(e, ConfigError::File { .. }), "{e:?}");
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert!(!message.contains('\n'), "{message:?}");
}

// ---------------------------------------------------------------------------------------------
// Bad values: key and layer named
// ---------------------------------------------------------------------------------------------

/// Sets `key = value` in each layer in turn and expects an error naming `key` and that layer.
fn check_bad_in_every_layer(key: &str, value: &str, toml_value: &str) {
    let (section, field) = key.split_once('.').unwrap();

    // Environment.
    let var = env_var(key);
    let e = load_err(None, &[(&var, value)], &[]);
    assert_names(&e, key, &format!("environment variable {var}"));

    // File.
    let file = toml_file(&format!("[{section}]\n{field} = {toml_value}\n"));
    let e = load_err(Some(&file), &[], &[]);
    assert_names(&e, key, &format!("file {}", file.display()));

    // Command line.
    let e = load_err(None, &[], &[(key, value)]);
    assert_names(&e, key, "the command line");
}

#[test]
fn service_id_auto_from_every_layer() {
    let s = load(None, &[("LOGSTAMP__ID__SERVICE_ID", "auto")], &[]);
    assert_eq!(s.id.service_id, ServiceIdSetting::Auto);
    let file = toml_file("[id]\nservice_id = \"auto\"\n");
    assert_eq!(
        load(Some(&file), &[], &[]).id.service_id,
        ServiceIdSetting::Auto
    );
    // A number on the command line wins over "auto" in the file.
    let s = load(Some(&file), &[], &[("id.service_id", "7")]);
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(7));
    assert_eq!(s.id.service_id.fixed(), Some(7));
    assert_eq!(ServiceIdSetting::Auto.fixed(), None);
    for bad in ["automatic", "-1", "seven"] {
        let e = load_err(None, &[], &[("id.service_id", bad)]);
        assert_names(&e, "id.service_id", "the command line");
        assert!(e.to_string().contains("auto"), "{e}");
    }
    check_bad_in_every_layer("id.service_id", "-3", "-3");
}

#[test]
fn auto_range_is_all_or_a_span_within_the_layout() {
    let s = Settings::defaults().unwrap();
    assert_eq!(s.id.auto_range, AutoRange::All);
    assert_eq!(s.id.auto_ids(), 0..=1023);
    let s = load(None, &[("LOGSTAMP__ID__SERVICE_BITS", "4")], &[]);
    assert_eq!(s.id.auto_ids(), 0..=15);
    let s = load(None, &[("LOGSTAMP__ID__AUTO_RANGE", "16-31")], &[]);
    assert_eq!(
        s.id.auto_range,
        AutoRange::Span {
            first: 16,
            last: 31
        }
    );
    assert_eq!(s.id.auto_ids(), 16..=31);
    let s = load(None, &[], &[("id.auto_range", " 5 - 5 ")]);
    assert_eq!(s.id.auto_ids(), 5..=5);
    for (bad, why) in [
        ("31-16", "reversed"),
        ("0-1024", "1024"),
        ("some", "FIRST-LAST"),
        ("1-", "FIRST-LAST"),
    ] {
        let e = load_err(None, &[], &[("id.auto_range", bad)]);
        assert_names(&e, "id.auto_range", "the command line");
        assert!(e.to_string().contains(why), "{bad}: {e}");
    }
    check_bad_in_every_layer("id.auto_range", "9-2", "\"9-2\"");
}

#[test]
fn lease_durations_are_checked() {
    let s = Settings::defaults().unwrap();
    assert_eq!(s.id.lease_ttl, Duration::from_secs(30));
    assert_eq!(s.id.mark_window, Duration::from_secs(20));
    let s = load(
        None,
        &[("LOGSTAMP__ID__LEASE_TTL", "2s")],
        &[("id.mark_window", "1m")],
    );
    assert_eq!(s.id.lease_ttl, Duration::from_secs(2));
    assert_eq!(s.id.mark_window, Duration::from_secs(60));
    check_bad_in_every_layer("id.lease_ttl", "500ms", "\"500ms\"");
    check_bad_in_every_layer("id.lease_ttl", "soon", "\"soon\"");
    // The window must cover twice the borrowing bound plus 4 s: 14 s by default.
    assert_eq!(
        load(None, &[], &[("id.mark_window", "14s")]).id.mark_window,
        Duration::from_secs(14)
    );
    check_bad_in_every_layer("id.mark_window", "13s", "\"13s\"");
    let e = load_err(
        None,
        &[("LOGSTAMP__ID__MAX_BORROW_SECONDS", "10")],
        &[("id.mark_window", "20s")],
    );
    assert_names(&e, "id.mark_window", "the command line");
    assert!(e.to_string().contains("at least 24s"), "{e}");
}

#[test]
fn service_bits_out_of_range() {
    for bits in ["0", "32", "40"] {
        check_bad_in_every_layer("id.service_bits", bits, bits);
    }
    let e = load_err(None, &[("LOGSTAMP__ID__SERVICE_BITS", "0")], &[]);
    assert!(e.to_string().contains("between 1 and 31"), "{e}");
}

#[test]
fn service_bits_that_do_not_fit_a_byte() {
    for bits in ["256", "-1"] {
        check_bad_in_every_layer("id.service_bits", bits, bits);
    }
}

#[test]
fn service_id_must_fit_the_service_bits() {
    // Default 10 bits: 1023 fits, 1024 does not.
    let s = load(None, &[("LOGSTAMP__ID__SERVICE_ID", "1023")], &[]);
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(1023));
    check_bad_in_every_layer("id.service_id", "1024", "1024");
    // With 4 bits set elsewhere: 15 fits, 16 does not.
    let s = load(
        None,
        &[("LOGSTAMP__ID__SERVICE_BITS", "4")],
        &[("id.service_id", "15")],
    );
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(15));
    let e = load_err(
        None,
        &[("LOGSTAMP__ID__SERVICE_BITS", "4")],
        &[("id.service_id", "16")],
    );
    assert_names(&e, "id.service_id", "the command line");
    assert!(e.to_string().contains("16"), "{e}");
    let file = toml_file("[id]\nservice_bits = 4\n");
    let e = load_err(Some(&file), &[("LOGSTAMP__ID__SERVICE_ID", "16")], &[]);
    assert_names(
        &e,
        "id.service_id",
        "environment variable LOGSTAMP__ID__SERVICE_ID",
    );
}

#[test]
fn unknown_time_zone() {
    check_bad_in_every_layer("partitions.time_zone", "Mars/Olympus", "\"Mars/Olympus\"");
    check_bad_in_every_layer("partitions.time_zone", "+25:00", "\"+25:00\"");
}

#[test]
fn malformed_mysql_urls() {
    for url in [
        "not a url",
        "postgres://root@127.0.0.1/logstamp",
        "mysql://127.0.0.1:3306",
        "mysql://127.0.0.1:3306/",
        "mysql://root@127.0.0.1:99999/logstamp",
        "mysql://root@127.0.0.1/bad-name",
        "mysql:///logstamp",
    ] {
        check_bad_in_every_layer("mysql.url", url, &format!("\"{url}\""));
    }
}

#[test]
fn other_invalid_values() {
    for (key, value, toml_value) in [
        ("partitions.period", "fortnight", "\"fortnight\""),
        ("partitions.retention", "forever", "\"forever\""),
        ("store.table", "logs;drop", "\"logs;drop\""),
        (
            "store.insert_method",
            "carrier_pigeon",
            "\"carrier_pigeon\"",
        ),
        ("store.concurrency", "0", "0"),
        ("batch.max_rows", "0", "0"),
        ("batch.max_bytes", "0", "0"),
        ("telemetry.log_format", "xml", "\"xml\""),
        ("telemetry.listen", "nowhere", "\"nowhere\""),
        ("telemetry.log_level", "info,[", "\"info,[\""),
        ("kafka.brokers", " ", "\" \""),
        ("kafka.group_id", " ", "\" \""),
        ("relay.dc", "dc 1", "\"dc 1\""),
        ("relay.loop_filter", "telepathy", "\"telepathy\""),
        ("relay.checkpoint_interval", "often", "\"often\""),
        ("relay.apply_timeout", "10ms", "\"10ms\""),
        ("relay.topic_prefix", "relay/", "\"relay/\""),
        ("relay.server_id", "-1", "-1"),
        ("relay.apply_batch", "0", "0"),
        ("relay.max_message_bytes", "4095", "4095"),
        // Less than 8 times relay.max_message_bytes (1 MiB).
        ("relay.apply_memory_bytes", "8388607", "8388607"),
    ] {
        check_bad_in_every_layer(key, value, toml_value);
    }
}

#[test]
fn relay_settings() {
    let s = Settings::defaults().unwrap();
    assert_eq!(s.relay.loop_filter, LoopFilterMode::Marker);
    assert_eq!(s.relay.server_id, 0);
    assert!(s.relay.tables.is_empty() && s.relay.remotes.is_empty());
    assert_eq!(s.relay.topic("dc1", None), "logstamp-relay-dc1");
    let s = load(
        None,
        &[
            ("LOGSTAMP__RELAY__TABLES", "app.*,billing.invoices"),
            ("LOGSTAMP__RELAY__LOOP_FILTER", "skip_replication"),
        ],
        &[],
    );
    let tables: Vec<String> = s.relay.tables.iter().map(ToString::to_string).collect();
    assert_eq!(tables, ["app.*", "billing.invoices"]);
    assert_eq!(s.relay.loop_filter, LoopFilterMode::SkipReplication);
    let file = toml_file(
        "[relay]\ndc = \"east\"\nserver_id = 4001\n\
         [[relay.remotes]]\ndc = \"west\"\nbrokers = \"k.west:9092\"\n\
         [[relay.remotes]]\ndc = \"north\"\n",
    );
    let s = load(Some(&file), &[], &[]);
    assert_eq!(s.relay.dc, "east");
    assert_eq!(s.relay.server_id, 4001);
    let remotes: Vec<(&str, &str)> = s
        .relay
        .remotes
        .iter()
        .map(|r| (r.dc.as_str(), r.brokers.as_str()))
        .collect();
    assert_eq!(remotes, [("west", "k.west:9092"), ("north", "")]);
}

#[test]
fn relay_tables_never_take_in_logstamps_own_tables() {
    let url = ("LOGSTAMP__MYSQL__URL", "mysql://root@127.0.0.1/state");
    let every = [
        "ingest_offsets",
        "service_leases",
        "dead_letters",
        "relay_checkpoints",
    ];
    let cases: [(&str, &[&str]); 3] = [
        ("state.*", &every),
        ("state.ingest_offsets", &["ingest_offsets"]),
        ("state.relay_applied_gtids", &["relay_applied_gtids"]),
    ];
    for (pattern, named) in cases {
        let e = load_err(None, &[url, ("LOGSTAMP__RELAY__TABLES", pattern)], &[]);
        assert_names(
            &e,
            "relay.tables",
            "environment variable LOGSTAMP__RELAY__TABLES",
        );
        for table in named {
            assert!(e.to_string().contains(table), "{table} not named in {e}");
        }
    }
    let s = load(
        None,
        &[url, ("LOGSTAMP__RELAY__TABLES", "state.logs,app.*")],
        &[],
    );
    assert_eq!(s.relay.tables.len(), 2);
    // With shards, each shard's database holds offsets and the relay's state too.
    let shards = (
        "LOGSTAMP__STORE__SHARDS",
        "mysql://root@10.0.0.1/shard,mysql://root@10.0.0.2/shard",
    );
    let e = load_err(
        None,
        &[url, shards, ("LOGSTAMP__RELAY__TABLES", "shard.*")],
        &[],
    );
    assert!(e.to_string().contains("ingest_offsets"), "{e}");
    let s = load(
        None,
        &[url, shards, ("LOGSTAMP__RELAY__TABLES", "shard.logs")],
        &[],
    );
    assert_eq!(s.relay.tables.len(), 1);
}

#[test]
fn relay_tables_and_remotes_are_checked() {
    let e = load_err(None, &[("LOGSTAMP__RELAY__TABLES", "app.t,nodot")], &[]);
    assert_names(
        &e,
        "relay.tables",
        "environment variable LOGSTAMP__RELAY__TABLES",
    );
    assert!(
        e.to_string()
            .contains("\"nodot\" is not schema.table or schema.*"),
        "{e}"
    );
    for (remotes, why) in [
        ("[[relay.remotes]]\ndc = \"dc1\"\n", "is this data centre"),
        (
            "[[relay.remotes]]\ndc = \"b\"\n[[relay.remotes]]\ndc = \"b\"\n",
            "listed twice",
        ),
        (
            "[[relay.remotes]]\ndc = \"b c\"\n",
            "not a data centre name",
        ),
    ] {
        let file = toml_file(remotes);
        let e = load_err(Some(&file), &[], &[]);
        assert_names(&e, "relay.remotes", &format!("file {}", file.display()));
        assert!(e.to_string().contains(why), "{e}");
    }
}

#[test]
fn empty_topics() {
    let e = load_err(None, &[("LOGSTAMP__KAFKA__TOPICS", "a,,b")], &[]);
    assert_names(
        &e,
        "kafka.topics",
        "environment variable LOGSTAMP__KAFKA__TOPICS",
    );
    let file = toml_file("[kafka]\ntopics = []\n");
    let e = load_err(Some(&file), &[], &[]);
    assert_names(&e, "kafka.topics", &format!("file {}", file.display()));
}

#[test]
fn wrong_types() {
    for (key, value, toml_value) in [
        ("batch.max_rows", "lots", "\"lots\""),
        ("id.service_bits", "ten", "\"ten\""),
        ("id.max_borrow_seconds", "soon", "\"soon\""),
        ("batch.linger_ms", "1.5s", "\"1.5s\""),
    ] {
        check_bad_in_every_layer(key, value, toml_value);
    }
    // TOML-only shapes.
    let file = toml_file("[store]\nconcurrency = [1, 2]\n");
    let e = load_err(Some(&file), &[], &[]);
    assert_names(&e, "store.concurrency", &format!("file {}", file.display()));
    let file = toml_file("[kafka]\ntopics = { name = \"a\" }\n");
    let e = load_err(Some(&file), &[], &[]);
    assert_names(&e, "kafka.topics", &format!("file {}", file.display()));
}

#[test]
fn unknown_keys() {
    // In a section, from each layer.
    let e = load_err(None, &[("LOGSTAMP__ID__SERVICEID", "3")], &[]);
    assert_names(
        &e,
        "serviceid",
        "environment variable LOGSTAMP__ID__SERVICEID",
    );
    let file = toml_file("[id]\nserviceid = 3\n");
    let e = load_err(Some(&file), &[], &[]);
    assert_names(&e, "serviceid", &format!("file {}", file.display()));
    let e = load_err(None, &[], &[("id.serviceid", "3")]);
    assert_names(&e, "serviceid", "the command line");
    // A whole unknown section.
    let e = load_err(None, &[("LOGSTAMP__KAFKAA__TOPICS", "x")], &[]);
    assert_names(
        &e,
        "kafkaa",
        "environment variable LOGSTAMP__KAFKAA__TOPICS",
    );
    let file = toml_file("[kafkaa]\ntopics = [\"x\"]\n");
    let e = load_err(Some(&file), &[], &[]);
    assert_names(&e, "kafkaa", &format!("file {}", file.display()));
}

#[test]
fn unknown_key_is_blamed_on_its_own_layer() {
    // Other layers also set keys of the same section; the unknown key's layer is the one named.
    let file = toml_file("[id]\nserviceid = 3\n");
    let e = load_err(
        Some(&file),
        &[("LOGSTAMP__ID__SERVICE_ID", "2")],
        &[("id.service_bits", "12")],
    );
    assert_names(&e, "serviceid", &format!("file {}", file.display()));
    let e = load_err(
        None,
        &[
            ("LOGSTAMP__ID__SERVICE_ID", "2"),
            ("LOGSTAMP__ID__MAX_BORROW", "9"),
            ("LOGSTAMP__ID__SERVICE_BITS", "12"),
        ],
        &[],
    );
    assert_names(
        &e,
        "max_borrow",
        "environment variable LOGSTAMP__ID__MAX_BORROW",
    );
}

#[test]
fn env_variables_outside_the_prefix_are_ignored() {
    let s = load(
        None,
        &[
            ("PATH", "/usr/bin"),
            ("LOGSTAMPX__ID__SERVICE_ID", "5"),
            ("OTHER__ID__SERVICE_ID", "5"),
        ],
        &[],
    );
    assert_eq!(s.id.service_id, ServiceIdSetting::Fixed(0));
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

#[test]
fn the_password_is_never_shown() {
    let url = format!("mysql://app:{SECRET}@db.example.com:3306/logstamp");
    let s = load(None, &[("LOGSTAMP__MYSQL__URL", &url)], &[]);
    assert_eq!(s.mysql.url.expose(), url, "connecting still has it");
    for shown in [
        format!("{s:?}"),
        format!("{s:#?}"),
        format!("{:?}", s.mysql),
        format!("{}", s.mysql.url),
        s.mysql.url.redacted(),
        serde_json::to_string(&s).unwrap(),
        serde_json::to_string(&s.mysql).unwrap(),
    ] {
        assert!(!shown.contains(SECRET), "password shown: {shown}");
        assert!(shown.contains("db.example.com"), "URL still shown: {shown}");
    }
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(
        json["mysql"]["url"],
        "mysql://app:***@db.example.com:3306/logstamp"
    );
}

#[test]
fn the_password_is_never_in_an_error() {
    let bad_urls = [
        format!("mysql://app:{SECRET}@/logstamp"),
        format!("mysql://app:{SECRET}@db.example.com:99999/logstamp"),
        format!("mysql://app:{SECRET}@db.example.com:port/logstamp"),
        format!("postgres://app:{SECRET}@db.example.com/logstamp"),
        format!("mysql://app:{SECRET}@db.example.com/"),
        format!("mysql://app:{SECRET}@db.example.com/bad-name"),
        format!("mysql://app:{SECRET}@db.example.com/a/b"),
        format!("mysql://app:{SECRET}@[::1/logstamp"),
        format!("mysql//app:{SECRET}@db.example.com/logstamp"),
        format!("app:{SECRET}@db.example.com/logstamp"),
    ];
    for url in &bad_urls {
        let file = toml_file(&format!("[mysql]\nurl = \"{url}\"\n"));
        let errors = [
            load_err(None, &[("LOGSTAMP__MYSQL__URL", url)], &[]),
            load_err(None, &[], &[("mysql.url", url)]),
            load_err(Some(&file), &[], &[]),
        ];
        for e in errors {
            for shown in [e.to_string(), format!("{e:?}"), format!("{e:#?}")] {
                assert!(!shown.contains(SECRET), "password in error: {shown}");
            }
            assert!(e.to_string().contains("mysql.url"), "{e}");
        }
    }
}

#[test]
fn the_password_is_never_in_an_error_about_something_else() {
    let url = format!("mysql://app:{SECRET}@db.example.com/logstamp");
    // Valid URL, another setting wrong.
    let e = load_err(
        None,
        &[
            ("LOGSTAMP__MYSQL__URL", &url),
            ("LOGSTAMP__ID__SERVICE_BITS", "0"),
        ],
        &[],
    );
    assert!(!format!("{e} {e:?}").contains(SECRET));
    // The URL given where a section is expected (a forgotten __URL).
    let e = load_err(None, &[("LOGSTAMP__MYSQL", &url)], &[]);
    assert!(!format!("{e} {e:?}").contains(SECRET), "{e}");
    let file = toml_file(&format!("mysql = \"{url}\"\n"));
    let e = load_err(Some(&file), &[], &[]);
    assert!(!format!("{e} {e:?}").contains(SECRET), "{e}");
    // The URL under a misspelt key.
    let e = load_err(None, &[("LOGSTAMP__MYSQL__URI", &url)], &[]);
    assert!(!format!("{e} {e:?}").contains(SECRET), "{e}");
    // A file that is not valid TOML around the URL.
    let file = toml_file(&format!("[mysql]\nurl = \"{url}\n"));
    let e = load_err(Some(&file), &[], &[]);
    assert!(!format!("{e} {e:?}").contains(SECRET), "{e}");
    let file = toml_file(&format!("[mysql]\nurl = {url}\n"));
    let e = load_err(Some(&file), &[], &[]);
    assert!(!format!("{e} {e:?}").contains(SECRET), "{e}");
}

// ---------------------------------------------------------------------------------------------
// config/default.toml documents every setting
// ---------------------------------------------------------------------------------------------

/// Leaf keys of a JSON tree as `a.b.c`; arrays are leaves.
fn leaves(value: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(v, &key, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.clone());
        }
    }
}

#[test]
fn the_shipped_default_toml_is_the_built_in_one() {
    let shipped = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/default.toml"),
    )
    .unwrap();
    assert_eq!(shipped, DEFAULT_TOML);
}

#[test]
fn default_toml_lists_every_setting() {
    // The TOML as written, read with the same TOML reader the settings use.
    let toml: Value = config::Config::builder()
        .add_source(config::File::from_str(
            DEFAULT_TOML,
            config::FileFormat::Toml,
        ))
        .build()
        .unwrap()
        .try_deserialize()
        .unwrap();
    let mut in_toml = BTreeMap::new();
    leaves(&toml, "", &mut in_toml);

    let settings = Settings::defaults().unwrap();
    let mut in_settings = BTreeMap::new();
    leaves(
        &serde_json::to_value(&settings).unwrap(),
        "",
        &mut in_settings,
    );

    // Where the two representations differ: the ID layout is shown checked and derived,
    // `id.service_bits` / `id.epoch` (as written) become `id.layout.service_bits` /
    // `id.layout.epoch_unix_seconds` (Unix seconds), and `id.layout.counter_bits` is derived
    // (32 - service_bits), so it has no setting of its own.
    let renamed = [
        ("id.service_bits", "id.layout.service_bits"),
        ("id.epoch", "id.layout.epoch_unix_seconds"),
    ];
    let derived = ["id.layout.counter_bits"];

    let toml_to_settings = |key: &str| -> String {
        renamed
            .iter()
            .find(|(t, _)| *t == key)
            .map_or(key.to_string(), |(_, s)| s.to_string())
    };
    for key in in_toml.keys() {
        assert!(
            in_settings.contains_key(&toml_to_settings(key)),
            "{key} is in default.toml but not a setting"
        );
    }
    let documented: Vec<String> = in_toml.keys().map(|k| toml_to_settings(k)).collect();
    for key in in_settings.keys() {
        assert!(
            documented.contains(key) || derived.contains(&key.as_str()),
            "setting {key} is missing from config/default.toml"
        );
    }

    // And the values agree, each in its own representation.
    for (key, toml_value) in &in_toml {
        let setting = &in_settings[&toml_to_settings(key)];
        match key.as_str() {
            "id.epoch" => {
                let written = toml_value.as_str().unwrap();
                let seconds = chrono::DateTime::parse_from_rfc3339(written)
                    .unwrap()
                    .timestamp();
                assert_eq!(setting.as_i64(), Some(seconds), "{key}");
            }
            _ => assert_eq!(setting, toml_value, "{key}"),
        }
    }
    assert_eq!(
        in_settings["id.layout.counter_bits"].as_u64().unwrap()
            + in_settings["id.layout.service_bits"].as_u64().unwrap(),
        32
    );
}

#[test]
fn insert_methods_display_as_they_are_spelled_in_settings() {
    for method in [
        InsertMethod::Text,
        InsertMethod::Prepared,
        InsertMethod::Batch,
        InsertMethod::LoadData,
    ] {
        assert_eq!(
            serde_json::to_value(method).unwrap(),
            Value::String(method.to_string())
        );
    }
}

#[test]
fn kafka_properties_from_a_file_and_the_environment_are_flat_librdkafka_names() {
    let file = toml_file(
        "[kafka.properties]\n\"security.protocol\" = \"SASL_SSL\"\nsession.timeout.ms = 6000\n",
    );
    let s = load(
        Some(&file),
        &[
            ("LOGSTAMP__KAFKA__PROPERTIES__SASL__MECHANISM", "PLAIN"),
            ("LOGSTAMP__KAFKA__PROPERTIES__SASL__PASSWORD", SECRET),
        ],
        &[],
    );
    let flat: Vec<(&str, &str)> = s
        .kafka
        .properties
        .0
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        flat,
        [
            ("sasl.mechanism", "PLAIN"),
            ("sasl.password", SECRET),
            ("security.protocol", "SASL_SSL"),
            ("session.timeout.ms", "6000"),
        ]
    );
    let shown = serde_json::to_string(&s).unwrap();
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(shown.contains("\"sasl.password\":\"***\""), "{shown}");
    assert!(shown.contains("\"sasl.mechanism\":\"PLAIN\""), "{shown}");
}

#[test]
fn kafka_properties_logstamp_sets_itself_are_refused() {
    for (var, key, says) in [
        (
            "LOGSTAMP__KAFKA__PROPERTIES__GROUP__ID",
            "kafka.properties.group.id",
            "kafka.group_id",
        ),
        (
            "LOGSTAMP__KAFKA__PROPERTIES__ENABLE__AUTO__COMMIT",
            "kafka.properties.enable.auto.commit",
            "committed by logstamp",
        ),
        (
            "LOGSTAMP__KAFKA__PROPERTIES__BOOTSTRAP__SERVERS",
            "kafka.properties.bootstrap.servers",
            "kafka.brokers",
        ),
    ] {
        let e = load_err(None, &[(var, "x")], &[]);
        assert_names(&e, key, var);
        assert!(e.to_string().contains(says), "{e}");
    }
}

#[test]
fn ingest_settings_are_checked() {
    let s = load(
        None,
        &[
            ("LOGSTAMP__INGEST__FORMAT", "raw"),
            ("LOGSTAMP__INGEST__SHUTDOWN_TIMEOUT", "90s"),
        ],
        &[],
    );
    assert_eq!(s.ingest.format, logstamp::transform::MessageFormat::Raw);
    assert_eq!(s.ingest.shutdown_timeout, Duration::from_secs(90));
    for (key, value) in [
        ("ingest.format", "xml"),
        ("ingest.max_message_bytes", "0"),
        ("ingest.max_buffered_bytes", "0"),
        ("ingest.maintenance_interval", "0s"),
        ("ingest.shutdown_timeout", "soon"),
    ] {
        let e = load_err(None, &[], &[(key, value)]);
        assert_names(&e, key, "the command line");
    }
}

/// Sizes, counts and durations have upper bounds far above any sane value, below where the
/// arithmetic done with them could overflow (`ingest.max_message_bytes` at `usize::MAX` once
/// wrapped to 0): the bound itself loads, one more is refused naming the key and the bound.
#[test]
fn the_relay_message_size_has_an_upper_bound() {
    // The applier's memory holds 8 of the largest messages.
    let memory = ("relay.apply_memory_bytes", "7992000000");
    load(
        None,
        &[],
        &[("relay.max_message_bytes", "999000000"), memory],
    );
    let e = load_err(
        None,
        &[],
        &[("relay.max_message_bytes", "999000001"), memory],
    );
    assert_names(&e, "relay.max_message_bytes", "the command line");
    assert!(e.to_string().contains("at most 999000000"), "{e}");
}

#[test]
fn sizes_counts_and_durations_have_upper_bounds() {
    for (key, bound, over, says) in [
        (
            "ingest.max_message_bytes",
            "1000000000",
            "1000000001",
            "at most 1000000000",
        ),
        (
            "ingest.max_buffered_bytes",
            "1099511627776",
            "1099511627777",
            "at most 1099511627776",
        ),
        (
            "batch.max_bytes",
            "1099511627776",
            "1099511627777",
            "at most 1099511627776",
        ),
        ("batch.max_rows", "10000000", "10000001", "at most 10000000"),
        ("store.concurrency", "1024", "1025", "at most 1024"),
        ("relay.apply_batch", "100000", "100001", "at most 100000"),
        (
            "batch.linger_ms",
            "31536000000",
            "31536000001",
            "at most 365 days",
        ),
        (
            "ingest.shutdown_timeout",
            "365days",
            "366days",
            "at most 365 days",
        ),
        (
            "ingest.maintenance_interval",
            "365days",
            "365days 1s",
            "at most 365 days",
        ),
        (
            "store.give_up_after",
            "365days",
            "366days",
            "at most 365 days",
        ),
        ("id.lease_ttl", "365days", "366days", "at most 365 days"),
        ("id.mark_window", "365days", "366days", "at most 365 days"),
        (
            "relay.checkpoint_interval",
            "365days",
            "366days",
            "at most 365 days",
        ),
        (
            "relay.apply_timeout",
            "365days",
            "366days",
            "at most 365 days",
        ),
    ] {
        load(None, &[], &[(key, bound)]);
        let e = load_err(None, &[], &[(key, over)]);
        assert_names(&e, key, "the command line");
        assert!(e.to_string().contains(says), "{key}: {e}");
    }
    let largest = u64::MAX.to_string();
    for key in ["ingest.max_message_bytes", "batch.max_bytes"] {
        let e = load_err(None, &[], &[(key, &largest)]);
        assert_names(&e, key, "the command line");
    }
    check_bad_in_every_layer("ingest.max_message_bytes", "1000000001", "1000000001");
}

// ---------------------------------------------------------------------------------------------
// [[normalize]]
// ---------------------------------------------------------------------------------------------

#[test]
fn normalize_rule_sets_load_from_inline_and_sub_tables() {
    use logstamp::transform::settings::{NormalizeRule, NormalizeStep};
    assert!(Settings::defaults().unwrap().normalize.rules().is_empty());
    let file = toml_file(
        r#"
[[normalize]]
topics = ["logs"]
steps = [
  { op = "rename", from = "/lvl", to = "/level" },
  { op = "extract", from = "/context/trace/id", to = "/trace_id" },
  { op = "drop", field = "/debug" },
  { op = "default", field = "/level", value = "info" },
  { op = "lowercase", field = "/level" },
  { op = "map", field = "/level", values = { warning = "warn", Err = "error" } },
  { op = "time", field = "/time", formats = ["rfc3339", "%Y-%m-%d %H:%M:%S%.f", "epoch_seconds", "epoch_millis"], zone = "Asia/Shanghai" },
  { op = "require", field = "/message" },
]

[[normalize]]
[[normalize.steps]]
op = "default"
field = "/tags"
value = { a = [1, 2.5], b = true }
[[normalize.steps]]
op = "time"
field = "/t"
formats = ["epoch_millis"]
"#,
    );
    let s = load(Some(&file), &[], &[]);
    assert_eq!(s.normalize.rules().len(), 2);
    let NormalizeRule { topics, steps } = &s.normalize.rules()[0];
    assert_eq!(topics, &["logs"]);
    assert_eq!(steps.len(), 8);
    assert_eq!(
        steps[0],
        NormalizeStep::Rename {
            from: "/lvl".into(),
            to: "/level".into()
        }
    );
    // Keys of `values` keep their case.
    match &steps[5] {
        NormalizeStep::Map { values, .. } => {
            assert_eq!(values.get("Err").map(String::as_str), Some("error"));
        }
        other => panic!("{other:?}"),
    }
    assert!(s.normalize.rules()[1].topics.is_empty());
    assert_eq!(
        s.normalize.rules()[1].steps[0],
        NormalizeStep::Default {
            field: "/tags".into(),
            value: serde_json::json!({ "a": [1, 2.5], "b": true }),
        }
    );
    match &s.normalize.rules()[1].steps[1] {
        NormalizeStep::Time { zone, .. } => assert_eq!(zone, "UTC"),
        other => panic!("{other:?}"),
    }

    // And the loaded rules work.
    let n = &s.normalize;
    let mut doc =
        serde_json::json!({ "lvl": "WARNING", "time": "2026-11-21 10:00:00", "message": "m" });
    assert_eq!(n.apply("logs", &mut doc), Ok(true));
    assert_eq!(doc["level"], "warn");
    assert_eq!(doc["time"], "2026-11-21T02:00:00.000Z");
}

#[test]
fn bad_normalize_rules_are_refused_naming_the_problem() {
    for (steps, key, why) in [
        (r#"{ op = "upcase", field = "/a" }"#, "normalize", "upcase"),
        (
            r#"{ op = "drop", field = "a" }"#,
            "normalize[0].steps[1]",
            "start it with /",
        ),
        (
            r#"{ op = "time", field = "/t", formats = ["%Y-%m-%d %Q"] }"#,
            "normalize[0].steps[1]",
            "not a valid strftime pattern",
        ),
        (
            r#"{ op = "time", field = "/t", formats = ["rfc3339"], zone = "Mars/Olympus" }"#,
            "normalize[0].steps[1]",
            "unknown time zone",
        ),
        (
            r#"{ op = "time", field = "/t", formats = [] }"#,
            "normalize[0].steps[1]",
            "at least one format",
        ),
        (
            r#"{ op = "default", field = "/t", value = nan }"#,
            "normalize[0].steps[1]",
            "not representable as JSON",
        ),
        (
            r#"{ op = "drop", field = "/a", to = "/b" }"#,
            "normalize[0].steps[1].to",
            "unknown field `to`",
        ),
    ] {
        let file = toml_file(&format!(
            "[[normalize]]\nsteps = [{{ op = \"drop\", field = \"/ok\" }}, {steps}]\n"
        ));
        let e = load_err(Some(&file), &[], &[]);
        assert_names(&e, key, &format!("file {}", file.display()));
        assert!(e.to_string().contains(why), "{why:?} not in {e}");
    }
}

#[test]
fn truncate_is_for_string_and_text_columns() {
    let file = toml_file(
        "[store]\n[[store.columns]]\nname = \"m\"\npointer = \"/m\"\ntype = \"text\"\ntruncate = true\n",
    );
    let s = load(Some(&file), &[], &[]);
    assert!(s.store.columns[0].truncate);
    let file = toml_file(
        "[store]\n[[store.columns]]\nname = \"n\"\npointer = \"/n\"\ntype = \"int\"\ntruncate = true\n",
    );
    let e = load_err(Some(&file), &[], &[]);
    assert_names(&e, "store.columns", &format!("file {}", file.display()));
    assert!(e.to_string().contains("truncate applies only"), "{e}");
}
