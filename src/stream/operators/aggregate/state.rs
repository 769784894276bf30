//! An aggregate's window bin in a checkpoint: one Arrow batch with the group
//! key (row format) and each accumulator's `state()` columns; restored by
//! `merge_batch` into fresh accumulators — DataFusion's own partial-aggregate
//! contract, so every aggregate checkpoints without code of its own.
//!
//! `Accumulator::state` may take the accumulator's contents (COUNT(DISTINCT)
//! over strings does), so a live accumulator is never asked for its state
//! and then used again: `snapshot` replaces it with a fresh one merged from
//! that state — exactly what a restore would build, so a view continues the
//! same way whether or not the server restarted after the checkpoint. The
//! accumulators known to report a copy (`AggregateCall::state_is_kept`)
//! are left as they are: the same values, without the rebuild's cost.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;

use super::calls::{new_accumulators, AggregateCall};
use super::Bin;
use crate::error::{Result, WeirError};
use crate::state::batch_codec::{decode_batches, encode_batch};
use crate::stream::checkpoint::{decode_i64, StateReader, StateWriter};

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
    if call.state_is_kept() {
        return Ok(state);
    }
    let arrays = state
        .iter()
        .map(ScalarValue::to_array)
        .collect::<datafusion::error::Result<Vec<ArrayRef>>>()?;
    let mut fresh = call.accumulator()?;
    fresh.merge_batch(&arrays)?;
    *accumulator = fresh;
    Ok(state)
}

/// `snapshot` of each call's accumulator of one group.
pub fn snapshot_all(
    calls: &[AggregateCall],
    accumulators: &mut [Box<dyn Accumulator>],
) -> Result<Vec<Vec<ScalarValue>>> {
    accumulators
        .iter_mut()
        .zip(calls)
        .map(|(accumulator, call)| snapshot(call, accumulator))
        .collect()
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
    // No group (an aggregate over retractions whose groups all went):
    // empty state columns of the right types.
    let states = match keys.is_empty() {
        true => row_types(calls)?[1..]
            .iter()
            .map(datafusion::arrow::array::new_empty_array)
            .collect(),
        false => states
            .into_iter()
            .map(|values| Ok(ScalarValue::iter_to_array(values)?))
            .collect::<Result<Vec<_>>>()?,
    };
    encode_rows(keys, states, calls)
}

/// First byte of an entry in row format (an Arrow IPC stream starts 0xFF).
const ROWS_FORMAT: u8 = b'R';

/// The key and state column types of a view's calls.
fn row_types(calls: &[AggregateCall]) -> Result<Vec<DataType>> {
    let mut types = vec![DataType::Binary];
    for call in calls {
        for field in call.function.state_fields()? {
            types.push(field.data_type().clone());
        }
    }
    Ok(types)
}

fn row_converter(types: &[DataType]) -> Result<RowConverter> {
    let fields = types
        .iter()
        .map(|data_type| SortField::new(data_type.clone()));
    Ok(RowConverter::new(fields.collect())?)
}

/// Groups in arrow's row format: `ROWS_FORMAT`, then per group a u32
/// length and its row (key and state columns). A SESSION key's few groups
/// then cost their own bytes, where an Arrow IPC stream spends a kilobyte
/// or more on schema and framing; state the row format cannot hold is
/// written as IPC.
pub(super) fn encode_rows(
    keys: BinaryArray,
    states: Vec<ArrayRef>,
    calls: &[AggregateCall],
) -> Result<Vec<u8>> {
    let types = row_types(calls)?;
    let converter = match row_converter(&types) {
        Ok(converter) if types.len() == states.len() + 1 => converter,
        _ => return encode_state(keys, states),
    };
    let mut columns: Vec<ArrayRef> = vec![Arc::new(keys.clone())];
    for (array, data_type) in states.iter().zip(&types[1..]) {
        columns.push(if array.data_type() == data_type {
            Arc::clone(array)
        } else {
            match cast(array, data_type) {
                Ok(cast) => cast,
                Err(_) => return encode_state(keys, states),
            }
        });
    }
    let Ok(rows) = converter.convert_columns(&columns) else {
        return encode_state(keys, states);
    };
    let mut value = Vec::with_capacity(1 + rows.size());
    value.push(ROWS_FORMAT);
    for row in rows.iter() {
        let data = row.data();
        value.extend_from_slice(&(data.len() as u32).to_be_bytes());
        value.extend_from_slice(data);
    }
    Ok(value)
}

