//! Where capture resumes: after its checkpoint on this server, or after the last message of its
//! topic.
//!
//! A checkpoint describes the server it was written on (it stays out of the binlog), so after a
//! failover the promoted server has none, or an old one. What capture last published is in its
//! topic, though: the last message names its GTID, what was published before it, and the GTID
//! state just before it in the binlog. GTIDs are the same on every server of the data centre,
//! so capture reads on from there on whichever server it now reads, and publishes what the old
//! one never did. If that server lacks those GTIDs, it refuses to send its binlog, and capture
//! stops (see [`super::capture`]).

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::mysql;
use crate::mysql::lock::{lock_name, try_lock};

use super::change::Change;
use super::checkpoint::{self, Checkpoint};
use super::context::{RelayContext, RelayError};

/// How long reading the topic's last message may take.
const TAIL_WITHIN: Duration = Duration::from_secs(30);

/// The end of this data centre's topic, as capture finds it at start.
#[derive(Debug, Clone)]
pub enum Tail {
    /// Nothing was ever published.
    Empty,
    /// Messages were published up to offset `end`, and all have expired.
    Expired { end: i64 },
    /// The last message.
    Last { offset: i64, change: Box<Change> },
}

/// Where capture starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Nothing was published yet and there is no checkpoint: from the server's current
    /// position, in epoch 0.
    Here,
    /// From this checkpoint; `why` says which one, for the log.
    From {
        checkpoint: Checkpoint,
        why: &'static str,
    },
}

/// Decides where capture starts, from this server's checkpoint and the topic's end.
pub fn decide(
    topic: &str,
    checkpoint: Option<Checkpoint>,
    tail: &Tail,
) -> Result<Start, RelayError> {
    let (offset, last) = match tail {
        Tail::Empty => {
            return Ok(match checkpoint {
                Some(checkpoint) => Start::From {
                    checkpoint,
                    why: "this server's checkpoint",
                },
                None => Start::Here,
            });
        }
        Tail::Expired { end } => {
            return match checkpoint {
                Some(checkpoint) => Ok(Start::From {
                    checkpoint,
                    why: "this server's checkpoint (the topic's messages expired)",
                }),
                None => Err(RelayError::Refused(format!(
                    "the messages of {topic} expired (it ends at offset {end}) and this server \
                     has no checkpoint: capture cannot tell what was published last, so it \
                     cannot resume without losing or repeating changes; {}",
                    reset_advice()
                ))),
            };
        }
        Tail::Last { offset, change } => (*offset, change),
    };
    let Some(gtid) = last.position.gtid() else {
        return Err(RelayError::Refused(format!(
            "the last message of {topic} (offset {offset}) carries no GTID, so capture cannot \
             resume after it; {}",
            reset_advice()
        )));
    };
    // Capture died while publishing the last transaction: it is published again, whole.
    let complete = last.txn.is_last();
    let next_seq = if complete {
        last.txn.seq + 1
    } else {
        last.txn.seq
    };
    if let Some(c) = &checkpoint {
        // Saved once Kafka acknowledged all it covers, so it is at or after the topic's end
        // when it counts as many transactions in the same epoch...
        let same = c.epoch == last.stream.epoch && c.next_seq == next_seq;
        // ...or when `relay reset` started a new epoch after the end.
        let reset = c.epoch > last.txn.seq && c.next_seq == c.epoch && c.published.is_empty();
        if same || reset {
            return Ok(Start::From {
                checkpoint: c.clone(),
                why: "this server's checkpoint",
            });
        }
    }
    let (gtid_state, published) = if complete {
        (
            last.stream.binlog.with(gtid),
            last.stream.published.with(gtid),
        )
    } else {
        (last.stream.binlog.clone(), last.stream.published.clone())
    };
    Ok(Start::From {
        checkpoint: Checkpoint {
            // A position in another server's binlog means nothing here: the GTIDs say where.
            file: String::new(),
            pos: 4,
            gtid_state,
            gtid_from_position: false,
            next_seq,
            epoch: last.stream.epoch,
            published,
            commit_ts: last.commit_ts,
            published_transactions: checkpoint
                .as_ref()
                .map_or(next_seq, |c| c.published_transactions),
            published_changes: checkpoint.as_ref().map_or(0, |c| c.published_changes),
        },
        why: if checkpoint.is_some() {
            "the last message of the topic (this server's checkpoint is not at it)"
        } else {
            "the last message of the topic (this server has no checkpoint)"
        },
    })
}

