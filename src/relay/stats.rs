//! What a running relay counts, for its metrics and readiness (and its stage times, for `bench
//! relay`): plain atomics, written where the work happens (capture, the checkpoint task, each
//! applier) and read at each scrape. Nothing
//! here knows about HTTP or Prometheus. Counts start at zero with the process, as Prometheus
//! counters do; the durable totals are in `relay_checkpoints` and `relay_applied`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::change::TxnRef;
use super::stage_times::StageTimes;

/// The counts of one relay process: its capture and an applier per remote data centre.
#[derive(Debug)]
pub struct RelayStats {
    pub capture: CaptureStats,
    /// Capture's snapshot of existing rows.
    pub snapshot: SnapshotStats,
    /// In the order of `relay.remotes`, by source data centre.
    appliers: Vec<(String, ApplyStats)>,
}

impl RelayStats {
    pub fn new<I: IntoIterator<Item = String>>(remotes: I) -> RelayStats {
        RelayStats {
            capture: CaptureStats::default(),
            snapshot: SnapshotStats::default(),
            appliers: remotes
                .into_iter()
                .map(|dc| (dc, ApplyStats::default()))
                .collect(),
        }
    }

    /// The applier of `source_dc`'s changes.
    pub fn applier(&self, source_dc: &str) -> Option<&ApplyStats> {
        self.appliers
            .iter()
            .find(|(dc, _)| dc == source_dc)
            .map(|(_, stats)| stats)
    }

    /// Every applier, with the data centre it applies.
    pub fn appliers(&self) -> impl Iterator<Item = (&str, &ApplyStats)> {
        self.appliers.iter().map(|(dc, stats)| (dc.as_str(), stats))
    }
}

#[derive(Debug, Default)]
pub struct CaptureStats {
    /// Transactions with relayed changes that Kafka acknowledged.
    pub published_transactions: AtomicU64,
    /// Their changes (one message each).
    pub published_changes: AtomicU64,
    /// Transactions with relayed changes of which the loop filter left nothing (they were
    /// applied from another data centre).
    pub loop_dropped_transactions: AtomicU64,
    /// Changes the loop filter dropped.
    pub loop_dropped_changes: AtomicU64,
    /// DDL statements read from the binlog (not relayed).
    pub ddl_skipped: AtomicU64,
    /// The number of the binlog file of the last checkpoint recorded (`mariadb-bin.000042`:
    /// 42), and the position in it.
    pub checkpoint_file: AtomicU64,
    pub checkpoint_pos: AtomicU64,
    /// Capture reads the binlog now.
    pub connected: AtomicBool,
    /// The server gave no answer (no event, no heartbeat, no statement's) within capture's
    /// bound, and has not answered since.
    pub source_hung: Hung,
    /// Behind in reading the binlog: since the last transaction read, until a heartbeat says
    /// the server has sent all it wrote.
    pub read_lag: Lag,
    /// Behind in publishing: since the oldest transaction read that Kafka has not acknowledged.
    pub publish_lag: Lag,
    /// From reading a transaction's commit in the binlog to Kafka acknowledging its last
    /// message: the producer's linger and the broker's write.
    pub publish_time: StageTimes,
}

impl CaptureStats {
    /// Seconds capture is behind the server: the older of what it has not read and what it has
    /// not published.
    pub fn lag_seconds(&self) -> u64 {
        self.read_lag.seconds().max(self.publish_lag.seconds())
    }
}

