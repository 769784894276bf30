//! Bind: the values of a portal's parameters as Arrow scalars (the session
//! casts them to the statement's parameter types).
//!
//! arrow-pg decodes each value from its wire form (text or binary). It is
//! called one parameter at a time because, for a NULL of a type it does not
//! know (psycopg sends NULL with type oid 0), it adds no value at all, so
//! every later parameter would move up one place and the last would go
//! missing ("No value found for placeholder"). Here a NULL always becomes a
//! NULL of the parameter's type.

use std::sync::Arc;

use arrow_pg::datatypes::df::deserialize_parameters;
use bytes::Bytes;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{ParamValues, ScalarValue};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::results::FieldFormat;
use pgwire::api::stmt::StoredStatement;
use pgwire::api::Type;
use pgwire::error::PgWireResult;
use pgwire::messages::extendedquery::Bind;

use super::response::to_pgwire;
use crate::error::{sqlstate, WeirError};
use crate::session::{bound_type, Prepared};
use crate::stream::time_columns::with_seconds;

/// Decodes every bound value of `portal`, in order.
pub fn bound_values(portal: &Portal<Prepared>) -> PgWireResult<ParamValues> {
    check_counts(portal).map_err(to_pgwire)?;
    let types = &portal.statement.statement.parameter_types;
    let values = types
        .iter()
        .enumerate()
        .map(|(index, inferred)| bound_value(portal, index, &bound_type(inferred.as_ref())))
        .collect::<PgWireResult<Vec<_>>>()?;
    Ok(ParamValues::from(values))
}

/// Postgres's protocol checks: one value per parameter, and a format code
/// for each value when the client lists them one by one.
fn check_counts(portal: &Portal<Prepared>) -> Result<(), WeirError> {
    let supplied = portal.parameter_len();
    let required = portal.statement.statement.parameter_types.len();
    if supplied != required {
        return Err(WeirError::new(
            sqlstate::PROTOCOL_VIOLATION,
            format!(
                "bind message supplies {supplied} parameters, but prepared statement \"{}\" requires {required}",
                portal.statement.id
            ),
        ));
    }
    if let Format::Individual(codes) = &portal.parameter_format {
        if codes.len() != supplied {
            return Err(WeirError::new(
                sqlstate::PROTOCOL_VIOLATION,
                format!(
                    "bind message has {} parameter formats but {supplied} parameters",
                    codes.len()
                ),
            ));
        }
    }
    Ok(())
}

/// `$index + 1`'s value: a NULL of the parameter's type, or the bytes read
/// as the type the client named (in Parse) or else as the parameter's type.
fn bound_value(
    portal: &Portal<Prepared>,
    index: usize,
    parameter_type: &DataType,
) -> PgWireResult<ScalarValue> {
    let Some(bytes) = &portal.parameters[index] else {
        return typed_null(parameter_type).map_err(to_pgwire);
    };
    let client_type = client_type(portal, index);
    // arrow-pg converts a value of the client's type to the type it is
    // given, cutting fractions and with unclear errors; the session's cast
    // does that instead.
    let decode_as = match client_type {
        Some(_) => None,
        None => Some(parameter_type),
    };
    let format = portal.parameter_format.format_for(index);
    let bytes =
        match format == FieldFormat::Text && is_timestamp(client_type.as_ref(), parameter_type) {
            true => completed_timestamp(bytes),
            false => bytes.clone(),
        };
    let single = Portal::try_new(
        &Bind::new(
            None,
            None,
            vec![format.value()],
            vec![Some(bytes)],
            Vec::new(),
        ),
        Arc::new(StoredStatement::new(String::new(), (), vec![client_type])),
    )?;
    let decoded = deserialize_parameters(&single, &[decode_as])?;
    let ParamValues::List(mut values) = decoded else {
        return Err(to_pgwire(WeirError::internal(
            "decoded parameters are not a list",
        )));
    };
    values
        .pop()
        .map(|value| value.value)
        .ok_or_else(|| to_pgwire(WeirError::internal("a bound value was not decoded")))
}

/// Whether a value is decoded as a timestamp: the client's type, or else
/// the parameter's.
fn is_timestamp(client_type: Option<&Type>, parameter_type: &DataType) -> bool {
    match client_type {
        Some(client_type) => *client_type == Type::TIMESTAMP || *client_type == Type::TIMESTAMPTZ,
        None => matches!(parameter_type, DataType::Timestamp(..)),
    }
}

/// Timestamp text written to the minute gains `:00` seconds, which
/// Postgres accepts and the decoder does not.
fn completed_timestamp(bytes: &Bytes) -> Bytes {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(with_seconds)
        .map_or_else(|| bytes.clone(), Bytes::from)
}

/// The type the client gave `$index` in Parse; oid 0 (unspecified) and
/// `unknown` mean it left the choice to the server.
fn client_type(portal: &Portal<Prepared>, index: usize) -> Option<Type> {
    portal
        .statement
        .parameter_types
        .get(index)
        .cloned()
        .flatten()
        .filter(|client_type| *client_type != Type::UNKNOWN)
}

fn typed_null(data_type: &DataType) -> Result<ScalarValue, WeirError> {
    ScalarValue::try_from(data_type).map_err(|error| {
        WeirError::new(
            sqlstate::DATATYPE_MISMATCH,
            format!("cannot bind NULL as {data_type}: {error}"),
        )
    })
}
