//! What capture and the appliers of one relay share: its settings, the relayed tables, what
//! they count, the errors they raise and the Kafka clients they use.

use std::sync::Arc;

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::settings::{LoopFilterMode, RelaySettings, TablePattern};
use crate::kafka::KafkaSettings;
use crate::mysql::bound::Bound;
use crate::mysql::{DbError, MysqlSettings, MysqlUrl};

use super::stats::RelayStats;
use super::text_filter::RelayedTextFilters;

/// The table the appliers record their progress in; in `marker` mode it is also the marker.
pub const APPLIED_TABLE: &str = "relay_applied";
/// The table capture records its position in.
pub const CHECKPOINT_TABLE: &str = "relay_checkpoints";
/// Where capture records what it published, with its checkpoint.
pub const PUBLISHED_TABLE: &str = "relay_published_gtids";
/// Where each applier records, per replication domain, the last GTID it applied.
pub const APPLIED_GTIDS_TABLE: &str = "relay_applied_gtids";
/// Where the appliers record the keys of what they apply, for the `cache` loop filter.
pub const LOOP_KEYS_TABLE: &str = "relay_loop_keys";
/// Where the appliers record the conflicts they met.
pub const CONFLICTS_TABLE: &str = "relay_conflicts";
/// Where the appliers record the messages they skipped (`relay.on_bad_message = "dead_letter"`).
pub const DEAD_LETTERS_TABLE: &str = "relay_dead_letters";
/// Where each snapshot's request and progress are recorded.
pub const SNAPSHOTS_TABLE: &str = "relay_snapshots";
/// Where the snapshot writes the watermarks around each chunk it reads.
pub const WATERMARKS_TABLE: &str = "relay_watermarks";
/// Which relayed tables each remote data centre changed here.
pub const APPLIED_TABLES_TABLE: &str = "relay_applied_tables";

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Store(#[from] DbError),
    #[error("{context}: {source}")]
    Kafka {
        context: String,
        #[source]
        source: KafkaError,
    },
    /// The source server, its binlog or the configuration cannot be relayed as they are.
    #[error("{0}")]
    Refused(String),
    /// A relayed table differs between data centres; applying waits until it no longer does.
    #[error("{0}")]
    SchemaMismatch(String),
    /// Another process does the same work; it may go away.
    #[error("{0}")]
    Busy(String),
    /// Work stopped part-way through and starts again from its durable state.
    #[error("{0}")]
    Interrupted(String),
}

impl RelayError {
    pub fn kafka(context: impl Into<String>) -> impl FnOnce(KafkaError) -> RelayError {
        let context = context.into();
        move |source| RelayError::Kafka { context, source }
    }

    /// The server gave no answer within the bound set for the wait: it may be hung. The part
    /// that met it reports it once; its retries until the server answers are no news.
    pub fn is_hang(&self) -> bool {
        matches!(self, RelayError::Store(DbError::TimedOut { .. }))
    }

    /// Whether starting the work again from its durable state may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            RelayError::Store(e) => e.is_transient(),
            RelayError::Kafka { source, .. } => !matches!(
                source.rdkafka_error_code(),
                Some(
                    RDKafkaErrorCode::MessageSizeTooLarge
                        | RDKafkaErrorCode::TopicAuthorizationFailed
                        | RDKafkaErrorCode::ClusterAuthorizationFailed
                        | RDKafkaErrorCode::InvalidConfig
                        | RDKafkaErrorCode::OffsetOutOfRange
                        | RDKafkaErrorCode::AutoOffsetReset
                )
            ),
            RelayError::Busy(_) | RelayError::Interrupted(_) => true,
            RelayError::Refused(_) | RelayError::SchemaMismatch(_) => false,
        }
    }
}

/// The relay of one data centre, shared by its capture and appliers.
#[derive(Debug, Clone)]
pub struct RelayContext {
    pub relay: Arc<RelaySettings>,
    pub kafka: Arc<KafkaSettings>,
    pub mysql: Arc<MysqlSettings>,
    pub tables: Arc<[TablePattern]>,
    /// The database of `mysql.url`, which holds the relay tables.
    pub state_database: String,
    /// What capture and the appliers count, read by the metrics.
    pub stats: Arc<RelayStats>,
    /// With shards: the position in `store.shards` of the shard this relay serves. Its
    /// capture follows that shard's binary log, and its appliers apply the same position's
    /// stream of each remote data centre.
    pub shard: Option<usize>,
    /// The text filters the appliers keep of the log tables they write into.
    pub text_filters: Option<Arc<RelayedTextFilters>>,
}

impl RelayContext {
    /// The relay of `relay`, keeping its state in the database of `mysql.url` and reaching
    /// Kafka with `kafka`.
    pub fn new(mysql: MysqlSettings, kafka: KafkaSettings, relay: RelaySettings) -> RelayContext {
        let stats = RelayStats::new(relay.remotes.iter().map(|r| r.dc.clone()));
        RelayContext {
            stats: Arc::new(stats),
            state_database: mysql.url.database().to_string(),
            tables: relay.tables.clone().into(),
            relay: Arc::new(relay),
            kafka: Arc::new(kafka),
            mysql: Arc::new(mysql),
            shard: None,
            text_filters: None,
        }
    }

    /// The relay of shard `shard` (its position in `store.shards`), whose database is `url`:
    /// the shard holds the relay tables of its own stream and of what is applied to it.
    pub fn for_shard(
        mut mysql: MysqlSettings,
        kafka: KafkaSettings,
        relay: RelaySettings,
        shard: usize,
        url: MysqlUrl,
    ) -> RelayContext {
        mysql.url = url;
        RelayContext {
            shard: Some(shard),
            ..RelayContext::new(mysql, kafka, relay)
        }
    }

    /// This relay's name towards Kafka (client and group IDs): its data centre's, and with
    /// shards its shard's after a dot, which no data centre name has.
    pub fn client_name(&self) -> String {
        match self.shard {
            None => format!("logstamp-relay-{}", self.dc()),
            Some(shard) => format!("logstamp-relay-{}.{shard}", self.dc()),
        }
    }

    /// The topic `dc`'s capture publishes to for this relay's shard.
    pub fn topic(&self, dc: &str) -> String {
        self.relay.topic(dc, self.shard)
    }

    /// The same relay, its appliers keeping the text filters of `filters`' log tables.
    pub fn with_text_filters(mut self, filters: RelayedTextFilters) -> RelayContext {
        self.text_filters = Some(Arc::new(filters));
        self
    }

    pub fn dc(&self) -> &str {
        &self.relay.dc
    }

    pub fn url(&self) -> &MysqlUrl {
        &self.mysql.url
    }

    /// The bound on each statement of the snapshot and of the relay's commands on this data
    /// centre's database: `relay.apply_timeout`, the appliers' bound on the same server, as
    /// their statements are of the same sizes (a chunk of rows).
    pub fn statement_bound(&self) -> Bound {
        Bound::new(self.url(), self.relay.apply_timeout)
    }

    pub fn loop_filter(&self) -> LoopFilterMode {
        self.relay.loop_filter
    }

    pub fn is_relayed(&self, schema: &str, table: &str) -> bool {
        self.tables.iter().any(|p| p.matches(schema, table))
    }

    /// Kafka settings common to the producer and the consumers, for `brokers`: the shared
    /// `kafka.properties` (security, for one), then the relay's own.
    pub fn kafka_config(&self, brokers: &str) -> ClientConfig {
        let mut config = self.kafka.properties.client_config();
        config
            .set("bootstrap.servers", brokers)
            .set("client.id", self.client_name());
        config
    }
}
