//! The nemesis on a small world of idle nodes: scheduled faults and their opposites happen at
//! their times, to the node `resolve` names; random profiles are a pure function of the seed;
//! the heal leaves nothing in force.

use std::time::Duration;

use gregor_core::disk::Disk;
use gregor_core::runtime::Runtime;

use super::*;
use crate::world::run_seed;

fn scenario(brokers: u32, coordinators: u32, duration_s: u64, faults: &str) -> Scenario {
    let source = format!(
        r#"
description = "nemesis test"
duration_s = {duration_s}
[cluster]
brokers = {brokers}
coordinators = {coordinators}
[topic]
[producer]
mode = "sync"
{faults}
[expect]
outcome = "no-anomalies"
"#
    );
    Scenario::parse(&source, "test.toml", "test").expect("the test scenario parses")
}

/// Adds idle nodes `broker-0..` then `coordinator-0..`, in that order.
fn add_nodes(world: &World, brokers: u32, coordinators: u32) {
    let names = (0..brokers)
        .map(|i| format!("broker-{i}"))
        .chain((0..coordinators).map(|i| format!("coordinator-{i}")));
    for name in names {
        world.add_node(&name, |_rt| std::future::pending::<()>());
    }
}

/// Resolves names to the nodes `add_nodes` made; `leader` is broker-1; `controller` is none.
fn resolver(brokers: u32) -> impl Fn(&str) -> Option<NodeIndex> {
    move |name: &str| {
        if name == "leader" {
            return Some(NodeIndex(1));
        }
        if let Some(i) = name.strip_prefix("broker-") {
            return i.parse().ok().map(NodeIndex);
        }
        if let Some(i) = name.strip_prefix("coordinator-") {
            return i.parse::<usize>().ok().map(|i| NodeIndex(brokers as usize + i));
        }
        None
    }
}

fn event(at_ms: u64, node: &str, what: &str) -> FaultEvent {
    FaultEvent {
        at_ms,
        node: node.into(),
        what: what.into(),
    }
}

async fn sleep_until_ms(ms: u64) {
    let now = madsim::time::TimeHandle::current().elapsed();
    madsim::time::sleep(Duration::from_millis(ms).saturating_sub(now)).await;
}

/// Plays `faults` on two idle brokers; reports the events, whether broker-0 was down at 0.5 s,
/// 1.5 s and 3.5 s, its disk crashes, and whether an unsynced write made before the fault survived.
fn play_on_broker_0(faults: &str) -> (Vec<FaultEvent>, [bool; 3], u64, bool) {
    let s = scenario(2, 1, 5, faults);
    run_seed(1, move |world| async move {
        add_nodes(&world, 2, 0);
        let b0 = NodeIndex(0);
        world.with_disk(b0, |d| {
            d.create("unsynced").expect("create");
            d.append("unsynced", b"page cache").expect("append");
        });
        let probe_world = world.clone();
        let probe = madsim::task::spawn_local(async move {
            let mut down = [false; 3];
            for (i, at) in [500, 1500, 3500].into_iter().enumerate() {
                sleep_until_ms(at).await;
                down[i] = probe_world.is_down(b0);
            }
            down
        });
        let mut nemesis = Nemesis::new(&s, 1);
        nemesis.play(&world, &resolver(2)).await;
        let down = probe.await.expect("probe task");
        assert!(!world.is_down(b0), "healed at the end");
        let crashes = world.with_disk(b0, |d| d.stats().crashes);
        let kept = world.with_disk(b0, |d| d.len("unsynced").ok()) == Some(10);
        (nemesis.into_events(), down, crashes, kept)
    })
}

#[test]
fn a_scheduled_crash_and_its_restart_happen_at_their_times() {
    let (events, down, crashes, _) =
        play_on_broker_0("[[faults.schedule]]\nat_s = 1\nfault = \"crash\"\nnode = \"broker-0\"\nheal_after_s = 2");
    assert_eq!(
        events,
        vec![event(1000, "broker-0", "crash"), event(3000, "broker-0", "restart")]
    );
    assert_eq!(down, [false, true, false]);
    assert_eq!(crashes, 1, "a crash is a power loss of the disk too");
}

