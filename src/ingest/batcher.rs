//! Per-partition batching decisions: which messages form a batch, when it is closed, and which
//! batch may be written next. Pure: time is passed in, nothing is written.
//!
//! A partition's batches are contiguous: each starts at the offset the previous one ends at (or
//! at the offset stored in MySQL), which is what the writer's conditional offset claim checks.
//! At most one batch per partition is written at a time, so offsets advance in order.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::store::DeadLetter;
use crate::store::MappedRow;

/// When a batch is closed: whichever limit is reached first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    pub max_rows: usize,
    pub max_bytes: usize,
    pub linger: Duration,
}

/// What one record of a message became (a message is one record, or several in OTLP).
#[derive(Debug, Clone)]
pub enum Record {
    Row(MappedRow),
    Dead(DeadLetter),
    /// A message with no payload: nothing to store, but its offset is passed.
    Tombstone,
}

/// A mapped message waiting for its ID.
#[derive(Debug, Clone)]
pub struct PendingRow {
    pub offset: i64,
    pub mapped: MappedRow,
}

/// A closed batch, ready to be stamped and written.
#[derive(Debug, Clone)]
pub struct PendingBatch {
    pub start_offset: i64,
    pub next_offset: i64,
    pub rows: Vec<PendingRow>,
    pub dead_letters: Vec<DeadLetter>,
    pub tombstones: usize,
    /// Message bytes held, for the memory budget.
    pub bytes: usize,
}

impl PendingBatch {
    fn new(start_offset: i64, rows: usize) -> PendingBatch {
        PendingBatch {
            start_offset,
            next_offset: start_offset,
            rows: Vec::with_capacity(rows),
            dead_letters: Vec::new(),
            tombstones: 0,
            bytes: 0,
        }
    }
}

/// A message offset the partition cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("offset {offset} arrived where offset {expected} or later was expected")]
pub struct OffsetBehind {
    pub offset: i64,
    pub expected: i64,
}

/// The messages of one partition between Kafka and MySQL.
#[derive(Debug)]
pub struct PartitionBatcher {
    limits: BatchLimits,
    /// Where the next batch starts; `None` until the first message of a partition MySQL has no
    /// offset for.
    next_start: Option<i64>,
    open: Option<(PendingBatch, Instant)>,
    closed: VecDeque<PendingBatch>,
    in_flight: Option<usize>,
    bytes: usize,
    /// Rows of the batch closed last: the next one is made that size, so a busy partition's
    /// batch does not grow by copying itself, and a quiet one's holds no room it will not use.
    last_rows: usize,
}

impl PartitionBatcher {
    /// A partition continuing from `stored`, the next offset stored in MySQL (if any).
    pub fn new(limits: BatchLimits, stored: Option<i64>) -> PartitionBatcher {
        PartitionBatcher {
            limits,
            next_start: stored,
            open: None,
            closed: VecDeque::new(),
            in_flight: None,
            bytes: 0,
            last_rows: 0,
        }
    }

    /// Adds a message of `bytes` bytes and the records it became. Offsets only go forward; gaps
    /// (compacted topics, transaction markers) are fine. A message's records all go into one
    /// batch, however many, since its offset is committed with them: a batch may pass
    /// `max_rows` by the records of its last message.
    pub fn push(
        &mut self,
        offset: i64,
        records: impl IntoIterator<Item = Record>,
        bytes: usize,
        now: Instant,
    ) -> Result<(), OffsetBehind> {
        let expected = self.expected_offset();
        if let Some(expected) = expected.filter(|e| offset < *e) {
            return Err(OffsetBehind { offset, expected });
        }
        let start = self.next_start.unwrap_or(offset);
        let rows = self.last_rows;
        let (batch, _) = self
            .open
            .get_or_insert_with(|| (PendingBatch::new(start, rows), now));
        for record in records {
            match record {
                Record::Row(mapped) => batch.rows.push(PendingRow { offset, mapped }),
                Record::Dead(letter) => batch.dead_letters.push(letter),
                Record::Tombstone => batch.tombstones += 1,
            }
        }
        batch.next_offset = offset + 1;
        batch.bytes += bytes;
        self.bytes += bytes;
        if batch.rows.len() + batch.dead_letters.len() >= self.limits.max_rows
            || batch.bytes >= self.limits.max_bytes
        {
            self.close();
        }
        Ok(())
    }

    /// The lowest offset the next message may have.
    fn expected_offset(&self) -> Option<i64> {
        match &self.open {
            Some((batch, _)) => Some(batch.next_offset),
            None => self.next_start,
        }
    }

    /// Closes the open batch if it has lingered long enough, unless the partition's previous
    /// batch is still being written: then the open one keeps growing (up to the row and byte
    /// limits) until that write is done, so a slow database gets fewer, larger batches instead
    /// of a queue of small ones.
    pub fn close_if_lingered(&mut self, now: Instant) {
        if self.deadline().is_some_and(|deadline| now >= deadline) {
            self.close();
        }
    }

