//! The rows of a materialized view in the state store, in one of three
//! layouts chosen when the view is created and kept in its head. A view
//! that only ever adds rows keeps an append-only log of Arrow batches
//! (`log`); a GROUP BY view whose rows are updated keeps them by key in
//! sorted runs (`keyed`, `runs`); any other keeps its distinct rows with
//! their counts, as sorted runs of count changes (`counted`). Views created
//! before the counted layout keep a multiset (row -> count), one entry per
//! distinct row keyed by the row in Arrow's row format (`multiset`). None
//! is held in memory beyond a statement's changes: a query streams the
//! rows from the store. For the multiset each
//! commit is an epoch; a stored row keeps its count per epoch while a
//! reader may need it (`versions`), so a query sees exactly one commit's
//! rows; a log reader reads the entries committed when it started, a keyed
//! reader the runs committed then. The state envelope's format version pins
//! the row encoding (docs/decisions.md). `provider` is the DataFusion face.

mod counted;
mod feed;
mod keyed;
mod log;
mod multiset;
mod provider;
mod scan;
mod versions;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use serde::{Deserialize, Serialize};

use crate::connectors::sink::Outbox;
use crate::error::{sqlstate, Result, WeirError};
use crate::state::runs::Run;
use crate::state::{key, StateStore, WriteBatch};
use crate::stream::message::Chunk;
use crate::stream::ViewSink;
pub use feed::{Change, Queue as SubscriberQueue};
use log::LogPosition;
pub use provider::MaterializedViewTable;
pub use scan::{RowBatches, ViewRows};
use versions::Versions;

pub struct ViewResult {
    id: u64,
    schema: SchemaRef,
    layout: RowLayout,
    converter: RowConverter,
    /// The key columns' converter (keyed layout).
    key_converter: Option<RowConverter>,
    /// The keyed layout's runs.
    runs: Arc<Mutex<keyed::KeyedRuns>>,
    store: Arc<dyn StateStore>,
    /// Changes applied but not yet committed (row -> count change, and the
    /// change in the total); queries see them once `publish` runs.
    staged: Mutex<Staged>,
    readers: Arc<Readers>,
    /// Where the log layout stands as of the last commit.
    log_position: Arc<Mutex<LogPosition>>,
    /// The last committed log entry's rows while it is small enough to
    /// take more (see `log`).
    log_tail: Mutex<Option<datafusion::arrow::record_batch::RecordBatch>>,
    /// Rows (with repeats) as of the committed epoch.
    total_rows: AtomicI64,
    /// The view's output watermark, when its rows are final (EMIT ON
    /// WINDOW CLOSE) and keep a watermark column.
    watermark: Mutex<Option<i64>>,
    /// Rows dropped as late by this view's operators.
    pub late_rows: Arc<AtomicU64>,
    /// Bytes of memory the view's operator state held at the last
    /// checkpoint (`weir_catalog.materialized_views`).
    pub state_memory_bytes: AtomicU64,
    /// Row changes committed since the server started (`/metrics`).
    changes_committed: AtomicU64,
    /// The subscribers to the view's changes (SUBSCRIBE).
    feed: feed::Feed,
    waiting_subscribers: Mutex<WaitingSubscribers>,
    /// The outboxes of the sinks that ship the view's changes: each commit's
    /// changes are written to them in the same commit.
    outboxes: Mutex<Vec<Arc<Outbox>>>,
}

/// How a subscription starts: at once, or when the commit being staged
/// is committed or discarded.
pub enum Subscribing {
    Now(Result<Subscription>),
    AfterCommit(tokio::sync::oneshot::Receiver<Result<Subscription>>),
}

/// Subscriptions waiting for a commit to end, with their queue limits.
type WaitingSubscribers = Vec<(usize, tokio::sync::oneshot::Sender<Result<Subscription>>)>;

/// A new subscriber's start: the rows at `epoch`, then the changes after.
pub struct Subscription {
    pub epoch: u64,
    pub snapshot: RowBatches,
    pub changes: Arc<SubscriberQueue>,
}

