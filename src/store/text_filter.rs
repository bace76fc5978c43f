//! The text filter's pure part: which n-grams a text holds, how they set bits of a blocked
//! Bloom filter per bucket of ID time, and which bits a search for a text needs set.
//!
//! Like ClickHouse's `ngrambf_v1` skip index, every window of [`GRAM`] characters of a text
//! column's value is a gram, so a substring search can use the needle's grams wherever they
//! sit, including at its ends (a token index, `tokenbf_v1`, can use only the tokens the needle
//! holds whole: `orders/6878` would give none). A bucket's filter is [`BLOCKS`] blocks of
//! [`WORDS`] 64-bit words, one filter row per block, so a search reads one row per distinct
//! block of its grams, not the whole filter.
//!
//! Format 2 (this one) sets a gram's [`BITS_PER_GRAM`] bits in one word (a register-blocked
//! Bloom filter): a gram costs a hash of two multiplications and one `OR`, where format 1 hashed
//! with five and spread four bits over a 2,048-bit block, and the writer's CPU per row went
//! mostly to that. Format 2's blocks are numbered from [`FIRST_BLOCK`], after format 1's, so a
//! row never holds bits of both formats, and a search reads a bucket's filter rows of format 1
//! (written by a version before, or by one still running in a fleet being upgraded) as "may
//! hold anything".
//!
//! A filter may say "may hold" for a text a bucket lacks (a false positive: the bucket is read
//! and the exact condition drops its rows), never "does not hold" for one it has. For the
//! case-insensitive search (MySQL's `LOWER`, one character for one), grams are folded before
//! hashing: ASCII to lower case, and any other character by Unicode's lower case; only needle
//! windows wholly of ASCII are used, since the only characters `LOWER` takes into ASCII are
//! ASCII letters, U+0130 (to `i`) and U+212A (to `k`), which the fold maps alike.

use std::collections::{BTreeMap, HashSet};

use crate::id::Layout;
use crate::mysql::{Ident, SqlValue};
use crate::store::zone_plan::bucket_start;

/// Characters per gram: short needles (of this many characters or more) still prune, and a
/// gram of three is selective enough in log text.
pub const GRAM: usize = 3;
/// Blocks per bucket filter (a power of two).
pub const BLOCKS: u64 = 128;
/// 64-bit words per block.
pub const WORDS: usize = 32;
/// Bits a gram sets in its word.
pub const BITS_PER_GRAM: usize = 4;
/// The number of format 2's first block: blocks below it are format 1's.
pub const FIRST_BLOCK: u64 = 128;
/// Set in the `service_id` of filter rows the relay's applier writes (rows from another data
/// centre): their own rows, so an applier never waits on a local worker's filter rows of the
/// same minute and service ID. A search tests each (minute, `service_id`) row set on its own,
/// so which set a row's grams go to never changes an answer.
pub const RELAYED: u32 = 1 << 31;

/// A table whose text columns (`string` and `text`) have a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFilterPlan {
    pub table: Ident,
    /// The table's place: 0 for `store.table`, then `[[store.tables]]` in order.
    pub table_index: usize,
    /// Each text column's place among the table's values, and its name (hashed with its grams,
    /// so a search on one column does not read buckets only another column matches).
    pub columns: Vec<(usize, String)>,
}

/// A block's bits to set, or to find set.
pub type Words = [u64; WORDS];

/// One filter row: one block of one bucket's filter, per service ID (so workers never wait
/// on each other's rows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterRow {
    pub bucket_start: u64,
    pub service_id: u32,
    pub block: u64,
    pub words: Words,
}

/// How a search compares text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// Character for character (`contains`).
    Exact,
    /// After MySQL's `LOWER` on both sides (`icontains`).
    IgnoreCase,
}

/// The fold applied to every character before hashing.
fn fold(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    if c == '\u{130}' {
        return 'i';
    }
    c.to_lowercase().next().unwrap_or(c)
}

