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
//!
//! A capture that was killed, or lost its database connection, may still have messages on
//! their way to the broker when the next one starts, and they may land after it read where the
//! topic ends. So capture first publishes a resume message, and once Kafka acknowledged it,
//! reads the topic's end before it: what lands after the resume message from an earlier run
//! is passed over by every applier (see [`super::change`]), and by [`last_followed`] here. A
//! snapshot chunk, which exists only in the memory of the capture that read it, would
//! otherwise come back as a transaction the new capture never knew was published.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::CreateRedacted;

use crate::mysql;
use crate::mysql::lock::{lock_name, try_lock};

use super::change::{Change, Resume};
use super::checkpoint::{self, Checkpoint};
use super::context::{RelayContext, RelayError};
use super::signing::{Covered, SIGNATURE_HEADER, Signer, Verifier};

/// How long reading the topic's last messages may take.
const TAIL_WITHIN: Duration = Duration::from_secs(30);
/// How long the resume message may take to be acknowledged.
const RESUME_WITHIN: Duration = Duration::from_secs(30);
/// Messages read before the resume message at first; at least twice as many each time that is
/// not enough to tell which one the appliers follow.
const TAIL_WINDOW: i64 = 64;

/// More than a capture that stopped can have had on its way to the broker: its producer's
/// queue (16 of the largest messages, see [`super::capture`]) and the requests in flight (5 of
/// at most a megabyte each), twice over.
pub fn stale_bytes(max_message_bytes: usize) -> usize {
    max_message_bytes
        .saturating_mul(16)
        .saturating_add(5 << 20)
        .saturating_mul(2)
}

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
    let topic = context.topic(dc);
    let bound = context.statement_bound();
    let mut conn = mysql::connect(context.url()).await?;
    bound
        .wait(
            || "setting up the session".into(),
            checkpoint::unlogged(&mut conn),
        )
        .await?;
    let lock = capture_lock(context);
    let locked = bound
        .wait(
            || format!("taking lock {lock}"),
            try_lock(&mut conn, &lock, 0),
        )
        .await?;
    if !locked {
        return Err(RelayError::Refused(format!(
            "a relay captures {dc} now (it holds lock {lock}): stop it first"
        )));
    }
    let old = bound
        .wait(
            || "reading the checkpoint".into(),
            checkpoint::load(&mut conn, dc),
        )
        .await?;
    // Above every seq used, so appliers see a new epoch: a transaction's seq is never above
    // the offset of its first message (each one before it took an offset), so the topic's end
    // offset is, also when its messages expired.
    let epoch = end_offset(context, &topic).await?;
    let epoch = u64::try_from(epoch)
        .unwrap_or(0)
        .max(old.as_ref().map_or(0, |c| c.next_seq));
    let fresh = bound
        .wait(
            || "recording the new checkpoint".into(),
            checkpoint::start_here(&mut conn, dc, epoch, old.as_ref()),
        )
        .await?;
    let _ = conn.disconnect().await;
    Ok(fresh)
}

/// The lock held by the one capture of a data centre and database.
pub fn capture_lock(context: &RelayContext) -> String {
    lock_name(&["relay-capture", &context.state_database, context.dc()])
}

