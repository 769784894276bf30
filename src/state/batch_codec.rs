//! Arrow record batches as stored values (Arrow IPC stream format).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, GenericByteViewArray};
use datafusion::arrow::datatypes::{ByteViewType, DataType};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use datafusion::arrow::ipc::CompressionType;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{sqlstate, Result, WeirError};

pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>> {
    encode_with(batch, IpcWriteOptions::default())
}

/// Like `encode_batch`, each buffer LZ4-compressed: for values kept long
/// and read rarely (table log entries), where bytes on disk and in the
/// store's cache matter more than the few microseconds it costs. Readers
/// need nothing different.
pub fn encode_batch_compressed(batch: &RecordBatch) -> Result<Vec<u8>> {
    let options =
        IpcWriteOptions::default().try_with_compression(Some(CompressionType::LZ4_FRAME))?;
    encode_with(batch, options)
}

fn encode_with(batch: &RecordBatch, options: IpcWriteOptions) -> Result<Vec<u8>> {
    let batch = compact_views(batch)?;
    let mut buffer = Vec::new();
    let mut writer = StreamWriter::try_new_with_options(&mut buffer, &batch.schema(), options)?;
    writer.write(&batch)?;
    writer.finish()?;
    drop(writer);
    Ok(buffer)
}

/// `batch` with each text or bytes view column holding only the bytes
/// its rows use. A slice of a view array shares every data buffer of the
/// whole array, and IPC writes them all: a 4,096-row log entry cut from a
/// 170 k-row COPY part stored the part's every string (2 MB for 300 KB of
/// rows) until this. Columns already compact are kept as they are; view
/// types nested in lists or structs are rare here and written as they come.
pub fn compact_views(batch: &RecordBatch) -> Result<RecordBatch> {
    let wasteful = |column: &ArrayRef| match column.data_type() {
        DataType::Utf8View => wasted(column.as_string_view()),
        DataType::BinaryView => wasted(column.as_binary_view()),
        _ => false,
    };
    if !batch.columns().iter().any(wasteful) {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .map(|column| match column.data_type() {
            DataType::Utf8View if wasteful(column) => {
                Arc::new(column.as_string_view().gc()) as ArrayRef
            }
            DataType::BinaryView if wasteful(column) => Arc::new(column.as_binary_view().gc()),
            _ => column.clone(),
        })
        .collect();
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// Whether `array`'s data buffers hold more than twice what its views use
/// (beyond a page): copying then costs less than writing the rest.
fn wasted<T: ByteViewType + ?Sized>(array: &GenericByteViewArray<T>) -> bool {
    let held: usize = array.data_buffers().iter().map(|buffer| buffer.len()).sum();
    held > 4096 && held > 2 * array.total_buffer_bytes_used()
}

/// The batches in `value`; `what` names the value in the corruption error.
pub fn decode_batches(value: &[u8], what: &str) -> Result<Vec<RecordBatch>> {
    decode_batches_projected(value, what, None)
}

/// How many columns the batches in `value` have (only the schema is read).
pub fn stored_columns(value: &[u8], what: &str) -> Result<usize> {
    StreamReader::try_new(value, None)
        .map(|reader| reader.schema().fields().len())
        .map_err(|error| {
            WeirError::new(
                sqlstate::DATA_CORRUPTED,
                format!("{what} cannot be decoded: {error}"),
            )
        })
}

/// Like `decode_batches`, decoding only the `projection` columns.
pub fn decode_batches_projected(
    value: &[u8],
    what: &str,
    projection: Option<&[usize]>,
) -> Result<Vec<RecordBatch>> {
    let corrupt = |error: String| {
        WeirError::new(
            sqlstate::DATA_CORRUPTED,
            format!("{what} cannot be decoded: {error}"),
        )
    };
    let reader = StreamReader::try_new(value, projection.map(<[usize]>::to_vec))
        .map_err(|error| corrupt(error.to_string()))?;
    reader
        .map(|batch| batch.map_err(|error| corrupt(error.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringViewArray};

    #[test]
    fn batches_round_trip_and_garbage_is_corruption() {
        let batch = RecordBatch::try_from_iter([(
            "n",
            Arc::new(Int64Array::from(vec![1, 2])) as datafusion::arrow::array::ArrayRef,
        )])
        .unwrap();
        let decoded = decode_batches(&encode_batch(&batch).unwrap(), "test").unwrap();
        assert_eq!(decoded, vec![batch]);
        assert_eq!(
            decode_batches(b"nonsense", "test").unwrap_err().code,
            "XX001"
        );
    }

    #[test]
    fn compressed_batches_are_smaller_and_read_the_same() {
        let values: Vec<i64> = (0..4096).map(|i| 1_000 + i % 50).collect();
        let batch = RecordBatch::try_from_iter([(
            "n",
            Arc::new(Int64Array::from(values)) as datafusion::arrow::array::ArrayRef,
        )])
        .unwrap();
        let plain = encode_batch(&batch).unwrap();
        let compressed = encode_batch_compressed(&batch).unwrap();
        assert!(
            compressed.len() * 4 < plain.len(),
            "{} vs {}",
            compressed.len(),
            plain.len()
        );
        assert_eq!(decode_batches(&compressed, "test").unwrap(), vec![batch]);
    }

    #[test]
    fn a_slice_of_text_views_stores_only_its_own_strings() {
        let texts: Vec<String> = (0..10_000)
            .map(|i| format!("a text longer than twelve bytes {i}"))
            .collect();
        let whole = RecordBatch::try_from_iter([(
            "t",
            Arc::new(StringViewArray::from_iter_values(&texts)) as ArrayRef,
        )])
        .unwrap();
        let slice = whole.slice(100, 100);
        let encoded = encode_batch(&slice).unwrap();
        let whole_bytes = encode_batch(&whole).unwrap().len();
        assert!(
            encoded.len() * 50 < whole_bytes,
            "{} vs {whole_bytes}",
            encoded.len()
        );
        let decoded = decode_batches(&encoded, "test").unwrap();
        assert_eq!(decoded, vec![slice.clone()]);
        let compressed = encode_batch_compressed(&slice).unwrap();
        assert!(compressed.len() * 20 < whole_bytes, "{}", compressed.len());
    }
}
