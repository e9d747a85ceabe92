//! The coordinator end to end on the simulator: coordinator nodes (`start_coordinator`) and
//! `CoordClient`s on their own nodes, talking simulated TCP, under crashes and partitions.
//!
//! - `one_node_coordinator_serves_writes_reads_watches_and_sessions`: dev mode (a 1-node quorum).
//! - `ephemeral_node_lives_while_its_owner_heartbeats_and_goes_after_its_timeout`: session expiry
//!   on the leader's timer: never before the owner stops, within timeout + slack after.
//! - `three_coordinators_with_a_secret_serve_only_clients_proving_it`: Raft peers authenticate to
//!   each other (a quorum forms and serves), a client with the secret writes, one with a wrong
//!   secret or none gets no session.
//! - `three_coordinators_keep_a_linearizable_history_through_crashes_and_partitions`: random
//!   create / CAS set / delete / synced reads on a few paths while a minority is killed (disk
//!   crash), restarted and partitioned; the history (with a final read after healing) goes
//!   through `gregor_sim::checker::linearizable::check`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gregor_core::consensus::NodeId;
use gregor_core::coord::tree::{CreateMode, EventKind, Op, TreeError};
use gregor_core::coord::{
    start_coordinator, ClusterSecret, CoordClient, CoordClientConfig, CoordError, CoordNodeConfig, CoordTiming,
};
use gregor_core::node::cluster::ClusterConfig;
use gregor_core::runtime::Runtime;
use gregor_core::security::acl::{
    AccessControlEntry, AclBinding, AclFilter, Operation, Permission, ResourcePattern, ResourceType,
};
use gregor_sim::checker::linearizable::{check, CoordOp, CoordOpKind, CoordOutcome};
use gregor_sim::world::{run_seed, Fault, NodeIndex, World};

const PORT: u16 = 2181;

/// Adds `n` coordinator nodes (indexes 0..n) and returns their addresses.
fn add_coordinators(world: &World, n: usize) -> Vec<String> {
    add_coordinators_with(world, n, CoordTiming::default())
}

fn add_coordinators_with(world: &World, n: usize, timing: CoordTiming) -> Vec<String> {
    add_coordinators_secret(world, n, timing, None)
}

fn add_coordinators_secret(world: &World, n: usize, timing: CoordTiming, secret: Option<ClusterSecret>) -> Vec<String> {
    let addrs: Vec<String> = (0..n).map(|i| world.addr(NodeIndex(i), PORT)).collect();
    let peers: Vec<(NodeId, String)> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| (NodeId(i as u64 + 1), a.clone()))
        .collect();
    for (i, listen) in addrs.iter().enumerate() {
        let config = CoordNodeConfig {
            id: NodeId(i as u64 + 1),
            peers: peers.clone(),
            voters: None,
            listen: listen.clone(),
            dir: "coord".into(),
            timing: timing.clone(),
            secret: secret.clone(),
        };
        world.add_node(&format!("coord-{i}"), move |rt| {
            let config = config.clone();
            async move {
                match start_coordinator(rt, config) {
                    Ok(node) => node.await,
                    Err(e) => tracing::error!(error = %e, "coordinator did not start"),
                }
            }
        });
    }
    addrs
}

fn idle_node(world: &World, name: &str) -> NodeIndex {
    world.add_node(name, |_rt| std::future::pending::<()>())
}

fn client_config(servers: &[String], session_timeout_ms: u64) -> CoordClientConfig {
    let mut c = CoordClientConfig::new(servers.to_vec());
    c.session_timeout_ms = session_timeout_ms;
    c
}

async fn connect<R: Runtime>(rt: R, config: CoordClientConfig) -> CoordClient<R> {
    for _ in 0..20 {
        match CoordClient::connect(rt.clone(), config.clone()).await {
            Ok(c) => return c,
            Err(e) => tracing::info!(error = %e, "connect failed; retrying"),
        }
        rt.sleep(Duration::from_millis(200)).await;
    }
    panic!("no coordinator session after 20 attempts");
}

#[test]
fn one_node_coordinator_serves_writes_reads_watches_and_sessions() {
    run_seed(11, |world| async move {
        let addrs = add_coordinators(&world, 1);
        let a = idle_node(&world, "client-a");
        let b = idle_node(&world, "client-b");
        madsim::time::sleep(Duration::from_millis(1500)).await;
        let (addrs_a, addrs_b) = (addrs.clone(), addrs.clone());
        let checked = world
            .spawn_on(a, move |rt| async move {
                let c = connect(rt.clone(), client_config(&addrs_a, 2000)).await;
                assert_eq!(c.create("/a", b"x", CreateMode::Persistent).await, Ok("/a".to_string()));
                assert_eq!(
                    c.create("/a", b"x", CreateMode::Persistent).await,
                    Err(CoordError::Tree(TreeError::NodeExists))
                );
                let (data, stat) = c.get("/a", true, true).await.expect("get");
                assert_eq!((data, stat.version), (b"x".to_vec(), 0));
                assert_eq!(c.set_data("/a", b"y", Some(0)).await.map(|s| s.version), Ok(1));
                assert_eq!(
                    c.set_data("/a", b"z", Some(0)).await,
                    Err(CoordError::Tree(TreeError::BadVersion))
                );
                // The data watch fired by the set came with (before) the set's answer.
                let event = c
                    .try_next_watch_event()
                    .expect("the watch event arrived before the answer");
                assert_eq!((event.path.as_str(), event.kind), ("/a", EventKind::NodeDataChanged));
                assert_eq!(c.try_next_watch_event(), None, "one-shot");
                // A failed multi applies nothing.
                let failed = c
                    .multi(vec![
                        Op::Create {
                            path: "/m".into(),
                            data: vec![],
                            mode: CreateMode::Persistent,
                        },
                        Op::Check {
                            path: "/a".into(),
                            expected_version: Some(5),
                        },
                    ])
                    .await;
                assert_eq!(
                    failed,
                    Err(CoordError::MultiFailed {
                        index: 1,
                        error: TreeError::BadVersion
                    })
                );
                assert_eq!(c.exists("/m", false, true).await, Ok(None));
                c.create("/e", b"", CreateMode::Ephemeral).await.expect("ephemeral");
                c.children("/", true, true).await.expect("children watch");
                c.exists("/e", false, true)
                    .await
                    .expect("exists")
                    .expect("the ephemeral exists while its session lives");
                // Sessions are kept alive by the heartbeat task across an idle wait.
                rt.sleep(Duration::from_millis(5000)).await;
                assert!(c.exists("/e", false, true).await.expect("exists").is_some());
                c.close().await.expect("close");
                9
            })
            .await
            .expect("client a ran");
        let seen = world
            .spawn_on(b, move |rt| async move {
                let c = connect(rt.clone(), client_config(&addrs_b, 2000)).await;
                let gone = c.exists("/e", false, true).await.expect("exists");
                let kept = c.get("/a", true, true).await.expect("get").0;
                // Another session's write fires c's watch; c's next read that sees the write
                // is preceded by the event (ZooKeeper's ordering guarantee).
                let other = connect(rt, client_config(&addrs_b, 2000)).await;
                other.set_data("/a", b"w", None).await.expect("set by another session");
                let (now, _) = c.get("/a", false, false).await.expect("get");
                assert_eq!(now, b"w".to_vec());
                let event = c
                    .try_next_watch_event()
                    .expect("the event came before the read's answer");
                assert_eq!((event.path.as_str(), event.kind), ("/a", EventKind::NodeDataChanged));
                (gone, kept)
            })
            .await
            .expect("client b ran");
        assert_eq!(seen.0, None, "closing the session deleted its ephemeral");
        assert_eq!(seen.1, b"y".to_vec());
        println!("one-node coordinator: {checked} client steps checked");
    });
}

