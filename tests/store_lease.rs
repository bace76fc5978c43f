//! Service-ID leases against MariaDB: claims (fixed and auto, 20 at once), expiry, loss,
//! release, and the high-water mark across restarts with a clock an hour behind. Short TTLs keep
//! the waits short; every wait is on a condition with a deadline.

mod support;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use logstamp::config::Settings;
use logstamp::id::{IdError, Layout, ManualClock};
use logstamp::mysql;
use logstamp::store::lease::{self, HeldLease, LeaseError, LeaseRow, LeaseStatus};
use logstamp::store::migrate;
use support::TestDb;
use support::ingest::Setup;

/// How long any awaited condition may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// A TTL for the tests that wait on another holder's lease.
const SHORT_TTL: (&str, &str) = ("id.lease_ttl", "3s");

/// How long past the TTL a fixed claim waits for another holder's lease at most (README).
const WAIT_MARGIN: Duration = Duration::from_secs(2);

/// A database with the migrations applied, and a connection to it.
async fn migrated(hint: &str) -> (TestDb, Conn) {
    let test_db = TestDb::create(hint).await;
    mysql::create_database(&test_db.mysql_url()).await.unwrap();
    let mut conn = mysql::connect(&test_db.mysql_url()).await.unwrap();
    migrate::apply(&mut conn, &migrate::builtin().unwrap())
        .await
        .unwrap();
    (test_db, conn)
}

async fn within<T>(what: &str, work: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, work)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {PATIENCE:?}"))
}

