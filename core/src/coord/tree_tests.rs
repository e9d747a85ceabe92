//! Unit tests of the data tree: compare-and-set, multi atomicity, ephemerals, watches, snapshot
//! and command codecs, and garbage bytes.

use proptest::prelude::*;

use super::*;

struct T {
    tree: Tree,
    index: u64,
    changes: Vec<Change>,
}

impl T {
    fn new() -> T {
        T {
            tree: Tree::new(),
            index: 0,
            changes: Vec::new(),
        }
    }
    fn apply(&mut self, command: Command) -> Applied {
        self.index += 1;
        // Every command goes through its encoding, as it would through the log.
        let decoded = Command::decode(&command.encode()).expect("round trip");
        assert_eq!(decoded, command);
        self.tree.apply(self.index, &decoded, &mut self.changes)
    }
    fn session(&mut self) -> SessionId {
        match self.apply(Command::CreateSession { timeout_ms: 6000 }) {
            Applied::SessionCreated(s) => s,
            other => panic!("{other:?}"),
        }
    }
    fn op(&mut self, session: SessionId, op: Op) -> Result<OpResult, TreeError> {
        match self.apply(Command::Op { session, op }) {
            Applied::Op(r) => r,
            other => panic!("{other:?}"),
        }
    }
}

fn create(path: &str, data: &[u8]) -> Op {
    Op::Create {
        path: path.into(),
        data: data.to_vec(),
        mode: CreateMode::Persistent,
    }
}

fn set(path: &str, data: &[u8], v: Option<i32>) -> Op {
    Op::SetData {
        path: path.into(),
        data: data.to_vec(),
        expected_version: v,
    }
}

#[test]
fn create_needs_a_parent_and_refuses_an_existing_node() {
    let mut t = T::new();
    let s = t.session();
    assert_eq!(t.op(s, create("/a/b", b"")), Err(TreeError::NoNode));
    assert_eq!(t.op(s, create("/a", b"x")), Ok(OpResult::Created { path: "/a".into() }));
    assert_eq!(t.op(s, create("/a", b"y")), Err(TreeError::NodeExists));
    assert_eq!(t.op(s, create("/", b"")), Err(TreeError::NodeExists));
    assert_eq!(t.op(s, create("a", b"")), Err(TreeError::BadArguments));
    assert_eq!(t.op(s, create("/a/", b"")), Err(TreeError::BadArguments));
    assert_eq!(t.tree.get("/a"), Ok((b"x".to_vec(), t.tree.get("/a").unwrap().1)));
    assert_eq!(t.tree.children("/"), Ok(vec!["a".to_string()]));
}

#[test]
fn set_and_delete_compare_and_set_on_the_data_version() {
    let mut t = T::new();
    let s = t.session();
    t.op(s, create("/a", b"0")).unwrap();
    assert_eq!(t.op(s, set("/a", b"1", Some(1))), Err(TreeError::BadVersion));
    let stat = match t.op(s, set("/a", b"1", Some(0))).unwrap() {
        OpResult::SetData { stat } => stat,
        other => panic!("{other:?}"),
    };
    assert_eq!(stat.version, 1);
    assert!(matches!(t.op(s, set("/a", b"2", None)), Ok(OpResult::SetData { stat }) if stat.version == 2));
    assert_eq!(t.tree.get("/a").unwrap().0, b"2".to_vec());
    assert_eq!(t.op(s, set("/nope", b"", None)), Err(TreeError::NoNode));
    t.op(s, create("/a/c", b"")).unwrap();
    assert_eq!(
        t.op(
            s,
            Op::Delete {
                path: "/a".into(),
                expected_version: Some(2)
            }
        ),
        Err(TreeError::NotEmpty)
    );
    let del = |path: &str, v| Op::Delete {
        path: path.into(),
        expected_version: v,
    };
    assert_eq!(t.op(s, del("/a/c", Some(3))), Err(TreeError::BadVersion));
    assert_eq!(t.op(s, del("/a/c", Some(0))), Ok(OpResult::Deleted));
    assert_eq!(t.op(s, del("/a", Some(1))), Err(TreeError::BadVersion));
    assert_eq!(t.op(s, del("/a", None)), Ok(OpResult::Deleted));
    assert_eq!(t.op(s, del("/a", None)), Err(TreeError::NoNode));
    assert_eq!(t.tree.exists("/a"), Ok(None));
    // The root's child version counted both creates and both deletes of its child /a... once each.
    assert_eq!(t.tree.get("/").unwrap().1.cversion, 2);
}

