//! `Reader`: the bounded cursor every request decoder reads untrusted bytes through.
//!
//! Contract: no method panics on any input, and no method allocates more than the bytes it has
//! already proven are present. Every length or count read off the wire is checked against the
//! bytes remaining *before* anything is allocated: an array of N elements whose smallest encoding
//! is S bytes needs N*S bytes left, so a 6-byte frame can never ask for 150 GB. Counts are also
//! capped per array by [`Limits::array_len_max`] and per request by
//! [`Limits::request_elements_max`] (which bounds how much larger the decoded structs can be
//! than the frame), and tagged-field sections by [`Limits::tagged_fields_max`]. Decoders built on it follow the fixed depth of Kafka's schemas,
//! so recursion never depends on the input.
//!
//! Fault model: the bytes are arbitrary (truncated, hostile, bit-flipped). Every failure is a
//! [`DecodeError`] naming the offset where reading stopped.

use std::sync::Arc;

use bytes::Bytes;
use thiserror::Error;

use super::Uuid;

/// Why a frame could not be decoded. Operating errors: the connection sent bad bytes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("needed {needed} bytes at offset {offset}, only {remaining} remain")]
    Truncated {
        offset: usize,
        needed: usize,
        remaining: usize,
    },
    #[error("invalid length {len} at offset {offset}")]
    InvalidLength { offset: usize, len: i64 },
    #[error(
        "array of {count} elements at offset {offset} needs at least {bytes_min} bytes, \
         only {remaining} remain"
    )]
    ArrayOverrun {
        offset: usize,
        count: usize,
        bytes_min: usize,
        remaining: usize,
    },
    #[error("array of {count} elements at offset {offset} exceeds array_len_max {max}")]
    ArrayTooLong { offset: usize, count: usize, max: usize },
    #[error(
        "array of {count} elements at offset {offset} brings the frame to {total} elements, \
         over request_elements_max {max}"
    )]
    TooManyElements {
        offset: usize,
        count: usize,
        total: usize,
        max: usize,
    },
    #[error("{count} tagged fields at offset {offset} exceed tagged_fields_max {max}")]
    TooManyTaggedFields { offset: usize, count: usize, max: usize },
    #[error("varint at offset {offset} is longer than {bytes_max} bytes")]
    VarintTooLong { offset: usize, bytes_max: usize },
    #[error("string of {len} bytes at offset {offset} is over 32767 bytes")]
    StringTooLong { offset: usize, len: usize },
    #[error("string at offset {offset} is not UTF-8")]
    InvalidUtf8 { offset: usize },
    #[error("null at offset {offset} where {field} is not nullable")]
    UnexpectedNull { offset: usize, field: &'static str },
    #[error("frame of {len} bytes exceeds request_bytes_max {max}")]
    FrameTooLarge { len: usize, max: usize },
    #[error("unknown api key {api_key}")]
    UnknownApiKey {
        api_key: i16,
        header: super::header::RequestHeader,
    },
    #[error("api key {} does not support version {}", header.api_key, header.api_version)]
    UnsupportedVersion { header: super::header::RequestHeader },
    #[error("{remaining} bytes left over after the body")]
    TrailingBytes { remaining: usize },
}

/// Input limits. Each caps memory or work that a single frame can cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame accepted (Kafka's `socket.request.max.bytes`). A client decoding
    /// responses sets it from what it asked for (a fetch's `max_bytes` plus slack).
    pub request_bytes_max: usize,
    /// Most elements one array may hold, whatever the bytes allow.
    pub array_len_max: usize,
    /// Most array elements in one frame (request or response), all arrays together. A decoded element takes more
    /// memory than its smallest encoding (a 3-byte partition entry becomes a 40-byte struct), so
    /// this, not the frame size, bounds the memory one request can make us allocate.
    pub request_elements_max: usize,
    /// Most tagged fields one tagged-field section may hold.
    pub tagged_fields_max: usize,
}