/// Publishes capture's resume message to `topic`, signed by `signer` if any, and returns its
/// offset once Kafka acknowledged it: the run of the messages this capture publishes.
pub async fn fence(
    context: &RelayContext,
    topic: &str,
    server_id: u32,
    signer: Option<&Signer>,
) -> Result<u64, RelayError> {
    let producer: FutureProducer = context
        .kafka_config(&context.kafka.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", RESUME_WITHIN.as_millis().to_string())
        .create_redacted()
        .map_err(RelayError::kafka(
            "creating the producer of the resume message",
        ))?;
    // The end before it: a copy of it, or a resume message of a capture that stopped landing
    // late, names an offset the next run's resume message is past (see `Resume::precedes`).
    let after = u64::try_from(end_offset(context, topic).await?).ok();
    let payload = Resume {
        dc: context.dc().to_string(),
        server_id,
        after,
    }
    .to_json();
    let mut record = FutureRecord::<(), [u8]>::to(topic)
        .partition(0)
        .payload(&payload);
    let signature = signer.map(|s| s.sign(&Covered::value(topic, &payload)));
    if let Some(signature) = &signature {
        record = record.headers(OwnedHeaders::new().insert(Header {
            key: SIGNATURE_HEADER,
            value: Some(signature.as_bytes()),
        }));
    }
    let delivery = producer
        .send(record, RESUME_WITHIN)
        .await
        .map_err(|(e, _)| {
            RelayError::kafka(format!("publishing the resume message to {topic}"))(e)
        })?;
    u64::try_from(delivery.offset).map_err(|_| {
        RelayError::Refused(format!(
            "Kafka acknowledged the resume message to {topic} at offset {}",
            delivery.offset
        ))
    })
}

/// The topic's end offset: above every `seq` published, as each transaction's is at most the
/// offset of its first message.
async fn end_offset(context: &RelayContext, topic: &str) -> Result<i64, RelayError> {
    let consumer = tail_consumer(context)?;
    let name = topic.to_string();
    tokio::task::spawn_blocking(move || {
        consumer
            .fetch_watermarks(&name, 0, Duration::from_secs(10))
            .map(|(_, high)| high)
            .map_err(RelayError::kafka(format!("reading the offsets of {name}")))
    })
    .await
    .map_err(|e| RelayError::Refused(format!("reading the end of {topic}: {e}")))?
}

fn tail_consumer(context: &RelayContext) -> Result<BaseConsumer, RelayError> {
    context
        .kafka_config(&context.kafka.brokers)
        .set("group.id", format!("{}-tail", context.client_name()))
        .set("enable.auto.commit", "false")
        .create_redacted()
        .map_err(RelayError::kafka("creating a Kafka consumer"))
}

/// Reads the last message of `topic` (partition 0) from this data centre's Kafka that the
/// appliers follow, before offset `before` (capture's resume message).
pub async fn read_tail(
    context: &RelayContext,
    topic: &str,
    before: u64,
) -> Result<Tail, RelayError> {
    let consumer = tail_consumer(context)?;
    let (name, dc) = (topic.to_string(), context.dc().to_string());
    let before = i64::try_from(before).unwrap_or(i64::MAX);
    let stale = stale_bytes(context.relay.max_message_bytes);
    // A message not signed by this data centre is no message of its capture's. Its old keys
    // count past their until: the end of the topic may be from before a rotation.
    let verifier = Verifier::of(&context.relay.keys, &dc).map(Verifier::any_time);
    tokio::task::spawn_blocking(move || {
        tail_of(&consumer, &name, &dc, before, stale, verifier.as_ref())
    })
    .await
    .map_err(|e| RelayError::Refused(format!("reading the end of {topic}: {e}")))?
}

/// What a message of the topic is, to tell which one the appliers follow last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Resume,
    Change {
        run: Option<u64>,
    },
    /// Neither: no applier applies it.
    Other,
}

impl Entry {
    fn of(payload: &[u8], dc: &str) -> Entry {
        match Resume::from_json(payload) {
            Some(Ok(resume)) if resume.dc == dc => Entry::Resume,
            Some(_) => Entry::Other,
            None => match Change::from_json(payload) {
                Ok(change) if change.dc == dc => Entry::Change {
                    run: change.stream.run,
                },
                _ => Entry::Other,
            },
        }
    }
}

/// Where the last message the appliers follow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    Found(i64),
    /// There is none.
    Nothing,
    /// Messages before these are needed to tell.
    Earlier,
}

/// Finds the last message the appliers follow among `entries`, the topic's messages before
/// where capture reads on (in offset order), as they do: after a resume message, only changes
/// of its run (its offset). Before the first resume message among them, the run is the highest
/// one there once `settled`: they go back to the topic's oldest message, or further than what
/// a capture that stopped can have had on its way (see [`stale_bytes`]), which is all a run
/// after the highest can have left there. Otherwise `Earlier`.
pub fn last_followed(entries: &[(i64, Entry)], settled: bool) -> Scan {
    let mut end = entries.len();
    loop {
        let before = &entries[..end];
        let resume = before.iter().rposition(|(_, e)| *e == Entry::Resume);
        let (from, run) = match resume {
            Some(k) => (k + 1, u64::try_from(before[k].0).ok()),
            None if settled => {
                let highest = before
                    .iter()
                    .filter_map(|(_, e)| match e {
                        Entry::Change { run } => Some(*run),
                        _ => None,
                    })
                    .max();
                (0, highest.flatten())
            }
            None => return Scan::Earlier,
        };
        let followed = Entry::Change { run };
        if let Some((offset, _)) = before[from..].iter().rev().find(|(_, e)| *e == followed) {
            return Scan::Found(*offset);
        }
        match resume {
            // That run published nothing the appliers follow: the one before it counts.
            Some(k) => end = k,
            None => return Scan::Nothing,
        }
    }
}

