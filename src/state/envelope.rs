//! The envelope around every stored value: `[version u8][crc32 u32 BE][payload]`.

use crate::error::{sqlstate, Result, WeirError};

/// Bump when the payload encoding changes incompatibly.
pub const FORMAT_VERSION: u8 = 1;
const HEADER_BYTES: usize = 5;

pub fn seal(payload: &[u8]) -> Vec<u8> {
    let mut sealed = Vec::with_capacity(HEADER_BYTES + payload.len());
    sealed.push(FORMAT_VERSION);
    sealed.extend_from_slice(&crc32fast::hash(payload).to_be_bytes());
    sealed.extend_from_slice(payload);
    sealed
}

/// The error for a stored value that cannot be trusted.
pub fn corrupt(key: &[u8], what: &str) -> WeirError {
    WeirError::new(
        sqlstate::DATA_CORRUPTED,
        format!(
            "stored value for key {:?} is corrupt: {what}",
            String::from_utf8_lossy(key)
        ),
    )
    .with_hint("The data directory was damaged outside weir; restore it from a backup.")
}

pub fn open(key: &[u8], sealed: &[u8]) -> Result<Vec<u8>> {
    let corrupt = |what: &str| corrupt(key, what);
    if sealed.len() < HEADER_BYTES {
        return Err(corrupt("value is truncated"));
    }
    if sealed[0] != FORMAT_VERSION {
        return Err(corrupt(&format!(
            "format version {} is not {FORMAT_VERSION}",
            sealed[0]
        )));
    }
    let expected = u32::from_be_bytes([sealed[1], sealed[2], sealed[3], sealed[4]]);
    let payload = &sealed[HEADER_BYTES..];
    if crc32fast::hash(payload) != expected {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(payload.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        assert_eq!(open(b"k", &seal(b"hello")).unwrap(), b"hello");
    }

    #[test]
    fn flipped_bit_is_detected() {
        let mut sealed = seal(b"hello");
        sealed[7] ^= 0x01;
        let error = open(b"k", &sealed).unwrap_err();
        assert_eq!(error.code, sqlstate::DATA_CORRUPTED);
        assert!(error.message.contains("checksum"));
    }

    #[test]
    fn truncation_and_unknown_version_are_detected() {
        assert!(open(b"k", &[1, 2]).is_err());
        let mut sealed = seal(b"x");
        sealed[0] = 99;
        assert!(open(b"k", &sealed).unwrap_err().message.contains("version"));
    }
}