#[derive(Default)]
struct Staged {
    /// Something was applied since the last commit.
    changed: bool,
    /// Log entries staged (log layout).
    entries: u64,
    /// The log's last entry as staged: its sequence number and rows.
    tail: Option<(u64, datafusion::arrow::record_batch::RecordBatch)>,
    /// Count change by row; empty once `in_store` (multiset layout).
    rows: BTreeMap<Vec<u8>, i64>,
    /// The statement's changes by key (keyed layout).
    keyed: keyed::KeyedStaged,
    total: i64,
    /// Row changes staged (each row of an applied chunk).
    changes: u64,
    /// The statement's versions are in the store (spilled): a row's running
    /// count is its version at `epoch` there, and changes go straight to
    /// the store, so memory holds no per-row state of a big statement.
    in_store: bool,
    /// The epoch the staged versions are written at.
    epoch: u64,
    /// Versions of `epoch` may be in the store before the commit (spilled),
    /// so the epoch is reserved durably and becomes aborted if discarded.
    reserved: bool,
}

/// The committed epoch and the epochs queries are reading at.
#[derive(Default)]
pub struct Readers {
    state: Mutex<ReaderState>,
}

#[derive(Default)]
struct ReaderState {
    committed: u64,
    /// Epochs whose versions were staged and never committed.
    aborted: Arc<Vec<u64>>,
    reading: BTreeMap<u64, usize>,
}

impl ReaderState {
    /// The epoch the next commit writes at: never one used before.
    fn next_epoch(&self) -> u64 {
        let highest_aborted = self.aborted.iter().max().copied().unwrap_or(0);
        self.committed.max(highest_aborted) + 1
    }
}

/// A query reading at an epoch; the epoch's versions stay while it lives.
pub struct ReadGuard {
    readers: Arc<Readers>,
    pub epoch: u64,
    pub aborted: Arc<Vec<u64>>,
}

impl Readers {
    fn lock(&self) -> std::sync::MutexGuard<'_, ReaderState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn begin(self: &Arc<Self>) -> ReadGuard {
        let mut state = self.lock();
        let epoch = state.committed;
        *state.reading.entry(epoch).or_insert(0) += 1;
        ReadGuard {
            readers: self.clone(),
            epoch,
            aborted: state.aborted.clone(),
        }
    }

    /// What a write needs to know: the committed epoch, the oldest epoch
    /// anyone may read at, the aborted epochs and the epoch to write at.
    fn for_write(&self) -> (u64, u64, Arc<Vec<u64>>, u64) {
        let state = self.lock();
        let oldest = state.reading.keys().next().copied();
        (
            state.committed,
            oldest.map_or(state.committed, |o| o.min(state.committed)),
            state.aborted.clone(),
            state.next_epoch(),
        )
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        let mut state = self.readers.lock();
        if let Some(count) = state.reading.get_mut(&self.epoch) {
            *count -= 1;
            if *count == 0 {
                state.reading.remove(&self.epoch);
            }
        }
    }
}

/// How a view's rows are stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RowLayout {
    /// Row -> count versions, one entry per row: views whose rows are
    /// retracted, created before the counted layout.
    #[default]
    Multiset,
    /// Batches in emit order, for views that only add rows.
    Log,
    /// Key -> row, for views whose rows are retracted and identified by
    /// these columns (a GROUP BY's), each key's change one retraction and
    /// one insertion: one stored entry per key (`keyed`).
    Keyed(Vec<usize>),
    /// Row -> count as sorted runs of count changes, for views whose rows
    /// are retracted and have no key (`counted`).
    Counted,
}

impl RowLayout {
    /// The name `weir_catalog.materialized_views` shows.
    pub fn name(&self) -> &'static str {
        match self {
            RowLayout::Multiset => "multiset",
            RowLayout::Log => "log",
            RowLayout::Keyed(_) => "keyed",
            RowLayout::Counted => "counted",
        }
    }

    /// Whether the rows are kept as sorted runs (`runs`).
    pub fn has_runs(&self) -> bool {
        matches!(self, RowLayout::Keyed(_) | RowLayout::Counted)
    }

    /// Whether the view's rows can be retracted.
    pub fn retracts(&self) -> bool {
        !matches!(self, RowLayout::Log)
    }
}

/// What the store holds about a view's rows as a whole.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ViewHead {
    /// Absent in heads written before the log layout.
    #[serde(default)]
    layout: RowLayout,
    /// Committed entries of the log layout.
    #[serde(default)]
    entries: u64,
    /// Rows of the last entry that are committed (it may hold more, written
    /// by a statement that then failed); None: all of them.
    #[serde(default)]
    last_entry_rows: Option<u64>,
    /// The last committed epoch.
    epoch: u64,
    rows: i64,
    /// Epochs staged by statements that failed; their versions are ignored.
    #[serde(default)]
    aborted: Vec<u64>,
    /// An epoch reserved by a statement that spilled versions and had not
    /// committed; found on open, it was aborted by a crash.
    #[serde(default)]
    pending: Option<u64>,
    /// The keyed layout's runs, oldest first.
    #[serde(default)]
    runs: Vec<Run>,
    /// The keyed layout's next run id.
    #[serde(default)]
    next_run: u64,
    /// Runs merged away and not yet deleted (readers held them): the next
    /// commit after a restart deletes them.
    #[serde(default)]
    retired: Vec<Run>,
}