#[test]
fn sequential_nodes_are_numbered_by_the_parents_child_version() {
    let mut t = T::new();
    let s = t.session();
    t.op(s, create("/q", b"")).unwrap();
    let seq = |t: &mut T| {
        t.op(
            s,
            Op::Create {
                path: "/q/n-".into(),
                data: vec![],
                mode: CreateMode::EphemeralSequential,
            },
        )
    };
    assert_eq!(
        seq(&mut t),
        Ok(OpResult::Created {
            path: "/q/n-0000000000".into()
        })
    );
    assert_eq!(
        seq(&mut t),
        Ok(OpResult::Created {
            path: "/q/n-0000000001".into()
        })
    );
}

#[test]
fn multi_applies_all_or_nothing() {
    let mut t = T::new();
    let s = t.session();
    t.op(s, create("/controller_epoch", b"1")).unwrap();
    t.op(s, create("/p", b"old")).unwrap();
    let before = t.tree.clone();
    t.changes.clear();
    // The controller fences on its epoch's version: a stale controller's multi changes nothing.
    let stale = Command::Multi {
        session: s,
        ops: vec![
            set("/p", b"stale", None),
            create("/new", b""),
            Op::Check {
                path: "/controller_epoch".into(),
                expected_version: Some(7),
            },
        ],
    };
    assert_eq!(t.apply(stale), Applied::Multi(Err((2, TreeError::BadVersion))));
    let mut after = t.tree.clone();
    after.last_applied = before.last_applied;
    assert_eq!(after, before, "a failed multi leaves the tree as it was");
    assert!(
        t.changes.is_empty(),
        "a failed multi reports no changes: {:?}",
        t.changes
    );
    let fenced = Command::Multi {
        session: s,
        ops: vec![
            Op::Check {
                path: "/controller_epoch".into(),
                expected_version: Some(0),
            },
            set("/p", b"new", Some(0)),
            create("/new", b""),
        ],
    };
    assert!(matches!(t.apply(fenced), Applied::Multi(Ok(r)) if r.len() == 3));
    assert_eq!(t.tree.get("/p").unwrap().0, b"new".to_vec());
    assert!(t.tree.exists("/new").unwrap().is_some());
}

#[test]
fn check_created_tells_a_recreated_ephemeral_from_the_one_read() {
    let mut t = T::new();
    let root = t.session();
    t.op(root, create("/brokers", b"")).unwrap();
    let first = t.session();
    let ephemeral = |data: &[u8]| Op::Create {
        path: "/brokers/2".into(),
        data: data.to_vec(),
        mode: CreateMode::Ephemeral,
    };
    t.op(first, ephemeral(b"old")).unwrap();
    let read = t.tree.exists("/brokers/2").unwrap().expect("created").czxid;
    let created = |czxid| Op::CheckCreated {
        path: "/brokers/2".into(),
        czxid,
    };
    assert_eq!(t.op(first, created(read)), Ok(OpResult::Checked));
    // The broker's process restarts: its old session ends, the new one registers again.
    assert!(matches!(
        t.apply(Command::CloseSession { session: first }),
        Applied::SessionClosed
    ));
    let second = t.session();
    t.op(second, ephemeral(b"new")).unwrap();
    let version_only = Op::Check {
        path: "/brokers/2".into(),
        expected_version: Some(0),
    };
    assert_eq!(
        t.op(second, version_only),
        Ok(OpResult::Checked),
        "a version check cannot tell the two registrations apart"
    );
    assert_eq!(t.op(second, created(read)), Err(TreeError::BadVersion));
    let now = t.tree.exists("/brokers/2").unwrap().expect("created").czxid;
    assert_ne!(now, read);
    assert_eq!(t.op(second, created(now)), Ok(OpResult::Checked));
    assert_eq!(
        t.op(
            second,
            Op::CheckCreated {
                path: "/brokers/9".into(),
                czxid: now
            }
        ),
        Err(TreeError::NoNode)
    );
    // The opposite precondition: a write decided while a broker was unregistered.
    let absent = |path: &str| Op::CheckAbsent { path: path.into() };
    assert_eq!(t.op(second, absent("/brokers/9")), Ok(OpResult::Checked));
    assert_eq!(t.op(second, absent("/brokers/2")), Err(TreeError::NodeExists));
}

