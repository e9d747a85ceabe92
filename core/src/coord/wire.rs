//! The coordinator's internal RPC: client requests and responses, and the framing that lets peer
//! Raft messages share the same listener.
//!
//! Contract: every frame starts with a tag byte ([`FrameKind`]); client frames then carry a
//! version byte. The client sends one request at a time on a connection and the server answers
//! each with one [`Response`] carrying the request's id, every watch event fired for the session
//! since the last response (in firing order, before the answer: ZooKeeper's ordering guarantee),
//! and the answer.
//!
//! Fault model: frames come from the network; decoding is bounded (limits from `tree`) and
//! returns [`DecodeError`] on anything malformed, never panics.

use super::codec::{DecodeError, Reader, Writer};
use super::tree::{
    decode_op, encode_op, EventKind, Op, OpResult, SessionId, Stat, TreeError, WatchEvent, MULTI_OPS_MAX, OP_BYTES_MIN,
    PATH_BYTES_MAX,
};
use crate::consensus::{MembershipChange, Message, NodeId, MEMBERS_MAX};

pub use super::tree::DATA_BYTES_MAX;

const RPC_VERSION: u8 = 1;
/// Watch events carried by one response at most (the rest wait for the next one).
pub const EVENTS_PER_RESPONSE_MAX: usize = 1024;
/// Children listed in one response at most.
pub const CHILDREN_MAX: usize = 100_000;
/// An address (`host:port`) is at most this long.
pub const ADDR_BYTES_MAX: usize = 256;

/// The first byte of every frame on a coordinator's listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    Peer = 0x50,
    Request = 0x51,
    Response = 0x52,
    /// The handshake of [`super::auth`], before any other frame when a cluster secret is set.
    Auth = 0x53,
}

/// A Raft message from peer `from`, framed for the shared listener.
/// Tag, sender and message go into one buffer sized ahead: the message encoded apart and then
/// copied behind the header cost three allocations a frame (~4,500 frames a batched seed).
pub fn encode_peer(from: NodeId, msg: &Message) -> Vec<u8> {
    let mut buf = Vec::with_capacity(PEER_HEADER_BYTES + msg.encoded_len_hint());
    buf.push(FrameKind::Peer as u8);
    buf.extend_from_slice(&from.0.to_be_bytes());
    msg.encode_into(&mut buf);
    buf
}

/// A peer frame's tag and sender.
const PEER_HEADER_BYTES: usize = 1 + 8;

/// Room a client frame's buffer starts with: its 18-byte header and a path, or a reply's stat
/// and a small payload (a partition's state, a broker's registration), fit without growing.
/// From empty, a frame grew three or four times (8, 16, 32, 64 bytes...), each a reallocation.
const FRAME_BYTES_START: usize = 128;

/// Decodes a peer frame (tag included).
pub fn decode_peer(frame: &[u8]) -> Result<(NodeId, Message), DecodeError> {
    let mut r = Reader::new(frame);
    if r.u8()? != FrameKind::Peer as u8 {
        return Err(DecodeError::Invalid("not a peer frame"));
    }
    let from = NodeId(r.u64()?);
    let msg = Message::decode(&frame[PEER_HEADER_BYTES..]).map_err(|_| DecodeError::Invalid("raft message"))?;
    Ok((from, msg))
}

/// What a client asks. Reads with `sync` are linearizable (served after a read-index round);
/// without, they are served from the leader's applied state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    CreateSession {
        timeout_ms: u64,
    },
    CloseSession,
    /// A heartbeat; also collects pending watch events.
    Ping,
    Write(Op),
    Multi(Vec<Op>),
    Get {
        path: String,
        watch: bool,
        sync: bool,
    },
    Exists {
        path: String,
        watch: bool,
        sync: bool,
    },
    Children {
        path: String,
        watch: bool,
        sync: bool,
    },
    /// A barrier: answered once the leader has applied everything committed before it.
    Sync,
    /// The quorum's membership as the leader uses it; with a change, answered once the change
    /// committed (KIP-853's AddVoter/RemoveVoter, one node at a time).
    Membership(Option<MembershipChange>),
    /// A read the receiving server answers from its own applied state, leader or not
    /// (ZooKeeper's reads): possibly stale, never ahead of the quorum.
    Local(LocalRead),
    /// Leader only, needs no session: confirm leadership (a read-index round) and answer the
    /// commit index as of the request. A follower's [`LocalRead::Sync`] asks this.
    ReadIndex,
}