/// Kafka's default `socket.request.max.bytes`: 100 MiB.
pub const REQUEST_BYTES_MAX: usize = 100 * 1024 * 1024;
/// Elements per array: far above any real request (partitions per topic, topics per request).
pub const ARRAY_LEN_MAX: usize = 1_000_000;
/// Array elements per request: a follower fetching 100k partitions uses a tenth of it; at
/// about 100 bytes per decoded element it caps a request's structs near 100 MB.
pub const REQUEST_ELEMENTS_MAX: usize = 1_000_000;
/// Tagged fields per section: Kafka's schemas define a handful per struct.
pub const TAGGED_FIELDS_MAX: usize = 64;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_bytes_max: REQUEST_BYTES_MAX,
            array_len_max: ARRAY_LEN_MAX,
            request_elements_max: REQUEST_ELEMENTS_MAX,
            tagged_fields_max: TAGGED_FIELDS_MAX,
        }
    }
}

/// Longest string in any version (i16 length; Kafka caps compact strings the same way).
pub const STRING_BYTES_MAX: usize = i16::MAX as usize;

/// Elements reserved up front for an array; beyond this it grows as elements actually decode.
const PREALLOC_ELEMS_MAX: usize = 1024;

/// Smallest encodings, for array element minimums.
pub mod min_bytes {
    /// A non-flexible string or bytes (i16/i32 length) is at least 2 bytes.
    pub const STRING: usize = 2;
    /// A compact string: at least its 1-byte length.
    pub const COMPACT_STRING: usize = 1;
    pub const I32: usize = 4;
    /// Length prefix of a string in either encoding.
    pub fn string(flexible: bool) -> usize {
        if flexible {
            COMPACT_STRING
        } else {
            STRING
        }
    }
    /// Length prefix of an array in either encoding.
    pub fn array(flexible: bool) -> usize {
        if flexible {
            1
        } else {
            4
        }
    }
    /// A tagged-field section: at least its 1-byte count, and only in flexible versions.
    pub fn tags(flexible: bool) -> usize {
        usize::from(flexible)
    }
}

/// A bounded cursor over one frame. See the module comment for the contract. Cloning it keeps
/// a position to read again from (a client re-reads a KIP-511 ApiVersions answer as v0).
#[derive(Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    /// When the frame is held in a `Bytes`, record sets are sliced from it without copying.
    shared: Option<&'a Bytes>,
    pos: usize,
    limits: Limits,
    /// Array elements announced so far, against `limits.request_elements_max`.
    elements: usize,
    /// The topic name read last (see [`Reader::topic_name`]).
    topic: Option<Arc<str>>,
}

