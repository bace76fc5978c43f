//! What `logstamp relay run` serves: the counts of its capture and appliers (`RelayStats`),
//! and ready while capture reads the binlog, every applier runs, and MySQL, this data centre's
//! Kafka and every remote's Kafka answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::mysql::MysqlUrl;
use crate::relay::RelayContext;
use crate::relay::stats::RelayStats;
use crate::telemetry::exporter::Exporter;
use crate::telemetry::server::{KafkaProbe, Source, mysql_answers};

/// The relay's endpoints.
pub struct RelaySource {
    dc: String,
    stats: Arc<RelayStats>,
    mysql: MysqlUrl,
    apply_timeout: std::time::Duration,
    /// Where capture publishes.
    kafka: KafkaProbe,
    /// Where each applier reads, by source data centre.
    remotes: Vec<(String, KafkaProbe)>,
}

impl RelaySource {
    pub fn new(context: &RelayContext) -> RelaySource {
        RelaySource {
            dc: context.dc().to_string(),
            stats: context.stats.clone(),
            mysql: context.url().clone(),
            apply_timeout: context.relay.apply_timeout,
            kafka: KafkaProbe::new(&context.kafka_config(&context.kafka.brokers)),
            remotes: context
                .relay
                .remotes
                .iter()
                .map(|remote| {
                    let config = context.kafka_config(remote.brokers_or(&context.kafka.brokers));
                    (remote.dc.clone(), KafkaProbe::new(&config))
                })
                .collect(),
        }
    }
}

fn count(value: &AtomicU64) -> u64 {
    value.load(Ordering::Relaxed)
}

fn flag(value: &AtomicBool) -> f64 {
    if value.load(Ordering::Relaxed) {
        1.0
    } else {
        0.0
    }
}

impl Source for RelaySource {
    fn describe() {
        describe();
    }

