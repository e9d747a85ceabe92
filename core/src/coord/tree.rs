//! The coordinator's data tree: ZooKeeper's data model as a deterministic state machine.
//!
//! What it owns: the znodes (data, data version, child version, ephemeral owner, creation and
//! modification index), the live sessions, and the encoding of the [`Command`]s that change them
//! (the entries of the consensus log) and of snapshots. [`Watches`] (one-shot, per server, not
//! replicated, as in ZooKeeper) live beside the tree and fire on the [`Change`]s an apply reports.
//!
//! Contract:
//! - [`Tree::apply`] is a pure function of the tree and the committed command (and its log index,
//!   which is the zxid and the id of a session it creates): every replica that applies the same
//!   commands in the same order holds the same tree.
//! - `multi` is atomic: either every op applies, or none does and the result names the first op
//!   that failed.
//! - Every op runs in a session: an op whose session is not live (expired or closed) fails with
//!   `SessionExpired`, so a client whose session expired cannot write (its ephemerals are gone).
//! - Closing a session deletes its ephemeral nodes in the same apply.
//!
//! Fault model: commands and snapshots arrive as bytes from disk or the network; their decoders
//! are bounded and return [`DecodeError`] on anything malformed, never panic.

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

use super::codec::{DecodeError, Reader, Writer};

/// A path is at most this long (ZooKeeper has no hard limit; ours bounds decoding).
pub const PATH_BYTES_MAX: usize = 1024;
/// A znode holds at most this much data (ZooKeeper's jute.maxbuffer default).
pub const DATA_BYTES_MAX: usize = 1024 * 1024;
/// A multi holds at most this many ops.
pub const MULTI_OPS_MAX: usize = 256;
/// A snapshot holds at most this many znodes and sessions.
pub const SNAPSHOT_NODES_MAX: usize = 1_000_000;
pub const SNAPSHOT_SESSIONS_MAX: usize = 1_000_000;

const COMMAND_VERSION: u8 = 1;
const SNAPSHOT_VERSION: u8 = 1;

/// A client session: the log index of the command that created it, so unique and deterministic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SessionId(pub u64);

/// How a znode is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateMode {
    Persistent,
    Ephemeral,
    PersistentSequential,
    EphemeralSequential,
}

impl CreateMode {
    fn ephemeral(self) -> bool {
        matches!(self, CreateMode::Ephemeral | CreateMode::EphemeralSequential)
    }
    fn sequential(self) -> bool {
        matches!(self, CreateMode::PersistentSequential | CreateMode::EphemeralSequential)
    }
    fn code(self) -> u8 {
        match self {
            CreateMode::Persistent => 0,
            CreateMode::Ephemeral => 1,
            CreateMode::PersistentSequential => 2,
            CreateMode::EphemeralSequential => 3,
        }
    }
    fn from_code(code: u8) -> Result<Self, DecodeError> {
        Ok(match code {
            0 => CreateMode::Persistent,
            1 => CreateMode::Ephemeral,
            2 => CreateMode::PersistentSequential,
            3 => CreateMode::EphemeralSequential,
            t => return Err(DecodeError::Tag(t)),
        })
    }
}

/// One write. `expected_version: None` is ZooKeeper's `-1` (any version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Create {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        expected_version: Option<i32>,
    },
    Delete {
        path: String,
        expected_version: Option<i32>,
    },
    /// Fails unless the node exists (with the version, when given). Used inside a multi to fence.
    Check {
        path: String,
        expected_version: Option<i32>,
    },
    /// Fails unless the node exists and was created at log index `czxid` (`BadVersion` when it
    /// was created at another): a version cannot tell a re-created ephemeral node from the one a
    /// reader saw (both start at version 0), its creation index can. Kafka's broker epoch
    /// (KIP-380) is this index of a broker's registration; a controller write made from a view
    /// carries one per broker it names, so it fails once a named broker registered anew.
    CheckCreated { path: String, czxid: u64 },
    /// Fails (`NodeExists`) if the node exists: a write decided while a broker was not
    /// registered fails once it registers.
    CheckAbsent { path: String },
}

/// A command of the consensus log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Opens a session whose id is the command's log index.
    CreateSession {
        timeout_ms: u64,
    },
    /// Closes a session (the client asked, or the leader saw it expire) and deletes its ephemerals.
    CloseSession {
        session: SessionId,
    },
    Op {
        session: SessionId,
        op: Op,
    },
    Multi {
        session: SessionId,
        ops: Vec<Op>,
    },
}

