//! The quorum's membership: which nodes vote and which only receive the log (learners), and its
//! encoding as a configuration entry.
//!
//! Reconfiguration follows the Raft dissertation's single-server changes (§4.1), as KRaft's
//! KIP-853 does: the membership is itself a log entry, every node uses the latest one in its log
//! (committed or not) for quorums and elections, and the leader allows at most one uncommitted
//! change, each adding or removing one voter, so the majorities of the old and the new membership
//! always overlap. A new node joins as a learner (it receives entries, counts in no quorum and
//! never campaigns) and is promoted once caught up, so that adding it does not stall commits
//! while it copies the log.
//!
//! A configuration entry is a command starting with [`CONFIG_MAGIC`]; `Raft::propose` refuses
//! app commands that start with it, so an app cannot forge one. The app sees configuration entries
//! as no-ops (an empty `Apply`). Decoding is bounded and never panics: a damaged entry decodes to
//! an error and the node keeps its previous membership.

use std::collections::BTreeSet;

use super::NodeId;

/// The prefix of a configuration entry's command.
pub const CONFIG_MAGIC: &[u8] = b"\xffgregor-raft-membership\x00";
const CONFIG_VERSION: u8 = 1;
/// Voters plus learners at most (a quorum is a handful of nodes; the limit bounds decoding).
pub const MEMBERS_MAX: usize = 64;

/// Who votes and who only learns. A node is in at most one of the two sets.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Membership {
    pub voters: BTreeSet<NodeId>,
    pub learners: BTreeSet<NodeId>,
}

/// One single-server change, proposed with `Raft::change_membership`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MembershipChange {
    /// A new node starts receiving the log without voting.
    AddLearner(NodeId),
    /// A caught-up learner becomes a voter (KIP-853's AddVoter).
    PromoteLearner(NodeId),
    /// A voter or learner leaves (KIP-853's RemoveVoter); a leader removing itself steps down
    /// once the change commits.
    Remove(NodeId),
}

impl Membership {
    pub fn voters_only(voters: impl IntoIterator<Item = NodeId>) -> Membership {
        Membership {
            voters: voters.into_iter().collect(),
            learners: BTreeSet::new(),
        }
    }

    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.contains(&id)
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.voters.contains(&id) || self.learners.contains(&id)
    }

    /// Voters and learners.
    pub fn members(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.voters.iter().chain(self.learners.iter()).copied()
    }

    /// The number of voters that make a majority.
    pub fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    /// The membership after `change`, or why the change does not apply to this one.
    pub fn apply(&self, change: MembershipChange) -> Result<Membership, String> {
        let mut next = self.clone();
        match change {
            MembershipChange::AddLearner(id) => {
                if self.contains(id) {
                    return Err(format!("node {id} is already a member"));
                }
                if self.voters.len() + self.learners.len() >= MEMBERS_MAX {
                    return Err(format!("the quorum has {MEMBERS_MAX} members already"));
                }
                next.learners.insert(id);
            }
            MembershipChange::PromoteLearner(id) => {
                if !next.learners.remove(&id) {
                    return Err(format!("node {id} is not a learner (add it as one first)"));
                }
                next.voters.insert(id);
            }
            MembershipChange::Remove(id) => {
                if !next.learners.remove(&id) && !next.voters.remove(&id) {
                    return Err(format!("node {id} is not a member"));
                }
                if next.voters.is_empty() {
                    return Err(format!("node {id} is the last voter"));
                }
            }
        }
        Ok(next)
    }

    /// The command of a configuration entry holding this membership.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = CONFIG_MAGIC.to_vec();
        out.push(CONFIG_VERSION);
        for set in [&self.voters, &self.learners] {
            out.extend_from_slice(&(set.len() as u32).to_be_bytes());
            for id in set {
                out.extend_from_slice(&id.0.to_be_bytes());
            }
        }
        out
    }

    /// Whether `command` is a configuration entry (well-formed or not).
    pub fn is_config(command: &[u8]) -> bool {
        command.starts_with(CONFIG_MAGIC)
    }

    pub fn decode(command: &[u8]) -> Result<Membership, String> {
        let body = command
            .strip_prefix(CONFIG_MAGIC)
            .ok_or_else(|| "not a configuration entry".to_string())?;
        let (&version, mut rest) = body.split_first().ok_or("empty configuration entry")?;
        if version != CONFIG_VERSION {
            return Err(format!("unknown configuration version {version}"));
        }
        let mut sets = [BTreeSet::new(), BTreeSet::new()];
        for set in &mut sets {
            if rest.len() < 4 {
                return Err("configuration entry truncated".into());
            }
            let count = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            rest = &rest[4..];
            if count > MEMBERS_MAX || rest.len() < count * 8 {
                return Err(format!("configuration entry lists {count} nodes"));
            }
            for _ in 0..count {
                let mut a = [0u8; 8];
                a.copy_from_slice(&rest[..8]);
                rest = &rest[8..];
                set.insert(NodeId(u64::from_be_bytes(a)));
            }
        }
        if !rest.is_empty() {
            return Err("trailing bytes after the configuration".into());
        }
        let [voters, learners] = sets;
        if voters.is_empty() || !voters.is_disjoint(&learners) {
            return Err("configuration without voters or with a node in both sets".into());
        }
        Ok(Membership { voters, learners })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_round_trip_and_refuse_what_does_not_apply() {
        let m = Membership::voters_only([NodeId(1), NodeId(2), NodeId(3)]);
        let m4 = m.apply(MembershipChange::AddLearner(NodeId(4))).unwrap();
        assert_eq!((m4.quorum(), m4.learners.len()), (2, 1));
        assert!(m4.apply(MembershipChange::AddLearner(NodeId(4))).is_err());
        assert!(m.apply(MembershipChange::PromoteLearner(NodeId(4))).is_err());
        let v4 = m4.apply(MembershipChange::PromoteLearner(NodeId(4))).unwrap();
        assert_eq!(v4.quorum(), 3);
        let one = Membership::voters_only([NodeId(1)]);
        assert!(one.apply(MembershipChange::Remove(NodeId(1))).is_err());
        for x in [&m, &m4, &v4] {
            assert_eq!(Membership::decode(&x.encode()).as_ref(), Ok(x));
        }
        let enc = v4.encode();
        for cut in 0..enc.len() {
            assert!(Membership::decode(&enc[..cut]).is_err(), "a cut at {cut} decoded");
        }
    }
}