/// The batch `encode_rows` wrote.
fn decode_rows(calls: &[AggregateCall], value: &[u8]) -> Result<RecordBatch> {
    let corrupt = || {
        WeirError::new(
            crate::error::sqlstate::DATA_CORRUPTED,
            "an aggregate's checkpointed window is malformed",
        )
    };
    let types = row_types(calls)?;
    let converter = row_converter(&types)?;
    let parser = converter.parser();
    let mut rows = Vec::new();
    let mut rest = value.get(1..).ok_or_else(corrupt)?;
    while !rest.is_empty() {
        let (length, tail) = rest.split_at_checked(4).ok_or_else(corrupt)?;
        let length = u32::from_be_bytes(length.try_into().map_err(|_| corrupt())?) as usize;
        let (row, tail) = tail.split_at_checked(length).ok_or_else(corrupt)?;
        rows.push(parser.parse(row));
        rest = tail;
    }
    let columns = converter.convert_rows(rows)?;
    let schema_fields: Vec<Field> = types
        .iter()
        .enumerate()
        .map(|(index, data_type)| match index {
            0 => Field::new("key", DataType::Binary, false),
            _ => Field::new(format!("state_{}", index - 1), data_type.clone(), true),
        })
        .collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(schema_fields)),
        columns,
    )?)
}

/// The checkpoint batch of a bin: group keys (row format), then each
/// accumulator's state columns.
pub fn encode_state(keys: BinaryArray, states: Vec<ArrayRef>) -> Result<Vec<u8>> {
    let mut fields = vec![Field::new("key", DataType::Binary, false)];
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
    calls.iter().map(AggregateCall::state_width).collect()
}

/// The batches `encode_state` wrote, checked against the view's calls.
pub fn decode_state(calls: &[AggregateCall], value: &[u8]) -> Result<Vec<RecordBatch>> {
    let expected = 1 + state_widths(calls)?.iter().sum::<usize>();
    let batches = if value.first() == Some(&ROWS_FORMAT) {
        vec![decode_rows(calls, value)?]
    } else {
        decode_batches(value, "an aggregate's checkpointed window")?
    };
    // A bin whose groups all went holds no state to check: its columns
    // were typed by DataFusion's state fields (or, before that, it had the
    // key column only), which differ from a retracting call's state.
    let batches: Vec<RecordBatch> = batches
        .into_iter()
        .filter(|batch| batch.num_rows() > 0)
        .collect();
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

/// What changed in an aggregate's window bins since the last checkpoint:
/// a checkpoint writes only those bins and deletes the closed ones.
#[derive(Default)]
pub struct BinChanges {
    pub changed: BTreeSet<i64>,
    pub closed: BTreeSet<i64>,
}

impl BinChanges {
    /// Writes the changed bins (`encode`d) and deletes the closed ones.
    pub fn checkpoint<B>(
        &mut self,
        state: &mut StateWriter,
        bins: &mut BTreeMap<i64, B>,
        mut encode: impl FnMut(&mut B) -> Result<Vec<u8>>,
    ) -> Result<()> {
        self.checkpoint_each(state, |end| match bins.get_mut(&end) {
            Some(bin) => encode(bin).map(Some),
            None => Ok(None),
        })
    }

    /// Like `checkpoint`, `encode` giving the entry of the bin ending at a
    /// changed end (None: no such bin any more).
    pub fn checkpoint_each(
        &mut self,
        state: &mut StateWriter,
        mut encode: impl FnMut(i64) -> Result<Option<Vec<u8>>>,
    ) -> Result<()> {
        for end in std::mem::take(&mut self.closed) {
            state.delete(&bin_name(end));
        }
        for end in std::mem::take(&mut self.changed) {
            if let Some(entry) = encode(end)? {
                state.put(&bin_name(end), entry);
            }
        }
        Ok(())
    }
}

/// The checkpoint entry of the bin ending at `end`.
fn bin_name(end: i64) -> Vec<u8> {
    let mut name = b"bin/".to_vec();
    name.extend_from_slice(&end.to_be_bytes());
    name
}

/// A checkpoint's bins: (window end, entry).
pub type CheckpointedBins<'a> = Vec<(i64, &'a [u8])>;

