//! COPY … TO STDOUT: the table's rows or the query's, as lines of COPY
//! text or CSV, streamed batch by batch (never collected), under the
//! session's statement_timeout like any query.

use futures::stream::{self, BoxStream, StreamExt};

use super::planning::Purpose;
use super::results::with_deadline;
use super::{Outcome, Session};
use crate::connectors::pg_copy::{encode_rows, header_line, CopyFormat, CopyOptions};
use crate::error::{Result, WeirError};
use crate::sql;

/// A COPY TO STDOUT's data: one line per row (and the header).
pub struct CopyOut {
    pub columns: usize,
    /// The first line is a header, not a row (`COPY n` counts rows).
    pub header: bool,
    pub lines: BoxStream<'static, Result<String>>,
}

impl Session {
    pub(super) async fn copy_out(&self, query: &str, options: &CopyOptions) -> Result<Outcome> {
        let statement = match sql::parse(query)?.pop() {
            Some(sql::Statement::Standard(statement)) => statement,
            _ => return Err(WeirError::syntax("COPY ( … ) TO STDOUT needs a query")),
        };
        let (state, task) = self.planning(Purpose::Queries)?;
        let plan = self.engine.plan(&state, &statement).await?;
        if matches!(
            plan,
            datafusion::logical_expr::LogicalPlan::Dml(_)
                | datafusion::logical_expr::LogicalPlan::Ddl(_)
                | datafusion::logical_expr::LogicalPlan::Statement(_)
        ) {
            return Err(WeirError::unsupported("COPY ( … ) TO takes a query")
                .with_hint("Write COPY (SELECT …) TO STDOUT."));
        }
        self.check_reads(&plan)?;
        self.authorize_reads(&plan)?;
        let names: Vec<String> = plan
            .schema()
            .fields()
            .iter()
            .map(|field| field.name().clone())
            .collect();
        let physical = state.create_physical_plan(&plan).await?;
        let batches = datafusion::physical_plan::execute_stream(physical, task)?;
        let batches = match self.settings().statement_timeout()? {
            Some(limit) => with_deadline(batches, limit),
            None => batches,
        };
        let header = (options.header && options.format == CopyFormat::Csv)
            .then(|| header_line(&names, options));
        let options = options.clone();
        let rows = batches.flat_map(move |batch| {
            let lines = batch
                .map_err(WeirError::from)
                .and_then(|batch| encode_rows(&batch, &options));
            match lines {
                Ok(lines) => stream::iter(lines.into_iter().map(Ok)).boxed(),
                Err(error) => stream::once(async move { Err(error) }).boxed(),
            }
        });
        let has_header = header.is_some();
        let lines = stream::iter(header.map(Ok)).chain(rows).boxed();
        Ok(Outcome::CopyOut(CopyOut {
            columns: names.len(),
            header: has_header,
            lines,
        }))
    }
}