/// A client's owner that waits between its own calls (the broker's cluster task) is woken by
/// what the heartbeat's answers bring: a watch event fired by another session wakes
/// its activity doorbell with no call of the owner's, and the event is there to read.
#[test]
fn a_watch_event_brought_by_the_heartbeat_wakes_a_waiting_owner() {
    run_seed(12, |world| async move {
        let addrs = add_coordinators(&world, 1);
        let a = idle_node(&world, "client-a");
        madsim::time::sleep(Duration::from_millis(1500)).await;
        let woke_ms = world
            .spawn_on(a, move |rt| async move {
                let c = connect(rt.clone(), client_config(&addrs, 3000)).await;
                c.create("/a", b"x", CreateMode::Persistent).await.expect("create");
                c.get("/a", true, true).await.expect("get with a watch");
                let other = connect(rt.clone(), client_config(&addrs, 3000)).await;
                let activity = c.activity();
                let seen = activity.rings();
                let start = rt.monotonic_ms();
                other.set_data("/a", b"y", None).await.expect("set by another session");
                assert_eq!(c.try_next_watch_event(), None, "nothing reached c yet");
                // No call of c's own from here: its heartbeat (every 1,000 ms) brings the event.
                let waited = gregor_core::client::conn::with_timeout(&rt, 2_500, activity.rung_since(seen)).await;
                assert!(waited.is_some(), "not woken within 2.5 s");
                let event = c.try_next_watch_event().expect("the event is there to read");
                assert_eq!((event.path.as_str(), event.kind), ("/a", EventKind::NodeDataChanged));
                rt.monotonic_ms() - start
            })
            .await
            .expect("client ran");
        println!("the waiting owner woke {woke_ms} ms after the other session's write");
        assert!(
            woke_ms <= 1_100,
            "woken by the first heartbeat after the write: {woke_ms} ms"
        );
    });
}

#[test]
fn ephemeral_node_lives_while_its_owner_heartbeats_and_goes_after_its_timeout() {
    const TIMEOUT_MS: u64 = 1500;
    // The leader's expiry tick, the close's commit and the observer's poll interval.
    const SLACK_MS: u64 = 600;
    run_seed(12, |world| async move {
        let addrs = add_coordinators(&world, 3);
        let owner = idle_node(&world, "owner");
        let observer = idle_node(&world, "observer");
        madsim::time::sleep(Duration::from_millis(2000)).await;
        let owner_addrs = addrs.clone();
        world.spawn_on(owner, move |rt| async move {
            let c = connect(rt, client_config(&owner_addrs, TIMEOUT_MS)).await;
            c.create("/brokers", b"", CreateMode::Persistent).await.ok();
            c.create("/brokers/1", b"", CreateMode::Ephemeral)
                .await
                .expect("register");
            // Keep the client (and its heartbeat task) alive until the node dies.
            std::future::pending::<()>().await;
        });
        madsim::time::sleep(Duration::from_millis(1000)).await;
        let polls: Arc<Mutex<Vec<(u64, bool)>>> = Arc::default();
        let log = polls.clone();
        let observer_addrs = addrs.clone();
        let started = world.spawn_on(observer, move |rt| async move {
            let c = connect(rt.clone(), client_config(&observer_addrs, 10_000)).await;
            for _ in 0..400 {
                let present = c.exists("/brokers/1", false, true).await.expect("exists").is_some();
                log.lock().expect("log").push((rt.monotonic_ms(), present));
                rt.sleep(Duration::from_millis(50)).await;
            }
        });
        // The owner heartbeats for 4 timeouts, then its node dies.
        madsim::time::sleep(Duration::from_millis(4 * TIMEOUT_MS)).await;
        let killed_ms = u64::try_from(madsim::time::TimeHandle::current().elapsed().as_millis()).expect("ms");
        world.kill(owner);
        madsim::time::sleep(Duration::from_millis(TIMEOUT_MS + 2 * SLACK_MS)).await;
        drop(started);
        let polls = polls.lock().expect("log").clone();
        let before: Vec<_> = polls.iter().filter(|(t, _)| *t < killed_ms).collect();
        assert!(
            before.len() > 20,
            "too few polls while the owner lived: {}",
            before.len()
        );
        assert!(
            before.iter().all(|(_, present)| *present),
            "gone while its owner heartbeated: {before:?}"
        );
        let gone_at = polls
            .iter()
            .find(|(t, present)| *t >= killed_ms && !present)
            .map(|(t, _)| *t)
            .expect("the ephemeral never went");
        let after = gone_at - killed_ms;
        println!(
            "ephemeral: {} polls while alive all present; gone {after} ms after its owner died (timeout {TIMEOUT_MS})",
            before.len()
        );
        // The last heartbeat was at most a third of the timeout before the kill.
        assert!(after + TIMEOUT_MS / 3 + 50 >= TIMEOUT_MS, "gone too early: {after} ms");
        assert!(after <= TIMEOUT_MS + SLACK_MS, "gone too late: {after} ms");
    });
}