#[test]
fn closing_a_session_removes_its_ephemerals_and_its_writes_then_fail() {
    let mut t = T::new();
    let s1 = t.session();
    let s2 = t.session();
    t.op(s1, create("/brokers", b"")).unwrap();
    let eph = |path: &str| Op::Create {
        path: path.into(),
        data: vec![],
        mode: CreateMode::Ephemeral,
    };
    t.op(s1, eph("/brokers/1")).unwrap();
    t.op(s2, eph("/brokers/2")).unwrap();
    assert_eq!(
        t.op(s1, create("/brokers/1/x", b"")),
        Err(TreeError::NoChildrenForEphemerals)
    );
    assert_eq!(t.tree.get("/brokers/1").unwrap().1.ephemeral_owner, Some(s1));
    t.apply(Command::CloseSession { session: s1 });
    assert_eq!(t.tree.children("/brokers"), Ok(vec!["2".to_string()]));
    assert_eq!(t.op(s1, eph("/brokers/1")), Err(TreeError::SessionExpired));
    assert_eq!(t.op(s1, create("/x", b"")), Err(TreeError::SessionExpired));
    assert!(t.tree.exists("/brokers").unwrap().is_some(), "persistent nodes stay");
    assert!(!t.tree.session_live(s1) && t.tree.session_live(s2));
}

#[test]
fn watches_fire_once_on_the_change_they_watch() {
    let mut t = T::new();
    let s = t.session();
    let w = SessionId(99);
    let mut watches = Watches::default();
    watches.add(w, "/a", WatchKind::Data); // an exists watch on a missing node
    watches.add(w, "/", WatchKind::Children);
    t.op(s, create("/a", b"")).unwrap();
    let fired = watches.fire(&std::mem::take(&mut t.changes));
    assert_eq!(
        fired,
        vec![
            (
                w,
                WatchEvent {
                    path: "/a".into(),
                    kind: EventKind::NodeCreated
                }
            ),
            (
                w,
                WatchEvent {
                    path: "/".into(),
                    kind: EventKind::NodeChildrenChanged
                }
            ),
        ]
    );
    // One-shot: the next change fires nothing until a read registers again.
    t.op(s, set("/a", b"1", None)).unwrap();
    assert!(watches.fire(&std::mem::take(&mut t.changes)).is_empty());
    watches.add(w, "/a", WatchKind::Data);
    watches.add(w, "/a", WatchKind::Children);
    t.op(s, set("/a", b"2", None)).unwrap();
    let fired = watches.fire(&std::mem::take(&mut t.changes));
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].1.kind, EventKind::NodeDataChanged);
    // Deletion fires the child watch left on the node itself.
    t.op(
        s,
        Op::Delete {
            path: "/a".into(),
            expected_version: None,
        },
    )
    .unwrap();
    let fired = watches.fire(&std::mem::take(&mut t.changes));
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0].1.kind, EventKind::NodeDeleted);
    assert!(watches.is_empty());
    watches.add(w, "/b", WatchKind::Data);
    watches.remove_session(w);
    assert!(watches.is_empty());
}

#[test]
fn snapshot_round_trips_and_damaged_snapshots_are_refused() {
    let mut t = T::new();
    let s = t.session();
    t.op(s, create("/a", b"x")).unwrap();
    t.op(s, create("/a-b", b"")).unwrap();
    t.op(s, create("/a/b", b"y")).unwrap();
    t.op(
        s,
        Op::Create {
            path: "/e".into(),
            data: vec![1],
            mode: CreateMode::Ephemeral,
        },
    )
    .unwrap();
    t.op(s, set("/a/b", b"z", None)).unwrap();
    let bytes = t.tree.snapshot();
    let restored = Tree::restore(&bytes).expect("restore");
    assert_eq!(restored, t.tree);
    assert_eq!(restored.last_applied(), t.index);
    for cut in 0..bytes.len() {
        assert!(
            Tree::restore(&bytes[..cut]).is_err(),
            "a snapshot cut at {cut} must be refused"
        );
    }
    // A session's close after restore removes the ephemeral it owned before the snapshot.
    let mut t2 = T {
        tree: restored,
        index: t.index,
        changes: vec![],
    };
    t2.apply(Command::CloseSession { session: s });
    assert_eq!(t2.tree.exists("/e"), Ok(None));
}