/// What [`Request::Local`] asks of one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalRead {
    Get {
        path: String,
        watch: bool,
    },
    Exists {
        path: String,
        watch: bool,
    },
    Children {
        path: String,
        watch: bool,
    },
    /// ZooKeeper's `sync`: answered once this server has applied at least the leader's commit
    /// index as of the request; refused (`Retry`) when the leader cannot be asked in time.
    Sync,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestFrame {
    pub request_id: u64,
    /// `SessionId(0)` before a session exists.
    pub session: SessionId,
    pub request: Request,
}

/// A successful answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Session(SessionId),
    Pong,
    Closed,
    Op(OpResult),
    Multi(Vec<OpResult>),
    Data(Vec<u8>, Stat),
    Stat(Option<Stat>),
    Children(Vec<String>),
    Synced,
    Membership {
        voters: Vec<NodeId>,
        learners: Vec<NodeId>,
    },
    /// The leader's confirmed commit index (the answer to [`Request::ReadIndex`]).
    ReadIndex(u64),
}

/// A failed answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RpcError {
    Tree(TreeError),
    /// The multi's op at `index` failed; nothing applied.
    MultiFailed {
        index: u32,
        error: TreeError,
    },
    /// Ask the leader instead (its address when known).
    NotLeader {
        leader: Option<String>,
    },
    /// The write was proposed but its outcome is not known (leadership lost, timeout).
    Unknown,
    /// Refused before anything happened (back-pressure, malformed request); safe to retry.
    Retry,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub request_id: u64,
    pub events: Vec<WatchEvent>,
    pub result: Result<Reply, RpcError>,
}

fn encode_stat(w: &mut Writer, s: &Stat) {
    w.u64(s.czxid);
    w.u64(s.mzxid);
    w.i32(s.version);
    w.i32(s.cversion);
    match s.ephemeral_owner {
        None => w.u8(0),
        Some(o) => {
            w.u8(1);
            w.u64(o.0);
        }
    }
    w.i32(s.num_children);
}

fn decode_stat(r: &mut Reader<'_>) -> Result<Stat, DecodeError> {
    Ok(Stat {
        czxid: r.u64()?,
        mzxid: r.u64()?,
        version: r.i32()?,
        cversion: r.i32()?,
        ephemeral_owner: if r.bool()? { Some(SessionId(r.u64()?)) } else { None },
        num_children: r.i32()?,
    })
}

fn encode_op_result(w: &mut Writer, r: &OpResult) {
    match r {
        OpResult::Created { path } => {
            w.u8(1);
            w.str(path);
        }
        OpResult::SetData { stat } => {
            w.u8(2);
            encode_stat(w, stat);
        }
        OpResult::Deleted => w.u8(3),
        OpResult::Checked => w.u8(4),
    }
}

fn decode_op_result(r: &mut Reader<'_>) -> Result<OpResult, DecodeError> {
    Ok(match r.u8()? {
        1 => OpResult::Created {
            path: r.string("path", PATH_BYTES_MAX)?,
        },
        2 => OpResult::SetData { stat: decode_stat(r)? },
        3 => OpResult::Deleted,
        4 => OpResult::Checked,
        t => return Err(DecodeError::Tag(t)),
    })
}

fn event_code(kind: EventKind) -> u8 {
    match kind {
        EventKind::NodeCreated => 1,
        EventKind::NodeDeleted => 2,
        EventKind::NodeDataChanged => 3,
        EventKind::NodeChildrenChanged => 4,
    }
}

fn event_from_code(code: u8) -> Result<EventKind, DecodeError> {
    Ok(match code {
        1 => EventKind::NodeCreated,
        2 => EventKind::NodeDeleted,
        3 => EventKind::NodeDataChanged,
        4 => EventKind::NodeChildrenChanged,
        t => return Err(DecodeError::Tag(t)),
    })
}