/// ZooKeeper's error codes that the tree can answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum TreeError {
    #[error("no node")]
    NoNode,
    #[error("node exists")]
    NodeExists,
    #[error("bad version")]
    BadVersion,
    #[error("node has children")]
    NotEmpty,
    #[error("ephemeral nodes may not have children")]
    NoChildrenForEphemerals,
    #[error("session expired")]
    SessionExpired,
    #[error("bad arguments")]
    BadArguments,
}

impl TreeError {
    pub fn code(self) -> u8 {
        match self {
            TreeError::NoNode => 1,
            TreeError::NodeExists => 2,
            TreeError::BadVersion => 3,
            TreeError::NotEmpty => 4,
            TreeError::NoChildrenForEphemerals => 5,
            TreeError::SessionExpired => 6,
            TreeError::BadArguments => 7,
        }
    }
    pub fn from_code(code: u8) -> Result<Self, DecodeError> {
        Ok(match code {
            1 => TreeError::NoNode,
            2 => TreeError::NodeExists,
            3 => TreeError::BadVersion,
            4 => TreeError::NotEmpty,
            5 => TreeError::NoChildrenForEphemerals,
            6 => TreeError::SessionExpired,
            7 => TreeError::BadArguments,
            t => return Err(DecodeError::Tag(t)),
        })
    }
}

/// A znode's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stat {
    /// Log index of the command that created the node.
    pub czxid: u64,
    /// Log index of the command that last changed its data.
    pub mzxid: u64,
    /// Data version: 0 at creation, +1 per set_data.
    pub version: i32,
    /// Child version: +1 per child created or deleted.
    pub cversion: i32,
    pub ephemeral_owner: Option<SessionId>,
    pub num_children: i32,
}

/// What one successful op did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    /// The created path (with the sequence suffix for sequential nodes).
    Created {
        path: String,
    },
    SetData {
        stat: Stat,
    },
    Deleted,
    Checked,
}

/// What applying a command answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    SessionCreated(SessionId),
    SessionClosed,
    Op(Result<OpResult, TreeError>),
    /// Err names the index of the first op that failed; nothing was applied.
    Multi(Result<Vec<OpResult>, (usize, TreeError)>),
}

/// What a change did to a node, for watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EventKind {
    NodeCreated,
    NodeDeleted,
    NodeDataChanged,
    NodeChildrenChanged,
}

/// One change an apply made.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    pub path: String,
    pub kind: EventKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Znode {
    data: Vec<u8>,
    stat: Stat,
    /// Child names (the last path component).
    children: BTreeSet<String>,
}

/// A live session's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    pub timeout_ms: u64,
}

/// The replicated state: znodes and sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    nodes: BTreeMap<String, Znode>,
    sessions: BTreeMap<SessionId, SessionInfo>,
    last_applied: u64,
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new()
    }
}

/// Checks a path's syntax: absolute, no empty, `.` or `..` components, no trailing slash.
pub fn validate_path(path: &str) -> Result<(), TreeError> {
    if path.len() > PATH_BYTES_MAX || !path.starts_with('/') {
        return Err(TreeError::BadArguments);
    }
    if path == "/" {
        return Ok(());
    }
    if path[1..]
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == ".." || c.contains('\0'))
    {
        return Err(TreeError::BadArguments);
    }
    Ok(())
}

/// The parent path and child name of a non-root path.
fn split(path: &str) -> (&str, &str) {
    let slash = path.rfind('/').expect("validated paths start with '/'");
    let parent = if slash == 0 { "/" } else { &path[..slash] };
    (parent, &path[slash + 1..])
}

fn version_matches(expected: Option<i32>, actual: i32) -> bool {
    expected.is_none_or(|v| v == actual)
}

/// Prior values of the nodes a multi touched, to roll it back.
type Undo = BTreeMap<String, Option<Znode>>;