#[derive(Debug, Default)]
pub struct ApplyStats {
    /// Source transactions committed here.
    pub applied_transactions: AtomicU64,
    /// Their changes.
    pub applied_changes: AtomicU64,
    /// The offset of the next message to apply, as stored with the last commit.
    pub next_offset: AtomicI64,
    /// Applying waits because a table differs between the source and here.
    pub schema_mismatch: AtomicBool,
    /// Transactions read that were applied already (published again), and skipped.
    pub skipped_transactions: AtomicU64,
    /// Messages passed over because a later capture of the source resumed before they landed.
    pub superseded_messages: AtomicU64,
    /// Applying stopped: at a transaction that cannot be placed after what was applied, until
    /// the source's stream starts anew; or at a message that cannot be applied, until the
    /// relay starts again.
    pub stopped: AtomicBool,
    /// UPDATEs and DELETEs that did not find their before image here, recorded in
    /// `relay_conflicts`.
    pub conflicts: AtomicU64,
    /// Messages recorded in `relay_dead_letters` and skipped
    /// (`relay.on_bad_message = "dead_letter"`).
    pub dead_letters: AtomicU64,
    /// Messages refused for their signature (missing, of an unknown or retired key, or wrong).
    pub refused_signatures: AtomicU64,
    /// A source transaction to dead-letter when it is read again: it failed for a definite
    /// reason after some of it was applied (and rolled back), so its messages are read again
    /// from the stored offset. Kept here, across the applier's restart.
    dead_lettering: Mutex<Option<DeadLettering>>,
    /// Up to this offset the applier sends each part's statements as it applies it, so that a
    /// definite failure is known to be that part's; beyond it (0: everywhere), what needs no
    /// answer goes with the next statement that does, or with the commit.
    send_each_part_until: AtomicI64,
    /// Applying waits at a conflict (`relay.on_conflict = "stop"`) until the row here matches.
    pub conflict_stopped: AtomicBool,
    /// The change applying waits at, kept while the applier starts again from its stored
    /// offset to try it again, so that its conflict is recorded once.
    waiting_at: Mutex<Option<TxnRef>>,
    /// The applier is connected to MySQL and reads its topic.
    pub running: AtomicBool,
    /// From a message's Kafka timestamp (when capture queued it to its producer) to the
    /// applier reading it: the producer's linger, the broker and the fetch. In whole
    /// milliseconds, Kafka's timestamps' unit.
    pub kafka_transit: StageTimes,
    /// From reading a source transaction's last message to committing the local transaction
    /// that applies it (waiting for its turn included).
    pub apply_time: StageTimes,
    /// Bytes of prepared parts the applier holds, waiting or being applied (at most half of
    /// `relay.apply_memory_bytes`).
    pub held_bytes: AtomicU64,
    /// The database applied to gave no answer within `relay.apply_timeout`, and has not
    /// answered since.
    pub target_hung: Hung,
    pub lag: Lag,
}

impl ApplyStats {
    /// The change applying waits at, if it does.
    pub fn waiting_at(&self) -> Option<TxnRef> {
        *self
            .waiting_at
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a part ending before `next_offset` is sent on its own (see
    /// `send_each_part_until`).
    pub fn sends_each_part(&self, next_offset: i64) -> bool {
        next_offset <= self.send_each_part_until.load(Ordering::Relaxed)
    }

    /// Parts up to `next_offset` are sent on their own, from the next start of the applier.
    pub fn send_each_part_until(&self, next_offset: i64) {
        self.send_each_part_until
            .fetch_max(next_offset, Ordering::Relaxed);
    }

    /// Takes the transaction to dead-letter, if there is one.
    pub fn take_dead_lettering(&self) -> Option<DeadLettering> {
        self.dead_lettering
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }

    pub fn dead_letter_next(&self, lettering: DeadLettering) {
        *self
            .dead_lettering
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(lettering);
    }

    pub fn wait_at(&self, change: Option<TxnRef>) {
        *self
            .waiting_at
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = change;
    }
}

/// A source transaction an applier skips into `relay_dead_letters` when it reads it again
/// (`relay.on_bad_message = "dead_letter"`), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLettering {
    /// The transaction: its stream's epoch, its sequence number in the topic and its GTID.
    pub epoch: u64,
    pub seq: u64,
    pub gtid: Option<String>,
    pub reason: String,
}

/// How far behind a part is: the commit time at the source of the oldest transaction it has
/// in hand and not finished, or none when it has caught up. Measured like MariaDB's
/// `Seconds_Behind_Master`, so an idle relay shows 0, not the time since the last write.
#[derive(Debug, Default)]
pub struct Lag {
    /// Unix seconds; 0: caught up.
    since: AtomicU64,
}

impl Lag {
    /// The part works on a transaction committed at `commit_ts` (Unix seconds).
    pub fn behind_since(&self, commit_ts: u32) {
        // A commit time of 0 would read as caught up; the binlog never has one.
        self.since
            .store(u64::from(commit_ts.max(1)), Ordering::Relaxed);
    }

