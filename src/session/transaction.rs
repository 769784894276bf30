//! Transaction blocks. Writes inside BEGIN … COMMIT wait in the session's
//! `PendingWrites` and COMMIT applies them all at once (one group commit:
//! all or nothing, durable before COMMIT returns); ROLLBACK drops them.
//! SAVEPOINT, RELEASE and ROLLBACK TO work on positions in that list. An
//! error aborts the block as in Postgres: later statements get 25P02 until
//! ROLLBACK (or ROLLBACK TO a savepoint), and COMMIT then rolls back.
//!
//! Two limits, each an error rather than a surprise: a query cannot read a
//! relation the block has uncommitted rows for (weir does not overlay a
//! block's own rows on what it reads), and DDL takes effect when it runs —
//! ROLLBACK warns that it did not undo it. docs/sql-reference.md.

use std::collections::BTreeSet;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::LogicalPlan;

use super::{Action, Session, Utility};
use crate::catalog::{side_output_name, RelationDefinition};
use crate::engine::{CommandDone, Notice};
use crate::error::{sqlstate, Result, WeirError};

/// What the server reports in ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionStatus {
    Idle,
    InBlock,
    /// An error aborted the block.
    Failed,
}

#[derive(Debug, Default)]
pub(super) struct TransactionBlock {
    status: Option<BlockState>,
    /// Savepoints, oldest first: name and the pending writes' mark.
    savepoints: Vec<(String, usize)>,
    /// Tags of the DDL statements run in the block.
    ddl: Vec<String>,
}

/// An open block: going on, or aborted by an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockState {
    Open,
    Aborted,
}

impl Session {
    pub fn transaction_status(&self) -> TransactionStatus {
        match self.transaction().status {
            None => TransactionStatus::Idle,
            Some(BlockState::Open) => TransactionStatus::InBlock,
            Some(BlockState::Aborted) => TransactionStatus::Failed,
        }
    }

    /// A statement failed: an open block is aborted.
    pub fn statement_failed(&self) {
        let mut block = self.transaction();
        if block.status.is_some() {
            block.status = Some(BlockState::Aborted);
        }
    }

    /// In an aborted block only COMMIT, ROLLBACK and ROLLBACK TO run.
    pub(super) fn refuse_if_aborted(&self, action: &Action) -> Result<()> {
        if self.transaction_status() != TransactionStatus::Failed {
            return Ok(());
        }
        let ends_block = matches!(
            action,
            Action::Utility(Utility::Commit | Utility::Rollback | Utility::RollbackTo { .. })
        );
        if ends_block {
            return Ok(());
        }
        Err(WeirError::new(
            sqlstate::IN_FAILED_SQL_TRANSACTION,
            "current transaction is aborted, commands ignored until end of transaction block",
        )
        .with_hint("ROLLBACK (or ROLLBACK TO a savepoint) to go on."))
    }

    /// Records a DDL statement run inside a block (ROLLBACK cannot undo it).
    pub(super) fn note_ddl(&self, done: &CommandDone) {
        let mut block = self.transaction();
        if block.status.is_some() {
            block.ddl.push(done.tag.clone());
        }
    }

    pub(super) fn begin(&self) -> CommandDone {
        let mut block = self.transaction();
        if block.status.is_some() {
            return CommandDone::new("BEGIN").with_notice(Notice::warning(
                "there is already a transaction in progress",
            ));
        }
        *block = TransactionBlock {
            status: Some(BlockState::Open),
            ..TransactionBlock::default()
        };
        self.pending.activate();
        CommandDone::new("BEGIN")
    }

    /// COMMIT: the block's writes, all at once; an aborted block rolls back.
    pub(super) async fn commit(&self) -> Result<CommandDone> {
        let status = std::mem::take(&mut *self.transaction()).status;
        match status {
            None => Ok(CommandDone::new("COMMIT")
                .with_notice(Notice::warning("there is no transaction in progress"))),
            Some(BlockState::Aborted) => {
                self.pending.discard();
                Ok(CommandDone::new("ROLLBACK"))
            }
            Some(BlockState::Open) => {
                let written = self.pending.commit(Some(&self.gate)).await;
                self.pending.discard();
                if written.is_err() {
                    self.engine.repair_views().await;
                }
                written.map(|_| CommandDone::new("COMMIT"))
            }
        }
    }