#[test]
fn command_decoder_refuses_wrong_versions_and_huge_counts() {
    let mut bytes = Command::CloseSession { session: SessionId(3) }.encode();
    bytes[0] = 9;
    assert_eq!(Command::decode(&bytes), Err(DecodeError::Version(9)));
    // A multi claiming 4 billion ops with nothing behind it is refused before allocating.
    let mut huge = vec![COMMAND_VERSION, 4];
    huge.extend_from_slice(&1u64.to_be_bytes());
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(Command::decode(&huge), Err(DecodeError::TooLong { .. })));
    assert!(Command::decode(&[]).is_err());
}

proptest! {
    #[test]
    fn garbage_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Command::decode(&bytes);
        let _ = Tree::restore(&bytes);
        let mut versioned = vec![COMMAND_VERSION];
        versioned.extend_from_slice(&bytes);
        let _ = Command::decode(&versioned);
        let mut snap = vec![SNAPSHOT_VERSION];
        snap.extend_from_slice(&bytes);
        let _ = Tree::restore(&snap);
    }

    /// Random ops against a flat model of paths: the tree answers as the model does.
    #[test]
    fn tree_matches_a_flat_model(ops in proptest::collection::vec((0u8..4, 0usize..3, 0i32..3, any::<bool>()), 1..60)) {
        let mut t = T::new();
        let s = t.session();
        let mut model: BTreeMap<String, (Vec<u8>, i32)> = BTreeMap::new();
        let mut compared = 0;
        for (i, (kind, p, v, any_version)) in ops.into_iter().enumerate() {
            let path = format!("/k{p}");
            let ev = if any_version { None } else { Some(v) };
            let data = vec![i as u8];
            let (op, expect) = match kind {
                0 => (create(&path, &data), match model.get(&path) {
                    Some(_) => Err(TreeError::NodeExists),
                    None => { model.insert(path.clone(), (data.clone(), 0)); Ok(OpResult::Created { path: path.clone() }) }
                }),
                1 => (set(&path, &data, ev), match model.get_mut(&path) {
                    None => Err(TreeError::NoNode),
                    Some((_, ver)) if ev.is_some_and(|e| e != *ver) => Err(TreeError::BadVersion),
                    Some(entry) => { *entry = (data.clone(), entry.1 + 1); Ok(OpResult::SetData { stat: Stat::default() }) }
                }),
                2 => (Op::Delete { path: path.clone(), expected_version: ev }, match model.get(&path) {
                    None => Err(TreeError::NoNode),
                    Some((_, ver)) if ev.is_some_and(|e| e != *ver) => Err(TreeError::BadVersion),
                    Some(_) => { model.remove(&path); Ok(OpResult::Deleted) }
                }),
                _ => (Op::Check { path: path.clone(), expected_version: ev }, match model.get(&path) {
                    None => Err(TreeError::NoNode),
                    Some((_, ver)) if ev.is_some_and(|e| e != *ver) => Err(TreeError::BadVersion),
                    Some(_) => Ok(OpResult::Checked),
                }),
            };
            let got = t.op(s, op);
            match (&got, &expect) {
                (Ok(OpResult::SetData { .. }), Ok(OpResult::SetData { .. })) => {}
                _ => prop_assert_eq!(&got, &expect),
            }
            for k in 0..3 {
                let path = format!("/k{k}");
                let actual = t.tree.get(&path).ok().map(|(d, st)| (d, st.version));
                prop_assert_eq!(actual, model.get(&path).cloned());
                compared += 1;
            }
        }
        prop_assert!(compared > 0);
    }
}