/// Over several seeds: one seed's schedule may happen to find the new leader in time. Before
/// the client followed a named leader at once and passed over servers it had just failed to
/// reach, 20 of seeds 0..301 lost the session (5, 10 and 13 among these; the new leader was
/// elected within a second, but the client chased followers' stale hints back to the dead one
/// and backed off after each until its own 3 s ran out).
#[test]
fn ephemeral_node_survives_leader_crashes_while_its_owner_heartbeats() {
    for seed in 0..16 {
        ephemeral_survives_leader_crashes(seed);
    }
}

fn ephemeral_survives_leader_crashes(seed: u64) {
    const TIMEOUT_MS: u64 = 3000;
    run_seed(seed, move |world| async move {
        let addrs = add_coordinators(&world, 3);
        let owner = idle_node(&world, "owner");
        let observer = idle_node(&world, "observer");
        madsim::time::sleep(Duration::from_millis(2000)).await;
        let expired: Arc<Mutex<Option<bool>>> = Arc::default();
        let (owner_addrs, owner_expired) = (addrs.clone(), expired.clone());
        let _owner = world.spawn_on(owner, move |rt| async move {
            let c = connect(rt.clone(), client_config(&owner_addrs, TIMEOUT_MS)).await;
            c.create("/brokers", b"", CreateMode::Persistent).await.ok();
            c.create("/brokers/1", b"", CreateMode::Ephemeral)
                .await
                .expect("register");
            loop {
                *owner_expired.lock().expect("flag") = Some(c.is_expired());
                rt.sleep(Duration::from_millis(100)).await;
            }
        });
        madsim::time::sleep(Duration::from_millis(1000)).await;
        let polls: Arc<Mutex<Vec<bool>>> = Arc::default();
        let (log, observer_addrs) = (polls.clone(), addrs.clone());
        let _observer = world.spawn_on(observer, move |rt| async move {
            let c = connect(rt.clone(), client_config(&observer_addrs, 20_000)).await;
            for _ in 0..1000 {
                if let Ok(stat) = c.exists("/brokers/1", false, true).await {
                    log.lock().expect("log").push(stat.is_some());
                }
                rt.sleep(Duration::from_millis(50)).await;
            }
        });
        // Every coordinator in turn (so the leader too) crashes with its disk and comes back.
        for victim in 0..3 {
            world.kill(NodeIndex(victim));
            madsim::time::sleep(Duration::from_millis(1500)).await;
            world.restart(NodeIndex(victim));
            madsim::time::sleep(Duration::from_millis(2500)).await;
        }
        let polls = polls.lock().expect("log").clone();
        println!(
            "seed {seed}: ephemeral under leader crashes: {} polls, {} present",
            polls.len(),
            polls.iter().filter(|p| **p).count()
        );
        assert!(polls.len() > 50, "seed {seed}: too few polls: {}", polls.len());
        assert!(
            polls.iter().all(|p| *p),
            "seed {seed}: the ephemeral vanished while its owner heartbeated"
        );
        assert_eq!(
            *expired.lock().expect("flag"),
            Some(false),
            "seed {seed}: the owner's session expired"
        );
    });
}

/// A tiny deterministic generator for the nemesis (the test's own stream, from the seed).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

type History = Arc<Mutex<Vec<CoordOp>>>;

const PATHS: u64 = 3;
const OPS_PER_CLIENT: u32 = 40;

/// One client process: random ops on a few paths, each recorded as the client saw it.
async fn workload<R: Runtime>(rt: R, process: u32, servers: Vec<String>, history: History) {
    let mut client = connect(rt.clone(), client_config(&servers, 3000)).await;
    let mut versions: BTreeMap<String, i32> = BTreeMap::new();
    for i in 0..OPS_PER_CLIENT {
        let path = format!("/k{}", rt.random_u64() % PATHS);
        let data = format!("p{process}-{i}").into_bytes();
        let expected_version = match rt.random_u64() % 3 {
            0 => None,
            _ => Some(versions.get(&path).copied().unwrap_or(0)),
        };
        let kind = match rt.random_u64() % 4 {
            0 => CoordOpKind::Read,
            1 => CoordOpKind::Create { data: data.clone() },
            2 => CoordOpKind::Set {
                data: data.clone(),
                expected_version,
            },
            _ => CoordOpKind::Delete { expected_version },
        };
        let invoke_ms = rt.monotonic_ms();
        let outcome = match &kind {
            CoordOpKind::Read => client.get(&path, false, true).await.map(|(d, st)| {
                versions.insert(path.clone(), st.version);
                CoordOutcome::Read(Some((d, st.version)))
            }),
            CoordOpKind::Create { data } => client
                .create(&path, data, CreateMode::Persistent)
                .await
                .map(|_| CoordOutcome::Created),
            CoordOpKind::Set { data, expected_version } => client
                .set_data(&path, data, *expected_version)
                .await
                .map(|st| CoordOutcome::SetOk { version: st.version }),
            CoordOpKind::Delete { expected_version } => client
                .delete(&path, *expected_version)
                .await
                .map(|()| CoordOutcome::Deleted),
        };
        let outcome = match outcome {
            Ok(o) => Some(o),
            Err(CoordError::Tree(TreeError::NoNode)) if kind == CoordOpKind::Read => Some(CoordOutcome::Read(None)),
            Err(CoordError::Tree(TreeError::NoNode)) => Some(CoordOutcome::NoNode),
            Err(CoordError::Tree(TreeError::NodeExists)) => Some(CoordOutcome::NodeExists),
            Err(CoordError::Tree(TreeError::BadVersion)) => Some(CoordOutcome::BadVersion),
            Err(CoordError::Unknown) if kind != CoordOpKind::Read => Some(CoordOutcome::Unknown),
            // Refused before it took effect (no leader reachable, session gone): not an op.
            Err(e) => {
                if matches!(e, CoordError::SessionExpired) {
                    client = connect(rt.clone(), client_config(&servers, 3000)).await;
                }
                None
            }
        };
        let Some(outcome) = outcome else { continue };
        let complete_ms = (outcome != CoordOutcome::Unknown).then(|| rt.monotonic_ms());
        history.lock().expect("history").push(CoordOp {
            process,
            path: path.clone(),
            kind,
            invoke_ms,
            complete_ms,
            outcome,
        });
        rt.sleep(Duration::from_millis(rt.random_u64() % 100)).await;
    }
}