#[test]
fn a_kill_keeps_the_page_cache() {
    let (events, down, crashes, kept) =
        play_on_broker_0("[[faults.schedule]]\nat_s = 1\nfault = \"kill\"\nnode = \"broker-0\"\nheal_after_s = 2");
    assert_eq!(
        events,
        vec![event(1000, "broker-0", "kill"), event(3000, "broker-0", "restart")]
    );
    assert_eq!(down, [false, true, false]);
    assert_eq!(crashes, 0);
    assert!(kept, "an unsynced write survives a process kill");
}

#[test]
fn faults_without_heal_after_end_at_the_heal_and_roles_resolve_when_due() {
    let faults = r#"
[[faults.schedule]]
at_s = 2
fault = "pause"
node = "leader"
[[faults.schedule]]
at_s = 1
fault = "disk-full"
node = "broker-0"
heal_after_s = 1.5
[[faults.schedule]]
at_s = 3
fault = "clock-skew"
node = "controller"
"#;
    let s = scenario(2, 1, 5, faults);
    let (events, full_mid) = run_seed(3, move |world| async move {
        add_nodes(&world, 2, 0);
        let probe_world = world.clone();
        let probe = madsim::task::spawn_local(async move {
            sleep_until_ms(1200).await;
            probe_world.with_disk(NodeIndex(0), |d| {
                d.create("f").expect("create");
                d.append("f", b"x").is_err()
            })
        });
        let mut nemesis = Nemesis::new(&s, 3);
        nemesis.play(&world, &resolver(2)).await;
        let full = probe.await.expect("probe");
        let after = world.with_disk(NodeIndex(0), |d| d.append("f", b"x").is_ok());
        assert!(after, "the disk drained");
        (nemesis.into_events(), full)
    });
    assert_eq!(
        events,
        vec![
            event(1000, "broker-0", "disk-full"),
            event(2000, "leader=broker-1", "pause"),
            event(2500, "broker-0", "drain"),
            event(3000, "controller", "clock-skew skipped: no such node now"),
            event(5000, "leader=broker-1", "resume"),
        ]
    );
    assert!(full_mid, "the disk refused a write while full");
}

/// The most faults in force at once, replaying `events`.
fn in_force_max(events: &[FaultEvent]) -> usize {
    let faults = [
        "crash",
        "kill",
        "pause",
        "isolate",
        "disk-full",
        "sync-fail",
        "clock-skew",
        "partition-halves",
    ];
    let (mut now, mut max) = (0usize, 0usize);
    for e in events {
        if faults.contains(&e.what.as_str()) {
            now += 1;
            max = max.max(now);
        } else {
            now = now.checked_sub(1).expect("an opposite follows its fault");
        }
    }
    assert_eq!(now, 0, "the heal left no fault in force: {events:?}");
    max
}

fn random_run(profile: &str, seed: u64) -> Vec<FaultEvent> {
    let s = scenario(3, 3, 120, &format!("[faults]\nprofile = \"{profile}\""));
    run_seed(seed, move |world| async move {
        add_nodes(&world, 3, 3);
        let mut nemesis = Nemesis::new(&s, seed);
        nemesis.play(&world, &resolver(3)).await;
        for i in 0..world.node_count() {
            assert!(!world.is_down(NodeIndex(i)), "node {i} restarted at the heal");
            assert_eq!(world.state(NodeIndex(i)).skew_ms(), 0);
        }
        nemesis.into_events()
    })
}

/// Plays `s` (3 brokers, 3 coordinators) with `seed`: the events and the played schedule.
fn played_run(s: Scenario, seed: u64) -> (Vec<FaultEvent>, Vec<ScheduledFault>) {
    run_seed(seed, move |world| async move {
        add_nodes(&world, 3, 3);
        let mut nemesis = Nemesis::new(&s, seed);
        nemesis.play(&world, &resolver(3)).await;
        let played = nemesis.played().to_vec();
        (nemesis.into_events(), played)
    })
}