impl Tree {
    pub fn new() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "/".to_string(),
            Znode {
                data: Vec::new(),
                stat: Stat::default(),
                children: BTreeSet::new(),
            },
        );
        Tree {
            nodes,
            sessions: BTreeMap::new(),
            last_applied: 0,
        }
    }

    /// The index of the last command applied (or of the snapshot restored).
    pub fn last_applied(&self) -> u64 {
        self.last_applied
    }

    pub fn sessions(&self) -> &BTreeMap<SessionId, SessionInfo> {
        &self.sessions
    }

    pub fn session_live(&self, session: SessionId) -> bool {
        self.sessions.contains_key(&session)
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Applies the committed command at log `index`; `changes` receives what it changed.
    pub fn apply(&mut self, index: u64, command: &Command, changes: &mut Vec<Change>) -> Applied {
        assert!(index > self.last_applied, "commands apply once, in index order");
        self.last_applied = index;
        match command {
            Command::CreateSession { timeout_ms } => {
                let session = SessionId(index);
                self.sessions.insert(
                    session,
                    SessionInfo {
                        timeout_ms: *timeout_ms,
                    },
                );
                Applied::SessionCreated(session)
            }
            Command::CloseSession { session } => {
                if self.sessions.remove(session).is_some() {
                    let owned: Vec<String> = self
                        .nodes
                        .iter()
                        .filter(|(_, n)| n.stat.ephemeral_owner == Some(*session))
                        .map(|(p, _)| p.clone())
                        .collect();
                    for path in owned {
                        let mut undo = Undo::new();
                        self.delete(index, &path, None, &mut undo, changes)
                            .expect("an ephemeral node has no children and exists");
                    }
                }
                Applied::SessionClosed
            }
            Command::Op { session, op } => {
                if !self.session_live(*session) {
                    return Applied::Op(Err(TreeError::SessionExpired));
                }
                let mut undo = Undo::new();
                let mut mine = Vec::new();
                let result = self.apply_op(index, *session, op, &mut undo, &mut mine);
                if result.is_err() {
                    self.rollback(undo);
                    mine.clear();
                }
                changes.extend(mine);
                Applied::Op(result)
            }
            Command::Multi { session, ops } => {
                if !self.session_live(*session) {
                    return Applied::Multi(Err((0, TreeError::SessionExpired)));
                }
                let mut undo = Undo::new();
                let mut mine = Vec::new();
                let mut results = Vec::with_capacity(ops.len());
                for (i, op) in ops.iter().enumerate() {
                    match self.apply_op(index, *session, op, &mut undo, &mut mine) {
                        Ok(r) => results.push(r),
                        Err(e) => {
                            self.rollback(undo);
                            return Applied::Multi(Err((i, e)));
                        }
                    }
                }
                changes.extend(mine);
                Applied::Multi(Ok(results))
            }
        }
    }

    fn rollback(&mut self, undo: Undo) {
        for (path, prior) in undo {
            match prior {
                Some(node) => self.nodes.insert(path, node),
                None => self.nodes.remove(&path),
            };
        }
    }

    fn remember(&self, path: &str, undo: &mut Undo) {
        if !undo.contains_key(path) {
            undo.insert(path.to_string(), self.nodes.get(path).cloned());
        }
    }

    fn apply_op(
        &mut self,
        index: u64,
        session: SessionId,
        op: &Op,
        undo: &mut Undo,
        changes: &mut Vec<Change>,
    ) -> Result<OpResult, TreeError> {
        match op {
            Op::Create { path, data, mode } => {
                validate_path(path)?;
                if path == "/" {
                    return Err(TreeError::NodeExists);
                }
                if data.len() > DATA_BYTES_MAX {
                    return Err(TreeError::BadArguments);
                }
                let (parent_path, _) = split(path);
                let parent = self.nodes.get(parent_path).ok_or(TreeError::NoNode)?;
                if parent.stat.ephemeral_owner.is_some() {
                    return Err(TreeError::NoChildrenForEphemerals);
                }
                let path = if mode.sequential() {
                    // ZooKeeper names sequential nodes by the parent's child version.
                    format!("{path}{:010}", parent.stat.cversion)
                } else {
                    path.clone()
                };
                if path.len() > PATH_BYTES_MAX {
                    return Err(TreeError::BadArguments);
                }
                if self.nodes.contains_key(&path) {
                    return Err(TreeError::NodeExists);
                }
                let parent_path = parent_path.to_string();
                let name = split(&path).1.to_string();
                self.remember(&parent_path, undo);
                self.remember(&path, undo);
                let parent = self.nodes.get_mut(&parent_path).expect("checked above");
                parent.children.insert(name);
                parent.stat.cversion = parent.stat.cversion.wrapping_add(1);
                parent.stat.num_children += 1;
                self.nodes.insert(
                    path.clone(),
                    Znode {
                        data: data.clone(),
                        stat: Stat {
                            czxid: index,
                            mzxid: index,
                            version: 0,
                            cversion: 0,
                            ephemeral_owner: mode.ephemeral().then_some(session),
                            num_children: 0,
                        },
                        children: BTreeSet::new(),
                    },
                );
                changes.push(Change {
                    path: path.clone(),
                    kind: EventKind::NodeCreated,
                });
                changes.push(Change {
                    path: parent_path,
                    kind: EventKind::NodeChildrenChanged,
                });
                Ok(OpResult::Created { path })
            }
            Op::SetData {
                path,
                data,
                expected_version,
            } => {
                validate_path(path)?;
                if data.len() > DATA_BYTES_MAX {
                    return Err(TreeError::BadArguments);
                }
                let node = self.nodes.get(path).ok_or(TreeError::NoNode)?;
                if !version_matches(*expected_version, node.stat.version) {
                    return Err(TreeError::BadVersion);
                }
                self.remember(path, undo);
                let node = self.nodes.get_mut(path).expect("checked above");
                node.data = data.clone();
                node.stat.version = node.stat.version.wrapping_add(1);
                node.stat.mzxid = index;
                changes.push(Change {
                    path: path.clone(),
                    kind: EventKind::NodeDataChanged,
                });
                Ok(OpResult::SetData { stat: node.stat })
            }
            Op::Delete { path, expected_version } => {
                validate_path(path)?;
                self.delete(index, path, *expected_version, undo, changes)?;
                Ok(OpResult::Deleted)
            }
            Op::Check { path, expected_version } => {
                validate_path(path)?;
                let node = self.nodes.get(path).ok_or(TreeError::NoNode)?;
                if !version_matches(*expected_version, node.stat.version) {
                    return Err(TreeError::BadVersion);
                }
                Ok(OpResult::Checked)
            }
            Op::CheckCreated { path, czxid } => {
                validate_path(path)?;
                let node = self.nodes.get(path).ok_or(TreeError::NoNode)?;
                if node.stat.czxid != *czxid {
                    return Err(TreeError::BadVersion);
                }
                Ok(OpResult::Checked)
            }
            Op::CheckAbsent { path } => {
                validate_path(path)?;
                if self.nodes.contains_key(path) {
                    return Err(TreeError::NodeExists);
                }
                Ok(OpResult::Checked)
            }
        }
    }

    fn delete(
        &mut self,
        _index: u64,
        path: &str,
        expected_version: Option<i32>,
        undo: &mut Undo,
        changes: &mut Vec<Change>,
    ) -> Result<(), TreeError> {
        if path == "/" {
            return Err(TreeError::BadArguments);
        }
        let node = self.nodes.get(path).ok_or(TreeError::NoNode)?;
        if !version_matches(expected_version, node.stat.version) {
            return Err(TreeError::BadVersion);
        }
        if !node.children.is_empty() {
            return Err(TreeError::NotEmpty);
        }
        let (parent_path, name) = split(path);
        self.remember(path, undo);
        self.remember(parent_path, undo);
        self.nodes.remove(path);
        let parent = self.nodes.get_mut(parent_path).expect("a node's parent exists");
        parent.children.remove(name);
        parent.stat.cversion = parent.stat.cversion.wrapping_add(1);
        parent.stat.num_children -= 1;
        changes.push(Change {
            path: path.to_string(),
            kind: EventKind::NodeDeleted,
        });
        changes.push(Change {
            path: parent_path.to_string(),
            kind: EventKind::NodeChildrenChanged,
        });
        Ok(())
    }

    /// The node's data and stat.
    pub fn get(&self, path: &str) -> Result<(Vec<u8>, Stat), TreeError> {
        validate_path(path)?;
        let node = self.nodes.get(path).ok_or(TreeError::NoNode)?;
        Ok((node.data.clone(), node.stat))
    }

    /// The node's stat, if it exists.
    pub fn exists(&self, path: &str) -> Result<Option<Stat>, TreeError> {
        validate_path(path)?;
        Ok(self.nodes.get(path).map(|n| n.stat))
    }

    /// The node's child names, sorted.
    pub fn children(&self, path: &str) -> Result<Vec<String>, TreeError> {
        validate_path(path)?;
        let node = self.nodes.get(path).ok_or(TreeError::NoNode)?;
        Ok(node.children.iter().cloned().collect())
    }

    /// The whole tree as bytes, for a consensus snapshot.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(SNAPSHOT_VERSION);
        w.u64(self.last_applied);
        w.count(self.sessions.len());
        for (id, info) in &self.sessions {
            w.u64(id.0);
            w.u64(info.timeout_ms);
        }
        w.count(self.nodes.len());
        for (path, node) in &self.nodes {
            w.str(path);
            w.bytes(&node.data);
            w.u64(node.stat.czxid);
            w.u64(node.stat.mzxid);
            w.i32(node.stat.version);
            w.i32(node.stat.cversion);
            match node.stat.ephemeral_owner {
                None => w.u8(0),
                Some(s) => {
                    w.u8(1);
                    w.u64(s.0);
                }
            }
        }
        w.buf
    }

    /// A tree from [`Tree::snapshot`] bytes; every node's parent must be in it.
    pub fn restore(bytes: &[u8]) -> Result<Tree, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != SNAPSHOT_VERSION {
            return Err(DecodeError::Version(version));
        }
        let last_applied = r.u64()?;
        let mut sessions = BTreeMap::new();
        for _ in 0..r.count("sessions", SNAPSHOT_SESSIONS_MAX, 16)? {
            let id = SessionId(r.u64()?);
            let timeout_ms = r.u64()?;
            sessions.insert(id, SessionInfo { timeout_ms });
        }
        let mut nodes: BTreeMap<String, Znode> = BTreeMap::new();
        for _ in 0..r.count("nodes", SNAPSHOT_NODES_MAX, 33)? {
            let path = r.string("path", PATH_BYTES_MAX)?;
            validate_path(&path).map_err(|_| DecodeError::Invalid("path"))?;
            let data = r.bytes("data", DATA_BYTES_MAX)?;
            let czxid = r.u64()?;
            let mzxid = r.u64()?;
            let version = r.i32()?;
            let cversion = r.i32()?;
            let ephemeral_owner = if r.bool()? { Some(SessionId(r.u64()?)) } else { None };
            let node = Znode {
                data,
                stat: Stat {
                    czxid,
                    mzxid,
                    version,
                    cversion,
                    ephemeral_owner,
                    num_children: 0,
                },
                children: BTreeSet::new(),
            };
            if nodes.insert(path, node).is_some() {
                return Err(DecodeError::Invalid("duplicate path"));
            }
        }
        r.finish()?;
        if !nodes.contains_key("/") {
            return Err(DecodeError::Invalid("no root"));
        }
        let paths: Vec<String> = nodes.keys().filter(|p| p.as_str() != "/").cloned().collect();
        for path in paths {
            let (parent, name) = split(&path);
            let parent = nodes.get_mut(parent).ok_or(DecodeError::Invalid("orphan node"))?;
            if parent.stat.ephemeral_owner.is_some() {
                return Err(DecodeError::Invalid("child of an ephemeral"));
            }
            parent.children.insert(name.to_string());
            parent.stat.num_children += 1;
        }
        Ok(Tree {
            nodes,
            sessions,
            last_applied,
        })
    }
}