/// Polls `check` until it gives a value, failing the test after `PATIENCE`.
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    within(what, async {
        loop {
            if let Some(value) = check().await {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

async fn row(conn: &mut Conn, service_id: u32) -> LeaseRow {
    lease::list(conn)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.service_id == service_id)
        .unwrap_or_else(|| panic!("no lease row for service ID {service_id}"))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn second_of(id: u64) -> u64 {
    id >> 32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_processes_claiming_at_once_get_the_twenty_lowest_ids() {
    let (test_db, mut conn) = migrated("lease_auto").await;
    let settings = test_db.settings(&[("id.service_id", "auto"), ("id.auto_range", "0-63")]);
    let claims: Vec<_> = (0..20)
        .map(|_| {
            let settings = settings.clone();
            tokio::spawn(async move { HeldLease::acquire(&settings.mysql.url, &settings.id).await })
        })
        .collect();
    let mut leases = Vec::new();
    for claim in claims {
        leases.push(within("a claim", claim).await.unwrap().unwrap());
    }
    let ids: BTreeSet<u32> = leases.iter().map(|l| l.service_id()).collect();
    // Distinct, and each claimer took the lowest it could: together exactly 0..20.
    assert_eq!(ids, (0..20).collect());
    for lease in &leases {
        assert_eq!(
            lease.generator().service_id(),
            lease.service_id(),
            "the generator stamps the claimed ID"
        );
    }
    let rows = lease::list(&mut conn).await.unwrap();
    assert_eq!(rows.len(), 20);
    assert!(rows.iter().all(|r| r.live));
    for lease in leases {
        lease.release().await.unwrap();
    }
}

#[tokio::test]
async fn auto_takes_the_lowest_free_or_expired_id_and_refuses_a_full_range() {
    let (test_db, mut conn) = migrated("lease_full").await;
    let settings = test_db.settings(&[("id.service_id", "auto"), ("id.auto_range", "4-6")]);
    let mut held = Vec::new();
    for expected in 4..=6 {
        let lease = HeldLease::acquire(&settings.mysql.url, &settings.id)
            .await
            .unwrap();
        assert_eq!(lease.service_id(), expected);
        held.push(lease);
    }
    match HeldLease::acquire(&settings.mysql.url, &settings.id).await {
        Err(e @ LeaseError::NoFreeId { first: 4, last: 6 }) => {
            assert!(e.to_string().contains("id.auto_range 4-6"), "{e}")
        }
        other => panic!("expected NoFreeId, got {other:?}"),
    }
    // Freeing the middle one makes it the next claimed.
    let middle = held.remove(1);
    middle.release().await.unwrap();
    assert!(!row(&mut conn, 5).await.live);
    let again = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    assert_eq!(again.service_id(), 5);
    again.release().await.unwrap();
    for lease in held {
        lease.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_second_process_with_the_same_fixed_id_refuses_naming_the_holder() {
    let (test_db, mut conn) = migrated("lease_fixed").await;
    let settings = test_db.settings(&[("id.service_id", "7"), SHORT_TTL]);
    let first = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    assert_eq!(first.service_id(), 7);
    let holder = first.holder().clone();
    let seen = row(&mut conn, 7).await.expires_at;
    match HeldLease::acquire(&settings.mysql.url, &settings.id).await {
        Err(
            ref e @ LeaseError::Held {
                service_id: 7,
                ref host,
                pid,
                ref expires_at,
                expires_in_seconds,
            },
        ) => {
            assert_eq!((host, pid), (&holder.host, holder.pid));
            assert!((0..=3).contains(&expires_in_seconds), "{e}");
            // Refused once the holder renewed, not at the sight of its lease.
            assert!(*expires_at > seen, "{expires_at} is not after {seen}");
            let message = e.to_string();
            for needle in [
                "service ID 7",
                holder.host.as_str(),
                &format!("pid {}", holder.pid),
                "leases release 7 --force",
            ] {
                assert!(message.contains(needle), "{needle:?} not in {message}");
            }
        }
        other => panic!("expected Held, got {other:?}"),
    }
    // The refused claim changed nothing: the first holder still renews and stamps.
    first.generator().next_id().unwrap();
    let released = first.release().await.unwrap();
    assert!(released.row_released);
    // Released: the same ID is claimable at once.
    let second = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    assert_ne!(second.holder().token, holder.token);
    second.release().await.unwrap();
}

#[tokio::test]
async fn a_fixed_claim_waits_for_the_lease_of_a_holder_that_stopped_renewing() {
    let (test_db, mut conn) = migrated("lease_expire").await;
    let settings = test_db.settings(&[("id.service_id", "3"), SHORT_TTL]);
    let crashed = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    let issued = crashed.generator().next_id().unwrap();
    // Dropped without release, as by a crash: the renewal stops, the row stays.
    drop(crashed);
    let before = Instant::now();
    let left = row(&mut conn, 3).await.expires_in_micros;
    let successor = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    let waited = before.elapsed();
    // Claimed once the lease expired by the database's clock, within the TTL and the margin.
    assert!(
        waited.as_micros() >= left as u128,
        "{waited:?}, lease left {left} µs"
    );
    assert!(waited <= settings.id.lease_ttl + WAIT_MARGIN, "{waited:?}");
    assert_eq!(successor.service_id(), 3);
    assert!(row(&mut conn, 3).await.live);
    assert!(successor.generator().next_id().unwrap() > issued);
    // Its renewal clock started at the claim, not before the wait: it renews and holds on.
    let claimed = row(&mut conn, 3).await.expires_at;
    eventually("a renewal", async || {
        (row(&mut conn, 3).await.expires_at != claimed).then_some(())
    })
    .await;
    assert_eq!(*successor.watch().borrow(), LeaseStatus::Held);
    successor.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_renew_stops_stamping_before_its_lease_expires() {
    let (test_db, mut conn) = migrated("lease_block").await;
    let settings = test_db.settings(&[("id.service_id", "2"), ("id.lease_ttl", "1s")]);
    let lease = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    let mut status = lease.watch();
    assert_eq!(*status.borrow_and_update(), LeaseStatus::Held);
    lease.generator().next_id().unwrap();
    // Another session holds the table: renewals hang until the holder gives up.
    conn.query_drop("LOCK TABLES service_leases WRITE")
        .await
        .unwrap();
    let reason = within("the loss to be noticed", lease.lost()).await;
    assert!(reason.contains("service ID 2"), "{reason}");
    assert!(matches!(*status.borrow(), LeaseStatus::Lost(_)));
    assert_eq!(
        lease.generator().next_id(),
        Err(IdError::LeaseLost { service_id: 2 })
    );
    conn.query_drop("UNLOCK TABLES").await.unwrap();
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_holder_whose_lease_was_taken_stops_stamping() {
    let (test_db, mut conn) = migrated("lease_taken").await;
    let settings = test_db.settings(&[("id.service_id", "9"), ("id.lease_ttl", "1s")]);
    let lease = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    let before = lease.generator().next_id().unwrap();
    let ended = lease::force_release(&mut conn, 9).await.unwrap().unwrap();
    assert_eq!(ended.pid, std::process::id());
    // Claimed by another process before the old holder's next renewal.
    let successor = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    within("the loss to be noticed", lease.lost()).await;
    assert_eq!(
        lease.generator().next_id(),
        Err(IdError::LeaseLost { service_id: 9 })
    );
    // The old holder's release must not touch the successor's row.
    assert!(!lease.release().await.unwrap().row_released);
    assert!(row(&mut conn, 9).await.live);
    // The successor starts above the mark, so above everything the old holder issued.
    assert!(successor.generator().next_id().unwrap() > before);
    assert_eq!(lease::force_release(&mut conn, 1000).await.unwrap(), None);
    successor.release().await.unwrap();
    assert_eq!(lease::force_release(&mut conn, 9).await.unwrap(), None);
}

/// Settings with a fixed service ID for the restart tests.
fn restart_settings(test_db: &TestDb) -> Settings {
    test_db.settings(&[("id.service_id", "4")])
}

async fn issue_on_a_clock(settings: &Settings, at: u64, release: bool) -> (Vec<u64>, u64) {
    let clock = Arc::new(ManualClock::new(at));
    let lease =
        HeldLease::acquire_with_clock(&settings.mysql.url, &settings.id, Arc::clone(&clock))
            .await
            .unwrap();
    let generator = lease.generator();
    let mut ids: Vec<u64> = (0..1000).map(|_| generator.next_id().unwrap()).collect();
    clock.advance(2);
    ids.extend(generator.next_block(1000).unwrap());
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    if release {
        let released = lease.release().await.unwrap();
        assert!(released.row_released);
        (ids, released.mark)
    } else {
        drop(lease);
        (ids, 0)
    }
}

#[tokio::test]
async fn a_restart_with_the_clock_an_hour_behind_continues_above_every_earlier_id() {
    let (test_db, mut conn) = migrated("lease_restart").await;
    let settings = restart_settings(&test_db);
    let t0 = now();
    let (before, mark) = issue_on_a_clock(&settings, t0, true).await;
    // A clean release leaves the mark at the last second issued.
    assert_eq!(mark, second_of(*before.last().unwrap()));
    assert_eq!(row(&mut conn, 4).await.issued_seconds_mark, mark);

    let (after, _) = issue_on_a_clock(&settings, t0 - 3_600, true).await;
    let (max_before, min_after) = (before.iter().max().unwrap(), after.iter().min().unwrap());
    assert!(min_after > max_before, "{min_after} <= {max_before}");
    // Right above the mark, not a window ahead: the release lowered it to what was issued.
    assert_eq!(second_of(*min_after), mark + 1);
    assert_eq!(Layout::default().decode(*min_after).service_id, 4);
}

#[tokio::test]
async fn a_restart_after_a_crash_with_the_clock_an_hour_behind_starts_above_the_mark() {
    let (test_db, mut conn) = migrated("lease_crash").await;
    let settings = restart_settings(&test_db);
    let t0 = now();
    let (before, _) = issue_on_a_clock(&settings, t0, false).await;
    // No release: the mark is still the one persisted ahead of the clock.
    let persisted = row(&mut conn, 4).await.issued_seconds_mark;
    assert!(persisted >= second_of(*before.last().unwrap()));
    assert!(persisted >= t0 + settings.id.mark_window.as_secs());
    // The operator frees the dead holder's ID instead of waiting for the expiry.
    lease::force_release(&mut conn, 4).await.unwrap().unwrap();
    assert_eq!(row(&mut conn, 4).await.issued_seconds_mark, persisted);

    let (after, _) = issue_on_a_clock(&settings, t0 - 3_600, true).await;
    assert!(after.iter().min() > before.iter().max());
    assert_eq!(second_of(after[0]), persisted + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mark_is_raised_ahead_of_the_clock_and_bounds_issuance_when_it_cannot_be() {
    let (test_db, mut conn) = migrated("lease_mark").await;
    let settings = test_db.settings(&[("id.service_id", "6")]);
    let window = settings.id.mark_window.as_secs();
    let t0 = now();
    let clock = Arc::new(ManualClock::new(t0));
    let lease =
        HeldLease::acquire_with_clock(&settings.mysql.url, &settings.id, Arc::clone(&clock))
            .await
            .unwrap();
    let generator = lease.generator();
    assert_eq!(row(&mut conn, 6).await.issued_seconds_mark, t0 + window);
    assert_eq!(generator.ceiling_unix_seconds(), Some(t0 + window));

    // The clock moves on past half the window: the task raises the mark ahead of it.
    clock.set(t0 + window / 2 + 1);
    let raised = t0 + window / 2 + 1 + window;
    eventually("the mark to be raised", async || {
        (row(&mut conn, 6).await.issued_seconds_mark == raised).then_some(())
    })
    .await;
    eventually("the generator's ceiling to follow", async || {
        (generator.ceiling_unix_seconds() == Some(raised)).then_some(())
    })
    .await;
    let id = generator.next_id().unwrap();
    assert!(second_of(id) <= raised);

    // With the row locked, the mark cannot be raised: a clock running past it is refused.
    let mut locker = test_db.conn().await;
    locker
        .query_drop("LOCK TABLES service_leases WRITE")
        .await
        .unwrap();
    clock.set(raised + 1);
    assert_eq!(
        generator.next_id(),
        Err(IdError::PastMark {
            service_id: 6,
            unix_seconds: raised + 1,
            mark: raised
        })
    );
    locker.query_drop("UNLOCK TABLES").await.unwrap();
    // Unlocked before the lease was given up: the raise goes through and issuance resumes.
    let resumed = eventually("issuance to resume", async || generator.next_id().ok()).await;
    assert_eq!(second_of(resumed), raised + 1);
    assert!(row(&mut conn, 6).await.issued_seconds_mark > raised);
    assert_eq!(lease.watch().borrow().clone(), LeaseStatus::Held);
    lease.release().await.unwrap();
}

#[tokio::test]
async fn clean_shutdown_releases_and_a_missing_table_is_explained() {
    let (test_db, mut conn) = migrated("lease_release").await;
    let settings = test_db.settings(&[("id.service_id", "1")]);
    let lease = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    let generator = Arc::clone(lease.generator());
    let last = generator.next_block(10).unwrap().last();
    let released = lease.release().await.unwrap();
    assert_eq!(released.service_id, 1);
    assert_eq!(released.mark, second_of(last));
    let row = row(&mut conn, 1).await;
    assert!(!row.live);
    assert!(row.expires_in_micros <= 0);
    assert_eq!(row.issued_seconds_mark, second_of(last));
    // A generator still shared after the release refuses.
    assert_eq!(
        generator.next_id(),
        Err(IdError::Released { service_id: 1 })
    );

    conn.query_drop("DROP TABLE service_leases").await.unwrap();
    let e = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("logstamp migrate"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// The binary: id gen under a clock an hour back, leases list and release
// ---------------------------------------------------------------------------------------------

const BIN: &str = env!("CARGO_BIN_EXE_logstamp");
const FAKETIME: &str = "faketime";

/// The binary, run with only `url`'s database configured (through `faketime` if `clock` is
/// given, a faketime offset such as "-1h"), with stdout and stderr.
fn run_logstamp(url: &str, clock: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut cmd = match clock {
        None => std::process::Command::new(BIN),
        Some(offset) => {
            let mut cmd = std::process::Command::new(FAKETIME);
            cmd.args(["-f", offset, BIN]);
            cmd
        }
    };
    cmd.env_clear()
        .env("LOGSTAMP__MYSQL__URL", url)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running {args:?} (clock {clock:?}) failed; the clock tests need faketime: {e}; {}",
                support::SET_UP
            )
        })
}

fn printed_ids(out: &std::process::Output) -> Vec<u64> {
    support::json_lines(out)
        .iter()
        .map(|v| v["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn id_gen_with_the_clock_an_hour_back_prints_ids_above_those_printed_before() {
    let (test_db, mut conn) = migrated("lease_faketime").await;
    let url = test_db.url.as_str();
    let hour_back = Some("-1h");
    // faketime really sets the binary's clock back: offline, IDs carry the time an hour ago.
    let offline = printed_ids(&run_logstamp(url, hour_back, &["id", "gen", "--no-lease"]));
    let behind = now() - second_of(offline[0]);
    assert!((3_590..=3_610).contains(&behind), "{behind} s behind");

    let before = printed_ids(&run_logstamp(url, None, &["id", "gen", "--count", "1000"]));
    assert_eq!(before.len(), 1000);
    let mark = row(&mut conn, 0).await.issued_seconds_mark;
    assert_eq!(mark, second_of(*before.last().unwrap()));

    let out = run_logstamp(url, hour_back, &["id", "gen", "--count", "1000"]);
    let after = printed_ids(&out);
    assert_eq!(after.len(), 1000);
    assert!(after.windows(2).all(|w| w[0] < w[1]));
    let (max_before, min_after) = (before.iter().max().unwrap(), after.iter().min().unwrap());
    assert!(min_after > max_before, "{min_after} <= {max_before}");
    assert_eq!(second_of(*min_after), mark + 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ahead of this host's clock"), "{stderr}");
    // Released again: the mark is the last second printed, and the lease is not live.
    let row = row(&mut conn, 0).await;
    assert_eq!(row.issued_seconds_mark, second_of(*after.last().unwrap()));
    assert!(!row.live);
}

#[tokio::test]
async fn leases_list_and_release_show_and_free_a_holders_id() {
    let (test_db, _conn) = migrated("lease_cli").await;
    let url = test_db.url.as_str();
    let settings = test_db.settings(&[("id.service_id", "5"), ("id.lease_ttl", "2s")]);
    let lease = HeldLease::acquire(&settings.mysql.url, &settings.id)
        .await
        .unwrap();
    let holder = lease.holder().clone();

    let listed = support::json_lines(&run_logstamp(url, None, &["leases", "list"]));
    assert_eq!(listed.len(), 1);
    let shown = &listed[0];
    assert_eq!(shown["service_id"], 5);
    assert_eq!(shown["host"], holder.host.as_str());
    assert_eq!(shown["pid"], holder.pid);
    assert_eq!(shown["live"], true);
    let mark = shown["issued_seconds_mark"].as_u64().unwrap();
    assert_eq!(
        shown["mark_time"],
        chrono::DateTime::from_timestamp(mark as i64, 0)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    );
    assert!(shown["expires_at"].as_str().unwrap().ends_with('Z'));

    let table = run_logstamp(url, None, &["leases", "list", "--format", "table"]);
    let table = String::from_utf8_lossy(&table.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("service_id  state"), "{table}");
    assert!(lines[1].starts_with("5           live"), "{table}");

    // Another process with the same fixed ID refuses once the holder renews (the runtime is
    // left free to renew meanwhile), with one line naming the holder.
    let newcomer = url.to_string();
    let refused = tokio::task::spawn_blocking(move || {
        run_logstamp(&newcomer, None, &["id", "gen", "--service-id", "5"])
    })
    .await
    .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(refused.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let error: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(error.len(), 1, "{stderr}");
    for needle in [
        &format!("host {}", holder.host),
        &format!("pid {}", holder.pid),
    ] {
        assert!(
            error[0].contains(needle.as_str()),
            "{needle} not in {stderr}"
        );
    }

    // The renewals may have raised the mark; the runtime is busy from here to the release.
    let mark = support::json_lines(&run_logstamp(url, None, &["leases", "list"]))[0]["issued_seconds_mark"]
        .as_u64()
        .unwrap();

    // Release needs --force; with it the holder loses the lease and stops stamping.
    let unforced = run_logstamp(url, None, &["leases", "release", "5"]);
    assert_eq!(unforced.status.code(), Some(2));
    let released = support::json_lines(&run_logstamp(
        url,
        None,
        &["leases", "release", "5", "--force"],
    ));
    assert_eq!(released[0]["action"], "released");
    assert_eq!(released[0]["service_id"], 5);
    assert_eq!(released[0]["pid"], holder.pid);
    within("the loss to be noticed", lease.lost()).await;
    assert!(matches!(
        lease.generator().next_id(),
        Err(IdError::LeaseLost { service_id: 5 })
    ));
    let again = support::json_lines(&run_logstamp(
        url,
        None,
        &["leases", "release", "5", "--force"],
    ));
    assert_eq!(
        again[0],
        serde_json::json!({"action": "not_held", "service_id": 5})
    );
    let listed = support::json_lines(&run_logstamp(url, None, &["leases", "list"]));
    assert_eq!(listed[0]["live"], false);
    assert_eq!(listed[0]["issued_seconds_mark"], mark);
    lease.release().await.unwrap();

    // Offline generation needs a fixed service ID.
    let offline = run_logstamp(url, None, &["id", "gen", "--no-lease"]);
    assert!(offline.status.success());
    let auto = std::process::Command::new(BIN)
        .env_clear()
        .env("LOGSTAMP__ID__SERVICE_ID", "auto")
        .args(["id", "gen", "--no-lease"])
        .output()
        .unwrap();
    assert_eq!(auto.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&auto.stderr).contains("--service-id"));
}

// ---------------------------------------------------------------------------------------------
// Workers restarted with a fixed service ID: `logstamp ingest` processes
// ---------------------------------------------------------------------------------------------

/// What a worker logs once it holds its lease, and while it waits for another's to expire.
const LEASED: &str = "service ID leased";
const WAITING: &str = "waiting for the lease to expire";

/// A worker killed with SIGKILL leaves its lease live; the same worker started again at once
/// waits, saying why, until that lease expires by the database's clock, then starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_restarted_at_once_after_sigkill_waits_for_its_old_lease_then_starts() {
    let setup = Setup::new("lease_sigkill", 1, &[]).await;
    let ttl = Duration::from_secs(3);
    let crashed = setup.spawn_process_with("8", 0, &[SHORT_TTL]);
    crashed.wait_for_log(LEASED, PATIENCE).await;
    let crashed_pid = crashed.child.id();
    crashed.kill();
    let mut conn = setup.db.conn().await;
    let killed_at = Instant::now();
    let left = row(&mut conn, 8).await;
    assert!(left.live && left.pid == crashed_pid, "{left:?}");

    let restarted = setup.spawn_process_with("8", 1, &[SHORT_TTL]);
    restarted.wait_for_log(WAITING, PATIENCE).await;
    restarted.wait_for_log(LEASED, PATIENCE).await;
    let waited = killed_at.elapsed();
    assert!(
        waited.as_micros() >= left.expires_in_micros as u128,
        "started {waited:?} after the kill, while the old lease had {} µs left",
        left.expires_in_micros
    );
    // The TTL and the margin, and a second for the process to start.
    let bound = ttl + WAIT_MARGIN + Duration::from_secs(1);
    assert!(waited <= bound, "started {waited:?} after the kill");
    let held = row(&mut conn, 8).await;
    assert!(held.live && held.pid == restarted.child.id(), "{held:?}");
    assert!(restarted.terminate(PATIENCE).success());
}

/// Beside a live holder of the same fixed service ID, a worker waits only until it sees the
/// holder renew, then refuses, naming it; the holder keeps its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_beside_a_live_holder_of_its_id_refuses_once_the_holder_renews() {
    let setup = Setup::new("lease_live", 1, &[]).await;
    let holder = setup.spawn_process_with("8", 0, &[SHORT_TTL]);
    holder.wait_for_log(LEASED, PATIENCE).await;
    let holder_pid = holder.child.id();

    let newcomer = setup.spawn_process_with("8", 1, &[SHORT_TTL]);
    let log_file = newcomer.log.clone();
    let status = newcomer.exit_within(PATIENCE, "beside a live holder");
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert_eq!(status.code(), Some(1), "{log}");
    let lines: Vec<&str> = log.lines().collect();
    let waited = lines.iter().find(|l| l.contains(WAITING));
    let refused = lines.iter().find(|l| l.starts_with("error"));
    let (Some(waited), Some(refused)) = (waited, refused) else {
        panic!("no line saying it waits, or none saying why it refused:\n{log}");
    };
    assert!(waited.contains(&format!("pid {holder_pid}")), "{waited}");
    assert!(refused.contains(&format!("pid {holder_pid}")), "{refused}");
    // Refused on a renewal: the expiry it names is later than the one it first waited for.
    let first_expiry = field(waited, "expires_at=");
    let renewed_expiry = field(refused, "until ");
    assert!(renewed_expiry > first_expiry, "{waited}\n{refused}");

    let mut conn = setup.db.conn().await;
    let held = row(&mut conn, 8).await;
    assert!(held.live && held.pid == holder_pid, "{held:?}");
    assert!(holder.terminate(PATIENCE).success());
}

/// The word after `prefix` in `line`.
fn field<'a>(line: &'a str, prefix: &str) -> &'a str {
    let (_, rest) = line
        .split_once(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in {line}"));
    rest.split_whitespace().next().unwrap_or_default()
}