    /// Closes the open batch, if any (on shutdown, everything read is flushed).
    pub fn close(&mut self) {
        if let Some((batch, _)) = self.open.take() {
            self.next_start = Some(batch.next_offset);
            self.last_rows = batch.rows.len();
            self.closed.push_back(batch);
        }
    }

    /// When the open batch must be closed: `None` while there is none, or while the previous
    /// batch is being written.
    pub fn deadline(&self) -> Option<Instant> {
        if self.in_flight.is_some() {
            return None;
        }
        self.open
            .as_ref()
            .map(|(_, opened)| *opened + self.limits.linger)
    }

    /// The next batch to write, unless one is being written.
    pub fn take_next(&mut self) -> Option<PendingBatch> {
        if self.in_flight.is_some() {
            return None;
        }
        let batch = self.closed.pop_front()?;
        self.in_flight = Some(batch.bytes);
        Some(batch)
    }

    /// The batch taken last is written (or given up): its bytes are free.
    pub fn written(&mut self) {
        if let Some(bytes) = self.in_flight.take() {
            self.bytes -= bytes;
        }
    }

    /// Forgets everything held and continues from `stored` (the offset MySQL has, after another
    /// writer moved it). A batch being written stays counted until [`Self::written`].
    pub fn restart_at(&mut self, stored: Option<i64>) {
        let in_flight = self.in_flight.unwrap_or(0);
        self.open = None;
        self.closed.clear();
        self.bytes = in_flight;
        self.next_start = stored;
    }

    /// Whether nothing is held: no open, closed or in-flight batch.
    pub fn is_idle(&self) -> bool {
        self.open.is_none() && self.closed.is_empty() && self.in_flight.is_none()
    }

