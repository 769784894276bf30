//! Functions that can be asked for outputs far larger than their inputs
//! (`repeat('x', 2147483647)`, `lpad`, `array_repeat`, a `range` list of a
//! billion elements) would allocate until the process dies. Postgres caps a
//! value at 1 GB and fails such calls with 54000 "requested length too
//! large". weir wraps those functions: each call first computes an upper
//! bound of its output from its arguments and fails the same way, before
//! anything is allocated.
//!
//! The bound covers one call over a whole batch of rows (DataFusion computes
//! a function for up to 8192 rows at once), so it also stops many large
//! values in one batch. The `||` operator is not a function and is not
//! covered; its output is at most the sum of its inputs.

mod arguments;
mod estimates;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{DataFusionError, Result as DataFusionResult};
use datafusion::config::ConfigOptions;
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::preimage::PreimageResult;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ExpressionPlacement, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

use crate::error::{sqlstate, Result, WeirError};
use arguments::Argument;
use estimates::Growth;

/// The largest value Postgres allocates (MaxAllocSize, 1 GB - 1).
pub const MAX_OUTPUT_BYTES: u64 = (1 << 30) - 1;

/// The functions weir limits, by the name DataFusion registers them under.
const LIMITED: &[(&str, Growth)] = &[
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("replace", Growth::Replace),
    ("concat", Growth::Concat),
    ("concat_ws", Growth::ConcatWithSeparator),
    ("array_repeat", Growth::ArrayRepeat),
    ("array_resize", Growth::ArrayResize),
    ("range", Growth::Series),
    ("generate_series", Growth::Series),
];

/// Replaces each limited function registered in `context` with its limited
/// version (same name, aliases, signature and results).
pub fn limit_function_outputs(context: &SessionContext) -> Result<()> {
    for (name, growth) in LIMITED {
        let function = context.udf(name).map_err(|error| {
            WeirError::internal(format!("function {name} is not registered: {error}"))
        })?;
        context.register_udf(ScalarUDF::new_from_impl(LimitedOutput {
            inner: function.as_ref().clone(),
            growth: *growth,
        }));
    }
    Ok(())
}

/// A function that refuses calls whose output would exceed
/// `MAX_OUTPUT_BYTES`, and otherwise is the function it wraps.
#[derive(Debug, PartialEq, Eq, Hash)]
struct LimitedOutput {
    inner: ScalarUDF,
    growth: Growth,
}

impl LimitedOutput {
    fn check(&self, args: &ScalarFunctionArgs) -> DataFusionResult<()> {
        let mut arguments = args
            .args
            .iter()
            .map(Argument::new)
            .collect::<DataFusionResult<Vec<_>>>()?;
        if let Some(index) = self.growth.count_argument() {
            if let Some(count) = arguments.get_mut(index) {
                *count = count.cast(&DataType::Int64)?;
            }
        }
        let bytes = self.growth.output_bytes(&arguments, args.number_rows)?;
        if bytes > MAX_OUTPUT_BYTES {
            return Err(too_large(self.inner.name(), bytes, args.number_rows));
        }
        Ok(())
    }
}

/// A bigint length with negative values as 0 (other types as they are).
fn non_negative(length: &ColumnarValue) -> ColumnarValue {
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::Int64Type;
    use datafusion::common::ScalarValue;
    match length {
        ColumnarValue::Scalar(ScalarValue::Int64(Some(value))) => {
            ColumnarValue::Scalar(ScalarValue::Int64(Some((*value).max(0))))
        }
        ColumnarValue::Array(array) if array.data_type() == &DataType::Int64 => {
            let lengths: Int64Array = array
                .as_primitive::<Int64Type>()
                .unary(|value| value.max(0));
            ColumnarValue::Array(std::sync::Arc::new(lengths))
        }
        other => other.clone(),
    }
}

fn too_large(name: &str, bytes: u64, rows: usize) -> DataFusionError {
    let rows = if rows == 1 {
        "one row".to_string()
    } else {
        format!("{rows} rows")
    };
    DataFusionError::External(Box::new(
        WeirError::new(
            sqlstate::PROGRAM_LIMIT_EXCEEDED,
            "requested length too large",
        )
        .with_hint(format!(
            "{name} would produce up to {bytes} bytes for {rows}; a value, and one \
                 function's results for a batch of rows, are limited to 1 GB \
                 ({MAX_OUTPUT_BYTES} bytes)."
        )),
    ))
}

