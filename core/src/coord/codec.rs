//! The byte codec shared by the coordinator's log commands, snapshots and client RPC.
//!
//! Contract: big-endian fixed-width integers, length-prefixed byte strings and counted lists.
//! The [`Reader`] is bounded: every length or count is checked against the bytes that remain
//! (and a caller-given maximum) before anything is allocated, so damaged or hostile bytes give a
//! [`DecodeError`], never a panic or a huge allocation.

use thiserror::Error;

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    #[error("unknown version {0}")]
    Version(u8),
    #[error("unknown tag {0}")]
    Tag(u8),
    #[error("{what} of {len} exceeds the limit of {max}")]
    TooLong { what: &'static str, len: u64, max: u64 },
    #[error("not UTF-8 text")]
    Utf8,
    #[error("{0} trailing bytes")]
    Trailing(usize),
    #[error("invalid value: {0}")]
    Invalid(&'static str),
}

/// Appends encoded values to a buffer.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    /// A writer with room for `bytes` before its first growth.
    pub fn with_capacity(bytes: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(bytes),
        }
    }
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(u32::try_from(v.len()).expect("encoded values are below 4 GiB by the limits"));
        self.buf.extend_from_slice(v);
    }
    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    pub fn opt_i32(&mut self, v: Option<i32>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.i32(v);
            }
        }
    }
    pub fn count(&mut self, n: usize) {
        self.u32(u32::try_from(n).expect("counts are below 4 billion by the limits"));
    }
}

/// Reads encoded values from a slice, never past its end.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Truncated {
                needed: n - self.bytes.len(),
            });
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(self.u32()? as i32)
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Invalid("bool")),
        }
    }
    /// A length-prefixed byte string of at most `max` bytes.
    pub fn bytes(&mut self, what: &'static str, max: usize) -> Result<Vec<u8>, DecodeError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(DecodeError::TooLong {
                what,
                len: len as u64,
                max: max as u64,
            });
        }
        Ok(self.take(len)?.to_vec())
    }
    pub fn string(&mut self, what: &'static str, max: usize) -> Result<String, DecodeError> {
        String::from_utf8(self.bytes(what, max)?).map_err(|_| DecodeError::Utf8)
    }
    pub fn opt_i32(&mut self) -> Result<Option<i32>, DecodeError> {
        Ok(if self.bool()? { Some(self.i32()?) } else { None })
    }
    /// A list count of at most `max` whose items take at least `item_bytes_min` bytes each, so a
    /// count larger than the remaining bytes could hold is refused before any allocation.
    pub fn count(&mut self, what: &'static str, max: usize, item_bytes_min: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        let fits = self.remaining() / item_bytes_min.max(1);
        if n > max || n > fits {
            return Err(DecodeError::TooLong {
                what,
                len: n as u64,
                max: max.min(fits) as u64,
            });
        }
        Ok(n)
    }
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing(self.bytes.len()))
        }
    }
}