impl fmt::Debug for ViewResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ViewResult").field("id", &self.id).finish()
    }
}

pub fn view_rows_prefix(view_id: u64) -> Vec<u8> {
    let mut prefix = key(&[b"viewrows", &view_id.to_be_bytes()]);
    prefix.push(b'/');
    prefix
}

/// Past every row key of the view.
fn view_rows_end(view_id: u64) -> Vec<u8> {
    let mut end = key(&[b"viewrows", &view_id.to_be_bytes()]);
    end.push(b'/' + 1);
    end
}

pub fn view_head_key(view_id: u64) -> Vec<u8> {
    key(&[b"viewhead", &view_id.to_be_bytes()])
}

impl ViewResult {
    /// Opens a view's result: its head only. A view without a head is new
    /// and gets `layout`, unless it has rows stored before heads existed
    /// (a multiset, counted once).
    pub fn open(
        id: u64,
        schema: SchemaRef,
        layout: RowLayout,
        store: Arc<dyn StateStore>,
    ) -> Result<Self> {
        let fields = schema
            .fields()
            .iter()
            .map(|field| SortField::new(field.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)?;
        let head: ViewHead = match store.get(&view_head_key(id))? {
            Some(value) => serde_json::from_slice(&value).map_err(|error| {
                WeirError::new(
                    sqlstate::DATA_CORRUPTED,
                    format!("materialized view {id}: its head cannot be decoded: {error}"),
                )
            })?,
            None => count_legacy_rows(&*store, id)?.unwrap_or(ViewHead {
                layout,
                ..ViewHead::default()
            }),
        };
        let readers = Arc::new(Readers::default());
        {
            let mut state = readers.lock();
            state.committed = head.epoch;
            let mut aborted = head.aborted.clone();
            aborted.extend(head.pending);
            state.aborted = Arc::new(aborted);
        }
        let position = LogPosition {
            entries: head.entries,
            last_entry_rows: head.last_entry_rows,
        };
        let key_converter = match &head.layout {
            RowLayout::Keyed(columns) => Some(keyed::key_converter(&schema, columns)?),
            _ => None,
        };
        let runs = keyed::KeyedRuns::open(&*store, id, &head)?;
        Ok(ViewResult {
            id,
            key_converter,
            runs: Arc::new(Mutex::new(runs)),
            log_position: Arc::new(Mutex::new(position)),
            log_tail: Mutex::new(log::load_tail(&*store, id, &schema, position)?),
            schema,
            layout: head.layout,
            converter,
            store,
            staged: Mutex::new(Staged::default()),
            readers,
            total_rows: AtomicI64::new(head.rows),
            watermark: Mutex::new(None),
            late_rows: Arc::new(AtomicU64::new(0)),
            state_memory_bytes: AtomicU64::new(0),
            changes_committed: AtomicU64::new(0),
            feed: feed::Feed::default(),
            waiting_subscribers: Mutex::new(Vec::new()),
            outboxes: Mutex::new(Vec::new()),
        })
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub fn layout(&self) -> &RowLayout {
        &self.layout
    }

    /// The write of the committed head: part of a new view's first commit,
    /// so its layout is fixed before any rows are.
    pub fn head_write(&self) -> Result<WriteBatch> {
        let state = self.readers.lock();
        let position = self.log_position();
        let retired = self.retired_runs();
        let head = ViewHead {
            layout: self.layout.clone(),
            entries: position.entries,
            last_entry_rows: position.last_entry_rows,
            epoch: state.committed,
            rows: self.total_rows.load(Ordering::Acquire),
            aborted: state.aborted.to_vec(),
            pending: None,
            runs: self.committed_runs(),
            next_run: self.keyed_runs().next_run,
            retired,
        };
        let mut writes = WriteBatch::new();
        writes.put(view_head_key(self.id), encode_head(&head)?);
        Ok(writes)
    }

    /// Stages a chunk of changes; returns the writes that make them durable
    /// (the rows at the next epoch or entry, and the head that commits
    /// them). Queries see them after `publish`, once those are committed.
    pub fn apply(&self, chunk: &Chunk) -> Result<WriteBatch> {
        if chunk.num_rows() == 0 {
            return Ok(WriteBatch::new());
        }
        {
            let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
            staged.changes += chunk.num_rows() as u64;
            // Under the staged lock, so a subscriber comes in before the
            // commit's first chunk or after its publication (`subscribe`).
            staged.changed = true;
            self.feed.stage(chunk);
        }
        let mut writes = match &self.layout {
            RowLayout::Multiset => self.apply_multiset(chunk)?,
            RowLayout::Log => self.apply_log(chunk)?,
            RowLayout::Keyed(columns) => self.apply_keyed(chunk, columns)?,
            RowLayout::Counted => self.apply_counted(chunk)?,
        };
        for outbox in self.outboxes().iter() {
            writes.extend(outbox.stage(chunk)?);
        }
        Ok(writes)
    }

    fn outboxes(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Outbox>>> {
        self.outboxes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From the next commit on, the view's changes go to `outbox` too.
    /// (Attach between commits: the caller holds the dataflow.)
    pub fn attach_outbox(&self, outbox: Arc<Outbox>) {
        let mut outboxes = self.outboxes();
        if !outboxes.iter().any(|o| Arc::ptr_eq(o, &outbox)) {
            outboxes.push(outbox);
        }
    }

    /// The view's changes no longer go to `outbox`.
    pub fn detach_outbox(&self, outbox: &Arc<Outbox>) {
        self.outboxes().retain(|o| !Arc::ptr_eq(o, outbox));
    }

    /// The staged versions were written to the store (after `reserve`):
    /// from now on the store holds this statement's running counts.
    pub fn spilled(&self) {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        self.spilled_keyed(&mut staged);
        if staged.reserved {
            staged.in_store = true;
            staged.rows = BTreeMap::new();
        }
    }

    /// Before staged row versions go to the store ahead of their commit:
    /// the write that reserves their epoch (commit it durably first), or
    /// None when it is reserved already or nothing is staged.
    pub fn reserve(&self) -> Result<Option<WriteBatch>> {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        // A log's entries past the committed count are never read.
        if !staged.changed || staged.reserved || self.layout == RowLayout::Log {
            return Ok(None);
        }
        staged.reserved = true;
        let state = self.readers.lock();
        let retired = self.retired_runs();
        let head = ViewHead {
            layout: self.layout.clone(),
            epoch: state.committed,
            rows: self.total_rows.load(Ordering::Acquire),
            aborted: state.aborted.to_vec(),
            pending: Some(staged.epoch),
            runs: self.committed_runs(),
            // Found on open, `pending` says runs from this id on may be in
            // the store, left by a statement a crash ended.
            next_run: self.keyed_runs().next_run,
            retired,
            ..ViewHead::default()
        };
        let mut writes = WriteBatch::new();
        writes.put(view_head_key(self.id), encode_head(&head)?);
        Ok(Some(writes))
    }

    /// The staged changes are committed: queries see them from now on.
    pub fn publish(&self) {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        if !staged.changed {
            return;
        }
        let taken = std::mem::take(&mut *staged);
        self.total_rows.fetch_add(taken.total, Ordering::AcqRel);
        self.changes_committed
            .fetch_add(taken.changes, Ordering::Relaxed);
        match self.layout {
            RowLayout::Multiset => self.readers.lock().committed = taken.epoch,
            RowLayout::Keyed(_) | RowLayout::Counted => {
                self.readers.lock().committed = taken.epoch;
                self.publish_keyed(taken);
            }
            RowLayout::Log => self.publish_log(taken.entries, taken.tail),
        }
        self.feed.publish();
        self.outboxes().iter().for_each(|outbox| outbox.publish());
        self.admit_waiting_subscribers();
        drop(staged);
    }

    /// The staged changes were not committed: forget them (and never read
    /// versions of their epoch that may be in the store).
    pub fn discard(&self) {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        let taken = std::mem::take(&mut *staged);
        self.feed.discard();
        self.outboxes().iter().for_each(|outbox| outbox.discard());
        if taken.reserved {
            let mut state = self.readers.lock();
            let mut aborted = state.aborted.to_vec();
            aborted.push(taken.epoch);
            state.aborted = Arc::new(aborted);
        }
        if self.layout.has_runs() {
            self.discard_keyed(taken);
        }
        self.admit_waiting_subscribers();
        drop(staged);
    }

    pub fn set_watermark(&self, watermark_ns: i64) {
        let mut watermark = self.watermark.lock().unwrap_or_else(|p| p.into_inner());
        *watermark = Some(watermark.map_or(watermark_ns, |w| w.max(watermark_ns)));
    }

    pub fn watermark_ns(&self) -> Option<i64> {
        *self.watermark.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Row changes (insertions and retractions) committed since the
    /// server started.
    pub fn changes_committed(&self) -> u64 {
        self.changes_committed.load(Ordering::Relaxed)
    }

    pub fn row_count(&self) -> i64 {
        self.total_rows.load(Ordering::Acquire)
    }

    /// A new subscriber: the rows committed now and every later commit's
    /// changes. While a commit is being staged the subscription starts
    /// when it ends (its changes are then in the snapshot, or discarded).
    pub fn subscribe(&self, limit_bytes: usize) -> Subscribing {
        let staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        if !staged.changed {
            return Subscribing::Now(self.start_subscription(limit_bytes));
        }
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.waiting_subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((limit_bytes, sender));
        drop(staged);
        Subscribing::AfterCommit(receiver)
    }

    /// Call with the staged lock held and nothing staged.
    fn start_subscription(&self, limit_bytes: usize) -> Result<Subscription> {
        let (changes, epoch) = self.feed.subscribe(limit_bytes);
        let snapshot = self.rows(None)?.read()?;
        Ok(Subscription {
            epoch,
            snapshot,
            changes,
        })
    }

    /// Starts the subscriptions that waited for the commit that just ended
    /// (call with the staged lock held).
    fn admit_waiting_subscribers(&self) {
        let waiting = std::mem::take(
            &mut *self
                .waiting_subscribers
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for (limit_bytes, sender) in waiting {
            let _ = sender.send(self.start_subscription(limit_bytes));
        }
    }

    /// Ends every subscription: their next FETCH fails with `why`.
    pub fn end_subscriptions(&self, why: &str) {
        self.feed.end(why);
    }

    /// The committed rows, read from the store in batches, as of now.
    pub fn rows(&self, projection: Option<Vec<usize>>) -> Result<ViewRows> {
        ViewRows::new(self, projection)
    }
}

fn encode_head(head: &ViewHead) -> Result<Vec<u8>> {
    serde_json::to_vec(head)
        .map_err(|error| WeirError::internal(format!("cannot encode a view head: {error}")))
}

/// A result written before heads: epoch 0, its rows counted once; None
/// when there are no rows.
fn count_legacy_rows(store: &dyn StateStore, id: u64) -> Result<Option<ViewHead>> {
    let mut rows = 0;
    let mut found = false;
    for entry in store.scan_range(&view_rows_prefix(id), &view_rows_end(id)) {
        rows += Versions::decode(&entry?.1)?.count_at(0, &[]);
        found = true;
    }
    Ok(found.then(|| ViewHead {
        rows,
        ..ViewHead::default()
    }))
}

impl ViewSink for ViewResult {
    fn schema(&self) -> SchemaRef {
        ViewResult::schema(self)
    }

    fn apply(&self, chunk: &Chunk) -> Result<WriteBatch> {
        ViewResult::apply(self, chunk)
    }

    fn set_watermark(&self, watermark_ns: i64) {
        ViewResult::set_watermark(self, watermark_ns)
    }

    fn watermark_ns(&self) -> Option<i64> {
        ViewResult::watermark_ns(self)
    }

    fn reset_watermark(&self, watermark_ns: Option<i64>) {
        *self.watermark.lock().unwrap_or_else(|p| p.into_inner()) = watermark_ns;
    }

    fn late_rows(&self) -> &AtomicU64 {
        &self.late_rows
    }

    fn record_state_memory(&self, bytes: u64) {
        self.state_memory_bytes.store(bytes, Ordering::Relaxed);
    }

    fn reserve(&self) -> Result<Option<WriteBatch>> {
        ViewResult::reserve(self)
    }

    fn seal(&self) -> Result<WriteBatch> {
        match self.layout {
            RowLayout::Keyed(_) | RowLayout::Counted => self.seal_keyed(),
            _ => Ok(WriteBatch::new()),
        }
    }

    fn spilled(&self) {
        ViewResult::spilled(self)
    }

    fn publish(&self) {
        ViewResult::publish(self)
    }

    fn discard(&self) {
        ViewResult::discard(self)
    }
}

#[cfg(test)]
mod tests;
