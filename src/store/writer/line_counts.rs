//! The writer's share of the line counts (see [`crate::store::line_count_plan`]): each batch
//! adds its lines' counts in its own transaction, after its rows, so the counts hold exactly
//! the committed lines. Kept apart from the rest of the writer: one concern, one file.

use mysql_async::Transaction;

use super::insert::InsertError;
use super::{Row, table_values, upsert};
use crate::id::Layout;
use crate::store::line_count_plan::{self, CountPlan};
use crate::store::line_counts;
use crate::store::settings::StoreSettings;

/// Every table's count plan and the upsert's text, built once.
pub(super) struct LineCounts {
    plans: Vec<CountPlan>,
    upsert: (String, String, usize),
}

impl LineCounts {
    pub(super) fn new(store: &StoreSettings) -> LineCounts {
        LineCounts {
            plans: line_count_plan::plans(store),
            upsert: line_counts::upsert_statement(),
        }
    }

    /// Adds the records' lines to the counts of every table they are stored in. Last in the
    /// batch's writes, so the shared rows of the current minute are held briefly.
    pub(super) async fn add(
        &self,
        tx: &mut Transaction<'_>,
        layout: &Layout,
        rows: &[Row],
        budget: usize,
    ) -> Result<(), InsertError> {
        let (prefix, suffix, width) = &self.upsert;
        for plan in &self.plans {
            let counts = plan.aggregate(
                layout,
                rows.iter()
                    .filter_map(|row| Some((row.id, table_values(row, plan.table_index)?))),
            );
            let values = counts
                .iter()
                .map(|count| line_counts::upsert_values(&plan.table, count))
                .collect();
            let what = || format!("the line counts of {}", plan.table);
            upsert(tx, (prefix, suffix, *width), values, budget, what).await?;
        }
        Ok(())
    }
}
