//! The group state machine and committed offsets, driven by hand with explicit time.

use super::*;
use crate::disk::mem::{CrashMode, MemDisk};
use crate::protocol::api::join_group::JoinGroupProtocol;
use crate::protocol::api::sync_group::SyncGroupAssignment;

const SESSION_MS: i32 = 10_000;

fn coordinator(disk: &mut MemDisk) -> GroupCoordinator {
    GroupCoordinator::open(disk, GroupConfig::default(), LogConfig::default()).expect("open")
}

fn join_req(member_id: &str, protocols: &[&str]) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: "g".into(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: 30_000,
        member_id: member_id.into(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| JoinGroupProtocol {
                name: p.to_string(),
                metadata: Bytes::from(format!("meta-{p}")),
            })
            .collect(),
        reason: None,
    }
}

/// A v4+ first join: MEMBER_ID_REQUIRED with an id, then the join with it.
fn join(c: &mut GroupCoordinator, protocols: &[&str], now: i64) -> (String, Reply<JoinGroupResponse>) {
    let Reply::Now(first) = c.handle_join(&join_req("", protocols), 5, "client", 7, now) else {
        panic!("first join parked");
    };
    assert_eq!(first.error_code, ErrorCode::MemberIdRequired.code());
    assert!(!first.member_id.is_empty());
    let id = first.member_id.clone();
    let reply = c.handle_join(&join_req(&id, protocols), 5, "client", 7, now);
    (id, reply)
}

fn sync_req(member: &str, generation: i32, assignments: &[(&str, &str)]) -> SyncGroupRequest {
    SyncGroupRequest {
        group_id: "g".into(),
        generation_id: generation,
        member_id: member.into(),
        group_instance_id: None,
        protocol_type: None,
        protocol_name: None,
        assignments: assignments
            .iter()
            .map(|(m, a)| SyncGroupAssignment {
                member_id: m.to_string(),
                assignment: Bytes::from(a.to_string()),
            })
            .collect(),
    }
}

fn parked<T: std::fmt::Debug>(r: Reply<T>) -> Ticket {
    match r {
        Reply::Parked(t) => t,
        Reply::Now(x) => panic!("expected to wait, got {x:?}"),
    }
}

fn now<T: std::fmt::Debug>(r: Reply<T>) -> T {
    match r {
        Reply::Now(x) => x,
        Reply::Parked(t) => panic!("expected an answer, parked as {t:?}"),
    }
}

/// Two members joined and synced at generation 1: (group, a (leader), b).
fn stable_pair(c: &mut GroupCoordinator) -> (String, String) {
    let (a, ra) = join(c, &["range", "roundrobin"], 0);
    // One member: the join completes at once.
    let ra = now(ra);
    assert_eq!((ra.generation_id, ra.leader.as_str()), (1, a.as_str()));
    let (b, rb) = join(c, &["roundrobin", "range"], 10);
    let tb = parked(rb);
    // a learns of the rebalance by heartbeat, and rejoins.
    assert_eq!(c.handle_heartbeat("g", 1, &a, 20), ErrorCode::RebalanceInProgress);
    let ra = now(c.handle_join(&join_req(&a, &["range", "roundrobin"]), 5, "client", 7, 30));
    let rb = c.take_join(tb).expect("b's join completed by a's");
    assert_eq!(ra.generation_id, 2);
    assert_eq!(rb.generation_id, 2);
    assert_eq!(ra.leader, a);
    assert_eq!(rb.leader, a);
    assert_eq!(ra.members.len(), 2, "the leader sees every member");
    assert!(rb.members.is_empty(), "followers see none");
    assert_eq!(c.group_state("g"), Some(GroupState::CompletingRebalance));
    let tb = parked(c.handle_sync(&sync_req(&b, 2, &[]), 40));
    let sa = now(c.handle_sync(&sync_req(&a, 2, &[(&a, "A-parts"), (&b, "B-parts")]), 50));
    assert_eq!(sa.assignment, Bytes::from("A-parts"));
    let sb = c.take_sync(tb).expect("b's sync completed by the leader's");
    assert_eq!(sb.assignment, Bytes::from("B-parts"));
    assert_eq!(c.group_state("g"), Some(GroupState::Stable));
    (a, b)
}

#[test]
fn two_members_one_leader_same_generation_assignments_distributed() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let (a, b) = stable_pair(&mut c);
    assert_ne!(a, b);
    let g = c.group("g").expect("group");
    assert_eq!(g.generation, 2);
    assert_eq!(g.leader.as_deref(), Some(a.as_str()));
    assert_eq!(
        g.protocol_name.as_deref(),
        Some("range"),
        "a tie goes to the leader's first choice"
    );
    assert_eq!(c.handle_heartbeat("g", 2, &b, 60), ErrorCode::None);
}

