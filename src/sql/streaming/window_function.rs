//! How a window TVF reaches the streaming planner. In a materialized view,
//! `TUMBLE(t, ts, size)` is rewritten (sql::windows) to the internal table
//! function `__weir_window('TUMBLE', 't', 'ts', size_ns, slide_ns,
//! offset_ns)`. Planning it yields a `WindowTable`: t's columns plus
//! `window_start` and `window_end`, which DataFusion plans over like any
//! table and which the streaming planner turns into a `WindowNode`.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::catalog::{Session as DataFusionSession, TableFunctionArgs, TableFunctionImpl};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::connectors::table::DurableTable;
use crate::error::{sqlstate, WeirError};
use crate::stream::operators::window::{WindowKind, WindowSpec};

pub const WINDOW_FUNCTION_NAME: &str = "__weir_window";

/// The time argument `PROCTIME()` stands for the input's PROCTIME() column.
pub const PROCTIME_COLUMN: &str = "__weir_proctime";

/// The name of `input`'s PROCTIME() column.
fn proctime_column(input: &str, provider: &dyn TableProvider) -> Result<String> {
    provider
        .downcast_ref::<DurableTable>()
        .and_then(|table| table.log().proctime_column())
        .ok_or_else(|| {
            external(
                WeirError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("\"{input}\" has no PROCTIME() column to window on"),
                )
                .with_hint(format!(
                    "Add a column stamped on arrival to {input}: `arrived AS PROCTIME()`."
                )),
            )
        })
}

/// A window over relation `input` (a table, view or materialized view).
#[derive(Debug, Clone)]
pub struct WindowTable {
    pub spec: WindowSpec,
    pub input: String,
    pub time_column: String,
    pub schema: SchemaRef,
}

#[derive(Debug)]
pub struct WindowFunction {
    schema: Arc<dyn SchemaProvider>,
}

impl WindowFunction {
    pub fn new(schema: Arc<dyn SchemaProvider>) -> Self {
        WindowFunction { schema }
    }
}

fn external(error: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(error))
}

fn text_argument(args: &[Expr], index: usize) -> Result<String> {
    match args.get(index) {
        Some(Expr::Literal(ScalarValue::Utf8(Some(text)), _)) => Ok(text.clone()),
        _ => Err(external(WeirError::internal(
            "malformed window function call",
        ))),
    }
}

fn integer_argument(args: &[Expr], index: usize) -> Result<i64> {
    match args.get(index) {
        Some(Expr::Literal(ScalarValue::Int64(Some(value)), _)) => Ok(*value),
        // An integer literal is typed integer when it fits (sql::literal_types).
        Some(Expr::Literal(ScalarValue::Int32(Some(value)), _)) => Ok(i64::from(*value)),
        _ => Err(external(WeirError::internal(
            "malformed window function call",
        ))),
    }
}

impl TableFunctionImpl for WindowFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        let function = text_argument(exprs, 0)?;
        let input = text_argument(exprs, 1)?;
        let mut time_column = text_argument(exprs, 2)?;
        let spec = WindowSpec {
            kind: match function.as_str() {
                "HOP" => WindowKind::Hop,
                "CUMULATE" => WindowKind::Cumulate,
                "SESSION" => WindowKind::Session,
                _ => WindowKind::Tumble,
            },
            size_ns: integer_argument(exprs, 3)?,
            slide_ns: integer_argument(exprs, 4)?,
            offset_ns: integer_argument(exprs, 5)?,
        };
        spec.validate().map_err(external)?;
        // Schema providers answer at once; nothing here awaits I/O.
        let provider = futures::executor::block_on(self.schema.table(&input))?
            .ok_or_else(|| external(WeirError::undefined_table(&input)))?;
        if time_column == PROCTIME_COLUMN {
            time_column = proctime_column(&input, provider.as_ref())?;
        }
        let input_schema = provider.schema();
        let field = input_schema.field_with_name(&time_column).map_err(|_| {
            external(
                WeirError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{time_column}\" of relation \"{input}\" does not exist"),
                )
                .with_hint(format!(
                    "{function} needs the name of a timestamp column of {input}."
                )),
            )
        })?;
        let time_type = field.data_type().clone();
        if !matches!(time_type, DataType::Timestamp(_, _)) {
            return Err(external(
                WeirError::new(
                    sqlstate::DATATYPE_MISMATCH,
                    format!(
                        "{function}: column \"{time_column}\" has type {}, not a timestamp",
                        crate::error::postgres_type_name(&time_type.to_string())
                    ),
                )
                .with_hint("Window over a TIMESTAMP or TIMESTAMPTZ column."),
            ));
        }
        if let Some(existing) = ["window_start", "window_end"]
            .into_iter()
            .find(|name| input_schema.field_with_name(name).is_ok())
        {
            return Err(external(
                WeirError::new(
                    "42701",
                    format!("{function}: \"{input}\" already has a column named {existing}"),
                )
                .with_hint(format!(
                    "The window adds window_start and window_end; rename the input's columns (e.g. SELECT {existing} AS ts ... in the view {input}), or use a plain SELECT over {input}."
                )),
            ));
        }
        let mut fields: Vec<Field> = input_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("window_start", time_type.clone(), true));
        fields.push(Field::new("window_end", time_type, true));
        Ok(Arc::new(WindowTable {
            spec,
            input,
            time_column,
            schema: Arc::new(Schema::new(fields)),
        }))
    }
}

#[async_trait]
impl TableProvider for WindowTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn DataFusionSession,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Err(external(
            WeirError::unsupported(format!(
                "{WINDOW_FUNCTION_NAME} is internal to materialized views"
            ))
            .with_hint("Use TUMBLE(...) or HOP(...) in FROM."),
        ))
    }
}
