use std::str;

use bytes::{Buf, BufMut, BytesMut};

use crate::error::{PgWireError, PgWireResult};

/// Get null-terminated string, returns None when empty or
/// non null-terminated cstring read.
///
/// Note that this implementation will also advance cursor by 1 after reading
/// empty cstring. This behaviour works for how postgres wire protocol handling
/// key-value pairs, which is ended by a single `\0`
pub(crate) fn get_cstring(buf: &mut BytesMut) -> Option<String> {
    let mut i = 0;

    // with bound check to prevent invalid format
    while i < buf.remaining() && buf[i] != b'\0' {
        i += 1;
    }

    if i == buf.remaining() {
        return None;
    }

    // i+1: include the '\0'
    // move cursor to the end of cstring
    let string_buf = buf.split_to(i + 1);

    if i == 0 {
        None
    } else {
        Some(String::from_utf8_lossy(&string_buf[..i]).into_owned())
    }
}

// weir's change: frontend strings that are not UTF-8 are refused
// (22021, as Postgres refuses them) instead of decoded lossily, which
// stored U+FFFD for the client's bytes, and let two different invalid
// passwords or user names read as the same one.

/// Like `get_cstring`, but fails when the string is not valid UTF-8.
pub(crate) fn take_cstring_utf8(buf: &mut BytesMut) -> PgWireResult<Option<String>> {
    let Some(end) = buf.iter().position(|byte| *byte == b'\0') else {
        return Ok(None);
    };
    let string_buf = buf.split_to(end + 1);
    if end == 0 {
        return Ok(None);
    }
    match str::from_utf8(&string_buf[..end]) {
        Ok(text) => Ok(Some(text.to_owned())),
        Err(_) => Err(PgWireError::InvalidUtf8String),
    }
}

/// Put null-termianted string
///
/// You can put empty string by giving `""` as input.
pub(crate) fn put_cstring(buf: &mut BytesMut, input: &str) {
    buf.put_slice(input.as_bytes());
    buf.put_u8(b'\0');
}

pub(crate) fn put_option_cstring(buf: &mut BytesMut, input: &Option<String>) {
    if let Some(input) = input {
        put_cstring(buf, input);
    } else {
        buf.put_u8(b'\0');
    }
}

/// Try to read message length from buf, without actually move the cursor
pub(crate) fn get_length(buf: &BytesMut, offset: usize) -> Option<usize> {
    if buf.remaining() >= 4 + offset {
        Some((&buf[offset..4 + offset]).get_i32() as usize)
    } else {
        None
    }
}

/// Validate an on-wire element count before it is used to pre-allocate a
/// collection. Counts are unsigned; `count` elements of `elem_size` bytes each
/// must fit in the remaining buffer, or the message cannot be real.
pub(crate) fn ensure_count(count: usize, elem_size: usize, buf: &BytesMut) -> PgWireResult<()> {
    let remaining = buf.remaining();
    let needed = count.saturating_mul(elem_size);
    if needed > remaining {
        Err(PgWireError::InvalidElementCount(count, needed, remaining))
    } else {
        Ok(())
    }
}

// weir's change: reads of a message's fields that fail, instead of
// panicking, when the message is shorter than its fields claim.

/// Takes a `u8`, or fails when the message has no byte left.
pub(crate) fn take_u8(buf: &mut BytesMut) -> PgWireResult<u8> {
    ensure_count(1, 1, buf)?;
    Ok(buf.get_u8())
}

/// Takes a big-endian `u16`, or fails when fewer than 2 bytes are left.
pub(crate) fn take_u16(buf: &mut BytesMut) -> PgWireResult<u16> {
    ensure_count(1, 2, buf)?;
    Ok(buf.get_u16())
}

/// Takes a big-endian `i16`, or fails when fewer than 2 bytes are left.
pub(crate) fn take_i16(buf: &mut BytesMut) -> PgWireResult<i16> {
    ensure_count(1, 2, buf)?;
    Ok(buf.get_i16())
}

/// Takes a big-endian `u32`, or fails when fewer than 4 bytes are left.
pub(crate) fn take_u32(buf: &mut BytesMut) -> PgWireResult<u32> {
    ensure_count(1, 4, buf)?;
    Ok(buf.get_u32())
}

/// Takes a big-endian `i32`, or fails when fewer than 4 bytes are left.
pub(crate) fn take_i32(buf: &mut BytesMut) -> PgWireResult<i32> {
    ensure_count(1, 4, buf)?;
    Ok(buf.get_i32())
}

/// Takes `len` bytes, or fails when fewer are left.
pub(crate) fn take_bytes(buf: &mut BytesMut, len: usize) -> PgWireResult<BytesMut> {
    ensure_count(1, len, buf)?;
    Ok(buf.split_to(len))
}

/// Check if message_length matches and move the cursor to right position then
/// call the `decode_fn` for the body
pub(crate) fn decode_packet<T, F>(
    buf: &mut BytesMut,
    offset: usize,
    max_size: usize,
    decode_fn: F,
) -> PgWireResult<Option<T>>
where
    F: Fn(&mut BytesMut, usize) -> PgWireResult<T>,
{
    if let Some(msg_len) = get_length(buf, offset) {
        if msg_len > max_size {
            return Err(PgWireError::MessageTooLarge(max_size, msg_len));
        }

        // weir's change: a length below the length field's own 4 bytes is
        // refused, and the body is split off, so a message whose fields
        // claim more than its length fails alone instead of reading the
        // next message's bytes.
        if msg_len < 4 {
            return Err(PgWireError::InvalidElementCount(1, 4, msg_len));
        }
        if buf.remaining() >= msg_len + offset {
            buf.advance(offset + 4);
            let mut body = buf.split_to(msg_len - 4);
            return decode_fn(&mut body, msg_len).map(|r| Some(r));
        }
    }

    Ok(None)
}

// pub(crate) fn get_and_ensure_message_type(buf: &mut BytesMut, t: u8) -> PgWireResult<()> {
//     let msg_type = buf[0];
//     // ensure the type is corrent
//     if msg_type != t {
//         return Err(PgWireError::InvalidMessageType(t, msg_type));
//     }

//     Ok(())
// }

pub(crate) fn option_string_len(s: &Option<String>) -> usize {
    1 + s.as_ref().map(|s| s.len()).unwrap_or(0)
}

#[cfg(test)]
mod test {
    use super::get_cstring;
    use bytes::{BufMut, BytesMut};

    #[test]
    fn get_cstring_valid() {
        let mut buf = BytesMut::new();
        buf.put(&b"a cstring\0"[..]);
        buf.put(&b"\0"[..]);

        assert_eq!(Some("a cstring".into()), get_cstring(&mut buf));
        assert_eq!(None, get_cstring(&mut buf));
    }

    #[test]
    fn get_cstring_empty() {
        let mut buf = BytesMut::new();

        assert_eq!(None, get_cstring(&mut buf));
    }

    #[test]
    fn get_cstring_without_null() {
        let mut buf = BytesMut::new();
        buf.put(&b"a cstring"[..]);
        assert_eq!(None, get_cstring(&mut buf));
    }
}