/// The bins a checkpoint holds.
pub fn checkpointed_bins(state: &StateReader) -> Result<CheckpointedBins<'_>> {
    state
        .with_prefix(b"bin/")
        .map(|(name, value)| {
            let end = decode_i64(&name[4..])
                .ok_or_else(|| WeirError::internal("malformed checkpoint key"))?;
            Ok((end, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::operators::aggregate::calls::evaluate;
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    /// COUNT(DISTINCT name): a list of strings as state.
    fn calls() -> Vec<AggregateCall> {
        let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, true)]));
        let function = AggregateExprBuilder::new(count_udaf(), vec![col("name", &schema).unwrap()])
            .schema(schema)
            .alias("names")
            .distinct()
            .build()
            .unwrap();
        vec![AggregateCall::new(Arc::new(function), None)]
    }

    fn group(calls: &[AggregateCall], names: &[&str]) -> Vec<Box<dyn Accumulator>> {
        let mut accumulators = new_accumulators(calls).unwrap();
        let values: ArrayRef =
            Arc::new(datafusion::arrow::array::StringArray::from(names.to_vec()));
        accumulators[0].update_batch(&[values]).unwrap();
        accumulators
    }

    /// The accumulators a snapshot leaves in place must report a copy:
    /// asked twice, the same state, and the same value after (a DataFusion
    /// upgrade that made one hand its state over fails here).
    #[test]
    fn kept_states_are_copies() {
        use datafusion::functions_aggregate::average::avg_udaf;
        use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
        use datafusion::functions_aggregate::sum::sum_udaf;
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
        ]));
        let functions = [count_udaf(), sum_udaf(), min_udaf(), max_udaf(), avg_udaf()];
        let columns: Vec<ArrayRef> = vec![
            Arc::new(datafusion::arrow::array::StringArray::from(vec![
                "b", "a", "c",
            ])),
            Arc::new(datafusion::arrow::array::Int64Array::from(vec![3, -1, 7])),
            Arc::new(datafusion::arrow::array::Float64Array::from(vec![
                0.1, 0.2, 0.3,
            ])),
        ];
        let mut checked = 0;
        for function in functions {
            for (index, column) in ["name", "n", "x"].into_iter().enumerate() {
                let built = AggregateExprBuilder::new(
                    function.clone(),
                    vec![col(column, &schema).unwrap()],
                )
                .schema(schema.clone())
                .alias("value")
                .build();
                let Ok(built) = built else { continue };
                let call = AggregateCall::new(Arc::new(built), None);
                assert!(call.state_is_kept());
                let Ok(mut accumulator) = call.accumulator() else {
                    continue;
                };
                if accumulator.update_batch(&[columns[index].clone()]).is_err() {
                    continue;
                }
                let value = accumulator.evaluate().unwrap();
                let first = snapshot(&call, &mut accumulator).unwrap();
                assert_eq!(accumulator.state().unwrap(), first, "{column}");
                assert_eq!(accumulator.evaluate().unwrap(), value, "{column}");
                checked += 1;
            }
        }
        assert!(checked >= 10, "{checked} accumulators checked");
        assert!(
            !calls()[0].state_is_kept(),
            "COUNT(DISTINCT text) hands over"
        );
        // COUNT(DISTINCT) over integers copies its set.
        let distinct = AggregateExprBuilder::new(count_udaf(), vec![col("n", &schema).unwrap()])
            .schema(schema.clone())
            .alias("distinct_n")
            .distinct()
            .build()
            .unwrap();
        let call = AggregateCall::new(Arc::new(distinct), None);
        assert!(call.state_is_kept());
        let mut accumulator = call.accumulator().unwrap();
        accumulator.update_batch(&[columns[1].clone()]).unwrap();
        let first = snapshot(&call, &mut accumulator).unwrap();
        assert_eq!(accumulator.state().unwrap(), first);
        assert_eq!(accumulator.evaluate().unwrap(), ScalarValue::Int64(Some(3)));
    }

    #[test]
    fn a_few_groups_are_stored_as_rows_and_read_back() {
        let calls = calls();
        let (mut first, mut second) = (group(&calls, &["a", "b", "a"]), group(&calls, &["c"]));
        let groups = [
            (b"k1".to_vec(), first.as_mut_slice()),
            (b"k2".to_vec(), second.as_mut_slice()),
        ];
        let value = encode_groups(groups.into_iter(), &calls).unwrap();
        assert_eq!(value[0], ROWS_FORMAT);
        assert!(
            value.len() < 100,
            "{} bytes for two small groups",
            value.len()
        );
        let mut bin = decode_bin(&calls, &value).unwrap();
        let count = |key: &[u8], bin: &mut Bin| evaluate(bin.get_mut(key).unwrap()).unwrap();
        assert_eq!(count(b"k1", &mut bin), vec![ScalarValue::Int64(Some(2))]);
        assert_eq!(count(b"k2", &mut bin), vec![ScalarValue::Int64(Some(1))]);
    }

    #[test]
    fn entries_written_as_arrow_ipc_still_read() {
        let calls = calls();
        let mut accumulators = group(&calls, &["x", "y"]);
        let state = snapshot(&calls[0], &mut accumulators[0]).unwrap();
        let states = vec![ScalarValue::iter_to_array(state).unwrap()];
        let value = encode_state(BinaryArray::from_iter_values([b"k"]), states).unwrap();
        let mut bin = decode_bin(&calls, &value).unwrap();
        let values = evaluate(bin.get_mut(b"k".as_slice()).unwrap()).unwrap();
        assert_eq!(values, vec![ScalarValue::Int64(Some(2))]);
    }

    #[test]
    fn a_damaged_row_entry_is_an_error() {
        let calls = calls();
        let mut accumulators = group(&calls, &["a"]);
        let groups = [(b"k".to_vec(), accumulators.as_mut_slice())];
        let value = encode_groups(groups.into_iter(), &calls).unwrap();
        let error = decode_bin(&calls, &value[..value.len() - 1]).err().unwrap();
        assert_eq!(error.code, crate::error::sqlstate::DATA_CORRUPTED);
    }

    #[test]
    fn a_bin_whose_groups_all_went_reads_back_empty() {
        let calls = calls();
        let value = encode_groups(std::iter::empty(), &calls).unwrap();
        assert!(decode_bin(&calls, &value).unwrap().is_empty());
        // As the previous release wrote it: the key column only.
        let value = encode_state(BinaryArray::from_iter_values(Vec::<&[u8]>::new()), vec![]);
        assert!(decode_bin(&calls, &value.unwrap()).unwrap().is_empty());
    }
}
