//! The changefeed statements of a session: subscription cursors by name
//! (they live until CLOSE or the end of the session, in or out of a
//! transaction block), FETCH from them, and COPY (SUBSCRIBE …) TO STDOUT.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::datatypes::Schema;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

use super::subscribe::{cursor_schema, SubscribeCursor};
use super::{Action, CommandDone, Outcome, Prepared, Session};
use crate::connectors::pg_copy::CopyOptions;
use crate::error::{sqlstate, Result, WeirError};
use crate::sql::subscribe::{Changefeed, Subscribe};

type Cursor = Arc<tokio::sync::Mutex<SubscribeCursor>>;

#[derive(Default)]
pub struct Cursors {
    open: Mutex<HashMap<String, Cursor>>,
}

impl Cursors {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cursor>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, name: &str) -> Result<Cursor> {
        self.lock().get(name).cloned().ok_or_else(|| {
            WeirError::new(
                sqlstate::INVALID_CURSOR_NAME,
                format!("cursor \"{name}\" does not exist"),
            )
            .with_hint("DECLARE name CURSOR FOR SUBSCRIBE view opens one.")
        })
    }
}

/// COPY (SUBSCRIBE …) TO STDOUT: the subscription and how to write rows.
pub struct CopySubscription {
    pub cursor: SubscribeCursor,
    pub options: CopyOptions,
}

impl CopySubscription {
    /// The rows there now or within a second, as COPY lines.
    pub async fn next_lines(&mut self) -> Result<Vec<String>> {
        let batches = self
            .cursor
            .fetch(None, Some(Duration::from_secs(1)))
            .await?;
        let mut lines = Vec::new();
        for batch in batches {
            lines.extend(crate::connectors::pg_copy::encode_rows(
                &batch,
                &self.options,
            )?);
        }
        Ok(lines)
    }

    pub fn columns(&self) -> usize {
        self.cursor.schema().fields().len()
    }
}

impl Session {
    pub(super) async fn prepare_changefeed(&self, changefeed: Changefeed) -> Result<Prepared> {
        let result_schema = match &changefeed {
            Changefeed::Subscribe(_) => return Err(WeirError::unsupported(
                "SUBSCRIBE on its own never completes, so clients would wait forever",
            )
            .with_hint(
                "Use DECLARE c CURSOR FOR SUBSCRIBE v, then FETCH 100 c WITH (timeout = '1s'); \
                     in psql, COPY (SUBSCRIBE v) TO STDOUT shows rows as they come.",
            )),
            Changefeed::Fetch { cursor, .. } => self.cursors.get(cursor)?.lock().await.schema(),
            Changefeed::Declare { subscribe, .. } | Changefeed::Copy { subscribe, .. } => {
                let view = self.subscribed_view(subscribe)?;
                cursor_schema(&view.schema())?;
                Arc::new(Schema::empty())
            }
            Changefeed::Close { .. } => Arc::new(Schema::empty()),
        };
        Ok(Prepared {
            sql: String::new(),
            action: Action::Changefeed(changefeed),
            parameter_types: Vec::new(),
            result_schema,
            stream_options: None,
            insert_template: Default::default(),
            on_conflict: None,
        })
    }

    fn subscribed_view(
        &self,
        subscribe: &Subscribe,
    ) -> Result<Arc<crate::connectors::view_result::ViewResult>> {
        let relations = self.engine.relations();
        if let Some(view) = relations.view_result(&subscribe.view) {
            return Ok(view);
        }
        match relations.table(&subscribe.view) {
            Some(_) => Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!(
                    "\"{}\" is a table: SUBSCRIBE reads materialized views",
                    subscribe.view
                ),
            )
            .with_hint(format!(
                "CREATE MATERIALIZED VIEW {0}_feed AS SELECT * FROM {0}, then SUBSCRIBE to it.",
                subscribe.view
            ))),
            None => Err(WeirError::new(
                sqlstate::UNDEFINED_TABLE,
                format!("materialized view \"{}\" does not exist", subscribe.view),
            )),
        }
    }

    async fn open_cursor(&self, subscribe: &Subscribe) -> Result<SubscribeCursor> {
        let view = self.subscribed_view(subscribe)?;
        let limit = self.settings().subscribe_queue_limit_bytes()?;
        SubscribeCursor::open(view, subscribe, limit).await
    }

    pub(super) async fn execute_changefeed(&self, changefeed: &Changefeed) -> Result<Outcome> {
        match changefeed {
            Changefeed::Subscribe(_) => Err(WeirError::internal("SUBSCRIBE was not prepared")),
            Changefeed::Declare { cursor, subscribe } => {
                if self.cursors.lock().contains_key(cursor) {
                    return Err(WeirError::new(
                        sqlstate::DUPLICATE_CURSOR,
                        format!("cursor \"{cursor}\" already exists"),
                    )
                    .with_hint(format!("CLOSE {cursor} first, or choose another name.")));
                }
                let opened = self.open_cursor(subscribe).await?;
                let opened = Arc::new(tokio::sync::Mutex::new(opened));
                self.cursors.lock().insert(cursor.clone(), opened);
                Ok(Outcome::Done(CommandDone::new("DECLARE CURSOR")))
            }
            Changefeed::Fetch {
                cursor,
                count,
                timeout_ms,
            } => {
                let cursor = self.cursors.get(cursor)?;
                let mut cursor = cursor.lock().await;
                let timeout = timeout_ms.map(Duration::from_millis);
                let batches = cursor.fetch(*count, timeout).await?;
                let rows = futures::stream::iter(batches.into_iter().map(Ok));
                Ok(Outcome::Rows(Box::pin(RecordBatchStreamAdapter::new(
                    cursor.schema(),
                    rows,
                ))))
            }
            Changefeed::Close { cursor: None } => {
                self.cursors.lock().clear();
                Ok(Outcome::Done(CommandDone::new("CLOSE CURSOR ALL")))
            }
            Changefeed::Close {
                cursor: Some(cursor),
            } => match self.cursors.lock().remove(cursor) {
                Some(_) => Ok(Outcome::Done(CommandDone::new("CLOSE CURSOR"))),
                None => Err(WeirError::new(
                    sqlstate::INVALID_CURSOR_NAME,
                    format!("cursor \"{cursor}\" does not exist"),
                )),
            },
            Changefeed::Copy { subscribe, copy } => {
                let options = super::utility::copy_to_options(copy)?;
                let cursor = self.open_cursor(subscribe).await?;
                Ok(Outcome::CopySubscribe(CopySubscription { cursor, options }))
            }
        }
    }
}