#[test]
fn a_random_run_played_back_as_its_recorded_schedule_applies_the_same_faults() {
    for (profile, seed) in [("mixed", 1), ("network", 2), ("crash-storm", 3), ("partitions", 4)] {
        let (events, played) = played_run(scenario(3, 3, 120, &format!("[faults]\nprofile = \"{profile}\"")), seed);
        // The schedule as a scenario file would hold it, parsed back (and validated) from text.
        let mut faults = toml::Table::new();
        faults.insert("schedule".into(), toml::Value::try_from(&played).expect("serializes"));
        let mut table = toml::Table::new();
        table.insert("faults".into(), toml::Value::Table(faults));
        let text = toml::to_string(&table).expect("serializes");
        let explicit = scenario(3, 3, 120, &text);
        assert_eq!(explicit.faults.schedule.len(), played.len());
        let (replayed, replayed_played) = played_run(explicit, seed);
        println!(
            "{profile} seed {seed}: {} faults played, {} events, replayed {} events",
            played.len(),
            events.len(),
            replayed.len()
        );
        assert!(played.len() >= 5, "{profile}: {played:?}");
        assert_eq!(replayed, events, "{profile}: the same faults, nodes and times");
        assert_eq!(
            replayed_played, played,
            "{profile}: the replay records itself the same way"
        );
    }
}

#[test]
fn a_profile_kept_as_a_timer_only_plays_no_random_fault() {
    let timer = "[faults]\nprofile = \"crash-storm\"\nprofile_timer_only = true";
    let (events, played) = played_run(scenario(3, 3, 60, timer), 3);
    let (storm, _) = played_run(scenario(3, 3, 60, "[faults]\nprofile = \"crash-storm\""), 3);
    println!(
        "crash-storm seed 3: {} events as a profile, {} as a timer",
        storm.len(),
        events.len()
    );
    assert!(storm.len() >= 10, "{storm:?}");
    assert_eq!((events, played), (vec![], vec![]));
}

#[test]
fn a_random_profile_draws_the_same_faults_for_the_same_seed_only() {
    let a = random_run("mixed", 1);
    assert!(a.len() >= 10, "120 s of mixed faults: {a:?}");
    assert_eq!(a, random_run("mixed", 1));
    assert_ne!(a, random_run("mixed", 2));
    let limit = profile("mixed").expect("mixed").concurrent_max;
    assert!(in_force_max(&a) <= limit);
    assert!(a.iter().all(|e| e.at_ms <= 120_000), "nothing after the heal: {a:?}");
}

#[test]
fn the_crashes_profile_crashes_one_broker_at_a_time() {
    let events = random_run("crashes", 5);
    assert!(events.len() >= 8, "{events:?}");
    assert_eq!(in_force_max(&events), 1);
    assert!(events.iter().all(|e| e.node.starts_with("broker-")), "{events:?}");
    assert!(events.iter().any(|e| e.what == "crash"));
}

#[test]
fn the_none_profile_does_nothing() {
    assert_eq!(random_run("none", 1), vec![]);
}

#[test]
fn every_profile_is_well_formed() {
    for p in PROFILES {
        assert!(p.fault_s_min <= p.fault_s_max && p.interval_s_mean > 0.0, "{p:?}");
        assert_eq!(p.weights.is_empty(), p.concurrent_max == 0, "{p:?}");
    }
    for name in ["none", "crashes", "partitions", "mixed", "disk", "network"] {
        assert!(profile(name).is_some(), "{name}");
    }
}

/// Adds `names` as nodes that accept connections on port 7000 (and hold them open).
fn add_listening_nodes(world: &World, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        let addr = world.addr(NodeIndex(i), 7000);
        world.add_node(name, move |rt| {
            let addr = addr.clone();
            async move {
                use gregor_core::runtime::Listener;
                let mut listener = rt.listen(&addr).await.expect("listen");
                let mut held = Vec::new();
                while let Ok(conn) = listener.accept().await {
                    held.push(conn);
                }
            }
        });
    }
}

/// Which ordered pairs of nodes can open a connection now (`true` at `[from][to]`).
async fn reachability(world: &World) -> Vec<Vec<bool>> {
    let n = world.node_count();
    let mut matrix = vec![vec![true; n]; n];
    for (from, row) in matrix.iter_mut().enumerate() {
        for (to, cell) in row.iter_mut().enumerate() {
            if from == to {
                continue;
            }
            let addr = world.addr(NodeIndex(to), 7000);
            *cell = world
                .spawn_on(NodeIndex(from), move |rt| async move {
                    madsim::time::timeout(Duration::from_millis(200), rt.connect(&addr))
                        .await
                        .is_ok_and(|c| c.is_ok())
                })
                .await
                .expect("the probe's node is up");
        }
    }
    matrix
}

