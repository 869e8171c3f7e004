//! Headers carried inside a Kinesis record, which has no header field of its own.
//!
//! A message without headers is written as its plain payload, so other consumers read it
//! unchanged. A message with headers is written as a compact binary envelope:
//!
//! ```text
//! magic "\0RSK" | version 1 | varint count | (varint len, name, varint len, value)* | payload
//! ```
//!
//! A record that does not start with the magic, or whose envelope does not parse, is read as a
//! headerless message (a foreign producer's record), so nothing is lost.

use bytes::{BufMut, Bytes, BytesMut};
use ruststream::HeaderMap;

const MAGIC: &[u8; 4] = b"\0RSK";
const VERSION: u8 = 1;

/// The size of the record `payload` and `headers` become, without building it.
pub(crate) fn encoded_len(payload: &[u8], headers: &HeaderMap) -> usize {
    if headers.is_empty() {
        return payload.len();
    }
    let mut len = MAGIC.len() + 1 + varint_len(headers.len());
    for (name, value) in headers.iter() {
        len += varint_len(name.len()) + name.len() + varint_len(value.len()) + value.len();
    }
    len + payload.len()
}

/// The record bytes for `payload` with `headers`: the payload itself when there are none.
pub(crate) fn encode(payload: &[u8], headers: &HeaderMap) -> Bytes {
    let mut out = BytesMut::with_capacity(encoded_len(payload, headers));
    encode_into(&mut out, payload, headers);
    out.freeze()
}

/// Appends the record bytes for `payload` with `headers` to `out` ([`encoded_len`] of them).
pub(crate) fn encode_into(out: &mut BytesMut, payload: &[u8], headers: &HeaderMap) {
    if headers.is_empty() {
        out.put_slice(payload);
        return;
    }
    out.put_slice(MAGIC);
    out.put_u8(VERSION);
    put_varint(out, headers.len());
    for (name, value) in headers.iter() {
        put_varint(out, name.len());
        out.put_slice(name.as_bytes());
        put_varint(out, value.len());
        out.put_slice(value);
    }
    out.put_slice(payload);
}

/// Splits a record into its payload and headers; a record with no envelope is all payload.
// Inlined where records are decoded: a record without our envelope (one published without
// headers, or by another producer) goes as it is without a call.
#[inline]
pub(crate) fn decode(record: Bytes) -> (Bytes, HeaderMap) {
    if !record.starts_with(MAGIC) {
        return (record, HeaderMap::new());
    }
    decode_enveloped(record)
}

/// [`decode`] of a record that starts with our envelope's magic.
#[inline(never)]
fn decode_enveloped(record: Bytes) -> (Bytes, HeaderMap) {
    match parse(&record) {
        Some((headers, offset)) => (record.slice(offset..), headers),
        None => (record, HeaderMap::new()),
    }
}

/// The headers of an enveloped record and where its payload starts. Header values are slices
/// of the record: they share its buffer rather than copy it.
fn parse(record: &Bytes) -> Option<(HeaderMap, usize)> {
    let start = MAGIC.len() + 1;
    let rest = record.strip_prefix(MAGIC.as_slice())?;
    let (&version, rest) = rest.split_first()?;
    if version != VERSION {
        return None;
    }
    let mut cursor = Cursor { buf: rest, pos: 0 };
    let count = cursor.varint()?;
    let mut headers = HeaderMap::with_capacity(count.min(64));
    for _ in 0..count {
        let name = std::str::from_utf8(cursor.chunk()?).ok()?.to_owned();
        let value = cursor.chunk()?;
        let at = start + cursor.pos - value.len();
        headers.insert(name, record.slice(at..at + value.len()));
    }
    Some((headers, start + cursor.pos))
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn varint(&mut self) -> Option<usize> {
        let mut value: usize = 0;
        for shift in (0..64).step_by(7) {
            let byte = *self.buf.get(self.pos)?;
            self.pos += 1;
            value |= usize::from(byte & 0x7f).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    fn chunk(&mut self) -> Option<&'a [u8]> {
        let len = self.varint()?;
        let end = self.pos.checked_add(len)?;
        let chunk = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(chunk)
    }
}

fn varint_len(mut value: usize) -> usize {
    let mut len = 1;
    while value >= 0x80 {
        value >>= 7;
        len += 1;
    }
    len
}

fn put_varint(out: &mut BytesMut, mut value: usize) {
    while value >= 0x80 {
        out.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_without_headers_stays_plain() {
        let record = encode(b"{\"id\":1}", &HeaderMap::new());
        assert_eq!(&record[..], b"{\"id\":1}");
        let (payload, headers) = decode(record);
        assert_eq!(&payload[..], b"{\"id\":1}");
        assert!(headers.is_empty());
    }

    #[test]
    fn headers_round_trip_byte_for_byte() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", Bytes::from_static(b"application/json"));
        headers.insert("binary", Bytes::from(vec![0u8, 255, 10, 13, 0x80]));
        headers.insert("long", Bytes::from(vec![7u8; 300]));
        let record = encode(b"body", &headers);
        assert_eq!(record.len(), encoded_len(b"body", &headers));
        let (payload, decoded) = decode(record);
        assert_eq!(&payload[..], b"body");
        assert_eq!(decoded, headers);
    }

    #[test]
    fn a_foreign_record_reads_as_a_headerless_message() {
        for foreign in [
            &b"\0RSK"[..],
            b"\0RSK\x01\x05\x02ab",
            b"\0RSK\x09",
            b"plain text",
        ] {
            let (payload, headers) = decode(Bytes::copy_from_slice(foreign));
            assert_eq!(&payload[..], foreign);
            assert!(headers.is_empty());
        }
    }
}