    pub(super) fn rollback(&self) -> CommandDone {
        let block = std::mem::take(&mut *self.transaction());
        self.pending.discard();
        let done = CommandDone::new("ROLLBACK");
        if block.status.is_none() {
            return done.with_notice(Notice::warning("there is no transaction in progress"));
        }
        if block.ddl.is_empty() {
            return done;
        }
        let statements: BTreeSet<String> = block.ddl.into_iter().collect();
        let statements: Vec<String> = statements.into_iter().collect();
        done.with_notice(Notice::warning(&format!(
            "ROLLBACK did not undo {} run in this transaction block: \
             weir applies DDL when it runs",
            statements.join(", ")
        )))
    }

    pub(super) fn savepoint(&self, name: &str) -> Result<CommandDone> {
        let mark = self.pending.mark();
        let mut block = self.transaction();
        if block.status.is_none() {
            return Err(outside_block("SAVEPOINT"));
        }
        block.savepoints.push((name.to_string(), mark));
        Ok(CommandDone::new("SAVEPOINT"))
    }

    /// RELEASE: forgets the savepoint and every later one; writes stay.
    pub(super) fn release(&self, name: &str) -> Result<CommandDone> {
        let mut block = self.transaction();
        if block.status.is_none() {
            return Err(outside_block("RELEASE SAVEPOINT"));
        }
        let position = find_savepoint(&block.savepoints, name)?;
        block.savepoints.truncate(position);
        Ok(CommandDone::new("RELEASE"))
    }

    /// ROLLBACK TO: drops the writes since the savepoint, which stays;
    /// an aborted block is open again.
    pub(super) fn rollback_to(&self, name: &str) -> Result<CommandDone> {
        let mut block = self.transaction();
        if block.status.is_none() {
            return Err(outside_block("ROLLBACK TO SAVEPOINT"));
        }
        let position = find_savepoint(&block.savepoints, name)?;
        let mark = block.savepoints[position].1;
        block.savepoints.truncate(position + 1);
        block.status = Some(BlockState::Open);
        self.pending.truncate(mark);
        Ok(CommandDone::new("ROLLBACK"))
    }

    /// A plan may not read what the block has uncommitted rows for: the
    /// tables written and every view over them.
    pub(super) fn check_reads(&self, plan: &LogicalPlan) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let affected = dependents_of(
            self.pending.tables(),
            &self.engine.relations().definitions(),
        );
        let mut read = None;
        plan.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = node {
                let name = crate::catalog::reference_key(&scan.table_name);
                if affected.contains(&name) {
                    read = Some(name);
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        match read {
            None => Ok(()),
            Some(name) => Err(WeirError::unsupported(format!(
                "cannot read \"{name}\" while this transaction block has uncommitted rows for it"
            ))
            .with_hint(
                "weir applies a block's writes at COMMIT and does not show them before: \
                 COMMIT first, or read before writing.",
            )),
        }
    }
}

/// `names` and every relation reading them, directly or through others
/// (with a materialized view, its side output `<view>_late`).
fn dependents_of(names: Vec<String>, definitions: &[RelationDefinition]) -> Vec<String> {
    let mut affected = names;
    let mut index = 0;
    while index < affected.len() {
        for definition in definitions {
            let reads = definition.depends_on.contains(&affected[index]);
            if reads && !affected.contains(&definition.name) {
                affected.push(definition.name.clone());
                if definition.side_output_id.is_some() {
                    affected.push(side_output_name(&definition.name));
                }
            }
        }
        index += 1;
    }
    affected
}

fn outside_block(statement: &str) -> WeirError {
    WeirError::new(
        sqlstate::NO_ACTIVE_SQL_TRANSACTION,
        format!("{statement} can only be used in transaction blocks"),
    )
    .with_hint("BEGIN starts one.")
}

/// The most recent savepoint called `name` (Postgres allows repeats).
fn find_savepoint(savepoints: &[(String, usize)], name: &str) -> Result<usize> {
    savepoints
        .iter()
        .rposition(|(saved, _)| saved == name)
        .ok_or_else(|| {
            WeirError::new(
                sqlstate::INVALID_SAVEPOINT_SPECIFICATION,
                format!("savepoint \"{name}\" does not exist"),
            )
        })
}
