//! Checking a table's WATERMARK clause against its columns and turning the
//! delay into milliseconds.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNanoType, IntervalUnit, Schema};
use datafusion::execution::SessionState;
use datafusion::physical_plan::collect;

use crate::catalog::WatermarkDefinition;
use crate::error::{sqlstate, Result, WeirError};
use crate::sql::WatermarkClause;

pub async fn resolve(
    state: &SessionState,
    schema: &Schema,
    clause: &WatermarkClause,
) -> Result<WatermarkDefinition> {
    let field = schema.field_with_name(&clause.column).map_err(|_| {
        WeirError::new(
            sqlstate::UNDEFINED_COLUMN,
            format!(
                "WATERMARK FOR {0}: there is no column \"{0}\"",
                clause.column
            ),
        )
        .with_hint("Name one of the table's TIMESTAMP columns.")
    })?;
    if !matches!(field.data_type(), DataType::Timestamp(_, _)) {
        return Err(WeirError::new(
            sqlstate::DATATYPE_MISMATCH,
            format!(
                "WATERMARK FOR {}: the column has type {}, not a timestamp",
                clause.column,
                crate::error::postgres_type_name(&field.data_type().to_string())
            ),
        )
        .with_hint("Event time must be a TIMESTAMP or TIMESTAMPTZ column."));
    }
    let delay_ms = match &clause.delay_sql {
        Some(delay) => delay_milliseconds(state, delay).await?,
        None => 0,
    };
    Ok(WatermarkDefinition {
        column: clause.column.clone(),
        delay_ms,
        idle_timeout_ms: None,
        processing_time: false,
    })
}

/// Evaluates the delay with DataFusion, so every interval spelling it
/// accepts ('5' SECOND, '5 seconds', '1 minute 30 seconds') works.
async fn delay_milliseconds(state: &SessionState, delay: &str) -> Result<i64> {
    let invalid = |why: &str| {
        WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("WATERMARK delay {delay} {why}"),
        )
        .with_hint("Use a fixed interval such as INTERVAL '5' SECOND.")
    };
    let plan = state
        .create_logical_plan(&format!("SELECT {delay}"))
        .await?;
    let physical = state.create_physical_plan(&plan).await?;
    let batches = collect(physical, state.task_ctx()).await?;
    let column = batches
        .first()
        .filter(|batch| batch.num_rows() == 1 && batch.num_columns() == 1)
        .map(|batch| batch.column(0).clone())
        .ok_or_else(|| invalid("is not a single value"))?;
    if !matches!(column.data_type(), DataType::Interval(_)) {
        return Err(invalid("is not an interval"));
    }
    let column = cast(&column, &DataType::Interval(IntervalUnit::MonthDayNano))
        .map_err(|error| invalid(&error.to_string()))?;
    let values = column.as_primitive::<IntervalMonthDayNanoType>();
    if values.is_null(0) {
        return Err(invalid("is NULL"));
    }
    let value = values.value(0);
    if value.months != 0 {
        return Err(invalid("uses months, whose length varies"));
    }
    let milliseconds = i64::from(value.days) * 86_400_000 + value.nanoseconds / 1_000_000;
    if milliseconds < 0 {
        return Err(invalid("is negative"));
    }
    Ok(milliseconds)
}