fn server_names(brokers: u32, coordinators: u32) -> Vec<String> {
    (0..brokers)
        .map(|i| format!("broker-{i}"))
        .chain((0..coordinators).map(|i| format!("coordinator-{i}")))
        .collect()
}

#[test]
fn a_bridge_cuts_the_halves_apart_and_keeps_the_bridge_linked_to_both() {
    let s = scenario(
        3,
        3,
        5,
        "[[faults.schedule]]\nat_s = 1\nfault = \"bridge\"\nnode = \"leader\"\nheal_after_s = 2",
    );
    let (events, during, after) = run_seed(4, move |world| async move {
        add_listening_nodes(&world, &server_names(3, 3));
        let probe_world = world.clone();
        let probe = madsim::task::spawn_local(async move {
            sleep_until_ms(1500).await;
            let during = reachability(&probe_world).await;
            sleep_until_ms(4000).await;
            (during, reachability(&probe_world).await)
        });
        let mut nemesis = Nemesis::new(&s, 4);
        nemesis.play(&world, &resolver(3)).await;
        let (during, after) = probe.await.expect("probe");
        (nemesis.into_events(), during, after)
    });
    // The others alternate between the sides in node order: broker-0, coordinator-0,
    // coordinator-2 | broker-2, coordinator-1; the leader (broker-1) is the bridge.
    let label = "broker-0,coordinator-0,coordinator-2|leader=broker-1|broker-2,coordinator-1";
    assert_eq!(
        events,
        vec![event(1000, label, "bridge"), event(3000, label, "repair-bridge")]
    );
    let side = |n: usize| match n {
        0 | 3 | 5 => 'a',
        2 | 4 => 'b',
        _ => 'x',
    };
    let mut compared = 0;
    for from in 0..6 {
        for to in (0..6).filter(|&to| to != from) {
            let cut = matches!((side(from), side(to)), ('a', 'b') | ('b', 'a'));
            assert_eq!(during[from][to], !cut, "{from} -> {to} during the bridge");
            assert!(after[from][to], "{from} -> {to} after the repair");
            compared += 1;
        }
    }
    println!("compared {compared} links during and after the bridge");
    assert!(
        during[0][1] && during[1][0] && during[2][1] && during[1][2],
        "the bridge reaches both sides"
    );
}

#[test]
fn a_swizzle_clogs_one_at_a_time_then_unclogs_in_another_order() {
    let s = scenario(
        3,
        1,
        6,
        "[[faults.schedule]]\nat_s = 1\nfault = \"swizzle-clog\"\nnode = \"broker-1\"\nheal_after_s = 2",
    );
    let (events, samples) = run_seed(5, move |world| async move {
        add_listening_nodes(&world, &server_names(3, 1));
        let probe_world = world.clone();
        // Whether coordinator-0 (never clogged) reaches each broker, sampled between the steps.
        let probe = madsim::task::spawn_local(async move {
            let mut samples = Vec::new();
            for at in [1200, 1700, 2200, 3200, 3700, 4200] {
                sleep_until_ms(at).await;
                let m = reachability(&probe_world).await;
                samples.push((0..3).map(|b| m[3][b]).collect::<Vec<_>>());
            }
            samples
        });
        let mut nemesis = Nemesis::new(&s, 5);
        nemesis.play(&world, &resolver(3)).await;
        (nemesis.into_events(), probe.await.expect("probe"))
    });
    let clogs: Vec<_> = events.iter().filter(|e| e.what == "swizzle-clog").collect();
    let unclogs: Vec<_> = events.iter().filter(|e| e.what == "swizzle-unclog").collect();
    assert_eq!(events.len(), 6, "{events:?}");
    assert_eq!(
        clogs.iter().map(|e| (e.at_ms, e.node.as_str())).collect::<Vec<_>>(),
        vec![(1000, "broker-1"), (1500, "broker-0"), (2000, "broker-2")],
        "the named node first, then the other brokers, one step apart"
    );
    assert_eq!(
        unclogs.iter().map(|e| e.at_ms).collect::<Vec<_>>(),
        vec![3000, 3500, 4000]
    );
    let unclog_order: Vec<&str> = unclogs.iter().map(|e| e.node.as_str()).collect();
    let mut sorted = unclog_order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["broker-0", "broker-1", "broker-2"]);
    assert_ne!(
        unclog_order,
        ["broker-1", "broker-0", "broker-2"],
        "unclogged in another order"
    );
    // Reachability follows the steps: clogged one by one, then freed in the unclog order.
    let index = |name: &str| {
        name.strip_prefix("broker-")
            .and_then(|i| i.parse::<usize>().ok())
            .expect("broker")
    };
    let mut expected = Vec::new();
    let mut state = [true; 3];
    for clogged in [1, 0, 2] {
        state[clogged] = false;
        expected.push(state.to_vec());
    }
    for name in &unclog_order {
        state[index(name)] = true;
        expected.push(state.to_vec());
    }
    println!("reachability of the brokers from coordinator-0 between the steps: {samples:?}");
    assert_eq!(samples, expected);
}

