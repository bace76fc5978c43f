//! The writer's share of the text filter (see [`crate::store::text_filter`]): each batch ORs
//! its rows' grams into the filter rows of their buckets, in the batch's own transaction, so
//! the filter holds exactly the committed rows. Bits already known committed are not sent
//! again (see [`KnownBits`]).

use std::sync::Mutex;

use mysql_async::Transaction;

use super::insert::InsertError;
use super::{Row, table_values, upsert};
use crate::id::Layout;
use crate::store::settings::StoreSettings;
use crate::store::text_filter::{FilterRow, KnownBits, TextFilterPlan};
use crate::store::text_search;

/// The text filters of the tables a writer writes, their upsert text, built once, and the bits
/// this writer knows are stored.
pub(super) struct TextFilters {
    plans: Vec<TextFilterPlan>,
    upsert: (String, String, usize),
    known: Mutex<KnownBits>,
}

/// The filter rows a transaction sent, per plan, to be known once it commits.
#[derive(Default)]
pub(super) struct Sent(Vec<(usize, Vec<FilterRow>)>);

impl TextFilters {
    pub(super) fn new(store: &StoreSettings) -> TextFilters {
        TextFilters {
            plans: text_search::plans(store),
            upsert: text_search::upsert_statement(),
            known: Mutex::new(KnownBits::default()),
        }
    }

    /// Adds the records' grams to the filter of every table they were written to; returns
    /// what it sent, for [`TextFilters::committed`].
    pub(super) async fn add(
        &self,
        tx: &mut Transaction<'_>,
        layout: &Layout,
        rows: &[Row],
        budget: usize,
    ) -> Result<Sent, InsertError> {
        let (prefix, suffix, width) = &self.upsert;
        let mut sent = Sent::default();
        for plan in &self.plans {
            let blocks = plan.aggregate(
                layout,
                rows.iter()
                    .filter_map(|row| Some((row.id, table_values(row, plan.table_index)?))),
            );
            let blocks: Vec<FilterRow> = {
                let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
                blocks
                    .iter()
                    .filter_map(|block| known.unknown(plan.table_index, block))
                    .collect()
            };
            let values = blocks
                .iter()
                .map(|block| text_search::upsert_values(&plan.table, block))
                .collect();
            let what = || format!("the text filter of {}", plan.table);
            upsert(tx, (prefix, suffix, *width), values, budget, what).await?;
            sent.0.push((plan.table_index, blocks));
        }
        Ok(sent)
    }

    /// Records what a committed transaction sent as stored.
    pub(super) fn committed(&self, sent: Sent) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        for (table_index, rows) in &sent.0 {
            known.record(*table_index, rows);
        }
    }

    /// Forgets every known bit: after a failed write, nothing is assumed of what is stored.
    pub(super) fn forget(&self) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .forget();
    }
}
