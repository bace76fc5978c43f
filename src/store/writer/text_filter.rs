//! The writer's share of the text filter (see [`crate::store::text_filter`]): each batch ORs
//! its rows' grams into the filter rows of their buckets, in the batch's own transaction, so
//! the filter holds exactly the committed rows. Bits already known committed are not sent
//! again (see [`KnownBits`]).

use std::sync::Mutex;

use mysql_async::Transaction;

use super::insert::{self, InsertError};
use super::{Row, table_values};
use crate::id::Layout;
use crate::store::settings::StoreSettings;
use crate::store::text_filter::{FilterRow, KnownBits, TextFilterPlan};
use crate::store::text_search;

/// The text filters of the tables a writer writes, their upsert text, built once, and the bits
/// this writer knows are stored.
pub(super) struct TextFilters {
    plans: Vec<TextFilterPlan>,
    known: Mutex<KnownBits>,
}

/// The filter rows a batch adds, per plan (in the plans' order), before the known bits are
/// taken out.
pub(super) struct Aggregated(Vec<Vec<FilterRow>>);

/// The filter rows a transaction sent, per plan, to be known once it commits.
#[derive(Default)]
pub(super) struct Sent(Vec<(usize, Vec<FilterRow>)>);

impl TextFilters {
    pub(super) fn new(store: &StoreSettings) -> TextFilters {
        TextFilters {
            plans: text_search::plans(store),
            known: Mutex::new(KnownBits::default()),
        }
    }

    /// The filter rows the records add to every table they were written to, per plan: pure
    /// work, done while the database inserts the rows (see `ServerWriter::write_records`).
    pub(super) fn aggregate(&self, layout: &Layout, rows: &[Row]) -> Aggregated {
        Aggregated(
            self.plans
                .iter()
                .map(|plan| {
                    plan.aggregate(
                        layout,
                        rows.iter()
                            .filter_map(|row| Some((row.id, table_values(row, plan.table_index)?))),
                    )
                })
                .collect(),
        )
    }

    /// Sends the aggregated filter rows, less the bits known stored; returns what it sent, for
    /// [`TextFilters::committed`].
    pub(super) async fn send(
        &self,
        tx: &mut Transaction<'_>,
        aggregated: Aggregated,
        budget: usize,
    ) -> Result<Sent, InsertError> {
        let mut sent = Sent::default();
        for (plan, blocks) in self.plans.iter().zip(aggregated.0) {
            let blocks: Vec<FilterRow> = {
                let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
                blocks
                    .iter()
                    .filter_map(|block| known.unknown(plan.table_index, block))
                    .collect()
            };
            for sql in text_search::upsert_sql(&plan.table, &blocks, budget) {
                insert::send_text(tx, &sql, None).await.map_err(|e| {
                    e.refused_as(|reason| {
                        format!(
                            "the database refused adding the records to the text filter of \
                             {}: {reason}",
                            plan.table
                        )
                    })
                })?;
            }
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