    /// The part has done everything it was given.
    pub fn caught_up(&self) {
        self.since.store(0, Ordering::Relaxed);
    }

    /// Seconds behind at `now` (Unix seconds); 0 when caught up or when the source's clock is
    /// ahead of ours.
    pub fn seconds_at(&self, now: u64) -> u64 {
        match self.since.load(Ordering::Relaxed) {
            0 => 0,
            since => now.saturating_sub(since),
        }
    }

    /// Seconds behind now.
    pub fn seconds(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.seconds_at(now)
    }
}

/// Whether a server a part waits on stopped answering within its bound: set at the first wait
/// that timed out, cleared at the next answer. Each change is reported once, not once per
/// retry.
#[derive(Debug, Default)]
pub struct Hung(AtomicBool);

impl Hung {
    /// Records a wait that got no answer; true if the server answered until now (the caller
    /// says so).
    pub fn hung(&self) -> bool {
        !self.0.swap(true, Ordering::Relaxed)
    }

    /// Records an answer; true if the server was hung until now.
    pub fn answered(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }

    pub fn is_hung(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Sets a flag for as long as it lives: a part that returns, by error or not, clears it.
#[derive(Debug)]
pub struct Running<'a>(&'a AtomicBool);

impl<'a> Running<'a> {
    pub fn mark(flag: &'a AtomicBool) -> Running<'a> {
        flag.store(true, Ordering::Relaxed);
        Running(flag)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_counts_from_the_commit_in_hand_and_is_zero_when_caught_up() {
        let lag = Lag::default();
        assert_eq!(lag.seconds_at(1_000), 0);
        lag.behind_since(990);
        assert_eq!(lag.seconds_at(1_000), 10);
        // The source's clock ahead of ours: not behind.
        assert_eq!(lag.seconds_at(980), 0);
        lag.caught_up();
        assert_eq!(lag.seconds_at(1_000), 0);
    }

    #[test]
    fn a_hung_server_is_reported_once_each_way() {
        let hung = Hung::default();
        assert!(!hung.is_hung());
        assert!(!hung.answered(), "answering is news only after a hang");
        assert!(hung.hung());
        assert!(!hung.hung(), "a retry that times out again is no news");
        assert!(hung.is_hung());
        assert!(hung.answered());
        assert!(!hung.answered());
        assert!(!hung.is_hung());
    }

    #[test]
    fn running_is_cleared_when_the_part_ends() {
        let stats = RelayStats::new(["b".to_string()]);
        let applier = stats.applier("b").unwrap();
        {
            let _running = Running::mark(&applier.running);
            assert!(applier.running.load(Ordering::Relaxed));
        }
        assert!(!applier.running.load(Ordering::Relaxed));
        assert!(stats.applier("c").is_none());
    }
}

/// What a running snapshot counts, for the metrics.
#[derive(Debug, Default)]
pub struct SnapshotStats {
    /// Rows published from chunks.
    pub copied_rows: AtomicU64,
    /// Chunk rows left out because the binlog changed them between the watermarks.
    pub dropped_rows: AtomicU64,
    pub chunks: AtomicU64,
    /// The table's estimated rows not copied yet (`information_schema.TABLES.TABLE_ROWS`).
    pub remaining_rows: AtomicU64,
    /// A table is being copied.
    pub running: AtomicBool,
}