/// Everything but `invoke_with_args` and `simplify` is the wrapped
/// function's. `simplify` stays the default (no rewrite): concat's would
/// join constant arguments itself, without the check; constant folding
/// calls `invoke_with_args` instead.
impl ScalarUDFImpl for LimitedOutput {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn schema_name(&self, args: &[Expr]) -> DataFusionResult<String> {
        self.inner.inner().schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> DataFusionResult<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DataFusionResult<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn is_strict(&self) -> bool {
        self.inner.inner().is_strict()
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> DataFusionResult<ColumnarValue> {
        self.check(&args)?;
        if self.growth == Growth::Pad {
            // A negative length pads to '' in Postgres; DataFusion's
            // lpad / rpad with a NULL fill panicked on it (capacity
            // overflow, found by tests/postgres_differential.rs).
            if let Some(length) = args.args.get_mut(1) {
                *length = non_negative(length);
            }
        }
        self.inner.invoke_with_args(args)
    }

    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let inner = self.inner.inner().with_updated_config(config)?;
        Some(ScalarUDF::new_from_impl(LimitedOutput {
            inner,
            growth: self.growth,
        }))
    }

    fn preimage(
        &self,
        args: &[Expr],
        literal: &Expr,
        info: &SimplifyContext,
    ) -> DataFusionResult<PreimageResult> {
        self.inner.preimage(args, literal, info)
    }

    fn conditional_arguments<'a>(
        &self,
        args: &'a [Expr],
    ) -> Option<(Vec<&'a Expr>, Vec<&'a Expr>)> {
        self.inner.conditional_arguments(args)
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn evaluate_bounds(&self, input: &[&Interval]) -> DataFusionResult<Interval> {
        self.inner.evaluate_bounds(input)
    }

    fn propagate_constraints(
        &self,
        interval: &Interval,
        inputs: &[&Interval],
    ) -> DataFusionResult<Option<Vec<Interval>>> {
        self.inner.propagate_constraints(interval, inputs)
    }

    fn output_ordering(&self, inputs: &[ExprProperties]) -> DataFusionResult<SortProperties> {
        self.inner.output_ordering(inputs)
    }

    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> DataFusionResult<bool> {
        self.inner.preserves_lex_ordering(inputs)
    }

    fn strictly_order_preserving(&self, inputs: &[ExprProperties]) -> DataFusionResult<bool> {
        self.inner.strictly_order_preserving(inputs)
    }

    fn placement(&self, args: &[ExpressionPlacement]) -> ExpressionPlacement {
        self.inner.placement(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DataFusionResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(context: &SessionContext, sql: &str) -> Result<()> {
        context.sql(sql).await?.collect().await?;
        Ok(())
    }

    #[tokio::test]
    async fn huge_requests_fail_before_they_run_and_small_ones_work() {
        let context = SessionContext::new();
        limit_function_outputs(&context).unwrap();
        for sql in [
            "SELECT lpad('x', 2147483647)",
            "SELECT repeat('ab', 600000000)",
            "SELECT array_repeat(1, 2000000000)",
            "SELECT generate_series(1, 10000000000)",
        ] {
            let error = run(&context, sql).await.unwrap_err();
            assert_eq!(error.code, "54000", "{sql}");
            assert_eq!(error.message, "requested length too large", "{sql}");
        }
        run(
            &context,
            "SELECT lpad('x', 5), repeat('ab', 3), range(1, 4)",
        )
        .await
        .unwrap();
    }

    #[test]
    fn wrapped_functions_keep_their_names_and_aliases() {
        let context = SessionContext::new();
        let before = context.udf("array_repeat").unwrap().aliases().to_vec();
        limit_function_outputs(&context).unwrap();
        let after = context.udf("array_repeat").unwrap();
        assert_eq!(after.aliases(), before.as_slice());
        assert!(context.udf("list_repeat").is_ok());
    }
}