/// A column's hash seed, from its name (FNV-1a, then a SplitMix64 finish), so the same gram in
/// two columns sets different bits. Fixed here, as filters written by one version are read by
/// the next.
fn column_seed(column: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in column.bytes().chain([0xff]) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The next gram key after `key` when a window moves on by character `c`: the last [`GRAM`]
/// characters' code points, 21 bits each.
#[inline]
fn push_key(key: u64, c: u32) -> u64 {
    ((key << 21) | u64::from(c)) & ((1 << (21 * GRAM)) - 1)
}

/// A window's gram key, as [`text_grams`] makes it.
fn gram_key(window: &[char]) -> u64 {
    window
        .iter()
        .fold(0, |key, c| push_key(key, u32::from(fold(*c))))
}

/// A gram's 64-bit hash, from its column's seed and its key: two multiplications, each
/// followed by folding the high half into the low one, so every bit of the result mixes.
#[inline]
fn hash(seed: u64, key: u64) -> u64 {
    let h = (key ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let h = (h ^ (h >> 32)).wrapping_mul(0xd6e8_feb8_6659_fd93);
    h ^ (h >> 32)
}

/// Where a gram's bits go in a bucket's filter: the word's place among all [`BLOCKS`] times
/// [`WORDS`] (block, then word), from the hash's top bits, and the bits, from its low 24.
#[inline]
fn place(h: u64) -> (usize, u64) {
    let mask = (0..BITS_PER_GRAM).fold(0, |mask, i| mask | 1 << ((h >> (6 * i)) & 63));
    ((h >> (64 - 12)) as usize, mask)
}

/// Words in a bucket's whole filter: [`place`]'s word is any 12-bit number.
const FILTER_WORDS: usize = 1 << 12;

const _: () = assert!(BLOCKS * WORDS as u64 == FILTER_WORDS as u64);

/// Calls `each` with the hash of every gram of `text` (repeats included), from the column's
/// seed. Text wholly of ASCII (most log text) is hashed byte by byte, without decoding
/// characters: an ASCII character's code point is its byte.
fn text_grams(seed: u64, text: &str, mut each: impl FnMut(u64)) {
    let bytes = text.as_bytes();
    if bytes.is_ascii() {
        // The first window's start is keyed before the loop, so the loop (most of a writer's
        // filter work) has no branch on whether its window is full yet.
        let Some((start, rest)) = bytes.split_at_checked(GRAM - 1) else {
            return;
        };
        let ascii_key = |key, c: &u8| push_key(key, u32::from(c.to_ascii_lowercase()));
        let mut key = start.iter().fold(0, ascii_key);
        for c in rest {
            key = ascii_key(key, c);
            each(hash(seed, key));
        }
        return;
    }
    let mut key = 0;
    for (n, c) in text.chars().enumerate() {
        key = push_key(key, u32::from(fold(c)));
        if n + 1 >= GRAM {
            each(hash(seed, key));
        }
    }
}

/// Texts of at most this many bytes are added to a filter once per column: short columns
/// (level, host, service) repeat a few values, and hashing a repeat costs more than finding it.
const SHORT_TEXT: usize = 64;
/// Distinct short texts remembered per filter and column, so memory stays bounded when a
/// column's short values do not repeat.
const SEEN_PER_COLUMN: usize = 1024;

/// One bucket and service's filter while it is built.
struct Filter {
    /// Block after block, as one array: a gram's word is indexed without a bounds check.
    words: Box<[u64; FILTER_WORDS]>,
    /// Per column, the short texts already added (hashed with foldhash: SipHash, the
    /// standard one, took a tenth of the filter's time, and these are no attacker's keys to
    /// flood a table with: the set stops growing at [`SEEN_PER_COLUMN`]).
    seen: Vec<HashSet<Box<str>, foldhash::fast::FixedState>>,
}

/// Whole filters of buckets and services, set in place as texts are added.
pub struct FilterBuilder {
    /// Each of the plan's columns' hash seed, computed once.
    seeds: Vec<u64>,
    /// ORed into every service ID ([`RELAYED`] for the applier's rows).
    service_bits: u32,
    filters: BTreeMap<(u64, u32), Filter>,
}

impl FilterBuilder {
    /// Adds the grams of texts of the row of `id`, each with its column's place in the plan.
    pub fn add_row<'a>(
        &mut self,
        layout: &Layout,
        id: u64,
        texts: impl IntoIterator<Item = (usize, &'a str)>,
    ) {
        let key = (
            bucket_start(id),
            layout.decode(id).service_id | self.service_bits,
        );
        let columns = self.seeds.len();
        let filter = self.filters.entry(key).or_insert_with(|| Filter {
            words: Box::new([0; FILTER_WORDS]),
            seen: vec![HashSet::default(); columns],
        });
        for (nth, text) in texts {
            let (Some(seed), Some(seen)) = (self.seeds.get(nth), filter.seen.get_mut(nth)) else {
                continue;
            };
            if text.len() <= SHORT_TEXT {
                if seen.contains(text) {
                    continue;
                }
                if seen.len() < SEEN_PER_COLUMN {
                    seen.insert(text.into());
                }
            }
            text_grams(*seed, text, |h| set(&mut filter.words, h));
        }
    }

    /// The filter rows set, in key order (so every writer locks filter rows in the same
    /// order): a block with no bit set adds nothing.
    pub fn rows(self) -> Vec<FilterRow> {
        let mut rows = Vec::new();
        for ((bucket_start, service_id), filter) in self.filters {
            let (blocks, _) = filter.words.as_chunks::<WORDS>();
            for (block, words) in blocks.iter().enumerate() {
                if words.iter().any(|w| *w != 0) {
                    rows.push(FilterRow {
                        bucket_start,
                        service_id,
                        block: FIRST_BLOCK + block as u64,
                        words: *words,
                    });
                }
            }
        }
        rows
    }
}

/// Sets a gram's bits in a whole filter, in place.
#[inline]
fn set(filter: &mut [u64; FILTER_WORDS], h: u64) {
    let (at, mask) = place(h);
    filter[at] |= mask;
}

/// Buckets per table and service ID whose known bits are kept: the current minute and the one
/// before it (a batch can straddle a minute; IDs are stamped at the current time).
const KNOWN_BUCKETS: usize = 2;

/// The bits of filter rows known to be committed, per table, bucket and service ID, so a
/// writer sends only blocks with a bit not yet stored: once a minute's filter has most of its
/// text's grams, a batch upserts a few blocks instead of up to [`BLOCKS`] per bucket.
///
/// Sound only while the bits it holds are a subset of the database's: bits are recorded only
/// after their transaction committed, filter rows only grow while their rows exist (a rebuild
/// recomputes them from every row under shared locks), and the writer forgets everything on
/// any failed write. A service ID's rows are written by the one worker holding its lease,
/// per database, so no other writer's commits are missed.
#[derive(Debug, Default)]
pub struct KnownBits {
    filters: BTreeMap<(usize, u32, u64), Box<[Words]>>,
}

impl KnownBits {
    /// `row` holding only the bits of its block not known to be stored (of the plan at
    /// `table_index`); `None` when it adds nothing.
    pub fn unknown(&self, table_index: usize, row: &FilterRow) -> Option<FilterRow> {
        let key = (table_index, row.service_id, row.bucket_start);
        let Some(known) = self
            .filters
            .get(&key)
            .and_then(|f| f.get(row.block.checked_sub(FIRST_BLOCK)? as usize))
        else {
            return Some(row.clone());
        };
        let mut words = row.words;
        for (w, k) in words.iter_mut().zip(known) {
            *w &= !k;
        }
        words.iter().any(|w| *w != 0).then(|| FilterRow {
            words,
            ..row.clone()
        })
    }

    /// Records committed rows of the plan at `table_index`, then forgets all but the newest
    /// [`KNOWN_BUCKETS`] buckets of each of their service IDs.
    pub fn record<'a>(
        &mut self,
        table_index: usize,
        rows: impl IntoIterator<Item = &'a FilterRow>,
    ) {
        let mut services = Vec::new();
        for row in rows {
            let key = (table_index, row.service_id, row.bucket_start);
            let filter = self
                .filters
                .entry(key)
                .or_insert_with(|| vec![[0; WORDS]; BLOCKS as usize].into_boxed_slice());
            let index = row.block.checked_sub(FIRST_BLOCK);
            if let Some(known) = index.and_then(|b| filter.get_mut(b as usize)) {
                for (k, w) in known.iter_mut().zip(row.words) {
                    *k |= w;
                }
            }
            if !services.contains(&row.service_id) {
                services.push(row.service_id);
            }
        }
        for service_id in services {
            let buckets: Vec<u64> = self
                .filters
                .range((table_index, service_id, 0)..=(table_index, service_id, u64::MAX))
                .map(|(key, _)| key.2)
                .collect();
            for old in buckets.iter().rev().skip(KNOWN_BUCKETS) {
                self.filters.remove(&(table_index, service_id, *old));
            }
        }
    }

    /// Forgets every known bit (after a failed write, whose cause may have been a table
    /// dropped and made again, with its filter rows).
    pub fn forget(&mut self) {
        self.filters.clear();
    }
}

impl TextFilterPlan {
    /// A builder of this table's filters.
    pub fn builder(&self) -> FilterBuilder {
        FilterBuilder {
            seeds: self.columns.iter().map(|(_, c)| column_seed(c)).collect(),
            service_bits: 0,
            filters: BTreeMap::new(),
        }
    }

    /// A builder of the filter rows of rows the relay applies (see [`RELAYED`]).
    pub fn relayed_builder(&self) -> FilterBuilder {
        FilterBuilder {
            service_bits: RELAYED,
            ..self.builder()
        }
    }

    /// The filter rows `rows` (each an ID with the table's values) add, in key order. A NULL
    /// or non-text value adds nothing.
    pub fn aggregate<'a>(
        &self,
        layout: &Layout,
        rows: impl IntoIterator<Item = (u64, &'a [SqlValue])>,
    ) -> Vec<FilterRow> {
        let mut builder = self.builder();
        for (id, values) in rows {
            let texts =
                self.columns
                    .iter()
                    .enumerate()
                    .filter_map(|(nth, (index, _))| match values.get(*index) {
                        Some(SqlValue::Text(text)) => Some((nth, text.as_str())),
                        _ => None,
                    });
            builder.add_row(layout, id, texts);
        }
        builder.rows()
    }
}

/// What a search needs of a bucket's filter: per block (in block order), the bits that must
/// all be set. Empty when the needle gives no gram the filter can use (too short, or for
/// [`Fold::IgnoreCase`] no window wholly of ASCII): then every bucket may hold it.
pub fn probe<'a>(needles: impl IntoIterator<Item = (&'a str, &'a str, Fold)>) -> Vec<(u64, Words)> {
    let mut blocks: BTreeMap<u64, Words> = BTreeMap::new();
    for (column, needle, how) in needles {
        let chars: Vec<char> = needle.chars().collect();
        for window in chars.windows(GRAM) {
            if how == Fold::IgnoreCase && !window.iter().all(char::is_ascii) {
                continue;
            }
            let (at, mask) = place(hash(column_seed(column), gram_key(window)));
            let block = FIRST_BLOCK + (at / WORDS) as u64;
            blocks.entry(block).or_insert([0; WORDS])[at % WORDS] |= mask;
        }
    }
    blocks.into_iter().collect()
}

