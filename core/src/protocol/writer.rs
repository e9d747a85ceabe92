//! `Writer`: encodes response fields in Kafka's wire formats into a growable buffer.
//!
//! Contract: the caller passes only values a version can carry; encoders in `api/` decide which
//! fields a version has. Our own values are trusted, so a length that cannot be represented
//! (a string over 32767 bytes, an array over i32::MAX elements) is a programmer error and
//! asserts rather than truncating silently.

use bytes::{BufMut, Bytes, BytesMut};

use super::Uuid;
use crate::runtime::{FileRegion, FramePart};

/// One tagged field to write: its tag and the encoder of its payload.
pub type TaggedField<'a> = (u32, &'a dyn Fn(&mut Writer));

/// A new writer's buffer, in bytes: most requests and responses fit, so encoding does not
/// reallocate the buffer at every doubling from empty (8, 16, 32, ... bytes), which cost ~5% of
/// the simulator's CPU under load.
pub const WRITER_BYTES_INITIAL: usize = 256;

#[derive(Debug, Default)]
pub struct Writer {
    buf: BytesMut,
    /// Finished pieces before `buf`, when a file region was written ([`Writer::file_region`]).
    parts: Vec<FramePart>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::with_capacity(WRITER_BYTES_INITIAL)
    }

    /// A writer whose buffer holds `bytes` before it grows (a frame whose size is known).
    pub fn with_capacity(bytes: usize) -> Self {
        Writer {
            buf: BytesMut::with_capacity(bytes),
            parts: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        let parts: u64 = self.parts.iter().map(FramePart::len).sum();
        self.buf.len() + usize::try_from(parts).unwrap_or(usize::MAX)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes written. A writer holding a file region must use [`Writer::finish_parts`].
    pub fn finish(self) -> Bytes {
        assert!(self.parts.is_empty(), "a writer with file regions finishes as parts");
        self.buf.freeze()
    }

    /// The frame as bytes and file regions, in order.
    pub fn finish_parts(mut self) -> Vec<FramePart> {
        if !self.buf.is_empty() {
            self.parts.push(FramePart::Bytes(self.buf.split().freeze()));
        }
        self.parts
    }

    /// A `bytes` field whose content is a file region, sent later from the file itself.
    pub fn file_region(&mut self, flexible: bool, region: FileRegion) {
        let len = usize::try_from(region.len).expect("a region sent in one frame fits in memory");
        self.length(flexible, true, Some(len));
        self.parts.push(FramePart::Bytes(self.buf.split().freeze()));
        if len > 0 {
            self.parts.push(FramePart::File(region));
        }
    }

    pub fn i8(&mut self, v: i8) {
        self.buf.put_i8(v);
    }
    pub fn i16(&mut self, v: i16) {
        self.buf.put_i16(v);
    }
    pub fn i32(&mut self, v: i32) {
        self.buf.put_i32(v);
    }
    pub fn i64(&mut self, v: i64) {
        self.buf.put_i64(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.put_u16(v);
    }
    pub fn bool(&mut self, v: bool) {
        self.buf.put_u8(u8::from(v));
    }
    pub fn uuid(&mut self, v: Uuid) {
        self.buf.put_slice(&v.0);
    }

    pub fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.put_u8((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.buf.put_u8(v as u8);
    }

    /// A length prefix; `None` is null. See `Reader::length`.
    fn length(&mut self, flexible: bool, wide: bool, len: Option<usize>) {
        match (flexible, len) {
            (true, None) => self.uvarint(0),
            (true, Some(n)) => {
                let n = u32::try_from(n).expect("our lengths fit a u32");
                self.uvarint(n.checked_add(1).expect("our lengths fit a u32"));
            }
            (false, None) if wide => self.i32(-1),
            (false, None) => self.i16(-1),
            (false, Some(n)) if wide => self.i32(i32::try_from(n).expect("our lengths fit an i32")),
            (false, Some(n)) => self.i16(i16::try_from(n).expect("strings we send are under 32 KiB")),
        }
    }

    pub fn string(&mut self, flexible: bool, v: &str) {
        self.length(flexible, false, Some(v.len()));
        self.buf.put_slice(v.as_bytes());
    }

    pub fn nullable_string(&mut self, flexible: bool, v: Option<&str>) {
        match v {
            None => self.length(flexible, false, None),
            Some(s) => self.string(flexible, s),
        }
    }

    pub fn bytes(&mut self, flexible: bool, v: &[u8]) {
        self.length(flexible, true, Some(v.len()));
        self.buf.put_slice(v);
    }

    pub fn nullable_bytes(&mut self, flexible: bool, v: Option<&[u8]>) {
        match v {
            None => self.length(flexible, true, None),
            Some(b) => self.bytes(flexible, b),
        }
    }

    pub fn array<T>(&mut self, flexible: bool, items: &[T], mut elem: impl FnMut(&mut Self, &T)) {
        self.length(flexible, true, Some(items.len()));
        for item in items {
            elem(self, item);
        }
    }

    pub fn nullable_array<T>(&mut self, flexible: bool, items: Option<&[T]>, elem: impl FnMut(&mut Self, &T)) {
        match items {
            None => self.length(flexible, true, None),
            Some(items) => self.array(flexible, items, elem),
        }
    }

    /// A tagged-field section: `fields` are (tag, encoder) in ascending tag order; each payload
    /// is encoded into a scratch writer to learn its size. Nothing in non-flexible versions.
    pub fn tagged_fields(&mut self, flexible: bool, fields: &[TaggedField<'_>]) {
        if !flexible {
            return;
        }
        self.uvarint(u32::try_from(fields.len()).expect("a handful of tags"));
        for (tag, encode) in fields {
            let mut scratch = Writer::default();
            encode(&mut scratch);
            self.uvarint(*tag);
            self.uvarint(u32::try_from(scratch.len()).expect("tagged fields are small"));
            self.buf.put_slice(&scratch.buf);
        }
    }

    /// Bytes already encoded (a frame's body after its header), as they are: no length prefix.
    pub fn raw(&mut self, v: &[u8]) {
        self.buf.put_slice(v);
    }

    /// An empty tagged-field section (flexible versions only).
    pub fn no_tagged_fields(&mut self, flexible: bool) {
        if flexible {
            self.uvarint(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::reader::{Limits, Reader};
    use super::*;

    #[test]
    fn writer_output_reads_back() {
        let mut w = Writer::new();
        w.i16(-3);
        w.uvarint(300);
        w.string(true, "héllo");
        w.nullable_string(false, None);
        w.bytes(false, &[1, 2, 3]);
        w.array(true, &[7i32, 8], |w, v| w.i32(*v));
        w.tagged_fields(true, &[(0, &|w: &mut Writer| w.i32(5))]);
        let b = w.finish();
        let mut r = Reader::new(&b, Limits::default());
        assert_eq!(r.i16(), Ok(-3));
        assert_eq!(r.uvarint(), Ok(300));
        assert_eq!(r.string(true, "s").as_deref(), Ok("héllo"));
        assert_eq!(r.nullable_string(false), Ok(None));
        assert_eq!(r.bytes(false, "b").map(|b| b.to_vec()), Ok(vec![1, 2, 3]));
        assert_eq!(r.array(true, 4, |r| r.i32()), Ok(vec![7, 8]));
        let mut seen = None;
        r.tagged_fields(true, |tag, sub| {
            seen = Some((tag, sub.i32()?));
            Ok(true)
        })
        .expect("well-formed section");
        assert_eq!(seen, Some((0, 5)));
        assert_eq!(r.finish(), Ok(()));
    }
}