/// What to do when the relayed changes of a data centre can no longer be followed.
pub fn reset_advice() -> &'static str {
    "stop writing to the relayed tables, run `logstamp relay reset` here, and copy this data \
     centre's relayed tables to the others once the relays caught up (README: \"Starting a \
     stream anew\")"
}

/// `relay reset`: records the server's current position as capture's checkpoint, in a new
/// epoch of the stream that follows nothing, so capture relays what is written from now on and
/// every applier takes the new epoch up where it starts. Refused while a capture runs.
pub async fn start_anew(context: &RelayContext) -> Result<Checkpoint, RelayError> {
    let dc = context.dc();
    let topic = context.relay.topic(dc);
    let mut conn = mysql::connect(context.url()).await?;
    checkpoint::unlogged(&mut conn).await?;
    let lock = capture_lock(context);
    if !try_lock(&mut conn, &lock, 0).await? {
        return Err(RelayError::Refused(format!(
            "a relay captures {dc} now (it holds lock {lock}): stop it first"
        )));
    }
    let old = checkpoint::load(&mut conn, dc).await?;
    // Above every seq used, so appliers see a new epoch: a transaction's seq is never above
    // the offset of its first message (each one before it took an offset), so the topic's end
    // offset is, also when its messages expired.
    let epoch = match read_tail(context, &topic).await? {
        Tail::Last { offset, .. } => offset + 1,
        Tail::Expired { end } => end,
        Tail::Empty => 0,
    };
    let epoch = u64::try_from(epoch)
        .unwrap_or(0)
        .max(old.as_ref().map_or(0, |c| c.next_seq));
    let fresh = checkpoint::start_here(&mut conn, dc, epoch, old.as_ref()).await?;
    let _ = conn.disconnect().await;
    Ok(fresh)
}

/// The lock held by the one capture of a data centre and database.
pub fn capture_lock(context: &RelayContext) -> String {
    lock_name(&["relay-capture", &context.state_database, context.dc()])
}

/// Reads the last message of `topic` (partition 0) from this data centre's Kafka.
pub async fn read_tail(context: &RelayContext, topic: &str) -> Result<Tail, RelayError> {
    let consumer: BaseConsumer = context
        .kafka_config(&context.kafka.brokers)
        .set("group.id", format!("logstamp-relay-{}-tail", context.dc()))
        .set("enable.auto.commit", "false")
        .create()
        .map_err(RelayError::kafka("creating a Kafka consumer"))?;
    let name = topic.to_string();
    tokio::task::spawn_blocking(move || tail_of(&consumer, &name))
        .await
        .map_err(|e| RelayError::Refused(format!("reading the end of {topic}: {e}")))?
}