fn encode_read(w: &mut Writer, tag: u8, path: &str, watch: bool, sync: bool) {
    w.u8(tag);
    w.str(path);
    w.u8(u8::from(watch));
    w.u8(u8::from(sync));
}

impl RequestFrame {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(FRAME_BYTES_START);
        w.u8(FrameKind::Request as u8);
        w.u8(RPC_VERSION);
        w.u64(self.request_id);
        w.u64(self.session.0);
        match &self.request {
            Request::CreateSession { timeout_ms } => {
                w.u8(1);
                w.u64(*timeout_ms);
            }
            Request::CloseSession => w.u8(2),
            Request::Ping => w.u8(3),
            Request::Write(op) => {
                w.u8(4);
                encode_op(&mut w, op);
            }
            Request::Multi(ops) => {
                w.u8(5);
                w.count(ops.len());
                for op in ops {
                    encode_op(&mut w, op);
                }
            }
            Request::Get { path, watch, sync } => encode_read(&mut w, 6, path, *watch, *sync),
            Request::Exists { path, watch, sync } => encode_read(&mut w, 7, path, *watch, *sync),
            Request::Children { path, watch, sync } => encode_read(&mut w, 8, path, *watch, *sync),
            Request::Sync => w.u8(9),
            Request::Membership(change) => {
                w.u8(10);
                let (code, id) = match change {
                    None => (0, NodeId(0)),
                    Some(MembershipChange::AddLearner(id)) => (1, *id),
                    Some(MembershipChange::PromoteLearner(id)) => (2, *id),
                    Some(MembershipChange::Remove(id)) => (3, *id),
                };
                w.u8(code);
                w.u64(id.0);
            }
            Request::Local(read) => {
                w.u8(11);
                match read {
                    LocalRead::Get { path, watch } => encode_read(&mut w, 1, path, *watch, false),
                    LocalRead::Exists { path, watch } => encode_read(&mut w, 2, path, *watch, false),
                    LocalRead::Children { path, watch } => encode_read(&mut w, 3, path, *watch, false),
                    LocalRead::Sync => w.u8(4),
                }
            }
            Request::ReadIndex => w.u8(12),
        }
        w.buf
    }

    pub fn decode(frame: &[u8]) -> Result<RequestFrame, DecodeError> {
        let mut r = Reader::new(frame);
        if r.u8()? != FrameKind::Request as u8 {
            return Err(DecodeError::Invalid("not a request frame"));
        }
        let version = r.u8()?;
        if version != RPC_VERSION {
            return Err(DecodeError::Version(version));
        }
        let request_id = r.u64()?;
        let session = SessionId(r.u64()?);
        let request = match r.u8()? {
            1 => Request::CreateSession { timeout_ms: r.u64()? },
            2 => Request::CloseSession,
            3 => Request::Ping,
            4 => Request::Write(decode_op(&mut r)?),
            5 => {
                let n = r.count("multi ops", MULTI_OPS_MAX, OP_BYTES_MIN)?;
                let mut ops = Vec::with_capacity(n);
                for _ in 0..n {
                    ops.push(decode_op(&mut r)?);
                }
                Request::Multi(ops)
            }
            tag @ 6..=8 => {
                let path = r.string("path", PATH_BYTES_MAX)?;
                let watch = r.bool()?;
                let sync = r.bool()?;
                match tag {
                    6 => Request::Get { path, watch, sync },
                    7 => Request::Exists { path, watch, sync },
                    _ => Request::Children { path, watch, sync },
                }
            }
            9 => Request::Sync,
            10 => {
                let code = r.u8()?;
                let id = NodeId(r.u64()?);
                Request::Membership(match code {
                    0 => None,
                    1 => Some(MembershipChange::AddLearner(id)),
                    2 => Some(MembershipChange::PromoteLearner(id)),
                    3 => Some(MembershipChange::Remove(id)),
                    t => return Err(DecodeError::Tag(t)),
                })
            }
            11 => Request::Local(match r.u8()? {
                tag @ 1..=3 => {
                    let path = r.string("path", PATH_BYTES_MAX)?;
                    let watch = r.bool()?;
                    if r.bool()? {
                        return Err(DecodeError::Invalid("a local read carries no sync flag"));
                    }
                    match tag {
                        1 => LocalRead::Get { path, watch },
                        2 => LocalRead::Exists { path, watch },
                        _ => LocalRead::Children { path, watch },
                    }
                }
                4 => LocalRead::Sync,
                t => return Err(DecodeError::Tag(t)),
            }),
            12 => Request::ReadIndex,
            t => return Err(DecodeError::Tag(t)),
        };
        r.finish()?;
        Ok(RequestFrame {
            request_id,
            session,
            request,
        })
    }
}