fn tail_of(
    consumer: &BaseConsumer,
    topic: &str,
    dc: &str,
    before: i64,
    stale: usize,
    verifier: Option<&Verifier>,
) -> Result<Tail, RelayError> {
    let (low, high) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .map_err(RelayError::kafka(format!("reading the offsets of {topic}")))?;
    let end = before.min(high);
    let none = || {
        if low == 0 {
            Tail::Empty
        } else {
            Tail::Expired { end: high }
        }
    };
    if low >= end {
        return Ok(none());
    }
    let deadline = Instant::now() + TAIL_WITHIN;
    let mut start = end;
    let mut entries: Vec<(i64, Entry)> = Vec::new();
    let mut bytes = 0;
    loop {
        // At least twice as many as read so far.
        let from = (start - TAIL_WINDOW.max(end - start)).max(low);
        let mut earlier = Vec::new();
        for (offset, payload) in read_range(consumer, topic, from, start, deadline, verifier)? {
            let entry = match payload {
                Some(payload) => {
                    bytes += payload.len();
                    Entry::of(&payload, dc)
                }
                None => Entry::Other,
            };
            earlier.push((offset, entry));
        }
        earlier.append(&mut entries);
        entries = earlier;
        start = from;
        let settled = start == low || bytes >= stale;
        match last_followed(&entries, settled) {
            Scan::Found(offset) => {
                let payload = read_range(consumer, topic, offset, offset + 1, deadline, verifier)?
                    .pop()
                    .and_then(|(_, payload)| payload)
                    .unwrap_or_default();
                let change = Change::from_json(&payload).map_err(|e| {
                    RelayError::Refused(format!(
                        "the last message of {topic} (offset {offset}): {e}"
                    ))
                })?;
                return Ok(Tail::Last {
                    offset,
                    change: Box::new(change),
                });
            }
            Scan::Nothing => return Ok(none()),
            Scan::Earlier => {}
        }
    }
}

/// A message read at its offset; `None` for one whose signature is refused.
type Read = (i64, Option<Vec<u8>>);

/// The messages of `topic` from offset `from` up to `to`, with their offsets; `None` for one
/// whose signature `verifier` refuses.
fn read_range(
    consumer: &BaseConsumer,
    topic: &str,
    from: i64,
    to: i64,
    deadline: Instant,
    verifier: Option<&Verifier>,
) -> Result<Vec<Read>, RelayError> {
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Offset(from))
        .map_err(RelayError::kafka(format!("assigning {topic}")))?;
    consumer
        .assign(&assignment)
        .map_err(RelayError::kafka(format!("assigning {topic}")))?;
    let mut messages = Vec::new();
    while Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.map_err(RelayError::kafka(format!("reading {topic}")))?;
        let offset = message.offset();
        if offset < from {
            continue;
        }
        if offset < to {
            let refused = verifier.and_then(|v| {
                let (covered, signatures) = Covered::of(&message);
                v.check(&covered, &signatures, chrono::Utc::now()).err()
            });
            if let Some(why) = &refused {
                tracing::warn!(
                    topic,
                    offset,
                    "capture passes over a message of its topic: {why}"
                );
            }
            let payload = message.payload().unwrap_or_default();
            messages.push((offset, refused.is_none().then(|| payload.to_vec())));
        }
        if offset + 1 >= to {
            return Ok(messages);
        }
    }
    Err(RelayError::Kafka {
        context: format!("reading the messages of {topic} from offset {from} to {to}"),
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
                    run: None,
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

    fn change(run: Option<u64>) -> Entry {
        Entry::Change { run }
    }

    #[test]
    fn messages_of_a_stopped_capture_after_the_next_resume_message_are_passed_over() {
        // Run 10 published up to 13; the capture of run 20 resumed, and 21-22 of run 10 landed
        // after its resume message.
        let entries = [
            (10, Entry::Resume),
            (11, change(Some(10))),
            (12, Entry::Other),
            (13, change(Some(10))),
            (20, Entry::Resume),
            (21, change(Some(10))),
            (22, change(Some(10))),
        ];
        assert_eq!(last_followed(&entries, false), Scan::Found(13));
        // The run of 20 published 23: it is the last.
        let mut more = entries.to_vec();
        more.push((23, change(Some(20))));
        more.push((24, change(Some(10))));
        assert_eq!(last_followed(&more, false), Scan::Found(23));
        // Several resume messages in a row: the last run that published counts.
        let restarts = [(5, change(None)), (6, Entry::Resume), (7, Entry::Resume)];
        assert_eq!(last_followed(&restarts, false), Scan::Earlier);
        assert_eq!(last_followed(&restarts, true), Scan::Found(5));
    }

    #[test]
    fn without_a_resume_message_the_highest_run_counts_once_settled() {
        let entries = [
            (100, change(Some(40))),
            (101, change(Some(90))),
            (102, change(Some(40))),
        ];
        assert_eq!(last_followed(&entries, false), Scan::Earlier);
        assert_eq!(last_followed(&entries, true), Scan::Found(101));
        // A topic written before resume messages.
        let old = [(0, change(None)), (1, Entry::Other), (2, change(None))];
        assert_eq!(last_followed(&old, true), Scan::Found(2));
        assert_eq!(last_followed(&[(0, Entry::Resume)], true), Scan::Nothing);
        assert_eq!(last_followed(&[], true), Scan::Nothing);
    }

    #[test]
    fn the_stale_bound_covers_the_producer_queue() {
        assert!(stale_bytes(1 << 20) > 16 << 20);
        assert_eq!(stale_bytes(usize::MAX), usize::MAX);
    }

    #[test]
    fn expired_messages_without_a_checkpoint_are_refused() {
        let e = decide("t", None, &Tail::Expired { end: 900 }).unwrap_err();
        assert!(e.to_string().contains("logstamp relay reset"), "{e}");
    }
}