fn tail_of(consumer: &BaseConsumer, topic: &str) -> Result<Tail, RelayError> {
    let (low, high) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .map_err(RelayError::kafka(format!("reading the offsets of {topic}")))?;
    if high == 0 {
        return Ok(Tail::Empty);
    }
    if low >= high {
        return Ok(Tail::Expired { end: high });
    }
    let offset = high - 1;
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Offset(offset))
        .map_err(RelayError::kafka(format!("assigning {topic}")))?;
    consumer
        .assign(&assignment)
        .map_err(RelayError::kafka(format!("assigning {topic}")))?;
    let deadline = Instant::now() + TAIL_WITHIN;
    while Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.map_err(RelayError::kafka(format!("reading {topic}")))?;
        if message.offset() != offset {
            continue;
        }
        let change = Change::from_json(message.payload().unwrap_or_default()).map_err(|e| {
            RelayError::Refused(format!(
                "the last message of {topic} (offset {offset}): {e}"
            ))
        })?;
        return Ok(Tail::Last {
            offset,
            change: Box::new(change),
        });
    }
    Err(RelayError::Kafka {
        context: format!("reading the last message of {topic} (offset {offset})"),
        source: rdkafka::error::KafkaError::MessageConsumption(
            rdkafka::error::RDKafkaErrorCode::RequestTimedOut,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::change::{Position, Stream, TxnRef};
    use crate::relay::gtid::GtidState;

    fn state(text: &str) -> GtidState {
        text.parse().unwrap()
    }

    fn last(seq: u64, index: u32, count: u32, gtid: &str, epoch: u64) -> Tail {
        Tail::Last {
            offset: 41,
            change: Box::new(Change::test_delete(
                Position {
                    file: "mariadb-bin.000003".into(),
                    pos: 1_597_136,
                    gtid: Some(gtid.into()),
                },
                TxnRef {
                    seq,
                    index,
                    last: index + 1 == count,
                },
                Stream {
                    epoch,
                    published: state("0-1-90,1-1-4"),
                    binlog: state("0-1-99,1-1-7"),
                },
            )),
        }
    }

    fn checkpoint(next_seq: u64, epoch: u64, published: &str) -> Checkpoint {
        Checkpoint {
            file: "mariadb-bin.000003".into(),
            pos: 2_000_000,
            gtid_state: state("0-1-140,1-1-7"),
            gtid_from_position: false,
            next_seq,
            epoch,
            published: state(published),
            commit_ts: 1_700_000_100,
            published_transactions: next_seq,
            published_changes: 3 * next_seq,
        }
    }

    fn from(start: Start) -> Checkpoint {
        match start {
            Start::From { checkpoint, .. } => checkpoint,
            Start::Here => panic!("starts here"),
        }
    }

    #[test]
    fn a_checkpoint_at_the_end_of_the_topic_is_used() {
        let c = checkpoint(31, 0, "0-1-100,1-1-4");
        let start = decide("t", Some(c.clone()), &last(30, 2, 3, "0-1-100", 0)).unwrap();
        assert_eq!(from(start), c);
        // Nothing published yet, or all of it expired: the checkpoint is all there is.
        assert_eq!(from(decide("t", Some(c.clone()), &Tail::Empty).unwrap()), c);
        let expired = Tail::Expired { end: 900 };
        assert_eq!(from(decide("t", Some(c.clone()), &expired).unwrap()), c);
        assert_eq!(decide("t", None, &Tail::Empty).unwrap(), Start::Here);
    }

    #[test]
    fn without_a_checkpoint_capture_goes_on_after_the_last_message() {
        // A promoted replica: no checkpoint, the topic ends with 0-1-100 complete.
        let c = from(decide("t", None, &last(30, 2, 3, "0-1-100", 5)).unwrap());
        assert_eq!(c.gtid_state.to_string(), "0-1-100,1-1-7");
        assert_eq!(c.published.to_string(), "0-1-100,1-1-4");
        assert_eq!((c.next_seq, c.epoch), (31, 5));
        assert_eq!(
            c.file, "",
            "a position in another server's binlog means nothing"
        );
        // An old checkpoint (this server was the primary once) is not at the end: the same.
        let old = checkpoint(12, 5, "0-1-40");
        let c = from(decide("t", Some(old), &last(30, 2, 3, "0-1-100", 5)).unwrap());
        assert_eq!(
            (c.next_seq, c.gtid_state.to_string()),
            (31, "0-1-100,1-1-7".into())
        );
    }

    #[test]
    fn a_transaction_cut_off_in_the_topic_is_published_again() {
        let c = from(decide("t", None, &last(30, 1, 3, "0-1-100", 0)).unwrap());
        assert_eq!(c.gtid_state.to_string(), "0-1-99,1-1-7");
        assert_eq!(c.published.to_string(), "0-1-90,1-1-4");
        assert_eq!(c.next_seq, 30);
    }

    #[test]
    fn a_reset_checkpoint_starts_its_new_epoch() {
        // `relay reset` after offset 41: epoch 42.
        let reset = checkpoint(42, 42, "");
        let c = from(decide("t", Some(reset.clone()), &last(30, 2, 3, "0-1-100", 0)).unwrap());
        assert_eq!(c, reset);
    }

    #[test]
    fn expired_messages_without_a_checkpoint_are_refused() {
        let e = decide("t", None, &Tail::Expired { end: 900 }).unwrap_err();
        assert!(e.to_string().contains("logstamp relay reset"), "{e}");
    }
}