/// Whether a block's stored words hold every bit needed.
pub fn holds(stored: &Words, needed: &Words) -> bool {
    stored.iter().zip(needed).all(|(s, n)| s & n == *n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn plan() -> TextFilterPlan {
        TextFilterPlan {
            table: Ident::new("logs").unwrap(),
            table_index: 0,
            columns: vec![(0, "message".into())],
        }
    }

    /// Whether a filter of exactly `text` may hold `needle` (as a search decides).
    fn may_hold(text: &str, needle: &str, how: Fold) -> bool {
        let layout = Layout::new(10, 0).unwrap();
        let values = [SqlValue::Text(text.into())];
        let rows = plan().aggregate(&layout, [(5u64 << 32, &values[..])]);
        probe([("message", needle, how)])
            .iter()
            .all(|(block, need)| {
                rows.iter()
                    .any(|r| r.block == *block && holds(&r.words, need))
            })
    }

    #[test]
    fn a_needle_in_the_text_is_always_found() {
        let text = "GET /api/v1/orders/6878 200 in 12ms user=İstanbul \u{212A}elvin";
        for needle in ["orders/6878", "ders/68", "GET", "78 2", "İstan", "ms user="] {
            assert!(may_hold(text, needle, Fold::Exact), "{needle}");
        }
        for needle in ["ORDERS/6878", "get /API", "istanbul", "KELVIN", "İSTAN"] {
            assert!(may_hold(text, needle, Fold::IgnoreCase), "{needle}");
        }
    }

    #[test]
    fn a_needle_not_in_the_text_is_mostly_refused() {
        let text = "GET /api/v1/orders/6878 200 in 12ms";
        assert!(!may_hold(text, "orders/9999", Fold::Exact));
        assert!(!may_hold(text, "timeout", Fold::IgnoreCase));
    }

    #[test]
    fn short_or_non_ascii_case_insensitive_needles_need_nothing() {
        assert!(probe([("message", "ab", Fold::Exact)]).is_empty());
        assert!(probe([("message", "日本語", Fold::IgnoreCase)]).is_empty());
        assert!(!probe([("message", "日本語", Fold::Exact)]).is_empty());
    }

    #[test]
    fn ascii_text_hashes_as_its_characters_do() {
        let seed = column_seed("message");
        for text in [
            "GET /API/v1/Orders/6878 200",
            "ab",
            "abc",
            "",
            "A\tB\u{7f}c",
        ] {
            let mut fast = Vec::new();
            text_grams(seed, text, |h| fast.push(h));
            let chars: Vec<char> = text.chars().collect();
            let slow: Vec<u64> = chars
                .windows(GRAM)
                .map(|w| hash(seed, gram_key(w)))
                .collect();
            assert_eq!(fast, slow, "{text:?}");
        }
    }

    #[test]
    fn columns_have_their_own_grams() {
        let key = gram_key(&['a', 'b', 'c']);
        assert_ne!(
            hash(column_seed("message"), key),
            hash(column_seed("host"), key)
        );
    }

    #[test]
    fn a_gram_sets_up_to_four_bits_of_one_word_in_format_two_blocks() {
        let layout = Layout::new(10, 0).unwrap();
        let values = [SqlValue::Text("abc".into())];
        let rows = plan().aggregate(&layout, [(5u64 << 32, &values[..])]);
        assert_eq!(rows.len(), 1);
        assert!(rows[0].block >= FIRST_BLOCK && rows[0].block < FIRST_BLOCK + BLOCKS);
        let words: Vec<&u64> = rows[0].words.iter().filter(|w| **w != 0).collect();
        assert_eq!(words.len(), 1);
        assert!((1..=BITS_PER_GRAM as u32).contains(&words[0].count_ones()));
    }

    /// The hash spreads grams well enough that a bucket of 20,000 distinct grams (a busy
    /// minute's) answers "may hold" for under 5% of absent grams: a register-blocked filter
    /// with 4 bits a gram at this load would give about 1%; a hash using few of its bits would
    /// give far more.
    #[test]
    fn absent_grams_are_mostly_refused() {
        let gram = |n: u32| -> String {
            let alphabet: Vec<char> = "abcdefghijklmnopqrstuvwxyz0123456789/=_.-: "
                .chars()
                .collect();
            let len = alphabet.len() as u32;
            [n % len, (n / len) % len, (n / len / len) % len]
                .iter()
                .map(|i| alphabet[*i as usize])
                .collect()
        };
        let layout = Layout::new(10, 0).unwrap();
        let texts: Vec<[SqlValue; 1]> = (0..20_000).map(|n| [SqlValue::Text(gram(n))]).collect();
        let rows = plan().aggregate(&layout, texts.iter().map(|v| (5u64 << 32, &v[..])));
        let absent = 20_000..(43u32 * 43 * 43);
        let found = absent
            .clone()
            .filter(|n| {
                probe([("message", gram(*n).as_str(), Fold::Exact)])
                    .iter()
                    .all(|(block, need)| {
                        rows.iter()
                            .any(|r| r.block == *block && holds(&r.words, need))
                    })
            })
            .count();
        let rate = found as f64 / absent.len() as f64;
        assert!(rate < 0.05, "{rate}");
    }

    #[test]
    fn rows_are_per_bucket_and_service_in_key_order() {
        let layout = Layout::new(10, 0).unwrap();
        let a = [SqlValue::Text("abcdef".into())];
        let null = [SqlValue::Null];
        let rows = plan().aggregate(
            &layout,
            [
                ((200u64 << 32) | (1 << 22), &a[..]),
                (5u64 << 32, &a[..]),
                (6u64 << 32, &null[..]),
            ],
        );
        let keys: Vec<(u64, u32)> = rows
            .iter()
            .map(|r| (r.bucket_start, r.service_id))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert!(keys.contains(&(0, 0)));
        assert!(keys.contains(&(180 << 32, 1)));
        assert_eq!(keys.iter().filter(|k| k.0 == 0).count(), rows.len() / 2);
    }

    #[test]
    fn short_texts_past_the_remembered_ones_are_still_added() {
        let layout = Layout::new(10, 0).unwrap();
        let texts: Vec<[SqlValue; 1]> = (0..SEEN_PER_COLUMN + 50)
            .map(|n| [SqlValue::Text(format!("host-{n:05}"))])
            .collect();
        let rows = plan().aggregate(&layout, texts.iter().map(|v| (5u64 << 32, &v[..])));
        for n in [0, SEEN_PER_COLUMN - 1, SEEN_PER_COLUMN + 49] {
            let needle = format!("host-{n:05}");
            let found = probe([("message", needle.as_str(), Fold::Exact)])
                .iter()
                .all(|(block, need)| {
                    rows.iter()
                        .any(|r| r.block == *block && holds(&r.words, need))
                });
            assert!(found, "{needle}");
        }
    }

    fn row(bucket_start: u64, block: u64, bits: &[(usize, u64)]) -> FilterRow {
        let block = FIRST_BLOCK + block;
        let mut words = [0; WORDS];
        for (word, bit) in bits {
            words[*word] |= bit;
        }
        FilterRow {
            bucket_start,
            service_id: 3,
            block,
            words,
        }
    }

    #[test]
    fn known_bits_leave_only_what_is_new() {
        let mut known = KnownBits::default();
        let first = row(0, 7, &[(0, 0b011), (31, 1)]);
        assert_eq!(known.unknown(0, &first), Some(first.clone()));
        known.record(0, [&first]);
        assert_eq!(known.unknown(0, &first), None);
        let more = row(0, 7, &[(0, 0b110)]);
        assert_eq!(known.unknown(0, &more), Some(row(0, 7, &[(0, 0b100)])));
        // Another block, table or bucket knows nothing yet.
        assert!(known.unknown(0, &row(0, 8, &[(0, 1)])).is_some());
        assert!(known.unknown(1, &first).is_some());
        assert!(known.unknown(0, &row(60 << 32, 7, &[(0, 1)])).is_some());
        known.forget();
        assert_eq!(known.unknown(0, &first), Some(first));
    }

    #[test]
    fn known_bits_keep_only_the_newest_buckets() {
        let mut known = KnownBits::default();
        let minute = |m: u64| row((m * 60) << 32, 0, &[(0, 1)]);
        for m in 0..4 {
            known.record(0, [&minute(m)]);
        }
        assert!(known.unknown(0, &minute(0)).is_some());
        assert!(known.unknown(0, &minute(1)).is_some());
        assert!(known.unknown(0, &minute(2)).is_none());
        assert!(known.unknown(0, &minute(3)).is_none());
        assert_eq!(known.filters.len(), KNOWN_BUCKETS);
    }

    proptest! {
        #[test]
        fn every_substring_is_found(text in "[a-zA-Z0-9 /=_%\\\\İ\u{212A}éÉß日]{0,40}", at in 0usize..40, len in 0usize..12) {
            let chars: Vec<char> = text.chars().collect();
            let start = at.min(chars.len());
            let end = (start + len).min(chars.len());
            let needle: String = chars[start..end].iter().collect();
            prop_assert!(may_hold(&text, &needle, Fold::Exact));
            // Lower case as MySQL's LOWER does for these characters.
            let lower: String = needle.chars().map(|c| if c == 'İ' { 'i' } else { c.to_lowercase().next().unwrap() }).collect();
            let upper = needle.to_ascii_uppercase();
            prop_assert!(may_hold(&text, &lower, Fold::IgnoreCase));
            prop_assert!(may_hold(&text, &upper, Fold::IgnoreCase));
        }
    }
}
