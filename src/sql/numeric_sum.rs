//! `sum(bigint)` is NUMERIC, as in Postgres. DataFusion sums an Int64 into
//! an Int64 that wraps; weir's `sum` (registered over DataFusion's, same
//! name) coerces a bigint argument to `Decimal128(38, 0)`, which holds the
//! sum of more rows than any table has. The type is decided where
//! DataFusion coerces arguments, so it is right from SQL planning on (the
//! result types a client is told at Describe, views, CREATE TABLE AS), and
//! the column keeps its name (`sum(t.v)`: casts are invisible in names).
//! Smaller integers keep a bigint sum (Postgres's sum(int4) is bigint),
//! through accumulators that widen their input (sql::widened_sum) rather
//! than a cast that would read as a bigint argument; everything else is
//! DataFusion's `Sum`.

use std::sync::Arc;

use super::widened_sum::Widened;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, GroupsAccumulator, ReversedUDAF,
    SetMonotonicity, Signature, StatisticsArgs, Volatility,
};

/// The type of `sum(bigint)`: Postgres's NUMERIC for whole numbers.
pub const BIGINT_SUM_TYPE: DataType = DataType::Decimal128(38, 0);

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericSum {
    sum: AggregateUDF,
    signature: Signature,
}

impl NumericSum {
    pub fn new() -> Self {
        NumericSum {
            sum: AggregateUDF::from(Sum::new()),
            // Coercion is `coerce_types`: Sum's, except for bigint.
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    /// weir's `sum`, to register over DataFusion's.
    pub fn udaf() -> AggregateUDF {
        AggregateUDF::from(NumericSum::new())
    }
}

impl Default for NumericSum {
    fn default() -> Self {
        NumericSum::new()
    }
}

impl AggregateUDFImpl for NumericSum {
    fn name(&self) -> &str {
        "sum"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [DataType::Int64] => return Ok(vec![BIGINT_SUM_TYPE]),
            [small] if is_small_integer(small) => return Ok(vec![small.clone()]),
            _ => {}
        }
        let fields: Vec<FieldRef> = arg_types
            .iter()
            .map(|data_type| Arc::new(Field::new("", data_type.clone(), true)))
            .collect();
        Ok(fields_with_udf(&fields, &self.sum)?
            .iter()
            .map(|field| field.data_type().clone())
            .collect())
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [small] if is_small_integer(small) => Ok(DataType::Int64),
            _ => self.sum.return_type(arg_types),
        }
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let accumulator = self.sum.accumulator(args.clone())?;
        Ok(match sums_small_integers(&args) {
            true => Box::new(Widened(accumulator)),
            false => accumulator,
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.sum.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.sum.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let accumulator = self.sum.create_groups_accumulator(args.clone())?;
        Ok(match sums_small_integers(&args) {
            true => Box::new(Widened(accumulator)),
            false => accumulator,
        })
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let accumulator = self.sum.create_sliding_accumulator(args.clone())?;
        Ok(match sums_small_integers(&args) {
            true => Box::new(Widened(accumulator)),
            false => accumulator,
        })
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        self.sum.reverse_udf()
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.sum.order_sensitivity()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.sum.documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.sum.inner().set_monotonicity(data_type)
    }

    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        self.sum.value_from_stats(statistics_args)
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.sum.default_value(data_type)
    }
}

fn is_small_integer(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
    )
}

fn sums_small_integers(args: &AccumulatorArgs) -> bool {
    args.expr_fields
        .first()
        .is_some_and(|field| is_small_integer(field.data_type()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bigint_sum_is_numeric() {
        let sum = NumericSum::new();
        let coerced = sum.coerce_types(&[DataType::Int64]).unwrap();
        assert_eq!(coerced, vec![BIGINT_SUM_TYPE]);
        assert_eq!(sum.return_type(&coerced).unwrap(), BIGINT_SUM_TYPE);
    }

    #[test]
    fn other_sums_are_datafusions() {
        let sum = NumericSum::new();
        for (argument, result) in [
            (DataType::Float32, DataType::Float64),
            (DataType::Decimal128(10, 2), DataType::Decimal128(20, 2)),
        ] {
            let coerced = sum.coerce_types(&[argument]).unwrap();
            assert_eq!(sum.return_type(&coerced).unwrap(), result);
        }
        assert!(sum.coerce_types(&[DataType::Utf8]).is_err());
    }

    /// Not cast to bigint: computed again, the cast would read as a bigint
    /// argument and the sum as numeric.
    #[test]
    fn a_smaller_integer_is_summed_as_it_is() {
        let sum = NumericSum::new();
        for argument in [DataType::Int32, DataType::Int16] {
            let coerced = sum.coerce_types(std::slice::from_ref(&argument)).unwrap();
            assert_eq!(coerced, vec![argument.clone()]);
            assert_eq!(sum.coerce_types(&coerced).unwrap(), coerced);
            assert_eq!(sum.return_type(&coerced).unwrap(), DataType::Int64);
        }
    }
}
