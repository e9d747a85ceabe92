//! The coordinator's client-visible history, and (to come) a linearizability checker over it.
//!
//! The history format is shared: the coordinator's clients in the simulator record [`CoordOp`]s
//! as they saw them (Jepsen style), and the checker decides whether some order of them, each
//! taking effect between its invoke and its completion, is legal for a per-path model of the
//! tree. Nothing here trusts what the coordinator says about itself.

/// One client operation on the coordinator, as a client saw it (Jepsen style).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordOp {
    pub process: u32,
    pub path: String,
    pub kind: CoordOpKind,
    pub invoke_ms: u64,
    /// None: the outcome is unknown (timeout, connection lost): the op may or may not have taken effect, at any time after invoke.
    pub complete_ms: Option<u64>,
    pub outcome: CoordOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordOpKind {
    /// Sync, then get.
    Read,
    Create {
        data: Vec<u8>,
    },
    Set {
        data: Vec<u8>,
        expected_version: Option<i32>,
    },
    Delete {
        expected_version: Option<i32>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordOutcome {
    /// The data and version read; `None` when the node did not exist.
    Read(Option<(Vec<u8>, i32)>),
    Created,
    SetOk {
        version: i32,
    },
    Deleted,
    NoNode,
    NodeExists,
    BadVersion,
    Unknown,
}