pub type Result<T> = std::result::Result<T, DecodeError>;

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], limits: Limits) -> Self {
        Reader {
            buf,
            shared: None,
            pos: 0,
            limits,
            elements: 0,
            topic: None,
        }
    }

    /// A reader whose record sets share `frame`'s allocation instead of copying.
    pub fn from_bytes(frame: &'a Bytes, limits: Limits) -> Self {
        Reader {
            buf: frame,
            shared: Some(frame),
            pos: 0,
            limits,
            elements: 0,
            topic: None,
        }
    }

    /// Starts from `last`, the topic name a previous frame of the connection ended with (see
    /// [`Reader::topic_name`]).
    pub fn with_topic(mut self, last: Option<Arc<str>>) -> Self {
        self.topic = last;
        self
    }

    /// The topic name read last, for the connection's next frame.
    pub fn take_topic(&mut self) -> Option<Arc<str>> {
        self.topic.take()
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    // The reads below are marked `#[inline]`, their error paths `#[cold]`: a decoder calls them
    // for every field, and as calls each cost more in saving registers and passing a `Result`
    // than the read itself (`skip_tagged_fields` ~50 instructions to read one zero byte).
    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(n));
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf[start..self.pos])
    }

    #[cold]
    fn truncated(&self, needed: usize) -> DecodeError {
        DecodeError::Truncated {
            offset: self.pos,
            needed,
            remaining: self.remaining(),
        }
    }

    #[inline]
    fn array_of<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    #[inline]
    pub fn i8(&mut self) -> Result<i8> {
        Ok(i8::from_be_bytes(self.array_of()?))
    }
    #[inline]
    pub fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array_of()?))
    }
    #[inline]
    pub fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array_of()?))
    }
    #[inline]
    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array_of()?))
    }
    #[inline]
    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array_of()?))
    }
    /// Kafka booleans: any non-zero byte is true, as the Java client reads them.
    pub fn bool(&mut self) -> Result<bool> {
        Ok(self.i8()? != 0)
    }
    pub fn uuid(&mut self) -> Result<Uuid> {
        Ok(Uuid(self.array_of()?))
    }

    /// Unsigned LEB128 of at most `bytes_max` bytes.
    #[inline]
    fn uvar(&mut self, bytes_max: usize) -> Result<u64> {
        // One byte below 0x80 is the whole varint: lengths, counts and an empty tag section
        // nearly always are.
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.uvar_long(bytes_max)
    }

    #[cold]
    #[inline(never)]
    fn uvar_long(&mut self, bytes_max: usize) -> Result<u64> {
        let offset = self.pos;
        let mut value: u64 = 0;
        for i in 0..bytes_max {
            let b = self.i8()? as u8;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::VarintTooLong { offset, bytes_max })
    }

    /// Unsigned varint (at most 5 bytes); bits beyond 32 are rejected as too long.
    #[inline]
    pub fn uvarint(&mut self) -> Result<u32> {
        let offset = self.pos;
        let v = self.uvar(5)?;
        u32::try_from(v).map_err(|_| DecodeError::VarintTooLong { offset, bytes_max: 5 })
    }

    /// Unsigned varlong (at most 10 bytes).
    pub fn uvarlong(&mut self) -> Result<u64> {
        self.uvar(10)
    }

    /// A length prefix: i16 (strings), i32 (bytes, arrays) or a compact uvarint (length + 1,
    /// 0 for null). `None` is null (-1, or compact 0); other negatives are invalid.
    #[inline]
    fn length(&mut self, flexible: bool, wide: bool) -> Result<Option<usize>> {
        let offset = self.pos;
        let len: i64 = if flexible {
            i64::from(self.uvarint()?) - 1
        } else if wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        match len {
            -1 => Ok(None),
            n if n < -1 => Err(DecodeError::InvalidLength { offset, len }),
            n => usize::try_from(n)
                .map(Some)
                .map_err(|_| DecodeError::InvalidLength { offset, len }),
        }
    }

    /// Strings are at most 32767 bytes in every version, compact ones included, as Kafka's own
    /// readers enforce: anything decoded here can be echoed back in a non-flexible response.
    pub fn nullable_string(&mut self, flexible: bool) -> Result<Option<String>> {
        match self.nullable_string_bytes(flexible)? {
            None => Ok(None),
            Some((offset, raw)) => std::str::from_utf8(raw)
                .map(|s| Some(s.to_owned()))
                .map_err(|_| DecodeError::InvalidUtf8 { offset }),
        }
    }

    /// A non-compact nullable string (the request header's client id), shared with `last` when
    /// it has the same bytes, else decoded and kept in `last` for the next.
    pub fn nullable_string_shared(&mut self, last: &mut Option<Arc<str>>) -> Result<Option<Arc<str>>> {
        let Some((offset, raw)) = self.nullable_string_bytes(false)? else {
            return Ok(None);
        };
        if let Some(known) = last.as_ref().filter(|known| known.as_bytes() == raw) {
            return Ok(Some(known.clone()));
        }
        let s: Arc<str> = std::str::from_utf8(raw)
            .map_err(|_| DecodeError::InvalidUtf8 { offset })?
            .into();
        *last = Some(s.clone());
        Ok(Some(s))
    }

    /// A topic name (a non-null string), shared with the one read last when it has the same
    /// bytes: no copy and no UTF-8 check. Produce and Fetch name their topic in every request
    /// and answer, and a connection nearly always names the same one again.
    #[inline]
    pub fn topic_name(&mut self, flexible: bool, field: &'static str) -> Result<Arc<str>> {
        let start = self.pos;
        let Some((offset, raw)) = self.nullable_string_bytes(flexible)? else {
            return Err(DecodeError::UnexpectedNull { offset: start, field });
        };
        match &self.topic {
            Some(known) if crate::short_eq::same_bytes(known.as_bytes(), raw) => Ok(known.clone()),
            _ => self.new_topic_name(offset, raw),
        }
    }

    /// [`Reader::topic_name`]'s other name: checked, copied, and kept as the one read last.
    #[inline(never)]
    fn new_topic_name(&mut self, offset: usize, raw: &[u8]) -> Result<Arc<str>> {
        let s: Arc<str> = std::str::from_utf8(raw)
            .map_err(|_| DecodeError::InvalidUtf8 { offset })?
            .into();
        self.topic = Some(s.clone());
        Ok(s)
    }

    /// A nullable string's bytes (not yet checked as UTF-8) and the offset where they start.
    #[inline(always)]
    fn nullable_string_bytes(&mut self, flexible: bool) -> Result<Option<(usize, &'a [u8])>> {
        let offset = self.pos;
        match self.length(flexible, false)? {
            None => Ok(None),
            Some(len) if len > STRING_BYTES_MAX => Err(DecodeError::StringTooLong { offset, len }),
            Some(n) => {
                let offset = self.pos;
                Ok(Some((offset, self.take(n)?)))
            }
        }
    }

    pub fn string(&mut self, flexible: bool, field: &'static str) -> Result<String> {
        let offset = self.pos;
        self.nullable_string(flexible)?
            .ok_or(DecodeError::UnexpectedNull { offset, field })
    }

    pub fn nullable_bytes(&mut self, flexible: bool) -> Result<Option<Bytes>> {
        match self.length(flexible, true)? {
            None => Ok(None),
            Some(n) => {
                let raw = self.take(n)?;
                Ok(Some(match self.shared {
                    Some(frame) => frame.slice_ref(raw),
                    None => Bytes::copy_from_slice(raw),
                }))
            }
        }
    }

    pub fn bytes(&mut self, flexible: bool, field: &'static str) -> Result<Bytes> {
        let offset = self.pos;
        self.nullable_bytes(flexible)?
            .ok_or(DecodeError::UnexpectedNull { offset, field })
    }

    /// An array whose elements each take at least `elem_bytes_min` bytes on the wire; `None` is
    /// null. The count is checked against the bytes left and `array_len_max` before the vector
    /// is allocated.
    pub fn nullable_array<T>(
        &mut self,
        flexible: bool,
        elem_bytes_min: usize,
        mut elem: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Option<Vec<T>>> {
        assert!(elem_bytes_min > 0, "every Kafka array element takes at least one byte");
        let offset = self.pos;
        let Some(count) = self.length(flexible, true)? else {
            return Ok(None);
        };
        if count > self.limits.array_len_max {
            return Err(DecodeError::ArrayTooLong {
                offset,
                count,
                max: self.limits.array_len_max,
            });
        }
        let total = self.elements.saturating_add(count);
        if total > self.limits.request_elements_max {
            return Err(DecodeError::TooManyElements {
                offset,
                count,
                total,
                max: self.limits.request_elements_max,
            });
        }
        self.elements = total;
        let bytes_min = count.saturating_mul(elem_bytes_min);
        if bytes_min > self.remaining() {
            return Err(DecodeError::ArrayOverrun {
                offset,
                count,
                bytes_min,
                remaining: self.remaining(),
            });
        }
        // The bytes bound the count; still, grow past a small start rather than trust it.
        let mut out = Vec::with_capacity(count.min(PREALLOC_ELEMS_MAX));
        for _ in 0..count {
            out.push(elem(self)?);
        }
        Ok(Some(out))
    }

    pub fn array<T>(
        &mut self,
        flexible: bool,
        elem_bytes_min: usize,
        elem: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        let offset = self.pos;
        self.nullable_array(flexible, elem_bytes_min, elem)?
            .ok_or(DecodeError::UnexpectedNull { offset, field: "array" })
    }

    /// Reads a tagged-field section when `flexible`, handing each field's tag and payload to
    /// `known`; it returns whether it consumed the tag. Unknown tags are skipped, as Kafka
    /// requires. Nothing is read in non-flexible versions.
    pub fn tagged_fields(
        &mut self,
        flexible: bool,
        mut known: impl FnMut(u32, &mut Reader<'a>) -> Result<bool>,
    ) -> Result<()> {
        if !flexible {
            return Ok(());
        }
        let offset = self.pos;
        let count = self.uvarint()? as usize;
        if count > self.limits.tagged_fields_max {
            return Err(DecodeError::TooManyTaggedFields {
                offset,
                count,
                max: self.limits.tagged_fields_max,
            });
        }
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            let payload = self.take(size)?;
            let mut sub = Reader {
                buf: payload,
                shared: None,
                pos: 0,
                limits: self.limits,
                elements: self.elements,
                topic: None,
            };
            let consumed = known(tag, &mut sub)?;
            self.elements = sub.elements;
            if consumed && sub.remaining() != 0 {
                return Err(DecodeError::TrailingBytes {
                    remaining: sub.remaining(),
                });
            }
        }
        Ok(())
    }

    /// Skips a tagged-field section (flexible versions only).
    #[inline]
    pub fn skip_tagged_fields(&mut self, flexible: bool) -> Result<()> {
        // No tagged fields (a count of 0, one byte): nearly every structure.
        if flexible && self.buf.get(self.pos) == Some(&0) {
            self.pos += 1;
            return Ok(());
        }
        self.skip_some_tagged_fields(flexible)
    }

    #[cold]
    #[inline(never)]
    fn skip_some_tagged_fields(&mut self, flexible: bool) -> Result<()> {
        self.tagged_fields(flexible, |_, _| Ok(false))
    }

    /// Fails unless every byte has been read.
    pub fn finish(&self) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            remaining => Err(DecodeError::TrailingBytes { remaining }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(b: &[u8]) -> Reader<'_> {
        Reader::new(b, Limits::default())
    }

    #[test]
    fn ints_are_big_endian_and_truncation_is_an_error() {
        assert_eq!(r(&[0x01, 0x02]).i16(), Ok(0x0102));
        assert_eq!(r(&[0xff, 0xff, 0xff, 0xfe]).i32(), Ok(-2));
        assert!(matches!(
            r(&[1, 2, 3]).i32(),
            Err(DecodeError::Truncated { needed: 4, .. })
        ));
    }

    #[test]
    fn topic_names_are_shared_with_the_last_one_read_and_checked_otherwise() {
        // Two frames of one connection, each naming "orders" twice and "pay" once (non-flexible:
        // i16 lengths), then one naming "orders" again: the second frame starts from the name the
        // first ended with.
        let mut frame = Vec::new();
        for name in ["orders", "orders", "pay"] {
            frame.extend_from_slice(&(name.len() as i16).to_be_bytes());
            frame.extend_from_slice(name.as_bytes());
        }
        let mut rd = r(&frame);
        let a = rd.topic_name(false, "t").expect("valid");
        let b = rd.topic_name(false, "t").expect("valid");
        let c = rd.topic_name(false, "t").expect("valid");
        assert_eq!((&*a, &*b, &*c), ("orders", "orders", "pay"));
        assert!(Arc::ptr_eq(&a, &b), "the same name again is shared");
        assert!(!Arc::ptr_eq(&a, &c));
        let last = rd.take_topic();
        assert!(
            last.as_ref().is_some_and(|l| Arc::ptr_eq(l, &c)),
            "the reader ends with the last name"
        );
        let mut next = r(&[0, 3, b'p', b'a', b'y', 0, 6, b'o', b'r', b'd', b'e', b'r', b's']).with_topic(last);
        assert!(Arc::ptr_eq(&next.topic_name(false, "t").expect("valid"), &c));
        let again = next.topic_name(false, "t").expect("valid");
        assert_eq!(&*again, "orders");
        assert!(!Arc::ptr_eq(&again, &a), "a name seen two names ago is decoded anew");
        // Same length and first bytes as the name kept, one byte off: not taken for it.
        let mut off = r(&[0, 6, b'o', b'r', b'd', b'e', b'r', b'z']).with_topic(Some(a.clone()));
        assert_eq!(&*off.topic_name(false, "t").expect("valid"), "orderz");
        // Bad bytes are refused whatever was kept, and a null name is an error naming its field.
        let mut bad = r(&[0, 6, b'o', b'r', b'd', b'e', b'r', 0xff]).with_topic(Some(a.clone()));
        assert!(matches!(
            bad.topic_name(false, "t"),
            Err(DecodeError::InvalidUtf8 { offset: 2 })
        ));
        assert!(matches!(
            r(&[0xff, 0xff]).topic_name(false, "topics.name"),
            Err(DecodeError::UnexpectedNull {
                offset: 0,
                field: "topics.name"
            })
        ));
        assert!(matches!(
            r(&[0]).topic_name(true, "t"),
            Err(DecodeError::UnexpectedNull { .. })
        ));
        assert_eq!(
            &*r(&[4, b'p', b'a', b'y']).topic_name(true, "t").expect("compact"),
            "pay"
        );
    }

    #[test]
    fn varints_decode_and_overlong_ones_fail() {
        assert_eq!(r(&[0x96, 0x01]).uvarint(), Ok(150));
        assert_eq!(r(&[0xff, 0xff, 0xff, 0xff, 0x0f]).uvarint(), Ok(u32::MAX));
        assert!(r(&[0xff, 0xff, 0xff, 0xff, 0x1f]).uvarint().is_err());
        assert!(r(&[0x80; 6]).uvarint().is_err());
        assert_eq!(r(&[0x01]).uvarlong(), Ok(1));
        assert!(r(&[0x80; 11]).uvarlong().is_err());
    }

    #[test]
    fn strings_nulls_and_bad_lengths() {
        assert_eq!(r(&[0, 2, b'h', b'i']).string(false, "s"), Ok("hi".into()));
        assert_eq!(r(&[3, b'h', b'i']).string(true, "s"), Ok("hi".into()));
        assert_eq!(r(&[0xff, 0xff]).nullable_string(false), Ok(None));
        assert_eq!(r(&[0]).nullable_string(true), Ok(None));
        assert!(matches!(
            r(&[0xff, 0xfe]).nullable_string(false),
            Err(DecodeError::InvalidLength { len: -2, .. })
        ));
        assert!(matches!(
            r(&[0, 1, 0xff]).string(false, "s"),
            Err(DecodeError::InvalidUtf8 { .. })
        ));
        assert!(matches!(
            r(&[0xff, 0xff]).string(false, "s"),
            Err(DecodeError::UnexpectedNull { field: "s", .. })
        ));
    }

    #[test]
    fn compact_strings_are_capped_like_classic_ones() {
        let mut b = vec![0x81, 0x80, 0x02]; // compact length 32769 + 1
        b.extend(std::iter::repeat_n(b'a', 32_769));
        let res = r(&b).string(true, "s");
        assert!(
            matches!(res, Err(DecodeError::StringTooLong { len: 32_768, .. })),
            "{res:?}"
        );
        let mut b = vec![0x80, 0x80, 0x02]; // compact length 32768: exactly the maximum
        b.extend(std::iter::repeat_n(b'a', 32_767));
        assert_eq!(r(&b).string(true, "s").map(|s| s.len()), Ok(32_767));
    }

    #[test]
    fn huge_array_count_fails_before_allocating() {
        // i32::MAX elements of 4 bytes, announced in 4 bytes.
        let mut rd = r(&[0x7f, 0xff, 0xff, 0xff]);
        let res = rd.array(false, 4, |r| r.i32());
        assert!(matches!(res, Err(DecodeError::ArrayTooLong { .. })), "{res:?}");
        // Under array_len_max but over the bytes present.
        let mut rd = r(&[0x00, 0x00, 0x10, 0x00, 0, 0, 0, 1]);
        let res = rd.array(false, 4, |r| r.i32());
        assert!(
            matches!(res, Err(DecodeError::ArrayOverrun { count: 4096, .. })),
            "{res:?}"
        );
    }

    #[test]
    fn elements_are_budgeted_across_arrays() {
        let limits = Limits {
            request_elements_max: 3,
            ..Limits::default()
        };
        // Two arrays of two i32s each: the second crosses the budget of three.
        let bytes = [0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4];
        let mut rd = Reader::new(&bytes, limits);
        assert_eq!(rd.array(false, 4, |r| r.i32()), Ok(vec![1, 2]));
        let res = rd.array(false, 4, |r| r.i32());
        assert!(
            matches!(res, Err(DecodeError::TooManyElements { total: 4, .. })),
            "{res:?}"
        );
    }

    #[test]
    fn tagged_fields_are_bounded_and_skipped() {
        let mut rd = r(&[2, 0, 1, 9, 5, 0, 7]);
        assert_eq!(rd.skip_tagged_fields(true), Ok(()));
        assert_eq!(rd.i8(), Ok(7));
        assert!(matches!(
            r(&[0xff, 0xff, 0xff, 0xff, 0x0f]).skip_tagged_fields(true),
            Err(DecodeError::TooManyTaggedFields { .. })
        ));
        assert!(r(&[1, 0, 200]).skip_tagged_fields(true).is_err());
    }

    #[test]
    fn records_share_the_frame_allocation() {
        let frame = Bytes::from_static(&[0, 0, 0, 2, 0xab, 0xcd]);
        let mut rd = Reader::from_bytes(&frame, Limits::default());
        let b = rd.bytes(false, "records").expect("two bytes present");
        assert_eq!(&b[..], &[0xab, 0xcd]);
        assert_eq!(b.as_ptr(), frame[4..].as_ptr());
    }
}