impl Response {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(FRAME_BYTES_START);
        w.u8(FrameKind::Response as u8);
        w.u8(RPC_VERSION);
        w.u64(self.request_id);
        w.count(self.events.len());
        for e in &self.events {
            w.str(&e.path);
            w.u8(event_code(e.kind));
        }
        match &self.result {
            Ok(reply) => {
                w.u8(0);
                match reply {
                    Reply::Session(s) => {
                        w.u8(1);
                        w.u64(s.0);
                    }
                    Reply::Pong => w.u8(2),
                    Reply::Closed => w.u8(3),
                    Reply::Op(r) => {
                        w.u8(4);
                        encode_op_result(&mut w, r);
                    }
                    Reply::Multi(rs) => {
                        w.u8(5);
                        w.count(rs.len());
                        for r in rs {
                            encode_op_result(&mut w, r);
                        }
                    }
                    Reply::Data(data, stat) => {
                        w.u8(6);
                        w.bytes(data);
                        encode_stat(&mut w, stat);
                    }
                    Reply::Stat(stat) => {
                        w.u8(7);
                        match stat {
                            None => w.u8(0),
                            Some(s) => {
                                w.u8(1);
                                encode_stat(&mut w, s);
                            }
                        }
                    }
                    Reply::Children(names) => {
                        w.u8(8);
                        w.count(names.len());
                        for n in names {
                            w.str(n);
                        }
                    }
                    Reply::Synced => w.u8(9),
                    Reply::Membership { voters, learners } => {
                        w.u8(10);
                        for set in [voters, learners] {
                            w.count(set.len());
                            for id in set {
                                w.u64(id.0);
                            }
                        }
                    }
                    Reply::ReadIndex(index) => {
                        w.u8(11);
                        w.u64(*index);
                    }
                }
            }
            Err(e) => {
                w.u8(1);
                match e {
                    RpcError::Tree(t) => {
                        w.u8(1);
                        w.u8(t.code());
                    }
                    RpcError::MultiFailed { index, error } => {
                        w.u8(2);
                        w.u32(*index);
                        w.u8(error.code());
                    }
                    RpcError::NotLeader { leader } => {
                        w.u8(3);
                        match leader {
                            None => w.u8(0),
                            Some(a) => {
                                w.u8(1);
                                w.str(a);
                            }
                        }
                    }
                    RpcError::Unknown => w.u8(4),
                    RpcError::Retry => w.u8(5),
                }
            }
        }
        w.buf
    }

    pub fn decode(frame: &[u8]) -> Result<Response, DecodeError> {
        let mut r = Reader::new(frame);
        if r.u8()? != FrameKind::Response as u8 {
            return Err(DecodeError::Invalid("not a response frame"));
        }
        let version = r.u8()?;
        if version != RPC_VERSION {
            return Err(DecodeError::Version(version));
        }
        let request_id = r.u64()?;
        let n = r.count("events", EVENTS_PER_RESPONSE_MAX, 5)?;
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            let path = r.string("path", PATH_BYTES_MAX)?;
            let kind = event_from_code(r.u8()?)?;
            events.push(WatchEvent { path, kind });
        }
        let result = if r.bool()? {
            Err(match r.u8()? {
                1 => RpcError::Tree(TreeError::from_code(r.u8()?)?),
                2 => RpcError::MultiFailed {
                    index: r.u32()?,
                    error: TreeError::from_code(r.u8()?)?,
                },
                3 => RpcError::NotLeader {
                    leader: if r.bool()? {
                        Some(r.string("address", ADDR_BYTES_MAX)?)
                    } else {
                        None
                    },
                },
                4 => RpcError::Unknown,
                5 => RpcError::Retry,
                t => return Err(DecodeError::Tag(t)),
            })
        } else {
            Ok(match r.u8()? {
                1 => Reply::Session(SessionId(r.u64()?)),
                2 => Reply::Pong,
                3 => Reply::Closed,
                4 => Reply::Op(decode_op_result(&mut r)?),
                5 => {
                    let n = r.count("multi results", MULTI_OPS_MAX, 1)?;
                    let mut rs = Vec::with_capacity(n);
                    for _ in 0..n {
                        rs.push(decode_op_result(&mut r)?);
                    }
                    Reply::Multi(rs)
                }
                6 => {
                    let data = r.bytes("data", DATA_BYTES_MAX)?;
                    Reply::Data(data, decode_stat(&mut r)?)
                }
                7 => Reply::Stat(if r.bool()? { Some(decode_stat(&mut r)?) } else { None }),
                8 => {
                    let n = r.count("children", CHILDREN_MAX, 4)?;
                    let mut names = Vec::with_capacity(n);
                    for _ in 0..n {
                        names.push(r.string("child", PATH_BYTES_MAX)?);
                    }
                    Reply::Children(names)
                }
                9 => Reply::Synced,
                10 => {
                    let mut sets = [Vec::new(), Vec::new()];
                    for set in &mut sets {
                        let n = r.count("members", MEMBERS_MAX, 8)?;
                        for _ in 0..n {
                            set.push(NodeId(r.u64()?));
                        }
                    }
                    let [voters, learners] = sets;
                    Reply::Membership { voters, learners }
                }
                11 => Reply::ReadIndex(r.u64()?),
                t => return Err(DecodeError::Tag(t)),
            })
        };
        r.finish()?;
        Ok(Response {
            request_id,
            events,
            result,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::coord::tree::CreateMode;

    /// A peer frame is its tag, the sender (big-endian) and the message's own encoding, and
    /// decodes back to both.
    #[test]
    fn peer_frames_are_tag_sender_and_message() {
        use bytes::Bytes;

        use crate::consensus::{Entry, LogIndex, Term};
        let messages = [
            Message::RequestVoteResponse {
                term: Term(7),
                granted: true,
            },
            Message::AppendEntries {
                term: Term(3),
                prev_log_index: LogIndex(9),
                prev_log_term: Term(2),
                entries: vec![
                    Entry {
                        term: Term(3),
                        index: LogIndex(10),
                        command: Bytes::from(vec![7u8; 300]),
                    },
                    Entry {
                        term: Term(3),
                        index: LogIndex(11),
                        command: Bytes::new(),
                    },
                ],
                leader_commit: LogIndex(9),
                read_seq: 4,
            },
        ];
        for msg in messages {
            let frame = encode_peer(NodeId(0x0102_0304_0506_0708), &msg);
            let mut expected = vec![FrameKind::Peer as u8, 1, 2, 3, 4, 5, 6, 7, 8];
            expected.extend_from_slice(&msg.encode());
            assert_eq!(frame, expected, "{msg:?}");
            assert_eq!(decode_peer(&frame), Ok((NodeId(0x0102_0304_0506_0708), msg)));
        }
    }

    #[test]
    fn requests_and_responses_round_trip() {
        let requests = [
            Request::CreateSession { timeout_ms: 6000 },
            Request::CloseSession,
            Request::Ping,
            Request::Write(Op::Create {
                path: "/a".into(),
                data: b"x".to_vec(),
                mode: CreateMode::EphemeralSequential,
            }),
            Request::Multi(vec![
                Op::Check {
                    path: "/e".into(),
                    expected_version: Some(3),
                },
                Op::CheckCreated {
                    path: "/brokers/ids/2".into(),
                    czxid: u64::MAX - 1,
                },
                Op::CheckAbsent {
                    path: "/brokers/ids/3".into(),
                },
                Op::Delete {
                    path: "/a".into(),
                    expected_version: None,
                },
            ]),
            Request::Get {
                path: "/a".into(),
                watch: true,
                sync: false,
            },
            Request::Exists {
                path: "/a".into(),
                watch: false,
                sync: true,
            },
            Request::Children {
                path: "/".into(),
                watch: true,
                sync: true,
            },
            Request::Sync,
            Request::Membership(None),
            Request::Membership(Some(MembershipChange::AddLearner(NodeId(4)))),
            Request::Membership(Some(MembershipChange::PromoteLearner(NodeId(4)))),
            Request::Membership(Some(MembershipChange::Remove(NodeId(1)))),
            Request::Local(LocalRead::Get {
                path: "/a".into(),
                watch: true,
            }),
            Request::Local(LocalRead::Exists {
                path: "/a".into(),
                watch: false,
            }),
            Request::Local(LocalRead::Children {
                path: "/".into(),
                watch: true,
            }),
            Request::Local(LocalRead::Sync),
            Request::ReadIndex,
        ];
        for (i, request) in requests.into_iter().enumerate() {
            let frame = RequestFrame {
                request_id: i as u64,
                session: SessionId(7),
                request,
            };
            let bytes = frame.encode();
            assert_eq!(RequestFrame::decode(&bytes), Ok(frame));
            for cut in 0..bytes.len() {
                assert!(RequestFrame::decode(&bytes[..cut]).is_err());
            }
        }
        let stat = Stat {
            czxid: 1,
            mzxid: 2,
            version: 3,
            cversion: 4,
            ephemeral_owner: Some(SessionId(5)),
            num_children: 6,
        };
        let results = [
            Ok(Reply::Session(SessionId(9))),
            Ok(Reply::Pong),
            Ok(Reply::Closed),
            Ok(Reply::Op(OpResult::Created { path: "/x".into() })),
            Ok(Reply::Multi(vec![
                OpResult::Checked,
                OpResult::SetData { stat },
                OpResult::Deleted,
            ])),
            Ok(Reply::Data(b"d".to_vec(), stat)),
            Ok(Reply::Stat(None)),
            Ok(Reply::Stat(Some(stat))),
            Ok(Reply::Children(vec!["a".into(), "b".into()])),
            Ok(Reply::Synced),
            Ok(Reply::Membership {
                voters: vec![NodeId(2), NodeId(3), NodeId(4)],
                learners: vec![NodeId(5)],
            }),
            Ok(Reply::ReadIndex(42)),
            Err(RpcError::Tree(TreeError::BadVersion)),
            Err(RpcError::MultiFailed {
                index: 2,
                error: TreeError::NoNode,
            }),
            Err(RpcError::NotLeader {
                leader: Some("10.0.0.2:2181".into()),
            }),
            Err(RpcError::NotLeader { leader: None }),
            Err(RpcError::Unknown),
            Err(RpcError::Retry),
        ];
        for (i, result) in results.into_iter().enumerate() {
            let response = Response {
                request_id: i as u64,
                events: vec![WatchEvent {
                    path: "/w".into(),
                    kind: EventKind::NodeDeleted,
                }],
                result,
            };
            let bytes = response.encode();
            assert_eq!(Response::decode(&bytes), Ok(response));
            for cut in 0..bytes.len() {
                assert!(Response::decode(&bytes[..cut]).is_err());
            }
        }
    }

    proptest! {
        #[test]
        fn garbage_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = RequestFrame::decode(&bytes);
            let _ = Response::decode(&bytes);
            let _ = decode_peer(&bytes);
            for tag in [FrameKind::Request as u8, FrameKind::Response as u8] {
                let mut framed = vec![tag, RPC_VERSION];
                framed.extend_from_slice(&bytes);
                let _ = RequestFrame::decode(&framed);
                let _ = Response::decode(&framed);
            }
        }
    }
}