/// Explored states per path at most before the checker calls a path too large.
const STATES_PER_PATH_MAX: usize = 2_000_000;

fn linearizable(ops: &[CoordOp]) -> Option<bool> {
    let report = check(ops, &BTreeMap::new(), STATES_PER_PATH_MAX);
    if !report.too_large.is_empty() {
        return None;
    }
    Some(report.ok())
}

fn op(process: u32, kind: CoordOpKind, invoke_ms: u64, complete_ms: Option<u64>, outcome: CoordOutcome) -> CoordOp {
    CoordOp {
        process,
        path: "/k".into(),
        kind,
        invoke_ms,
        complete_ms,
        outcome,
    }
}

#[test]
fn the_checker_catches_a_stale_read_and_two_cas_winners_in_histories_recorded_here() {
    let create = op(
        0,
        CoordOpKind::Create { data: b"a".to_vec() },
        0,
        Some(10),
        CoordOutcome::Created,
    );
    let set = |p, t0, t1, outcome| {
        op(
            p,
            CoordOpKind::Set {
                data: b"b".to_vec(),
                expected_version: Some(0),
            },
            t0,
            Some(t1),
            outcome,
        )
    };
    let read = |t0, v: Option<(&[u8], i32)>| {
        op(
            2,
            CoordOpKind::Read,
            t0,
            Some(t0 + 1),
            CoordOutcome::Read(v.map(|(d, v)| (d.to_vec(), v))),
        )
    };
    let good = vec![
        create.clone(),
        set(1, 20, 30, CoordOutcome::SetOk { version: 1 }),
        read(40, Some((b"b", 1))),
    ];
    assert_eq!(linearizable(&good), Some(true));
    let stale = vec![
        create.clone(),
        set(1, 20, 30, CoordOutcome::SetOk { version: 1 }),
        read(40, Some((b"a", 0))),
    ];
    assert_eq!(
        linearizable(&stale),
        Some(false),
        "a read after a completed write saw the old value"
    );
    let two_winners = vec![
        create.clone(),
        set(1, 20, 30, CoordOutcome::SetOk { version: 1 }),
        set(2, 20, 30, CoordOutcome::SetOk { version: 1 }),
    ];
    assert_eq!(
        linearizable(&two_winners),
        Some(false),
        "two CAS winners from one version"
    );
    let unknown = vec![
        create,
        op(
            1,
            CoordOpKind::Set {
                data: b"b".to_vec(),
                expected_version: None,
            },
            20,
            None,
            CoordOutcome::Unknown,
        ),
        read(100, Some((b"b", 1))),
        read(200, Some((b"b", 1))),
    ];
    assert_eq!(linearizable(&unknown), Some(true), "an unknown write may have applied");
}

#[test]
fn three_coordinators_keep_a_linearizable_history_through_crashes_and_partitions() {
    let mut total = 0;
    for seed in 21..31 {
        let (compared, paths, faults) = run_seed(seed, move |world| async move {
            // Odd seeds snapshot every few entries, so compaction, InstallSnapshot to a node that
            // was down and restore at restart run under the same faults.
            let timing = CoordTiming {
                snapshot_every_entries: if seed % 2 == 1 { 16 } else { 10_000 },
                ..CoordTiming::default()
            };
            let addrs = add_coordinators_with(&world, 3, timing);
            let clients: Vec<NodeIndex> = (0..3).map(|i| idle_node(&world, &format!("client-{i}"))).collect();
            madsim::time::sleep(Duration::from_millis(1500)).await;
            let history: History = Arc::default();
            let handles: Vec<_> = clients
                .iter()
                .enumerate()
                .map(|(p, &node)| {
                    let (servers, history) = (addrs.clone(), history.clone());
                    world.spawn_on(node, move |rt| workload(rt, p as u32, servers, history))
                })
                .collect();
            // The nemesis: one coordinator at a time is killed (its disk crashes) and restarted,
            // or cut off from the other two and rejoined.
            let mut rng = SplitMix(world.seed());
            let mut faults = 0;
            for _ in 0..8 {
                madsim::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
                let victim = NodeIndex(rng.below(3) as usize);
                let fault = if rng.below(2) == 0 {
                    Fault::Kill(victim)
                } else {
                    Fault::Isolate(victim)
                };
                world.inject(&fault);
                faults += 1;
                madsim::time::sleep(Duration::from_millis(500 + rng.below(1500))).await;
                world.inject(&fault.opposite());
            }
            for h in handles {
                madsim::time::timeout(Duration::from_secs(120), h)
                    .await
                    .expect("the workload ends")
                    .expect("the client ran");
            }
            // The final state, read after healing, joins the history.
            let (servers, final_history) = (addrs.clone(), history.clone());
            let reader = idle_node(&world, "final-reader");
            world
                .spawn_on(reader, move |rt| async move {
                    let c = connect(rt.clone(), client_config(&servers, 3000)).await;
                    for k in 0..PATHS {
                        let path = format!("/k{k}");
                        let invoke_ms = rt.monotonic_ms();
                        let read = match c.get(&path, false, true).await {
                            Ok((d, st)) => Some((d, st.version)),
                            Err(CoordError::Tree(TreeError::NoNode)) => None,
                            Err(e) => panic!("final read of {path}: {e}"),
                        };
                        final_history.lock().expect("history").push(CoordOp {
                            process: 99,
                            path,
                            kind: CoordOpKind::Read,
                            invoke_ms,
                            complete_ms: Some(rt.monotonic_ms()),
                            outcome: CoordOutcome::Read(read),
                        });
                    }
                })
                .await
                .expect("the final reader ran");
            let history = history.lock().expect("history").clone();
            let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
            for op in &history {
                let name = format!("{:?}", op.outcome);
                *outcomes
                    .entry(name.split(['(', ' ']).next().unwrap_or("").to_string())
                    .or_default() += 1;
            }
            let span_ms = history.iter().filter_map(|o| o.complete_ms).max().unwrap_or(0)
                - history.iter().map(|o| o.invoke_ms).min().unwrap_or(0);
            println!("outcomes over {span_ms} ms: {outcomes:?}");
            let report = check(&history, &BTreeMap::new(), STATES_PER_PATH_MAX);
            println!("{}", report.summary());
            assert!(report.ok(), "{}", report.summary());
            assert!(report.too_large.is_empty(), "{}", report.summary());
            // Negative control: the same history with one read of a value nobody wrote fails.
            let mut tampered = history.clone();
            let last_ms = history.iter().filter_map(|o| o.complete_ms).max().unwrap_or(0);
            tampered.push(CoordOp {
                process: 98,
                path: "/k0".into(),
                kind: CoordOpKind::Read,
                invoke_ms: last_ms + 1,
                complete_ms: Some(last_ms + 2),
                outcome: CoordOutcome::Read(Some((b"never-written".to_vec(), 77))),
            });
            let control = check(&tampered, &BTreeMap::new(), STATES_PER_PATH_MAX);
            assert!(
                !control.violations.is_empty(),
                "the checker missed a tampered read: {}",
                control.summary()
            );
            (report.ops_checked, report.paths_checked, faults)
        });
        println!("seed {seed}: {compared} ops on {paths} paths linearizable under {faults} faults");
        total += compared;
    }
    assert!(total > 0, "compared nothing");
}