    /// Message bytes held, including the batch being written.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_rows: usize, max_bytes: usize, linger_ms: u64) -> BatchLimits {
        BatchLimits {
            max_rows,
            max_bytes,
            linger: Duration::from_millis(linger_ms),
        }
    }

    fn row() -> Record {
        Record::Row(MappedRow {
            values: vec![],
            document: "{}".into(),
            residuals: vec![],
            fanout: vec![],
            truncated: 0,
            record: None,
        })
    }

    fn dead(offset: i64) -> Record {
        Record::Dead(DeadLetter {
            offset,
            record: None,
            reason: "bad".into(),
            raw: vec![],
        })
    }

    #[test]
    fn a_batch_closes_at_max_rows_and_the_next_continues_from_it() {
        let now = Instant::now();
        let mut b = PartitionBatcher::new(limits(3, 1 << 20, 1000), Some(10));
        for offset in 10..17 {
            b.push(offset, [row()], 5, now).unwrap();
        }
        let first = b.take_next().unwrap();
        assert_eq!((first.start_offset, first.next_offset), (10, 13));
        assert_eq!(first.rows.len(), 3);
        assert!(b.take_next().is_none(), "one batch per partition at a time");
        b.written();
        let second = b.take_next().unwrap();
        assert_eq!((second.start_offset, second.next_offset), (13, 16));
        b.written();
        assert!(b.take_next().is_none(), "offset 16 is still open");
        assert_eq!(b.bytes(), 5);
        b.close();
        let third = b.take_next().unwrap();
        assert_eq!((third.start_offset, third.next_offset), (16, 17));
        b.written();
        assert!(b.is_idle());
        assert_eq!(b.bytes(), 0);
    }

    #[test]
    fn a_batch_is_made_at_the_size_of_the_last_one() {
        let now = Instant::now();
        let mut b = PartitionBatcher::new(limits(100, 1 << 20, 1000), Some(0));
        b.push(0, [row()], 1, now).unwrap();
        assert!(b.open.as_ref().unwrap().0.rows.capacity() < 40);
        for offset in 1..40 {
            b.push(offset, [row()], 1, now).unwrap();
        }
        b.close();
        b.push(40, [row()], 1, now).unwrap();
        // Room for as many rows as the last batch had: it does not grow by copying itself.
        assert!(b.open.as_ref().unwrap().0.rows.capacity() >= 40);
        // A quieter spell: the next batch is made smaller again.
        b.close();
        b.push(41, [row()], 1, now).unwrap();
        assert!(b.open.as_ref().unwrap().0.rows.capacity() < 40);
    }

    #[test]
    fn dead_letters_count_toward_max_rows_and_tombstones_do_not() {
        let now = Instant::now();
        let mut b = PartitionBatcher::new(limits(2, 1 << 20, 1000), None);
        b.push(0, [Record::Tombstone], 0, now).unwrap();
        b.push(1, [dead(1)], 3, now).unwrap();
        assert!(b.take_next().is_none());
        b.push(2, [row()], 3, now).unwrap();
        let batch = b.take_next().unwrap();
        assert_eq!((batch.start_offset, batch.next_offset), (0, 3));
        assert_eq!(
            (batch.rows.len(), batch.dead_letters.len(), batch.tombstones),
            (1, 1, 1)
        );
    }

    #[test]
    fn a_message_of_many_records_is_one_unit_of_a_batch() {
        let now = Instant::now();
        let mut b = PartitionBatcher::new(limits(3, 1 << 20, 1000), Some(0));
        b.push(0, [row()], 1, now).unwrap();
        // Five records of one message: over max_rows, yet none is left for the next batch.
        b.push(1, [row(), dead(1), row(), row(), row()], 1, now)
            .unwrap();
        b.push(2, [row()], 1, now).unwrap();
        let first = b.take_next().unwrap();
        assert_eq!((first.start_offset, first.next_offset), (0, 2));
        assert_eq!((first.rows.len(), first.dead_letters.len()), (5, 1));
        let offsets: Vec<i64> = first.rows.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [0, 1, 1, 1, 1]);
        b.written();
        b.close();
        let second = b.take_next().unwrap();
        assert_eq!((second.start_offset, second.next_offset), (2, 3));
    }

    #[test]
    fn a_batch_closes_at_max_bytes() {
        let now = Instant::now();
        let mut b = PartitionBatcher::new(limits(100, 10, 1000), None);
        b.push(5, [row()], 6, now).unwrap();
        assert!(b.take_next().is_none());
        b.push(6, [row()], 6, now).unwrap();
        let batch = b.take_next().unwrap();
        assert_eq!(
            (batch.start_offset, batch.next_offset, batch.bytes),
            (5, 7, 12)
        );
    }

    #[test]
    fn a_batch_closes_after_lingering() {
        let start = Instant::now();
        let mut b = PartitionBatcher::new(limits(100, 1 << 20, 200), Some(0));
        assert_eq!(b.deadline(), None);
        b.push(0, [row()], 1, start).unwrap();
        b.push(1, [row()], 1, start + Duration::from_millis(150))
            .unwrap();
        assert_eq!(b.deadline(), Some(start + Duration::from_millis(200)));
        b.close_if_lingered(start + Duration::from_millis(199));
        assert!(b.take_next().is_none());
        b.close_if_lingered(start + Duration::from_millis(200));
        let batch = b.take_next().unwrap();
        assert_eq!(batch.rows.len(), 2);
        assert_eq!(b.deadline(), None);
    }

    #[test]
    fn a_batch_lingers_on_while_the_previous_one_is_written() {
        let start = Instant::now();
        let mut b = PartitionBatcher::new(limits(2, 1 << 20, 100), Some(0));
        b.push(0, [row()], 1, start).unwrap();
        b.push(1, [row()], 1, start).unwrap();
        let writing = b.take_next().unwrap();
        assert_eq!(writing.next_offset, 2);
        b.push(2, [row()], 1, start).unwrap();
        let late = start + Duration::from_millis(500);
        assert_eq!(b.deadline(), None);
        b.close_if_lingered(late);
        b.written();
        assert_eq!(b.deadline(), Some(start + Duration::from_millis(100)));
        assert!(
            b.take_next().is_none(),
            "still open until the dispatcher closes it"
        );
        b.close_if_lingered(late);
        let next = b.take_next().unwrap();
        assert_eq!((next.start_offset, next.next_offset), (2, 3));
    }

    #[test]
    fn the_first_batch_starts_at_the_stored_offset_even_past_a_gap() {
        let now = Instant::now();
        let mut b = PartitionBatcher::new(limits(2, 1 << 20, 1000), Some(100));
        b.push(104, [row()], 1, now).unwrap();
        b.push(109, [row()], 1, now).unwrap();
        let batch = b.take_next().unwrap();
        assert_eq!((batch.start_offset, batch.next_offset), (100, 110));
        let offsets: Vec<i64> = batch.rows.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [104, 109]);
    }

    #[test]
    fn offsets_never_go_back() {
        let now = Instant::now();
        let mut b = PartitionBatcher::new(limits(2, 1 << 20, 1000), Some(50));
        assert_eq!(
            b.push(49, [row()], 1, now),
            Err(OffsetBehind {
                offset: 49,
                expected: 50
            })
        );
        b.push(50, [row()], 1, now).unwrap();
        assert!(b.push(50, [row()], 1, now).is_err(), "a repeated offset");
        b.push(51, [row()], 1, now).unwrap();
        // Closed at max_rows: the next message must still follow it.
        assert_eq!(
            b.push(51, [row()], 1, now),
            Err(OffsetBehind {
                offset: 51,
                expected: 52
            })
        );
    }

    #[test]
    fn restart_forgets_what_is_held_but_counts_the_batch_being_written() {
        let now = Instant::now();
        let mut b = PartitionBatcher::new(limits(2, 1 << 20, 1000), Some(0));
        for offset in 0..5 {
            b.push(offset, [row()], 10, now).unwrap();
        }
        let writing = b.take_next().unwrap();
        assert_eq!(writing.next_offset, 2);
        assert_eq!(b.bytes(), 50);
        b.restart_at(Some(40));
        assert_eq!(b.bytes(), 20);
        assert!(!b.is_idle(), "the batch being written is still held");
        b.written();
        assert!(b.is_idle());
        assert_eq!(b.bytes(), 0);
        b.push(40, [row()], 1, now).unwrap();
        b.close();
        assert_eq!(b.take_next().unwrap().start_offset, 40);
    }
}
