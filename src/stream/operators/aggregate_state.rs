//! An aggregate's window bin in a checkpoint: one Arrow batch with the group
//! key (row format) and each accumulator's `state()` columns; restored by
//! `merge_batch` into fresh accumulators — DataFusion's own partial-aggregate
//! contract, so every aggregate checkpoints without code of its own.
//!
//! `Accumulator::state` may take the accumulator's contents (COUNT(DISTINCT)
//! over strings does), so a live accumulator is never asked for its state
//! and then used again: `snapshot` replaces it with a fresh one merged from
//! that state — exactly what a restore would build, so a view continues the
//! same way whether or not the server restarted after the checkpoint.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryArray};
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;

use super::aggregate::Bin;
use super::aggregate_calls::{new_accumulators, AggregateCall};
use crate::error::{Result, WeirError};
use crate::state::batch_codec::{decode_batches, encode_batch};

pub fn encode_bin(bin: &mut Bin, calls: &[AggregateCall]) -> Result<Vec<u8>> {
    encode_groups(
        bin.iter_mut()
            .map(|(key, accumulators)| (key.clone(), accumulators.as_mut_slice())),
        calls,
    )
}

/// The state of a live accumulator, which is replaced by a fresh one merged
/// from that state (see the module comment).
pub fn snapshot(
    call: &AggregateCall,
    accumulator: &mut Box<dyn Accumulator>,
) -> Result<Vec<ScalarValue>> {
    let state = accumulator.state()?;
    let arrays = state
        .iter()
        .map(ScalarValue::to_array)
        .collect::<datafusion::error::Result<Vec<ArrayRef>>>()?;
    let mut fresh = call.function.create_accumulator()?;
    fresh.merge_batch(&arrays)?;
    *accumulator = fresh;
    Ok(state)
}

/// Groups (key, accumulators) as one batch; `decode_bin` reads it back.
pub fn encode_groups<'a>(
    groups: impl Iterator<Item = (Vec<u8>, &'a mut [Box<dyn Accumulator>])>,
    calls: &[AggregateCall],
) -> Result<Vec<u8>> {
    let mut keys = Vec::new();
    let mut states: Vec<Vec<ScalarValue>> = Vec::new();
    for (key, accumulators) in groups {
        keys.push(key);
        let mut column = 0;
        for (accumulator, call) in accumulators.iter_mut().zip(calls) {
            for value in snapshot(call, accumulator)? {
                if states.len() <= column {
                    states.push(Vec::with_capacity(keys.capacity()));
                }
                states[column].push(value);
                column += 1;
            }
        }
    }
    let keys = BinaryArray::from_iter_values(keys);
    let states = states
        .into_iter()
        .map(|values| Ok(ScalarValue::iter_to_array(values)?))
        .collect::<Result<Vec<_>>>()?;
    encode_state(keys, states)
}

/// The checkpoint batch of a bin: group keys (row format), then each
/// accumulator's state columns.
pub fn encode_state(keys: BinaryArray, states: Vec<ArrayRef>) -> Result<Vec<u8>> {
    let mut fields = vec![Field::new(
        "key",
        datafusion::arrow::datatypes::DataType::Binary,
        false,
    )];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(keys)];
    for (index, array) in states.into_iter().enumerate() {
        fields.push(Field::new(
            format!("state_{index}"),
            array.data_type().clone(),
            true,
        ));
        columns.push(array);
    }
    encode_batch(&RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// How many state columns each call's accumulator has.
pub fn state_widths(calls: &[AggregateCall]) -> Result<Vec<usize>> {
    calls
        .iter()
        .map(|call| Ok(call.function.state_fields()?.len()))
        .collect()
}

/// The batches `encode_state` wrote, checked against the view's calls.
pub fn decode_state(calls: &[AggregateCall], value: &[u8]) -> Result<Vec<RecordBatch>> {
    let expected = 1 + state_widths(calls)?.iter().sum::<usize>();
    let batches = decode_batches(value, "an aggregate's checkpointed window")?;
    for batch in &batches {
        if batch.num_columns() != expected || batch.column(0).as_binary_opt::<i32>().is_none() {
            return Err(WeirError::new(
                crate::error::sqlstate::DATA_CORRUPTED,
                "an aggregate's checkpointed window does not match the view",
            ));
        }
    }
    Ok(batches)
}

pub fn decode_bin(calls: &[AggregateCall], value: &[u8]) -> Result<Bin> {
    let mut bin = Bin::new();
    let widths = state_widths(calls)?;
    for batch in decode_state(calls, value)? {
        let keys = batch.column(0).as_binary::<i32>();
        for row in 0..batch.num_rows() {
            let mut accumulators = new_accumulators(calls)?;
            let mut column = 1;
            for (accumulator, width) in accumulators.iter_mut().zip(&widths) {
                let states: Vec<ArrayRef> = batch.columns()[column..column + width]
                    .iter()
                    .map(|array| array.slice(row, 1))
                    .collect();
                accumulator.merge_batch(&states)?;
                column += width;
            }
            bin.insert(keys.value(row).to_vec(), accumulators);
        }
    }
    Ok(bin)
}