    fn render(&self, exporter: &Exporter) -> String {
        let dc = self.dc.clone();
        let capture = &self.stats.capture;
        let counter = |name: &'static str, value: u64| {
            metrics::counter!(name, "dc" => dc.clone()).absolute(value);
        };
        let gauge = |name: &'static str, value: f64| {
            metrics::gauge!(name, "dc" => dc.clone()).set(value);
        };
        counter(
            "logstamp_relay_published_transactions_total",
            count(&capture.published_transactions),
        );
        counter(
            "logstamp_relay_published_changes_total",
            count(&capture.published_changes),
        );
        counter(
            "logstamp_relay_loop_dropped_transactions_total",
            count(&capture.loop_dropped_transactions),
        );
        counter(
            "logstamp_relay_loop_dropped_changes_total",
            count(&capture.loop_dropped_changes),
        );
        counter(
            "logstamp_relay_ddl_skipped_total",
            count(&capture.ddl_skipped),
        );
        gauge(
            "logstamp_relay_checkpoint_file",
            count(&capture.checkpoint_file) as f64,
        );
        gauge(
            "logstamp_relay_checkpoint_position",
            count(&capture.checkpoint_pos) as f64,
        );
        gauge(
            "logstamp_relay_capture_lag_seconds",
            capture.lag_seconds() as f64,
        );
        gauge("logstamp_relay_capture_connected", flag(&capture.connected));
        gauge(
            "logstamp_relay_capture_source_up",
            if capture.source_hung.is_hung() {
                0.0
            } else {
                1.0
            },
        );
        let snapshot = &self.stats.snapshot;
        counter(
            "logstamp_relay_snapshot_rows_total",
            count(&snapshot.copied_rows),
        );
        counter(
            "logstamp_relay_snapshot_dropped_rows_total",
            count(&snapshot.dropped_rows),
        );
        counter(
            "logstamp_relay_snapshot_chunks_total",
            count(&snapshot.chunks),
        );
        gauge(
            "logstamp_relay_snapshot_remaining_rows",
            count(&snapshot.remaining_rows) as f64,
        );
        gauge("logstamp_relay_snapshot_running", flag(&snapshot.running));
        for (remote, apply) in self.stats.appliers() {
            let labels = [("dc", dc.clone()), ("remote", remote.to_string())];
            metrics::counter!("logstamp_relay_applied_transactions_total", &labels)
                .absolute(count(&apply.applied_transactions));
            metrics::counter!("logstamp_relay_applied_changes_total", &labels)
                .absolute(count(&apply.applied_changes));
            metrics::gauge!("logstamp_relay_apply_offset", &labels)
                .set(apply.next_offset.load(Ordering::Relaxed) as f64);
            metrics::gauge!("logstamp_relay_apply_lag_seconds", &labels)
                .set(apply.lag.seconds() as f64);
            metrics::gauge!("logstamp_relay_apply_schema_mismatch", &labels)
                .set(flag(&apply.schema_mismatch));
            metrics::gauge!("logstamp_relay_apply_running", &labels).set(flag(&apply.running));
            metrics::gauge!("logstamp_relay_apply_target_up", &labels).set(
                if apply.target_hung.is_hung() {
                    0.0
                } else {
                    1.0
                },
            );
            metrics::counter!("logstamp_relay_apply_skipped_transactions_total", &labels)
                .absolute(count(&apply.skipped_transactions));
            metrics::counter!("logstamp_relay_apply_superseded_messages_total", &labels)
                .absolute(count(&apply.superseded_messages));
            metrics::gauge!("logstamp_relay_apply_stopped", &labels).set(flag(&apply.stopped));
            metrics::gauge!("logstamp_relay_apply_held_bytes", &labels)
                .set(count(&apply.held_bytes) as f64);
            metrics::counter!("logstamp_relay_conflicts_total", &labels)
                .absolute(count(&apply.conflicts));
            metrics::gauge!("logstamp_relay_apply_conflict_stopped", &labels)
                .set(flag(&apply.conflict_stopped));
            metrics::counter!("logstamp_relay_dead_letters_total", &labels)
                .absolute(count(&apply.dead_letters));
            metrics::counter!("logstamp_relay_refused_signatures_total", &labels)
                .absolute(count(&apply.refused_signatures));
        }
        exporter.render()
    }

    async fn ready(&self) -> Result<(), String> {
        if self.stats.capture.source_hung.is_hung() {
            return Err(format!(
                "MySQL at {} does not answer capture (no binlog event or heartbeat, or no \
                 answer to a statement, within 10s)",
                self.mysql.redacted()
            ));
        }
        if !self.stats.capture.connected.load(Ordering::Relaxed) {
            return Err("capture is not reading the binlog (the log says why)".into());
        }
        for (remote, apply) in self.stats.appliers() {
            // Before `running`: an applier waiting on a hung database still runs.
            if apply.target_hung.is_hung() {
                return Err(format!(
                    "MySQL at {} does not answer the applier of {remote} within \
                     relay.apply_timeout ({:?})",
                    self.mysql.redacted(),
                    self.apply_timeout
                ));
            }
            if !apply.running.load(Ordering::Relaxed) {
                return Err(format!(
                    "the applier of {remote} is not running (the log says why)"
                ));
            }
            if apply.conflict_stopped.load(Ordering::Relaxed) {
                return Err(format!(
                    "applying from {remote} waits at a conflict (relay status and relay_conflicts \
                     say which row)"
                ));
            }
            if apply.stopped.load(Ordering::Relaxed) {
                return Err(format!(
                    "applying from {remote} stopped at a transaction that cannot be placed after \
                     what was applied, or at a message that cannot be applied (relay status and \
                     the log say why)"
                ));
            }
        }
        mysql_answers(&self.mysql).await?;
        self.kafka
            .answers()
            .await
            .map_err(|reason| format!("Kafka of {} does not answer: {reason}", self.dc))?;
        for (remote, probe) in &self.remotes {
            probe
                .answers()
                .await
                .map_err(|reason| format!("Kafka of {remote} does not answer: {reason}"))?;
        }
        Ok(())
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        "logstamp_relay_published_transactions_total",
        "Transactions with relayed changes that capture published and Kafka acknowledged."
    );
    describe_counter!(
        "logstamp_relay_published_changes_total",
        "Changes (messages) capture published and Kafka acknowledged."
    );
    describe_counter!(
        "logstamp_relay_loop_dropped_transactions_total",
        "Transactions with relayed changes the loop filter dropped whole (applied from another data centre)."
    );
    describe_counter!(
        "logstamp_relay_loop_dropped_changes_total",
        "Changes the loop filter dropped."
    );
    describe_counter!(
        "logstamp_relay_ddl_skipped_total",
        "DDL statements capture read from the binlog and did not relay."
    );
    describe_gauge!(
        "logstamp_relay_checkpoint_file",
        "Number of the binlog file of capture's last recorded checkpoint."
    );
    describe_gauge!(
        "logstamp_relay_checkpoint_position",
        "Position in that file of capture's last recorded checkpoint."
    );
    describe_gauge!(
        "logstamp_relay_capture_lag_seconds",
        "Seconds since the commit of the oldest transaction capture has not read or not published; 0 when it has read all the server wrote and Kafka acknowledged it."
    );
    describe_gauge!(
        "logstamp_relay_capture_connected",
        "1 while capture reads the binlog."
    );
    describe_gauge!(
        "logstamp_relay_capture_source_up",
        "0 from capture's first wait on its server that got no answer (no binlog event or heartbeat for 10 s, or no answer to a statement) until it answers again; 1 otherwise."
    );
    describe_counter!(
        "logstamp_relay_snapshot_rows_total",
        "Rows of existing tables the snapshot published (rows/s: its rate)."
    );
    describe_counter!(
        "logstamp_relay_snapshot_dropped_rows_total",
        "Chunk rows the snapshot left out because the binlog changed them between the chunk's watermarks (the binlog's newer version is published instead)."
    );
    describe_counter!(
        "logstamp_relay_snapshot_chunks_total",
        "Chunks the snapshot read and published."
    );
    describe_gauge!(
        "logstamp_relay_snapshot_remaining_rows",
        "Estimated rows of the table being snapshotted not read yet (from information_schema's estimate)."
    );
    describe_gauge!(
        "logstamp_relay_snapshot_running",
        "1 while capture snapshots a table."
    );
    describe_counter!(
        "logstamp_relay_applied_transactions_total",
        "Source transactions applied from the remote data centre."
    );
    describe_counter!(
        "logstamp_relay_applied_changes_total",
        "Changes applied from the remote data centre."
    );
    describe_gauge!(
        "logstamp_relay_apply_offset",
        "Offset of the next message to apply from the remote data centre's topic, as committed."
    );
    describe_gauge!(
        "logstamp_relay_apply_lag_seconds",
        "Seconds since the source commit of the oldest transaction the applier holds unapplied; 0 when it holds none."
    );
    describe_gauge!(
        "logstamp_relay_apply_schema_mismatch",
        "1 while applying waits because a table differs between the remote data centre and here."
    );
    describe_gauge!(
        "logstamp_relay_apply_running",
        "1 while the applier is connected to MySQL and reads its topic."
    );
    describe_gauge!(
        "logstamp_relay_apply_target_up",
        "0 from the applier's first wait on this data centre's database that got no answer within relay.apply_timeout until it answers again; 1 otherwise."
    );
    describe_counter!(
        "logstamp_relay_apply_skipped_transactions_total",
        "Transactions read from the remote data centre's topic that were applied already (published again) and skipped."
    );
    describe_counter!(
        "logstamp_relay_apply_superseded_messages_total",
        "Messages of a stopped capture that landed in the remote data centre's topic after the next capture resumed, passed over."
    );
    describe_counter!(
        "logstamp_relay_conflicts_total",
        "UPDATEs and DELETEs from the remote data centre that did not find their before image here (recorded in relay_conflicts)."
    );
    describe_counter!(
        "logstamp_relay_dead_letters_total",
        "Messages from the remote data centre recorded in relay_dead_letters and skipped (relay.on_bad_message = dead_letter)."
    );
    describe_counter!(
        "logstamp_relay_refused_signatures_total",
        "Messages from the remote data centre refused for their signature (missing, of a key not known or past its until, or wrong), stopped at or dead-lettered per relay.on_bad_message."
    );
    describe_gauge!(
        "logstamp_relay_apply_conflict_stopped",
        "1 while applying from the remote data centre waits at a conflict (relay.on_conflict = stop)."
    );
    describe_gauge!(
        "logstamp_relay_apply_held_bytes",
        "Bytes of prepared SQL the applier holds, waiting or being applied (at most half of relay.apply_memory_bytes)."
    );
    describe_gauge!(
        "logstamp_relay_apply_stopped",
        "1 while applying from the remote data centre is stopped: at a transaction that cannot be placed after what was applied (until its stream is started anew), or at a message that cannot be applied (until the relay starts again)."
    );
}
