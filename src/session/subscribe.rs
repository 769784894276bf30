//! Changefeeds in a session. `DECLARE c CURSOR FOR SUBSCRIBE v` opens a
//! subscription on view `v`; `FETCH n c` returns up to n rows that are
//! there, waiting for the first one (up to its `timeout`, or until one
//! comes); `CLOSE c` ends it. `COPY (SUBSCRIBE v) TO STDOUT` streams the
//! same rows until cancelled. Each row is `epoch, diff, <v's columns>`:
//! first the rows at the subscription's epoch (diff +1, unless WITH
//! (SNAPSHOT = false)), then each commit's changes in commit order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::connectors::view_result::{
    Change, RowBatches, SubscriberQueue, Subscribing, ViewResult,
};
use crate::error::{sqlstate, Result, WeirError};
use crate::sql::subscribe::Subscribe;

pub struct SubscribeCursor {
    schema: SchemaRef,
    /// The snapshot's rows not read yet, and its epoch.
    snapshot: Option<(u64, RowBatches)>,
    queue: Arc<SubscriberQueue>,
    /// Rows taken from the queue or snapshot but not fetched yet.
    pending: VecDeque<RecordBatch>,
}

/// `epoch, diff` and then the view's columns.
pub fn cursor_schema(view: &Schema) -> Result<SchemaRef> {
    let mut fields = vec![
        Field::new("epoch", DataType::Int64, false),
        Field::new("diff", DataType::Int64, false),
    ];
    for field in view.fields() {
        if matches!(field.name().as_str(), "epoch" | "diff") {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_COLUMN,
                format!(
                    "the view has a column \"{}\", which SUBSCRIBE adds",
                    field.name()
                ),
            )
            .with_hint("Rename the view's column (SELECT … AS another_name)."));
        }
        fields.push(field.as_ref().clone().with_nullable(true));
    }
    Ok(Arc::new(Schema::new(fields)))
}

impl SubscribeCursor {
    /// Subscribes to `view`, between two of its commits.
    pub async fn open(
        view: Arc<ViewResult>,
        subscribe: &Subscribe,
        limit_bytes: usize,
    ) -> Result<Self> {
        let schema = cursor_schema(&view.schema())?;
        let subscription = match view.subscribe(limit_bytes) {
            Subscribing::Now(subscription) => subscription?,
            Subscribing::AfterCommit(waiting) => waiting.await.map_err(|_| {
                WeirError::new(
                    sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                    "the view went away before the subscription started",
                )
            })??,
        };
        Ok(SubscribeCursor {
            schema,
            snapshot: subscribe
                .snapshot
                .then_some((subscription.epoch, subscription.snapshot)),
            queue: subscription.changes,
            pending: VecDeque::new(),
        })
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Up to `count` rows there now (None: all of them), without waiting.
    fn take_now(&mut self, count: Option<u64>) -> Result<Vec<RecordBatch>> {
        let mut wanted = count.map_or(usize::MAX, |count| count as usize);
        let mut taken = Vec::new();
        while wanted > 0 {
            let Some(batch) = self.next_batch()? else {
                break;
            };
            if batch.num_rows() > wanted {
                self.pending
                    .push_front(batch.slice(wanted, batch.num_rows() - wanted));
                taken.push(batch.slice(0, wanted));
                break;
            }
            wanted -= batch.num_rows();
            taken.push(batch);
        }
        Ok(taken)
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(batch) = self.pending.pop_front() {
            return Ok(Some(batch));
        }
        if let Some((epoch, rows)) = &mut self.snapshot {
            let epoch = *epoch;
            match rows.next().transpose()? {
                Some(batch) => {
                    let ones = Int64Array::from(vec![1; batch.num_rows()]);
                    return self.output(epoch, &batch, ones).map(Some);
                }
                None => self.snapshot = None,
            }
        }
        for Change { epoch, rows, diffs } in self.queue.take()? {
            let batch = self.output(epoch, &rows, diffs)?;
            self.pending.push_back(batch);
        }
        Ok(self.pending.pop_front())
    }

    fn output(&self, epoch: u64, rows: &RecordBatch, diffs: Int64Array) -> Result<RecordBatch> {
        let epochs = Int64Array::from(vec![epoch as i64; rows.num_rows()]);
        let mut columns: Vec<ArrayRef> = vec![Arc::new(epochs), Arc::new(diffs)];
        columns.extend(rows.columns().iter().cloned());
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// FETCH: up to `count` rows; waits for a first one until `timeout`
    /// (None: until one comes).
    pub async fn fetch(
        &mut self,
        count: Option<u64>,
        timeout: Option<Duration>,
    ) -> Result<Vec<RecordBatch>> {
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        loop {
            let rows = self.take_now(count)?;
            if !rows.is_empty() || count == Some(0) {
                return Ok(rows);
            }
            let queue = self.queue.clone();
            match deadline {
                None => queue.wait().await,
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || tokio::time::timeout(left, queue.wait()).await.is_err() {
                        return self.take_now(count);
                    }
                }
            }
        }
    }
}