/// Encodes one op (shared with the client RPC).
pub(crate) fn encode_op(w: &mut Writer, op: &Op) {
    match op {
        Op::Create { path, data, mode } => {
            w.u8(1);
            w.str(path);
            w.bytes(data);
            w.u8(mode.code());
        }
        Op::SetData {
            path,
            data,
            expected_version,
        } => {
            w.u8(2);
            w.str(path);
            w.bytes(data);
            w.opt_i32(*expected_version);
        }
        Op::Delete { path, expected_version } => {
            w.u8(3);
            w.str(path);
            w.opt_i32(*expected_version);
        }
        Op::Check { path, expected_version } => {
            w.u8(4);
            w.str(path);
            w.opt_i32(*expected_version);
        }
        Op::CheckCreated { path, czxid } => {
            w.u8(5);
            w.str(path);
            w.u64(*czxid);
        }
        Op::CheckAbsent { path } => {
            w.u8(6);
            w.str(path);
            // The one-byte field every op has (OP_BYTES_MIN), for a decoder's bound.
            w.u8(0);
        }
    }
}

/// Decodes one op (shared with the client RPC).
pub(crate) fn decode_op(r: &mut Reader<'_>) -> Result<Op, DecodeError> {
    Ok(match r.u8()? {
        1 => Op::Create {
            path: r.string("path", PATH_BYTES_MAX)?,
            data: r.bytes("data", DATA_BYTES_MAX)?,
            mode: CreateMode::from_code(r.u8()?)?,
        },
        2 => Op::SetData {
            path: r.string("path", PATH_BYTES_MAX)?,
            data: r.bytes("data", DATA_BYTES_MAX)?,
            expected_version: r.opt_i32()?,
        },
        3 => Op::Delete {
            path: r.string("path", PATH_BYTES_MAX)?,
            expected_version: r.opt_i32()?,
        },
        4 => Op::Check {
            path: r.string("path", PATH_BYTES_MAX)?,
            expected_version: r.opt_i32()?,
        },
        5 => Op::CheckCreated {
            path: r.string("path", PATH_BYTES_MAX)?,
            czxid: r.u64()?,
        },
        6 => {
            let path = r.string("path", PATH_BYTES_MAX)?;
            match r.u8()? {
                0 => Op::CheckAbsent { path },
                t => return Err(DecodeError::Tag(t)),
            }
        }
        t => return Err(DecodeError::Tag(t)),
    })
}

