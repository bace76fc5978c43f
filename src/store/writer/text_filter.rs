//! The writer's share of the text filter (see [`crate::store::text_filter`]): each batch ORs
//! its rows' grams into the filter rows of their buckets, in the batch's own transaction, so
//! the filter holds exactly the committed rows.

use mysql_async::Transaction;

use super::insert::InsertError;
use super::{Row, table_values, upsert};
use crate::id::Layout;
use crate::store::settings::StoreSettings;
use crate::store::text_filter::TextFilterPlan;
use crate::store::text_search;

/// The text filters of the tables a writer writes, and their upsert text, built once.
pub(super) struct TextFilters {
    plans: Vec<TextFilterPlan>,
    upsert: (String, String, usize),
}

impl TextFilters {
    pub(super) fn new(store: &StoreSettings) -> TextFilters {
        TextFilters {
            plans: text_search::plans(store),
            upsert: text_search::upsert_statement(),
        }
    }

    /// Adds the records' grams to the filter of every table they were written to.
    pub(super) async fn add(
        &self,
        tx: &mut Transaction<'_>,
        layout: &Layout,
        rows: &[Row],
        budget: usize,
    ) -> Result<(), InsertError> {
        let (prefix, suffix, width) = &self.upsert;
        for plan in &self.plans {
            let blocks = plan.aggregate(
                layout,
                rows.iter()
                    .filter_map(|row| Some((row.id, table_values(row, plan.table_index)?))),
            );
            let values = blocks
                .iter()
                .map(|block| text_search::upsert_values(&plan.table, block))
                .collect();
            let what = || format!("the text filter of {}", plan.table);
            upsert(tx, (prefix, suffix, *width), values, budget, what).await?;
        }
        Ok(())
    }
}
