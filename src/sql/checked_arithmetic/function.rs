//! The checked operators as scalar functions. Their column name is the
//! operator's (`a + b`), so results, GROUP BY keys and the columns that
//! refer to them keep the names DataFusion gave the unchecked expression.

use datafusion::arrow::compute::kernels::numeric::{add, div, mul, neg, sub};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::arrow::error::ArrowError;
use datafusion::common::{exec_err, DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, Expr, Operator, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::physical_expr_common::datum::apply;

use crate::error::{sqlstate, WeirError};

/// Integer arithmetic that wraps in DataFusion, and float arithmetic
/// that gives ±Infinity or NaN where Postgres fails (`Divide` is only
/// floats': integer division by zero already fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arithmetic {
    Add,
    Subtract,
    Multiply,
    Negate,
    Divide,
}

impl Arithmetic {
    pub const ALL: [Arithmetic; 5] = [
        Arithmetic::Add,
        Arithmetic::Subtract,
        Arithmetic::Multiply,
        Arithmetic::Negate,
        Arithmetic::Divide,
    ];

    pub fn of_operator(operator: Operator) -> Option<Arithmetic> {
        match operator {
            Operator::Plus => Some(Arithmetic::Add),
            Operator::Minus => Some(Arithmetic::Subtract),
            Operator::Multiply => Some(Arithmetic::Multiply),
            Operator::Divide => Some(Arithmetic::Divide),
            _ => None,
        }
    }

    /// The binary operator; None for negation.
    pub fn operator(self) -> Option<Operator> {
        match self {
            Arithmetic::Add => Some(Operator::Plus),
            Arithmetic::Subtract => Some(Operator::Minus),
            Arithmetic::Multiply => Some(Operator::Multiply),
            Arithmetic::Divide => Some(Operator::Divide),
            Arithmetic::Negate => None,
        }
    }

    /// The function's name, shown where DataFusion prints calls (EXPLAIN).
    pub fn function_name(self) -> &'static str {
        match self {
            Arithmetic::Add => "weir_checked_add",
            Arithmetic::Subtract => "weir_checked_subtract",
            Arithmetic::Multiply => "weir_checked_multiply",
            Arithmetic::Negate => "weir_checked_negate",
            Arithmetic::Divide => "weir_checked_divide",
        }
    }

    pub fn of_function_name(name: &str) -> Option<Arithmetic> {
        Arithmetic::ALL
            .into_iter()
            .find(|arithmetic| arithmetic.function_name() == name)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedArithmetic {
    arithmetic: Arithmetic,
    signature: Signature,
}

impl CheckedArithmetic {
    pub fn new(arithmetic: Arithmetic) -> Self {
        let arguments = if arithmetic == Arithmetic::Negate {
            1
        } else {
            2
        };
        CheckedArithmetic {
            arithmetic,
            // Operands arrive coerced to one integer type; `any` keeps a
            // second analyzer pass from changing them.
            signature: Signature::any(arguments, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CheckedArithmetic {
    fn name(&self) -> &str {
        self.arithmetic.function_name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types.first() {
            Some(data_type) => Ok(data_type.clone()),
            None => exec_err!("{} needs an argument", self.name()),
        }
    }

    /// Nullable only when an operand is, as the operator's result is.
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let Some(first) = args.arg_fields.first() else {
            return exec_err!("{} needs an argument", self.name());
        };
        let nullable = args.arg_fields.iter().any(|field| field.is_nullable());
        Ok(Arc::new(Field::new(
            self.name(),
            first.data_type().clone(),
            nullable,
        )))
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        // Expr::schema_name of the operator expression it replaces.
        match (self.arithmetic.operator(), args) {
            (None, [value]) => Ok(format!("(- {})", value.schema_name())),
            (Some(operator), [left, right]) => Ok(format!(
                "{} {operator} {}",
                left.schema_name(),
                right.schema_name()
            )),
            _ => exec_err!("{} has the wrong number of arguments", self.name()),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let data_type = args.return_field.data_type().clone();
        if data_type.is_floating() {
            return match args.args.as_slice() {
                [left, right] => super::float::checked(self.arithmetic, left, right),
                _ => exec_err!("{} has the wrong number of arguments", self.name()),
            };
        }
        let result = match (self.arithmetic, args.args.as_slice()) {
            (Arithmetic::Negate, [value]) => negate(value),
            (Arithmetic::Add, [left, right]) => apply(left, right, add),
            (Arithmetic::Subtract, [left, right]) => apply(left, right, sub),
            (Arithmetic::Multiply, [left, right]) => apply(left, right, mul),
            (Arithmetic::Divide, [left, right]) => apply(left, right, div),
            _ => return exec_err!("{} has the wrong number of arguments", self.name()),
        };
        result.map_err(|error| out_of_range(error, &data_type))
    }
}

fn negate(value: &ColumnarValue) -> Result<ColumnarValue> {
    match value {
        ColumnarValue::Array(array) => Ok(ColumnarValue::Array(neg(array.as_ref())?)),
        ColumnarValue::Scalar(scalar) => {
            let negated = neg(&scalar.to_array()?)?;
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(negated.as_ref(), 0)?,
            ))
        }
    }
}

/// Arrow's overflow error as Postgres reports it: 22003 naming the type.
fn out_of_range(error: DataFusionError, data_type: &DataType) -> DataFusionError {
    let DataFusionError::ArrowError(arrow_error, _) = &error else {
        return error;
    };
    if !matches!(arrow_error.as_ref(), ArrowError::ArithmeticOverflow(_)) {
        return error;
    }
    let name = postgres_type_name(data_type);
    DataFusionError::External(Box::new(
        WeirError::new(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            format!("{name} out of range"),
        )
        .with_hint(format!(
            "The result does not fit in a {name}; cast an operand to NUMERIC for a wider range, e.g. CAST(x AS NUMERIC)."
        )),
    ))
}

fn postgres_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Int16 => "smallint".to_string(),
        DataType::Int32 => "integer".to_string(),
        DataType::Int64 => "bigint".to_string(),
        other => other.to_string(),
    }
}
