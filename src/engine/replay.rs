//! Recovery's replay: every table's rows after the checkpoint's offset for
//! it, pushed through the views in the order their write groups reached
//! the views (`stream::commit_order`), a group at a time, so a view reading
//! several tables sees them interleaved as it did before: a lookup join's
//! stream rows meet the table as they met it, and what is downstream of it
//! comes back as it was. Rows no logged group names (written before the
//! order was logged) follow, table by table.

use std::collections::BTreeMap;

use super::Engine;
use crate::catalog::RelationKind;
use crate::connectors::table::History;
use crate::error::{sqlstate, Result, WeirError};
use crate::stream::commit_order;
use crate::stream::dataflow::Dataflow;

/// A table's history being replayed, and how many of its rows the groups
/// replayed so far took beyond what they logged (an entry is pushed whole).
struct Replaying {
    history: History,
    ahead: u64,
}

impl Replaying {
    /// Pushes the table's next `rows` rows (whole entries) through the
    /// views.
    fn push(&mut self, table: &str, rows: u64, flow: &mut Dataflow) -> Result<()> {
        let wanted = rows.saturating_sub(self.ahead);
        self.ahead = self.ahead.saturating_sub(rows);
        let mut pushed = 0;
        while pushed < wanted {
            let Some(messages) = self.history.next() else {
                break;
            };
            let messages = messages?;
            pushed += messages.iter().map(|m| m.num_rows() as u64).sum::<u64>();
            flow.push(table, messages)?;
        }
        self.ahead += pushed.saturating_sub(wanted);
        Ok(())
    }
}

impl Engine {
    /// Pushes every table's rows after the dataflow's offset for it, in
    /// the logged order of their groups; returns the rows replayed.
    pub(super) fn replay_tables(&self, flow: &mut Dataflow) -> Result<u64> {
        let mut tables = BTreeMap::new();
        for definition in self.catalog.definitions() {
            if definition.kind != RelationKind::Table || !flow.has_readers(&definition.name) {
                continue;
            }
            let Some(log) = self.catalog.table(&definition.name) else {
                continue;
            };
            let offset = flow.offset(&definition.name);
            let total = log.row_count();
            if offset > total {
                return Err(WeirError::new(
                    sqlstate::DATA_CORRUPTED,
                    format!(
                        "the checkpoint has seen {offset} rows of {} but it has {total}",
                        definition.name
                    ),
                ));
            }
            let replaying = Replaying {
                history: log.history_from(offset)?,
                ahead: 0,
            };
            tables.insert(definition.id, (definition.name, replaying, total - offset));
        }
        let by_name: BTreeMap<String, u64> = tables
            .iter()
            .map(|(id, (name, _, _))| (name.clone(), *id))
            .collect();
        let store = self.catalog.store().clone();
        for (sequence, order) in commit_order::after(&*store, flow.commit_sequence())? {
            for (table, rows) in order {
                let Some((name, replaying, _)) =
                    by_name.get(&table).and_then(|id| tables.get_mut(id))
                else {
                    continue;
                };
                replaying.push(name, rows, flow)?;
            }
            flow.flush()?;
            flow.commit_group();
            flow.set_commit_sequence(sequence);
        }
        let mut replayed = 0;
        for (name, mut replaying, rows) in tables.into_values() {
            replaying.push(&name, u64::MAX, flow)?;
            flow.flush()?;
            flow.commit_group();
            flow.advance_offset(&name, rows);
            replayed += rows;
        }
        Ok(replayed)
    }
}