#[test]
fn protocol_no_member_shares_is_refused() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let (_, r) = join(&mut c, &["range"], 0);
    now(r);
    let Reply::Now(r) = c.handle_join(&join_req("", &["sticky"]), 5, "client", 7, 1) else {
        panic!("parked");
    };
    assert_eq!(r.error_code, ErrorCode::InconsistentGroupProtocol.code());
}

#[test]
fn old_join_versions_get_a_member_id_at_once() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let r = now(c.handle_join(&join_req("", &["range"]), 3, "client", 7, 0));
    assert_eq!(r.error_code, 0);
    assert_eq!(r.leader, r.member_id);
    assert_eq!(r.generation_id, 1);
}

#[test]
fn member_that_stops_heartbeating_expires_and_group_rebalances() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let (a, b) = stable_pair(&mut c);
    // b keeps heartbeating, a does not.
    let mut t = 50;
    while t < 50 + i64::from(SESSION_MS) + 1_000 {
        t += 3_000;
        if let Some(deadline) = c.poll_timeout() {
            if deadline <= t {
                c.handle_timeout(t);
            }
        }
        let code = c.handle_heartbeat("g", 2, &b, t);
        if code != ErrorCode::None {
            assert_eq!(code, ErrorCode::RebalanceInProgress);
            break;
        }
    }
    assert!(!c.group("g").expect("group").members.contains_key(&a), "a expired");
    assert_eq!(c.group_state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(c.handle_heartbeat("g", 2, &a, t), ErrorCode::UnknownMemberId);
    // b rejoins alone and leads generation 3.
    let r = now(c.handle_join(&join_req(&b, &["roundrobin", "range"]), 5, "client", 7, t));
    assert_eq!((r.generation_id, r.leader.as_str()), (3, b.as_str()));
}

#[test]
fn rebalance_timeout_removes_members_that_did_not_rejoin() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let (a, b) = stable_pair(&mut c);
    // a rejoins (say, a new subscription); b never does, though it stays alive.
    let ta = parked(c.handle_join(&join_req(&a, &["range"]), 5, "client", 7, 100));
    assert_eq!(c.handle_heartbeat("g", 2, &b, 5_000), ErrorCode::RebalanceInProgress);
    let deadline = c.poll_timeout().expect("a deadline");
    assert!(deadline <= 100 + 30_000);
    c.handle_timeout(deadline);
    let r = c.take_join(ta).expect("completed at the rebalance deadline");
    assert_eq!(r.generation_id, 3);
    assert_eq!(r.members.len(), 1);
    assert_eq!(c.handle_heartbeat("g", 3, &b, deadline), ErrorCode::UnknownMemberId);
}

#[test]
fn heartbeat_errors() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let (a, _) = stable_pair(&mut c);
    assert_eq!(c.handle_heartbeat("g", 1, &a, 60), ErrorCode::IllegalGeneration);
    assert_eq!(c.handle_heartbeat("g", 2, "nobody", 60), ErrorCode::UnknownMemberId);
    assert_eq!(c.handle_heartbeat("other", 2, &a, 60), ErrorCode::UnknownMemberId);
    assert_eq!(c.handle_heartbeat("g", 2, &a, 60), ErrorCode::None);
}

#[test]
fn leave_rebalances_and_unknown_members_are_named() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let (a, b) = stable_pair(&mut c);
    let r = c.handle_leave("g", &[b.clone(), "ghost".into()], 100);
    assert_eq!(r, vec![ErrorCode::None, ErrorCode::UnknownMemberId]);
    assert_eq!(c.group_state("g"), Some(GroupState::PreparingRebalance));
    let r = now(c.handle_join(&join_req(&a, &["range"]), 5, "client", 7, 110));
    assert_eq!(r.generation_id, 3);
    assert_eq!(c.handle_leave("g", &[a], 120), vec![ErrorCode::None]);
    // Empty, and the pending sync-less generation moved on.
    assert_eq!(c.group_state("g"), Some(GroupState::Empty));
}

fn entry(topic: &str, partition: i32, offset: i64) -> CommitEntry {
    CommitEntry {
        topic: topic.into(),
        partition,
        committed: Committed {
            offset,
            leader_epoch: 0,
            metadata: "m".into(),
            commit_timestamp_ms: 0,
        },
    }
}

