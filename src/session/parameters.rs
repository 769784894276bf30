//! Statement parameters (`$1..$n`): their types from the plan, and bound
//! values cast to those types.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;

use crate::error::{Result, WeirError};

/// `$1..$n` types in order.
pub(super) fn parameter_types(plan: &LogicalPlan) -> Result<Vec<Option<DataType>>> {
    let types = plan.get_parameter_types()?;
    let mut numbered: Vec<(usize, Option<DataType>)> = types
        .into_iter()
        .map(|(name, data_type)| {
            let index = name.trim_start_matches('$').parse::<usize>().map_err(|_| {
                WeirError::syntax(format!("parameter {name} is not of the form $n"))
            })?;
            Ok((index, data_type))
        })
        .collect::<Result<_>>()?;
    numbered.sort_by_key(|(index, _)| *index);
    let count = numbered.last().map_or(0, |(index, _)| *index);
    let mut ordered = vec![None; count];
    for (index, data_type) in numbered {
        if index >= 1 {
            ordered[index - 1] = data_type;
        }
    }
    Ok(ordered)
}

/// Casts bound values to the types planning inferred: the plan was
/// type-checked with those, so a text value bound for a Utf8View column (or
/// an int4 for an int8 one) must arrive as that type.
pub(super) fn coerce_parameters(
    values: &ParamValues,
    types: &[Option<DataType>],
) -> Result<ParamValues> {
    let ParamValues::List(list) = values else {
        return Ok(values.clone());
    };
    let coerced = list
        .iter()
        .zip(types.iter().chain(std::iter::repeat(&None)))
        .map(|(value, data_type)| match data_type {
            Some(data_type) if value.value.data_type() != *data_type => {
                let mut value = value.clone();
                value.value = value.value.cast_to(data_type).map_err(|error| {
                    WeirError::new(
                        crate::error::sqlstate::DATATYPE_MISMATCH,
                        format!("parameter does not fit type {data_type}: {error}"),
                    )
                })?;
                Ok(value)
            }
            _ => Ok(value.clone()),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ParamValues::List(coerced))
}
