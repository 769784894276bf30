//! Arrow record batches as stored values (Arrow IPC stream format).

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
    let mut buffer = Vec::new();
    let mut writer = StreamWriter::try_new_with_options(&mut buffer, &batch.schema(), options)?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    Ok(buffer)
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
    use datafusion::arrow::array::Int64Array;
    use std::sync::Arc;

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
}