#[test]
fn stale_generation_or_unknown_member_commits_change_nothing() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let (a, _) = stable_pair(&mut c);
    let ok = c.handle_commit(&mut disk, "g", 2, &a, vec![entry("t", 0, 5)], 60);
    assert_eq!(ok, vec![ErrorCode::None]);
    let end = c.offsets().log_end_offset();
    let stale = c.handle_commit(&mut disk, "g", 1, &a, vec![entry("t", 0, 99), entry("t", 1, 9)], 61);
    assert_eq!(stale, vec![ErrorCode::IllegalGeneration; 2]);
    let unknown = c.handle_commit(&mut disk, "g", 2, "ghost", vec![entry("t", 0, 99)], 62);
    assert_eq!(unknown, vec![ErrorCode::UnknownMemberId]);
    // A simple commit (no generation) is refused while the group has members.
    let simple = c.handle_commit(&mut disk, "g", -1, "", vec![entry("t", 0, 99)], 63);
    assert_eq!(simple, vec![ErrorCode::UnknownMemberId]);
    assert_eq!(c.committed("g", "t", 0).map(|x| x.offset), Some(5));
    assert_eq!(c.committed("g", "t", 1), None);
    assert_eq!(c.offsets().log_end_offset(), end, "nothing was written");
}

#[test]
fn simple_commit_to_an_empty_group_is_allowed() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let r = c.handle_commit(&mut disk, "solo", -1, "", vec![entry("t", 3, 42)], 0);
    assert_eq!(r, vec![ErrorCode::None]);
    assert_eq!(c.committed("solo", "t", 3).map(|x| x.offset), Some(42));
    assert_eq!(c.group_state("solo"), Some(GroupState::Empty));
    let r = c.handle_commit(&mut disk, "other", 4, "", vec![entry("t", 3, 42)], 0);
    assert_eq!(r, vec![ErrorCode::IllegalGeneration]);
}

#[test]
fn acknowledged_commits_survive_restart_and_crash() {
    let mut disk = MemDisk::new();
    {
        let mut c = coordinator(&mut disk);
        for i in 0..20 {
            let r = c.handle_commit(
                &mut disk,
                "g",
                -1,
                "",
                vec![entry("t", i % 3, i64::from(i))],
                i64::from(i),
            );
            assert_eq!(r, vec![ErrorCode::None]);
        }
    }
    // Dropped without a clean shutdown; every unsynced write is lost or torn.
    for seed in 0..8 {
        let mut crashed = disk.clone();
        if seed == 0 {
            crashed.crash(CrashMode::DropUnsynced);
        } else {
            crashed.crash(CrashMode::Torn { seed });
        }
        let c = coordinator(&mut crashed);
        assert_eq!(c.committed("g", "t", 0).map(|x| x.offset), Some(18), "seed {seed}");
        assert_eq!(c.committed("g", "t", 1).map(|x| x.offset), Some(19), "seed {seed}");
        assert_eq!(c.committed("g", "t", 2).map(|x| x.offset), Some(17), "seed {seed}");
        assert_eq!(c.committed("g", "t", 2).map(|x| x.metadata.as_str()), Some("m"));
        assert_eq!(c.group_state("g"), Some(GroupState::Empty));
    }
}

#[test]
fn metadata_over_the_limit_is_refused_alone() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let mut big = entry("t", 1, 7);
    big.committed.metadata = "x".repeat(5_000);
    let r = c.handle_commit(&mut disk, "g", -1, "", vec![entry("t", 0, 3), big], 0);
    assert_eq!(r, vec![ErrorCode::None, ErrorCode::OffsetMetadataTooLarge]);
    assert_eq!(c.committed("g", "t", 1), None);
}

#[test]
fn offset_records_round_trip_and_reject_garbage() {
    let c = entry("t", 1, 7).committed;
    assert_eq!(offsets::decode_value(&offsets::encode_value(&c)), Some(c));
    let k = offsets::encode_key("g", "t", 4);
    assert_eq!(offsets::decode_key(&k), Some(("g".into(), "t".into(), 4)));
    assert_eq!(offsets::decode_key(&k[..k.len() - 1]), None);
    assert_eq!(offsets::decode_value(b"\x00\x03"), None);
}

#[test]
fn a_member_id_never_used_stops_holding_up_the_rebalance() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let (a, ra) = join(&mut c, &["range"], 0);
    now(ra);
    now(c.handle_sync(&sync_req(&a, 1, &[]), 1));
    // A second consumer gets an id (KIP-394) and vanishes before joining with it.
    let Reply::Now(r) = c.handle_join(&join_req("", &["range"]), 5, "client", 8, 10) else {
        panic!("parked");
    };
    assert_eq!(r.error_code, ErrorCode::MemberIdRequired.code());
    let ta = parked(c.handle_join(&join_req(&a, &["range"]), 5, "client", 7, 20));
    let forget = c.poll_timeout().expect("deadline");
    assert_eq!(
        forget,
        10 + i64::from(SESSION_MS),
        "the pending id is forgotten after a session"
    );
    c.handle_timeout(forget);
    let r = c.take_join(ta).expect("completed once the pending id was forgotten");
    assert_eq!((r.generation_id, r.members.len()), (2, 1));
}

