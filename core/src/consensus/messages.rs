//! Raft's wire messages and their codec.
//!
//! Format: one version byte ([`VERSION`]), one kind byte, then fixed big-endian fields; byte
//! strings are a u32 length then the bytes. Decoding is bounded: every length is checked against
//! the remaining input and a named limit before anything is allocated, trailing bytes are an
//! error, and no input makes it panic (a proptest feeds it random bytes).

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use super::{LogIndex, Term};

/// The codec version written as the first byte; decoders refuse others.
pub const VERSION: u8 = 1;
/// The largest encoded message accepted.
pub const MESSAGE_BYTES_MAX: usize = 16 << 20;
/// The most entries one AppendEntries may carry.
pub const ENTRIES_PER_MESSAGE_MAX: usize = 4096;
/// The largest single command.
pub const COMMAND_BYTES_MAX: usize = 4 << 20;

/// One log entry. An empty command is a leader's no-op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub term: Term,
    pub index: LogIndex,
    pub command: Bytes,
}

/// A message between voters. Every message carries the sender's term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// "Would you vote for me in `term`?" Sent without bumping the sender's own term.
    PreVote {
        term: Term,
        last_log_index: LogIndex,
        last_log_term: Term,
    },
    /// `term` is the requested term when granted, the responder's term otherwise.
    PreVoteResponse {
        term: Term,
        granted: bool,
    },
    RequestVote {
        term: Term,
        last_log_index: LogIndex,
        last_log_term: Term,
    },
    RequestVoteResponse {
        term: Term,
        granted: bool,
    },
    /// Entries follow `prev_log_index`, contiguous. `read_seq` is echoed back to confirm
    /// leadership for `read_index`.
    AppendEntries {
        term: Term,
        prev_log_index: LogIndex,
        prev_log_term: Term,
        entries: Vec<Entry>,
        leader_commit: LogIndex,
        read_seq: u64,
    },
    /// On success `index` is the last index known to match the leader's log (durable); on
    /// failure it is the index the leader should try next.
    AppendEntriesResponse {
        term: Term,
        success: bool,
        index: LogIndex,
        read_seq: u64,
    },
    /// One chunk of the leader's snapshot at `offset`; `done` marks the last chunk.
    InstallSnapshot {
        term: Term,
        last_index: LogIndex,
        last_term: Term,
        offset: u64,
        data: Bytes,
        done: bool,
        read_seq: u64,
    },
    /// `next_offset` is the byte the follower expects next; `done` once it stored the snapshot.
    InstallSnapshotResponse {
        term: Term,
        last_index: LogIndex,
        next_offset: u64,
        done: bool,
        read_seq: u64,
    },
}