/// The smallest encoded op: tag, empty path, and a one-byte field.
pub(crate) const OP_BYTES_MIN: usize = 6;

impl Command {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(COMMAND_VERSION);
        match self {
            Command::CreateSession { timeout_ms } => {
                w.u8(1);
                w.u64(*timeout_ms);
            }
            Command::CloseSession { session } => {
                w.u8(2);
                w.u64(session.0);
            }
            Command::Op { session, op } => {
                w.u8(3);
                w.u64(session.0);
                encode_op(&mut w, op);
            }
            Command::Multi { session, ops } => {
                w.u8(4);
                w.u64(session.0);
                w.count(ops.len());
                for op in ops {
                    encode_op(&mut w, op);
                }
            }
        }
        w.buf
    }

    pub fn decode(bytes: &[u8]) -> Result<Command, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != COMMAND_VERSION {
            return Err(DecodeError::Version(version));
        }
        let command = match r.u8()? {
            1 => Command::CreateSession { timeout_ms: r.u64()? },
            2 => Command::CloseSession {
                session: SessionId(r.u64()?),
            },
            3 => Command::Op {
                session: SessionId(r.u64()?),
                op: decode_op(&mut r)?,
            },
            4 => {
                let session = SessionId(r.u64()?);
                let n = r.count("multi ops", MULTI_OPS_MAX, OP_BYTES_MIN)?;
                let mut ops = Vec::with_capacity(n);
                for _ in 0..n {
                    ops.push(decode_op(&mut r)?);
                }
                Command::Multi { session, ops }
            }
            t => return Err(DecodeError::Tag(t)),
        };
        r.finish()?;
        Ok(command)
    }
}