#[test]
fn empty_groups_are_forgotten_but_their_offsets_are_not() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let (a, ra) = join(&mut c, &["range"], 0);
    assert_eq!(now(ra).generation_id, 1);
    now(c.handle_sync(&sync_req(&a, 1, &[]), 1));
    assert_eq!(
        c.handle_commit(&mut disk, "g", 1, &a, vec![entry("t", 0, 5)], 1),
        vec![ErrorCode::None]
    );
    assert_eq!(c.handle_leave("g", &[a], 2), vec![ErrorCode::None]);
    c.handle_timeout(3);
    assert!(c.group("g").is_none());
    assert_eq!(c.group_state("g"), Some(GroupState::Empty));
    assert_eq!(c.committed("g", "t", 0).map(|x| x.offset), Some(5));
}

#[test]
fn completing_rebalance_rejoin_with_same_metadata_is_answered_at_once() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let (a, ra) = join(&mut c, &["range"], 0);
    now(ra);
    // Generation 1 is CompletingRebalance until a syncs; a retried join changes nothing.
    let r = now(c.handle_join(&join_req(&a, &["range"]), 5, "client", 7, 5));
    assert_eq!((r.generation_id, r.leader.as_str()), (1, a.as_str()));
    assert_eq!(c.group_state("g"), Some(GroupState::CompletingRebalance));
}

#[test]
fn commit_too_large_for_one_batch_is_refused_whole_and_not_retriable() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    // 400 partitions × 4 KiB of metadata: more than max.message.bytes (1 MiB) in one batch.
    let entries: Vec<CommitEntry> = (0..400)
        .map(|p| {
            let mut e = entry("t", p, 1);
            e.committed.metadata = "x".repeat(4_000);
            e
        })
        .collect();
    let r = c.handle_commit(&mut disk, "g", -1, "", entries, 0);
    assert_eq!(r, vec![ErrorCode::InvalidCommitOffsetSize; 400]);
    assert!(!ErrorCode::InvalidCommitOffsetSize.is_retriable());
    assert_eq!(c.committed("g", "t", 0), None);
    // The offsets log still takes commits.
    let r = c.handle_commit(&mut disk, "g", -1, "", vec![entry("t", 0, 2)], 1);
    assert_eq!(r, vec![ErrorCode::None]);
}

mod model {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Against a map of acknowledged commits: after any crash, reopening gives exactly the
        /// last acknowledged offset of every (group, partition), nothing more, nothing older.
        #[test]
        fn reopened_offsets_equal_the_acknowledged_ones(
            commits in proptest::collection::vec((0u8..3, 0i32..4, 0i64..1_000), 1..40),
            crash_after in 0usize..40,
            torn_seed in proptest::option::of(0u64..1_000),
        ) {
            let mut disk = MemDisk::new();
            let mut c = coordinator(&mut disk);
            let mut model: BTreeMap<(String, i32), i64> = BTreeMap::new();
            for (i, (g, p, o)) in commits.iter().enumerate() {
                if i == crash_after {
                    break;
                }
                let group = format!("g{g}");
                let r = c.handle_commit(&mut disk, &group, -1, "", vec![entry("t", *p, *o)], i as i64);
                prop_assert_eq!(r, vec![ErrorCode::None]);
                model.insert((group, *p), *o);
            }
            disk.crash(match torn_seed {
                Some(seed) => CrashMode::Torn { seed },
                None => CrashMode::DropUnsynced,
            });
            let reopened = coordinator(&mut disk);
            let mut seen: BTreeMap<(String, i32), i64> = BTreeMap::new();
            for g in 0..3u8 {
                let group = format!("g{g}");
                for (topic, p, committed) in reopened.offsets().group(&group) {
                    prop_assert_eq!(topic, "t");
                    seen.insert((group.clone(), p), committed.offset);
                }
            }
            prop_assert_eq!(seen, model);
        }
    }
}

#[test]
fn group_ids_too_long_for_a_record_are_refused_not_a_panic() {
    let mut disk = MemDisk::new();
    let mut c = coordinator(&mut disk);
    let long = "g".repeat(40_000);
    let r = c.handle_commit(&mut disk, &long, -1, "", vec![entry("t", 0, 1)], 0);
    assert_eq!(r, vec![ErrorCode::InvalidGroupId]);
    let mut req = join_req("", &["range"]);
    req.group_id = long;
    let r = now(c.handle_join(&req, 9, "client", 1, 0));
    assert_eq!(r.error_code, ErrorCode::InvalidGroupId.code());
}