/// Why bytes are not a message.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("message truncated: wanted {wanted} more bytes at {pos}")]
    Truncated { pos: usize, wanted: usize },
    #[error("unknown codec version {0}")]
    UnknownVersion(u8),
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("{what} of {len} exceeds the limit of {max}")]
    TooLarge { what: &'static str, len: usize, max: usize },
    #[error("invalid {0}")]
    Invalid(&'static str),
    #[error("{0} trailing bytes")]
    TrailingBytes(usize),
}

const KIND_PRE_VOTE: u8 = 1;
const KIND_PRE_VOTE_RESPONSE: u8 = 2;
const KIND_REQUEST_VOTE: u8 = 3;
const KIND_REQUEST_VOTE_RESPONSE: u8 = 4;
const KIND_APPEND_ENTRIES: u8 = 5;
const KIND_APPEND_ENTRIES_RESPONSE: u8 = 6;
const KIND_INSTALL_SNAPSHOT: u8 = 7;
const KIND_INSTALL_SNAPSHOT_RESPONSE: u8 = 8;

/// Bytes of an AppendEntries before its entries, and of each entry before its command: used by
/// the leader to keep messages under [`MESSAGE_BYTES_MAX`].
pub(crate) const APPEND_HEADER_BYTES: usize = 2 + 8 * 5 + 4;
pub(crate) const ENTRY_HEADER_BYTES: usize = 8 + 8 + 4;

impl Message {
    /// The sender's term.
    pub fn term(&self) -> Term {
        match self {
            Message::PreVote { term, .. }
            | Message::PreVoteResponse { term, .. }
            | Message::RequestVote { term, .. }
            | Message::RequestVoteResponse { term, .. }
            | Message::AppendEntries { term, .. }
            | Message::AppendEntriesResponse { term, .. }
            | Message::InstallSnapshot { term, .. }
            | Message::InstallSnapshotResponse { term, .. } => *term,
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(64);
        self.encode_into(&mut b);
        b.freeze()
    }

    /// About how many bytes [`encode`](Self::encode) makes (at least that many, for any
    /// message): room to reserve ahead.
    pub fn encoded_len_hint(&self) -> usize {
        const FIXED: usize = 64;
        match self {
            Message::AppendEntries { entries, .. } => {
                FIXED + entries.iter().map(|e| 8 + 8 + 4 + e.command.len()).sum::<usize>()
            }
            Message::InstallSnapshot { data, .. } => FIXED + 4 + data.len(),
            _ => FIXED,
        }
    }

    /// The bytes of [`encode`](Self::encode), appended to `b`: a peer frame's header and the
    /// message in one buffer, without the message's own first.
    pub fn encode_into<B: BufMut>(&self, b: &mut B) {
        b.put_u8(VERSION);
        match self {
            Message::PreVote {
                term,
                last_log_index,
                last_log_term,
            } => {
                b.put_u8(KIND_PRE_VOTE);
                b.put_u64(term.0);
                b.put_u64(last_log_index.0);
                b.put_u64(last_log_term.0);
            }
            Message::PreVoteResponse { term, granted } => {
                b.put_u8(KIND_PRE_VOTE_RESPONSE);
                b.put_u64(term.0);
                b.put_u8(u8::from(*granted));
            }
            Message::RequestVote {
                term,
                last_log_index,
                last_log_term,
            } => {
                b.put_u8(KIND_REQUEST_VOTE);
                b.put_u64(term.0);
                b.put_u64(last_log_index.0);
                b.put_u64(last_log_term.0);
            }
            Message::RequestVoteResponse { term, granted } => {
                b.put_u8(KIND_REQUEST_VOTE_RESPONSE);
                b.put_u64(term.0);
                b.put_u8(u8::from(*granted));
            }
            Message::AppendEntries {
                term,
                prev_log_index,
                prev_log_term,
                entries,
                leader_commit,
                read_seq,
            } => {
                b.put_u8(KIND_APPEND_ENTRIES);
                b.put_u64(term.0);
                b.put_u64(prev_log_index.0);
                b.put_u64(prev_log_term.0);
                b.put_u64(leader_commit.0);
                b.put_u64(*read_seq);
                b.put_u32(u32::try_from(entries.len()).expect("entries bounded by ENTRIES_PER_MESSAGE_MAX"));
                for e in entries {
                    b.put_u64(e.term.0);
                    b.put_u64(e.index.0);
                    put_bytes(b, &e.command);
                }
            }
            Message::AppendEntriesResponse {
                term,
                success,
                index,
                read_seq,
            } => {
                b.put_u8(KIND_APPEND_ENTRIES_RESPONSE);
                b.put_u64(term.0);
                b.put_u8(u8::from(*success));
                b.put_u64(index.0);
                b.put_u64(*read_seq);
            }
            Message::InstallSnapshot {
                term,
                last_index,
                last_term,
                offset,
                data,
                done,
                read_seq,
            } => {
                b.put_u8(KIND_INSTALL_SNAPSHOT);
                b.put_u64(term.0);
                b.put_u64(last_index.0);
                b.put_u64(last_term.0);
                b.put_u64(*offset);
                b.put_u8(u8::from(*done));
                b.put_u64(*read_seq);
                put_bytes(b, data);
            }
            Message::InstallSnapshotResponse {
                term,
                last_index,
                next_offset,
                done,
                read_seq,
            } => {
                b.put_u8(KIND_INSTALL_SNAPSHOT_RESPONSE);
                b.put_u64(term.0);
                b.put_u64(last_index.0);
                b.put_u64(*next_offset);
                b.put_u8(u8::from(*done));
                b.put_u64(*read_seq);
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        if bytes.len() > MESSAGE_BYTES_MAX {
            return Err(DecodeError::TooLarge {
                what: "message bytes",
                len: bytes.len(),
                max: MESSAGE_BYTES_MAX,
            });
        }
        let mut r = Reader { buf: bytes, pos: 0 };
        let version = r.u8()?;
        if version != VERSION {
            return Err(DecodeError::UnknownVersion(version));
        }
        let kind = r.u8()?;
        let msg = match kind {
            KIND_PRE_VOTE => Message::PreVote {
                term: Term(r.u64()?),
                last_log_index: LogIndex(r.u64()?),
                last_log_term: Term(r.u64()?),
            },
            KIND_PRE_VOTE_RESPONSE => Message::PreVoteResponse {
                term: Term(r.u64()?),
                granted: r.bool()?,
            },
            KIND_REQUEST_VOTE => Message::RequestVote {
                term: Term(r.u64()?),
                last_log_index: LogIndex(r.u64()?),
                last_log_term: Term(r.u64()?),
            },
            KIND_REQUEST_VOTE_RESPONSE => Message::RequestVoteResponse {
                term: Term(r.u64()?),
                granted: r.bool()?,
            },
            KIND_APPEND_ENTRIES => {
                let term = Term(r.u64()?);
                let prev_log_index = LogIndex(r.u64()?);
                let prev_log_term = Term(r.u64()?);
                let leader_commit = LogIndex(r.u64()?);
                let read_seq = r.u64()?;
                let count = r.u32()? as usize;
                if count > ENTRIES_PER_MESSAGE_MAX {
                    return Err(DecodeError::TooLarge {
                        what: "entry count",
                        len: count,
                        max: ENTRIES_PER_MESSAGE_MAX,
                    });
                }
                // Each entry takes at least its header: refuse counts the input cannot hold
                // before reserving room for them.
                if count.saturating_mul(ENTRY_HEADER_BYTES) > r.remaining() {
                    return Err(DecodeError::Truncated {
                        pos: r.pos,
                        wanted: count * ENTRY_HEADER_BYTES,
                    });
                }
                let mut entries = Vec::with_capacity(count);
                for i in 0..count {
                    let entry_term = Term(r.u64()?);
                    let index = LogIndex(r.u64()?);
                    let command = r.bytes(COMMAND_BYTES_MAX, "command bytes")?;
                    if index.0 != prev_log_index.0.wrapping_add(1).wrapping_add(i as u64) {
                        return Err(DecodeError::Invalid("entry index (not contiguous)"));
                    }
                    if entry_term > term {
                        return Err(DecodeError::Invalid("entry term (above the message's)"));
                    }
                    entries.push(Entry {
                        term: entry_term,
                        index,
                        command,
                    });
                }
                Message::AppendEntries {
                    term,
                    prev_log_index,
                    prev_log_term,
                    entries,
                    leader_commit,
                    read_seq,
                }
            }
            KIND_APPEND_ENTRIES_RESPONSE => Message::AppendEntriesResponse {
                term: Term(r.u64()?),
                success: r.bool()?,
                index: LogIndex(r.u64()?),
                read_seq: r.u64()?,
            },
            KIND_INSTALL_SNAPSHOT => Message::InstallSnapshot {
                term: Term(r.u64()?),
                last_index: LogIndex(r.u64()?),
                last_term: Term(r.u64()?),
                offset: r.u64()?,
                done: r.bool()?,
                read_seq: r.u64()?,
                data: r.bytes(MESSAGE_BYTES_MAX, "snapshot chunk bytes")?,
            },
            KIND_INSTALL_SNAPSHOT_RESPONSE => Message::InstallSnapshotResponse {
                term: Term(r.u64()?),
                last_index: LogIndex(r.u64()?),
                next_offset: r.u64()?,
                done: r.bool()?,
                read_seq: r.u64()?,
            },
            other => return Err(DecodeError::UnknownKind(other)),
        };
        if r.remaining() != 0 {
            return Err(DecodeError::TrailingBytes(r.remaining()));
        }
        Ok(msg)
    }
}

fn put_bytes<B: BufMut>(b: &mut B, data: &[u8]) {
    b.put_u32(u32::try_from(data.len()).expect("byte strings bounded by MESSAGE_BYTES_MAX"));
    b.put_slice(data);
}

/// A cursor over untrusted bytes: every read checks the remaining length first.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated {
                pos: self.pos,
                wanted: n,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Invalid("boolean")),
        }
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_be_bytes(a))
    }

    fn bytes(&mut self, max: usize, what: &'static str) -> Result<Bytes, DecodeError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(DecodeError::TooLarge { what, len, max });
        }
        Ok(Bytes::copy_from_slice(self.take(len)?))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn samples() -> Vec<Message> {
        vec![
            Message::PreVote {
                term: Term(3),
                last_log_index: LogIndex(10),
                last_log_term: Term(2),
            },
            Message::PreVoteResponse {
                term: Term(3),
                granted: true,
            },
            Message::RequestVote {
                term: Term(u64::MAX),
                last_log_index: LogIndex(0),
                last_log_term: Term(0),
            },
            Message::RequestVoteResponse {
                term: Term(4),
                granted: false,
            },
            Message::AppendEntries {
                term: Term(5),
                prev_log_index: LogIndex(7),
                prev_log_term: Term(4),
                entries: vec![
                    Entry {
                        term: Term(4),
                        index: LogIndex(8),
                        command: Bytes::from_static(b"create /a"),
                    },
                    Entry {
                        term: Term(5),
                        index: LogIndex(9),
                        command: Bytes::new(),
                    },
                ],
                leader_commit: LogIndex(8),
                read_seq: 42,
            },
            Message::AppendEntriesResponse {
                term: Term(5),
                success: true,
                index: LogIndex(9),
                read_seq: 42,
            },
            Message::InstallSnapshot {
                term: Term(6),
                last_index: LogIndex(100),
                last_term: Term(5),
                offset: 4096,
                data: Bytes::from_static(b"tree bytes"),
                done: true,
                read_seq: 1,
            },
            Message::InstallSnapshotResponse {
                term: Term(6),
                last_index: LogIndex(100),
                next_offset: 4106,
                done: true,
                read_seq: 1,
            },
        ]
    }

    /// `encode_into` appends what `encode` makes, after whatever the buffer held, and the hint
    /// is never short of it.
    #[test]
    fn encode_into_appends_the_encoding_within_the_hint() {
        let mut compared = 0;
        for msg in samples() {
            let mut buf = b"head".to_vec();
            msg.encode_into(&mut buf);
            let expected = msg.encode();
            assert_eq!(&buf[..4], b"head");
            assert_eq!(&buf[4..], &expected[..], "{msg:?}");
            assert!(
                msg.encoded_len_hint() >= expected.len(),
                "{msg:?}: hint {} < {}",
                msg.encoded_len_hint(),
                expected.len()
            );
            compared += 1;
        }
        println!("{compared} messages compared");
        assert!(compared >= 8, "every kind compared");
    }

    #[test]
    fn every_kind_round_trips() {
        for msg in samples() {
            let bytes = msg.encode();
            assert_eq!(Message::decode(&bytes), Ok(msg));
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut checked = 0;
        for msg in samples() {
            let bytes = msg.encode();
            for cut in 0..bytes.len() {
                assert!(Message::decode(&bytes[..cut]).is_err(), "{msg:?} cut at {cut}");
                checked += 1;
            }
        }
        assert!(checked > 100, "only {checked} truncations checked");
    }

    #[test]
    fn garbage_is_refused() {
        let ae = samples()[4].encode();
        let mut trailing = ae.to_vec();
        trailing.push(0);
        assert_eq!(Message::decode(&trailing), Err(DecodeError::TrailingBytes(1)));
        let mut version = ae.to_vec();
        version[0] = 9;
        assert_eq!(Message::decode(&version), Err(DecodeError::UnknownVersion(9)));
        let mut kind = ae.to_vec();
        kind[1] = 200;
        assert_eq!(Message::decode(&kind), Err(DecodeError::UnknownKind(200)));
        // An entry count of u32::MAX must be refused before any allocation.
        let mut count = ae.to_vec();
        count[42..46].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(Message::decode(&count), Err(DecodeError::TooLarge { .. })));
        let mut count = ae.to_vec();
        count[42..46].copy_from_slice(&4000u32.to_be_bytes());
        assert!(matches!(Message::decode(&count), Err(DecodeError::Truncated { .. })));
        // A boolean that is neither 0 nor 1.
        let mut b = samples()[1].encode().to_vec();
        b[10] = 2;
        assert_eq!(Message::decode(&b), Err(DecodeError::Invalid("boolean")));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Message::decode(&bytes);
        }

        #[test]
        fn mutated_messages_never_panic(which in 0usize..8, pos in any::<usize>(), byte in any::<u8>()) {
            let mut bytes = samples()[which].encode().to_vec();
            let at = pos % bytes.len();
            bytes[at] = byte;
            if let Ok(msg) = Message::decode(&bytes) {
                prop_assert_eq!(msg.encode().to_vec(), bytes);
            }
        }
    }
}