/// What a broker's ACL task is asked to do (the test's commands, carried to its node).
enum AclCommand {
    Grant(AclBinding),
    Revoke(AclFilter),
}

/// ACLs stored in the coordinator and cached on two brokers: grants and revocations from
/// alternating brokers while coordinators crash and restart in turn. The checker: after each
/// write is answered, every broker's cache shows it within the propagation bound
/// (`refresh_ms` + slack), and after a revocation no cache still holds the revoked binding.
#[test]
fn acl_grants_and_revocations_reach_every_broker_cache_within_the_bound_through_coordinator_crashes() {
    use std::collections::VecDeque;

    use gregor_core::node::acl_sync::{run_acl_sync, AclAdmin};
    use gregor_core::node::authz::NodeAcls;

    const REFRESH_MS: u64 = 300;
    const BOUND_MS: u64 = REFRESH_MS + 1_200;
    run_seed(21, |world| async move {
        let addrs = add_coordinators(&world, 3);
        madsim::time::sleep(Duration::from_millis(2000)).await;
        type Snapshot = Arc<Mutex<Vec<AclBinding>>>;
        type Commands = Arc<Mutex<VecDeque<AclCommand>>>;
        type Answers = Arc<Mutex<Vec<bool>>>;
        let mut brokers: Vec<(Snapshot, Commands, Answers)> = Vec::new();
        for b in 0..2 {
            let node = idle_node(&world, &format!("broker-{b}"));
            let (snapshot, commands, answers): (Snapshot, Commands, Answers) = Default::default();
            brokers.push((snapshot.clone(), commands.clone(), answers.clone()));
            let config = client_config(&addrs, 6_000);
            let _task = world.spawn_on(node, move |rt| async move {
                let acls = NodeAcls::default();
                let admin = AclAdmin::default();
                rt.spawn(run_acl_sync(
                    rt.clone(),
                    config,
                    REFRESH_MS,
                    acls.clone(),
                    admin.clone(),
                ));
                for _ in 0..200_000 {
                    *snapshot.lock().expect("snapshot") = acls.acls.borrow().bindings().collect();
                    let command = commands.lock().expect("commands").pop_front();
                    match command {
                        Some(AclCommand::Grant(b)) => {
                            let ok = admin.create(&rt, vec![b]).await.iter().all(|r| r.is_ok());
                            answers.lock().expect("answers").push(ok);
                        }
                        Some(AclCommand::Revoke(f)) => {
                            let ok = admin.delete(&rt, vec![f]).await.iter().all(|r| r.is_ok());
                            answers.lock().expect("answers").push(ok);
                        }
                        None => rt.sleep(Duration::from_millis(5)).await,
                    }
                }
            });
        }
        // Waits (bounded) for broker `b`'s answer number `n`.
        let answered = |b: usize, n: usize| {
            let answers = brokers[b].2.clone();
            async move {
                for _ in 0..3_000 {
                    if let Some(ok) = answers.lock().expect("answers").get(n).copied() {
                        return ok;
                    }
                    madsim::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("broker {b} never answered command {n}");
            }
        };
        let mut compared = 0;
        let mut sent = [0usize; 2];
        for round in 0..6usize {
            // Every coordinator in turn crashes (with its disk) during a round and comes back.
            let victim = NodeIndex(round % 3);
            if round % 2 == 1 {
                world.kill(victim);
            }
            let binding = AclBinding {
                pattern: ResourcePattern::literal(ResourceType::Topic, &format!("t{round}")),
                entry: AccessControlEntry {
                    principal: format!("User:u{round}"),
                    host: "*".into(),
                    operation: Operation::Write,
                    permission: Permission::Allow,
                },
            };
            let (granter, revoker) = (round % 2, (round + 1) % 2);
            brokers[granter]
                .1
                .lock()
                .expect("commands")
                .push_back(AclCommand::Grant(binding.clone()));
            assert!(answered(granter, sent[granter]).await, "round {round}: grant failed");
            sent[granter] += 1;
            madsim::time::sleep(Duration::from_millis(BOUND_MS)).await;
            for (b, (snapshot, _, _)) in brokers.iter().enumerate() {
                let has = snapshot.lock().expect("snapshot").contains(&binding);
                compared += 1;
                assert!(
                    has,
                    "round {round}: broker {b} lacks the grant {BOUND_MS} ms after it was answered"
                );
            }
            let mut filter = AclFilter::any();
            filter.principal = Some(binding.entry.principal.clone());
            brokers[revoker]
                .1
                .lock()
                .expect("commands")
                .push_back(AclCommand::Revoke(filter));
            assert!(
                answered(revoker, sent[revoker]).await,
                "round {round}: revocation failed"
            );
            sent[revoker] += 1;
            madsim::time::sleep(Duration::from_millis(BOUND_MS)).await;
            for (b, (snapshot, _, _)) in brokers.iter().enumerate() {
                let has = snapshot.lock().expect("snapshot").contains(&binding);
                compared += 1;
                assert!(!has, "round {round}: broker {b} still holds a revoked ACL {BOUND_MS} ms after the revocation was answered");
            }
            if round % 2 == 1 {
                world.restart(victim);
                madsim::time::sleep(Duration::from_millis(2500)).await;
            }
        }
        println!("acl propagation: {compared} cache checks against the {BOUND_MS} ms bound, 6 grants and 6 revocations, 3 coordinator crashes");
        assert!(compared > 0, "compared nothing");
    });
}

/// SCRAM users stored with AlterUserScramCredentials on one broker reach the other broker's
/// credential cache (what logins are checked against), and deleted ones leave it, while the
/// coordinators crash in turn (leader failovers included). The checker: after each write is
/// answered, both caches show it within the propagation bound.
#[test]
fn scram_users_added_and_deleted_reach_every_broker_cache_through_coordinator_crashes() {
    use std::collections::VecDeque;
    use std::rc::Rc;

    use gregor_core::node::scram_sync::{run_user_sync, UserAdmin};
    use gregor_core::security::scram::ScramCredential;
    use gregor_core::security::users::Change;
    use gregor_core::security::{Mechanism, SaslConfig};

    const REFRESH_MS: u64 = 300;
    const BOUND_MS: u64 = REFRESH_MS + 1_200;
    enum UserCommand {
        Add(String),
        Delete(String),
    }
    run_seed(23, |world| async move {
        let addrs = add_coordinators(&world, 3);
        madsim::time::sleep(Duration::from_millis(2000)).await;
        type Snapshot = Arc<Mutex<Vec<String>>>;
        type Commands = Arc<Mutex<VecDeque<UserCommand>>>;
        type Answers = Arc<Mutex<Vec<bool>>>;
        let mut brokers: Vec<(Snapshot, Commands, Answers)> = Vec::new();
        for b in 0..2 {
            let node = idle_node(&world, &format!("broker-{b}"));
            let (snapshot, commands, answers): (Snapshot, Commands, Answers) = Default::default();
            brokers.push((snapshot.clone(), commands.clone(), answers.clone()));
            let config = client_config(&addrs, 6_000);
            let _task = world.spawn_on(node, move |rt| async move {
                let sasl = Rc::new(SaslConfig::default());
                let admin = UserAdmin::default();
                rt.spawn(run_user_sync(
                    rt.clone(),
                    config,
                    REFRESH_MS,
                    sasl.clone(),
                    admin.clone(),
                ));
                let m = Mechanism::ScramSha256;
                for _ in 0..200_000 {
                    // Only users a login would find count: the lookup logins use.
                    *snapshot.lock().expect("snapshot") = sasl
                        .scram_users()
                        .into_iter()
                        .filter(|(u, _, _)| sasl.scram_credential(u, m).is_some())
                        .map(|(u, _, _)| u)
                        .collect();
                    let command = commands.lock().expect("commands").pop_front();
                    let job = match command {
                        Some(UserCommand::Add(u)) => vec![(
                            u,
                            vec![Change {
                                mechanism: m,
                                credential: Some(ScramCredential::from_password(m, "pw", b"salt", 4096)),
                            }],
                        )],
                        Some(UserCommand::Delete(u)) => vec![(
                            u,
                            vec![Change {
                                mechanism: m,
                                credential: None,
                            }],
                        )],
                        None => {
                            rt.sleep(Duration::from_millis(5)).await;
                            continue;
                        }
                    };
                    let ok = admin.alter(&rt, job).await.iter().all(|r| r.is_ok());
                    answers.lock().expect("answers").push(ok);
                }
            });
        }
        let answered = |b: usize, n: usize| {
            let answers = brokers[b].2.clone();
            async move {
                for _ in 0..3_000 {
                    if let Some(ok) = answers.lock().expect("answers").get(n).copied() {
                        return ok;
                    }
                    madsim::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("broker {b} never answered command {n}");
            }
        };
        let mut compared = 0;
        let mut sent = [0usize; 2];
        for round in 0..6usize {
            let victim = NodeIndex(round % 3);
            if round % 2 == 1 {
                world.kill(victim);
            }
            let user = format!("u{round}");
            let (adder, deleter) = (round % 2, (round + 1) % 2);
            brokers[adder]
                .1
                .lock()
                .expect("commands")
                .push_back(UserCommand::Add(user.clone()));
            assert!(answered(adder, sent[adder]).await, "round {round}: add failed");
            sent[adder] += 1;
            madsim::time::sleep(Duration::from_millis(BOUND_MS)).await;
            for (b, (snapshot, _, _)) in brokers.iter().enumerate() {
                compared += 1;
                assert!(
                    snapshot.lock().expect("snapshot").contains(&user),
                    "round {round}: broker {b} cannot log {user} in {BOUND_MS} ms after it was added"
                );
            }
            brokers[deleter]
                .1
                .lock()
                .expect("commands")
                .push_back(UserCommand::Delete(user.clone()));
            assert!(answered(deleter, sent[deleter]).await, "round {round}: delete failed");
            sent[deleter] += 1;
            madsim::time::sleep(Duration::from_millis(BOUND_MS)).await;
            for (b, (snapshot, _, _)) in brokers.iter().enumerate() {
                compared += 1;
                assert!(
                    !snapshot.lock().expect("snapshot").contains(&user),
                    "round {round}: broker {b} still logs {user} in {BOUND_MS} ms after it was deleted"
                );
            }
            if round % 2 == 1 {
                world.restart(victim);
                madsim::time::sleep(Duration::from_millis(2500)).await;
            }
        }
        println!("scram user propagation: {compared} cache checks against the {BOUND_MS} ms bound, 6 adds and 6 deletes, 3 coordinator crashes");
        assert!(compared > 0, "compared nothing");
    });
}

#[test]
fn three_coordinators_with_a_secret_serve_only_clients_proving_it() {
    let secret = |fill: u8| ClusterSecret::new(&[fill; 24]).expect("24 bytes is a valid secret");
    let outcomes = run_seed(12, move |world| async move {
        let addrs = add_coordinators_secret(&world, 3, CoordTiming::default(), Some(secret(1)));
        let client = idle_node(&world, "client");
        madsim::time::sleep(Duration::from_millis(1500)).await;
        world
            .spawn_on(client, move |rt| async move {
                let mut outcomes = Vec::new();
                for s in [Some(secret(1)), Some(secret(2)), None] {
                    let mut config = client_config(&addrs, 2000);
                    config.attempts_max = 8;
                    config.secret = s.clone();
                    let outcome = match CoordClient::connect(rt.clone(), config).await {
                        Ok(c) => c.create("/written", b"", CreateMode::Ephemeral).await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    outcomes.push(format!("{outcome:?}"));
                }
                outcomes
            })
            .await
            .expect("the client ran")
    });
    println!("right secret, wrong secret, none: {outcomes:?}");
    assert_eq!(outcomes, ["Ok(())", "Err(Unavailable)", "Err(Unavailable)"]);
}

/// Waits (bounded: 60 s of simulated time) until `phase` reaches `at_least`.
async fn await_phase(phase: &Mutex<u32>, at_least: u32) {
    for _ in 0..1200 {
        if *phase.lock().expect("phase") >= at_least {
            return;
        }
        madsim::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("phase {at_least} never came");
}

/// Follower reads (ZooKeeper's): a follower cut off from the other two coordinators still
/// answers a read from its own, stale, state; its `sync` is refused while it cannot ask the
/// leader (it never claims to be caught up); once healed, `sync` and then a read on it return the
/// latest committed write. The client reaches every coordinator throughout: only the follower's
/// links to its peers are cut.
#[test]
fn follower_read_is_stale_when_cut_off_and_sync_catches_it_up_once_healed() {
    let checked = run_seed(41, |world| async move {
        let addrs = add_coordinators(&world, 3);
        let client = idle_node(&world, "client");
        madsim::time::sleep(Duration::from_millis(1500)).await;
        // 1: the client found the follower and saw it caught up; 2: it is cut off;
        // 3: the client is done with the cut-off checks; 4: healed.
        let phase = Arc::new(Mutex::new(0u32));
        let follower = Arc::new(Mutex::new(None::<usize>));
        let (servers, script_phase, script_follower) = (addrs.clone(), phase.clone(), follower.clone());
        let script = world.spawn_on(client, move |rt| async move {
            let mut config = client_config(&servers, 20_000);
            // Longer than the server's own request timeout: the refusal is the server's.
            config.request_timeout_ms = 5_000;
            let c = connect(rt.clone(), config).await;
            c.create("/k", b"v1", CreateMode::Persistent).await.expect("create /k");
            let leader = c.server().expect("a leader answered");
            let f = servers.iter().position(|a| *a != leader).expect("three servers");
            let at = servers[f].clone();
            let mut seen = None;
            for _ in 0..50 {
                seen = c.get_at(&at, "/k", false).await.ok().map(|(d, _)| d);
                if seen.as_deref() == Some(b"v1".as_slice()) {
                    break;
                }
                rt.sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(seen.as_deref(), Some(b"v1".as_slice()), "follower {f} never served v1");
            *script_follower.lock().expect("follower") = Some(f);
            *script_phase.lock().expect("phase") = 1;
            await_phase(&script_phase, 2).await;

            c.set_data("/k", b"v2", None)
                .await
                .expect("the leader's majority commits v2");
            let stale = c
                .get_at(&at, "/k", false)
                .await
                .expect("a cut-off follower still answers reads");
            println!(
                "cut-off follower {f} read /k = {:?} after v2 committed",
                String::from_utf8_lossy(&stale.0)
            );
            assert_eq!(stale.0, b"v1", "the cut-off follower cannot know v2");
            let sync = c.sync_at(&at).await;
            println!("sync on the cut-off follower: {sync:?}");
            assert_eq!(
                sync,
                Err(CoordError::Unavailable),
                "a cut-off follower must not report itself synced"
            );
            *script_phase.lock().expect("phase") = 3;
            await_phase(&script_phase, 4).await;

            // Healed: a sync succeeds within a few elections, and the read after it is current.
            for attempt in 0..30 {
                match c.sync_at(&at).await {
                    Ok(()) => {
                        let (data, _) = c.get_at(&at, "/k", false).await.expect("read after sync");
                        println!(
                            "after healing: sync ok at attempt {attempt}, /k = {:?}",
                            String::from_utf8_lossy(&data)
                        );
                        assert_eq!(data, b"v2", "a read after sync must see the write committed before it");
                        return 3;
                    }
                    Err(e) => println!("after healing: sync attempt {attempt}: {e}"),
                }
                rt.sleep(Duration::from_millis(200)).await;
            }
            panic!("sync never succeeded after healing");
        });
        await_phase(&phase, 1).await;
        let f = follower.lock().expect("follower").expect("set with phase 1");
        let others: Vec<usize> = (0..3).filter(|i| *i != f).collect();
        for o in &others {
            world.inject(&Fault::Partition(NodeIndex(f), NodeIndex(*o)));
        }
        *phase.lock().expect("phase") = 2;
        await_phase(&phase, 3).await;
        for o in &others {
            world.inject(&Fault::Repair(NodeIndex(f), NodeIndex(*o)));
        }
        *phase.lock().expect("phase") = 4;
        madsim::time::timeout(Duration::from_secs(120), script)
            .await
            .expect("the script ends")
            .expect("the script ran")
    });
    println!("compared {checked} follower reads (stale, refused sync, synced)");
    assert_eq!(checked, 3);
}

/// One broker in cluster mode against a 1-node coordinator, idle: what its cluster task costs,
/// and how soon it re-reads after the coordinator restarted (watches live on the server: a
/// restarted one has none of this session's, at the same address, so `server_changes` does
/// not move; the task re-reads when `connections_opened` does). Returns the frames the broker
/// sent over 30 idle seconds and the ms until it claimed the controller office again after
/// another session deleted `/controller`, 5 s after the coordinator restarted.
fn idle_broker(refresh_quiet_ms_max: u64) -> (u64, u64) {
    use gregor_core::cluster::CONTROLLER_PATH;
    use gregor_core::node::cluster::start_cluster_broker;
    use gregor_core::node::NodeConfig;
    use gregor_core::BrokerId;
    use gregor_sim::world::node_ip;

    run_seed(13, move |world| async move {
        let addrs = add_coordinators(&world, 1);
        let coordinators = addrs.clone();
        let broker = world.add_node("broker-0", move |rt| {
            let coordinators = coordinators.clone();
            async move {
                let ip = node_ip(NodeIndex(1)).to_string();
                let mut config = NodeConfig::single_node(&format!("{ip}:9092"), &ip, 9092, "test");
                config.broker.broker_id = BrokerId(0);
                let mut cluster = ClusterConfig::new(coordinators);
                cluster.refresh_quiet_ms_max = refresh_quiet_ms_max;
                match start_cluster_broker(rt, config, cluster).await {
                    Ok((_broker, accept_loop)) => accept_loop.await,
                    Err(e) => panic!("the broker did not start: {e}"),
                }
            }
        });
        assert_eq!(broker, NodeIndex(1));
        let client = idle_node(&world, "client");
        madsim::time::sleep(Duration::from_secs(10)).await;
        let before = world.state(broker).frames_sent();
        madsim::time::sleep(Duration::from_secs(30)).await;
        let idle_frames = world.state(broker).frames_sent() - before;

        world.kill(NodeIndex(0));
        madsim::time::sleep(Duration::from_millis(500)).await;
        world.restart(NodeIndex(0));
        madsim::time::sleep(Duration::from_secs(5)).await;
        let reclaim_ms = world
            .spawn_on(client, move |rt| async move {
                let c = connect(rt.clone(), client_config(&addrs, 6000)).await;
                let (data, _) = c
                    .get(CONTROLLER_PATH, false, true)
                    .await
                    .expect("the broker is controller");
                c.delete(CONTROLLER_PATH, None).await.expect("delete /controller");
                let deleted_ms = rt.monotonic_ms();
                loop {
                    rt.sleep(Duration::from_millis(10)).await;
                    if let Ok(Some(_)) = c.exists(CONTROLLER_PATH, false, true).await {
                        let elapsed = rt.monotonic_ms() - deleted_ms;
                        println!(
                            "/controller was {:?}; claimed again after {elapsed} ms",
                            String::from_utf8_lossy(&data)
                        );
                        break elapsed;
                    }
                    assert!(
                        rt.monotonic_ms() - deleted_ms < 30_000,
                        "/controller never claimed again"
                    );
                }
            })
            .await
            .expect("client ran");
        (idle_frames, reclaim_ms)
    })
}

#[test]
fn idle_broker_backs_off_its_scans_and_rereads_at_once_after_its_coordinator_restarts() {
    let (quiet, reclaim_ms) = idle_broker(ClusterConfig::new(Vec::new()).refresh_quiet_ms_max);
    let (every_500_ms, _) = idle_broker(500);
    println!("frames sent by an idle broker in 30 s: {quiet} (quiet rounds doubling to 2 s), {every_500_ms} (a scan every 500 ms)");
    assert!(quiet > 0, "compared nothing: the broker sent no frame");
    assert!(
        quiet * 2 < every_500_ms,
        "the quiet backoff should at least halve an idle broker's coordinator traffic: {quiet} vs {every_500_ms}"
    );
    // With quiet waits growing to 60 s the next scan after the delete is ~20 s away (scans at
    // about 33 s and 65 s): only a watch registered again after the restart, its event collected
    // by the pings every `refresh_ms`, explains a reclaim within a second (ping interval, a scan
    // of ~15 round trips, the claim and the epoch bump).
    let (_, reclaim_long_quiet_ms) = idle_broker(60_000);
    for (what, ms) in [("the default", reclaim_ms), ("60 s", reclaim_long_quiet_ms)] {
        assert!(
            ms < 1_000,
            "quiet waits up to {what}: after its coordinator restarted, the broker saw /controller deleted only \
             after {ms} ms: its watch was lost and it waited for a quiet re-read"
        );
    }
}

/// Calls on one session overlap (a broker's heartbeat task pings while its cluster task waits
/// for an answer): they share the client's connections instead of each overlap opening one,
/// which `connections_opened` would count as a possibly restarted server (its owner then
/// re-reads everything it watches).
#[test]
fn overlapping_calls_on_one_session_reuse_its_connections() {
    const ROUNDS: u64 = 50;
    run_seed(17, |world| async move {
        let addrs = add_coordinators(&world, 1);
        let node = idle_node(&world, "client");
        madsim::time::sleep(Duration::from_millis(1500)).await;
        let (opened_before, opened_after) = world
            .spawn_on(node, move |rt| async move {
                let c = connect(rt.clone(), client_config(&addrs, 6000)).await;
                c.create("/a", b"x", CreateMode::Persistent).await.expect("create");
                let before = c.connections_opened();
                for _ in 0..ROUNDS {
                    let (a, b) = futures_util::future::join(c.get("/a", false, false), c.ping()).await;
                    assert_eq!(a.map(|(data, _)| data), Ok(b"x".to_vec()));
                    assert_eq!(b, Ok(()));
                }
                (before, c.connections_opened())
            })
            .await
            .expect("client ran");
        println!(
            "{ROUNDS} rounds of two overlapping calls: connections opened {opened_before} before, {opened_after} after"
        );
        assert!(
            opened_before >= 1,
            "compared nothing: no connection counted before the rounds"
        );
        assert!(
            opened_after <= opened_before + 1,
            "{ROUNDS} rounds of two overlapping calls opened {} connections: overlaps should reuse the idle ones",
            opened_after - opened_before
        );
    });
}