/// What a watch was set by: `get`/`exists` set a data watch, `children` a child watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WatchKind {
    Data,
    Children,
}

/// A fired watch, as the session receives it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WatchEvent {
    pub path: String,
    pub kind: EventKind,
}

/// One-shot watches of one server, by path and session. Not replicated: a client whose server
/// changes must read again (and so re-register), as in ZooKeeper.
#[derive(Clone, Debug, Default)]
pub struct Watches {
    data: BTreeMap<String, BTreeSet<SessionId>>,
    children: BTreeMap<String, BTreeSet<SessionId>>,
}

impl Watches {
    pub fn add(&mut self, session: SessionId, path: &str, kind: WatchKind) {
        let table = match kind {
            WatchKind::Data => &mut self.data,
            WatchKind::Children => &mut self.children,
        };
        table.entry(path.to_string()).or_default().insert(session);
    }

    /// Fires (and removes) every watch the changes trigger, in change order. A data watch fires
    /// on create, delete and data change; a child watch on a child change or the node's deletion.
    pub fn fire(&mut self, changes: &[Change]) -> Vec<(SessionId, WatchEvent)> {
        let mut fired = Vec::new();
        for change in changes {
            let tables: &mut [&mut BTreeMap<String, BTreeSet<SessionId>>] = match change.kind {
                EventKind::NodeCreated | EventKind::NodeDataChanged => &mut [&mut self.data],
                EventKind::NodeDeleted => &mut [&mut self.data, &mut self.children],
                EventKind::NodeChildrenChanged => &mut [&mut self.children],
            };
            let mut sessions = BTreeSet::new();
            for table in tables.iter_mut() {
                if let Some(s) = table.remove(&change.path) {
                    sessions.extend(s);
                }
            }
            for session in sessions {
                fired.push((
                    session,
                    WatchEvent {
                        path: change.path.clone(),
                        kind: change.kind,
                    },
                ));
            }
        }
        fired
    }

    /// Forgets a closed session's watches.
    pub fn remove_session(&mut self, session: SessionId) {
        for table in [&mut self.data, &mut self.children] {
            table.retain(|_, s| {
                s.remove(&session);
                !s.is_empty()
            });
        }
    }

    pub fn len(&self) -> usize {
        self.data
            .values()
            .chain(self.children.values())
            .map(BTreeSet::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