#[test]
fn frame_faults_set_their_rates_and_heal_them() {
    let faults = r#"
[[faults.schedule]]
at_s = 1
fault = "duplicate-frames"
node = "broker-0"
rate = 0.5
heal_after_s = 1
[[faults.schedule]]
at_s = 1.5
fault = "corrupt-frames"
node = "broker-0"
"#;
    let s = scenario(2, 1, 3, faults);
    let (events, samples) = run_seed(6, move |world| async move {
        add_nodes(&world, 2, 0);
        let probe_world = world.clone();
        let probe = madsim::task::spawn_local(async move {
            let mut samples = Vec::new();
            for at in [1200, 1700, 2500] {
                sleep_until_ms(at).await;
                samples.push(probe_world.state(NodeIndex(0)).frame_rates());
            }
            samples
        });
        let mut nemesis = Nemesis::new(&s, 6);
        nemesis.play(&world, &resolver(2)).await;
        assert_eq!(world.state(NodeIndex(0)).frame_rates(), FrameRates::default(), "healed");
        (nemesis.into_events(), probe.await.expect("probe"))
    });
    assert_eq!(
        events,
        vec![
            event(1000, "broker-0", "duplicate-frames"),
            event(1500, "broker-0", "corrupt-frames"),
            event(2000, "broker-0", "heal-duplicates"),
            event(3000, "broker-0", "heal-corruption"),
        ]
    );
    let rates = |duplicate, corrupt| FrameRates { duplicate, corrupt };
    assert_eq!(
        samples,
        vec![
            rates(0.5, 0.0),
            rates(0.5, FRAME_FAULT_RATE_DEFAULT),
            rates(0.0, FRAME_FAULT_RATE_DEFAULT)
        ]
    );
}

#[test]
fn the_network_profile_draws_bridges_swizzles_and_frame_faults_and_heals_them_all() {
    let run = |seed: u64| {
        let s = scenario(3, 3, 200, "[faults]\nprofile = \"network\"");
        run_seed(seed, move |world| async move {
            add_listening_nodes(&world, &server_names(3, 3));
            let mut nemesis = Nemesis::new(&s, seed);
            nemesis.play(&world, &resolver(3)).await;
            let m = reachability(&world).await;
            let links = m.iter().flatten().filter(|&&ok| ok).count();
            assert_eq!(links, 36, "every link works after the heal: {m:?}");
            for i in 0..world.node_count() {
                assert_eq!(world.state(NodeIndex(i)).frame_rates(), FrameRates::default());
            }
            nemesis.into_events()
        })
    };
    let a = run(1);
    let kinds: std::collections::BTreeSet<&str> = a.iter().map(|e| e.what.as_str()).collect();
    println!("network profile, 200 s: {} events, kinds {kinds:?}", a.len());
    for kind in [
        "bridge",
        "swizzle-clog",
        "swizzle-unclog",
        "duplicate-frames",
        "corrupt-frames",
    ] {
        assert!(kinds.contains(kind), "{kind} in {kinds:?}");
    }
    assert_eq!(a, run(1), "the same seed draws the same faults");
    assert_ne!(a, run(2));
    let clogs = a.iter().filter(|e| e.what == "swizzle-clog").count();
    assert_eq!(clogs, a.iter().filter(|e| e.what == "swizzle-unclog").count());
}
