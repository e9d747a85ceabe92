//! gregor-sim's integration tests: `SimRuntime` and the `World` harness, end to end.
//!
//! The echo server and client are generic over `gregor_core::runtime::Runtime` and use nothing
//! else, so passing here shows the binding works through the trait the core drivers use. Each
//! test names the fault it injects and checks both the fault and its opposite.

use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use gregor_core::disk::Disk;
use gregor_core::runtime::{Connection, Listener, NetError, Runtime};
use gregor_sim::world::{run_seed, Fault, NodeConfig, NodeIndex, World};

const PORT: u16 = 9092;

/// What the echo server saw, shared with the test (the server runs on its own node).
type Log = Arc<Mutex<Vec<String>>>;

fn log(log: &Log, event: String) {
    log.lock().expect("log lock").push(event);
}

/// Listens on `addr` and echoes every frame back on its connection; logs each connection's end.
async fn echo_server<R: Runtime>(rt: R, addr: String, events: Log) {
    let mut listener = match rt.listen(&addr).await {
        Ok(listener) => listener,
        Err(e) => return log(&events, format!("listen failed: {e}")),
    };
    log(&events, format!("listening at {}", rt.monotonic_ms()));
    loop {
        let mut conn = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => return log(&events, format!("accept failed: {e}")),
        };
        let events = events.clone();
        rt.spawn(async move {
            loop {
                match conn.recv().await {
                    Ok(Some(frame)) => {
                        if let Err(e) = conn.send(frame).await {
                            return log(&events, format!("send failed: {e:?}"));
                        }
                    }
                    Ok(None) => return log(&events, "peer closed".to_string()),
                    Err(e) => return log(&events, format!("recv failed: {e:?}")),
                }
            }
        });
    }
}

/// Connects to `addr`, sends each message and waits for its echo; returns the echoes.
async fn echo_client<R: Runtime>(rt: R, addr: String, messages: Vec<Bytes>) -> Result<Vec<Bytes>, NetError> {
    let mut conn = rt.connect(&addr).await?;
    let mut echoes = Vec::new();
    for message in messages {
        conn.send(message).await?;
        echoes.push(conn.recv().await?.ok_or(NetError::Closed)?);
    }
    Ok(echoes)
}

/// A node that only hosts tasks the test spawns on it.
fn idle_node(world: &World, name: &str) -> NodeIndex {
    world.add_node(name, |_rt| std::future::pending::<()>())
}

fn echo_node(world: &World, config: NodeConfig, events: &Log) -> NodeIndex {
    let addr = world.addr(NodeIndex(world.node_count()), PORT);
    let events = events.clone();
    world.add_node_with(config, move |rt| echo_server(rt, addr.clone(), events.clone()))
}

/// An echo server ("server") and an idle "client" node, both started: the server's node, the
/// client's and the server's address.
async fn echo_pair(world: &World) -> (NodeIndex, NodeIndex, String) {
    let server = echo_node(world, NodeConfig::named("server"), &Log::default());
    let client = idle_node(world, "client");
    settle().await;
    (server, client, world.addr(server, PORT))
}

async fn settle() {
    madsim::time::sleep(Duration::from_millis(100)).await;
}

fn messages(sizes: &[usize]) -> Vec<Bytes> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| Bytes::from(vec![i as u8; n]))
        .collect()
}

#[test]
fn two_nodes_exchange_frames_through_the_runtime_trait() {
    run_seed(1, |world| async move {
        let events = Log::default();
        let server = echo_node(&world, NodeConfig::named("server"), &events);
        let client = idle_node(&world, "client");
        settle().await;

        let sent = messages(&[0, 1, 4, 1000, 70_000]);
        let addr = world.addr(server, PORT);
        let expected = sent.clone();
        let echoes = world
            .spawn_on(client, move |rt| echo_client(rt, addr, sent))
            .await
            .expect("client task ran")
            .expect("echo succeeded");
        assert_eq!(echoes, expected);
        settle().await;
        assert_eq!(
            events.lock().expect("log").last().map(String::as_str),
            Some("peer closed")
        );
    });
}

/// Accepts connections and reads every frame sent on them, answering none.
async fn silent_server<R: Runtime>(rt: R, addr: String) {
    let mut listener = rt.listen(&addr).await.expect("listens");
    loop {
        let Ok(mut conn) = listener.accept().await else { return };
        rt.spawn(async move { while let Ok(Some(_)) = conn.recv().await {} });
    }
}

/// A Kafka request nobody answers fails with `Timeout` when its timeout passes, both as one call
/// and as a response awaited after a pipelined send; the virtual time taken is the timeout's
/// (plus at most the connect and one network hop).
#[test]
fn unanswered_requests_time_out_at_their_timeouts() {
    use gregor_core::client::{ClientError, KafkaConn};
    use gregor_core::protocol::api::api_versions::ApiVersionsRequest;
    use gregor_core::protocol::Request;
    run_seed(9, |world| async move {
        let server = {
            let addr = world.addr(NodeIndex(world.node_count()), PORT);
            world.add_node("silent", move |rt| silent_server(rt, addr.clone()))
        };
        let client = idle_node(&world, "client");
        settle().await;
        let addr = world.addr(server, PORT);
        let (call_ms, recv_ms) = world
            .spawn_on(client, move |rt| async move {
                let mut conn = KafkaConn::connect(&rt, &addr, "t", 30_000).await.expect("connects");
                let request = Request::ApiVersions(ApiVersionsRequest::default());
                let start = rt.monotonic_ms();
                let called = conn.call_with_timeout(&request, 0, 500).await;
                assert!(matches!(called, Err(ClientError::Timeout(500))), "{called:?}");
                let call_ms = rt.monotonic_ms() - start;
                let start = rt.monotonic_ms();
                let id = conn.send_request(&request, 0).await.expect("sent");
                let received = conn.recv_response(18, 0, id, 700).await;
                assert!(matches!(received, Err(ClientError::Timeout(700))), "{received:?}");
                (call_ms, rt.monotonic_ms() - start)
            })
            .await
            .expect("client task ran");
        println!("timed out after {call_ms} ms (500 asked) and {recv_ms} ms (700 asked)");
        assert!((500..=510).contains(&call_ms), "call: {call_ms} ms");
        assert!((700..=710).contains(&recv_ms), "recv_response: {recv_ms} ms");
    });
}

/// Sends one frame per message on one connection and reads `echoes` frames back.
async fn send_and_read<R: Runtime>(
    rt: R,
    addr: String,
    messages: Vec<Bytes>,
    echoes: usize,
) -> Result<Vec<Bytes>, NetError> {
    let mut conn = rt.connect(&addr).await?;
    for message in messages {
        conn.send(message).await?;
    }
    let mut read = Vec::new();
    for _ in 0..echoes {
        read.push(conn.recv().await?.ok_or(NetError::Closed)?);
    }
    Ok(read)
}

/// Frame faults set on a node reach the frames it sends on Kafka connections (the echo server
/// answers each frame it receives, so its own count of frames sent counts what arrived), and
/// setting the rates back to zero stops them.
#[test]
fn duplicate_frames_while_the_rate_is_set_and_none_after_it_is_cleared() {
    use gregor_sim::runtime::frame_faults::{FrameRates, FrameStats};
    run_seed(5, |world| async move {
        let (server, client, addr) = echo_pair(&world).await;

        let all_twice = FrameRates {
            duplicate: 1.0,
            corrupt: 0.0,
        };
        world.state(client).set_frame_rates(all_twice);
        let sent = messages(&[3, 5]);
        let (a, expected) = (addr.clone(), sent.clone());
        let echoes = world
            .spawn_on(client, move |rt| send_and_read(rt, a, sent, 4))
            .await
            .expect("client task ran")
            .expect("echoes arrived");
        let twice: Vec<Bytes> = expected.iter().flat_map(|m| [m.clone(), m.clone()]).collect();
        assert_eq!(echoes, twice, "each frame arrives twice");
        settle().await;
        let stats = world.state(client).frame_stats();
        assert_eq!(
            stats,
            FrameStats {
                duplicated: 2,
                corrupted: 0
            }
        );
        let received = world.state(server).frames_sent();
        assert_eq!(received, 4, "the server saw every copy");

        world.state(client).set_frame_rates(FrameRates::default());
        let sent = messages(&[7]);
        let echoes = world
            .spawn_on(client, move |rt| send_and_read(rt, addr, sent, 1))
            .await
            .expect("client task ran")
            .expect("echo arrived");
        assert_eq!(echoes.len(), 1);
        settle().await;
        assert_eq!(world.state(server).frames_sent(), received + 1, "one copy once cleared");
        assert_eq!(world.state(client).frame_stats(), stats);
    });
}

#[test]
fn oversized_frame_closes_only_its_connection() {
    run_seed(2, |world| async move {
        let events = Log::default();
        let config = NodeConfig {
            frame_bytes_max: 1024,
            ..NodeConfig::named("server")
        };
        let server = echo_node(&world, config, &events);
        let client = idle_node(&world, "client");
        settle().await;
        let addr = world.addr(server, PORT);

        let (a, b, c) = (addr.clone(), addr.clone(), addr.clone());
        let outcome = world
            .spawn_on(client, move |rt| async move {
                // A healthy connection opened before the bad one keeps working after it.
                let mut healthy = rt.connect(&a).await.expect("connect healthy");
                healthy.send(Bytes::from_static(b"before")).await.expect("send");
                assert_eq!(healthy.recv().await, Ok(Some(Bytes::from_static(b"before"))));

                let mut bad = rt.connect(&b).await.expect("connect bad");
                bad.send(Bytes::from(vec![7u8; 1025]))
                    .await
                    .expect("sender does not police");
                let bad_end = bad.recv().await;

                healthy.send(Bytes::from_static(b"after")).await.expect("send");
                assert_eq!(healthy.recv().await, Ok(Some(Bytes::from_static(b"after"))));

                // And new connections are still served, up to the limit exactly.
                let fresh = echo_client(rt, c, messages(&[1024])).await;
                (bad_end, fresh)
            })
            .await
            .expect("client task ran");
        assert_eq!(
            outcome.0,
            Ok(None),
            "server must close the connection that sent too much"
        );
        assert_eq!(outcome.1, Ok(messages(&[1024])));
        let events = events.lock().expect("log").clone();
        assert!(
            events.contains(&"recv failed: FrameTooLarge { len: 1025, max: 1024 }".to_string()),
            "{events:?}"
        );
    });
}

/// What the simulated network keeps of TCP when ends go away (`gregor_sim::runtime::net`): the
/// frames an end sent before it was dropped all reach the peer, in order, before its
/// end-of-stream; a killed server's clients read end-of-stream, and connects to it are refused at
/// once until its next incarnation listens.
#[test]
fn frames_sent_before_a_drop_arrive_first_and_a_killed_server_refuses_until_restarted() {
    run_seed(3, |world| async move {
        let received = Log::default();
        let server_log = received.clone();
        let server = world.add_node("server", move |rt| {
            let received = server_log.clone();
            async move {
                let mut listener = rt.listen("10.0.0.1:9092").await.expect("listen");
                loop {
                    let mut conn = listener.accept().await.expect("accept");
                    let received = received.clone();
                    rt.spawn(async move {
                        loop {
                            match conn.recv().await {
                                Ok(Some(frame)) if frame.as_ref() == b"ping" => {
                                    let _ = conn.send(frame).await;
                                }
                                Ok(Some(frame)) => log(&received, format!("frame {}", frame.len())),
                                Ok(None) => return log(&received, "end-of-stream".to_string()),
                                Err(e) => return log(&received, format!("error {e:?}")),
                            }
                        }
                    });
                }
            }
        });
        let client = idle_node(&world, "client");
        settle().await;
        let addr = world.addr(server, PORT);

        let a = addr.clone();
        world
            .spawn_on(client, move |rt| async move {
                let mut conn = rt.connect(&a).await.expect("connect");
                for len in 1..=5 {
                    conn.send(Bytes::from(vec![0u8; len])).await.expect("send");
                }
                // Dropped at once, the five frames still in flight.
            })
            .await
            .expect("client ran");
        settle().await;
        let seen = received.lock().expect("log").clone();
        assert_eq!(
            seen,
            ["frame 1", "frame 2", "frame 3", "frame 4", "frame 5", "end-of-stream"],
            "every frame sent before the drop, in order, then end-of-stream"
        );

        let a = addr.clone();
        let open = world
            .spawn_on(client, move |rt| async move {
                let mut conn = rt.connect(&a).await.expect("connect");
                conn.send(Bytes::from_static(b"ping")).await.expect("send");
                assert_eq!(conn.recv().await, Ok(Some(Bytes::from_static(b"ping"))));
                conn
            })
            .await
            .expect("client ran");
        world.kill(server);
        let a = addr.clone();
        let (end, refused) = world
            .spawn_on(client, move |rt| async move {
                let mut conn = open;
                let end = madsim::time::timeout(Duration::from_secs(1), conn.recv()).await;
                let refused = rt.connect(&a).await.map(|_| ());
                (end, refused)
            })
            .await
            .expect("client ran");
        assert_eq!(end, Ok(Ok(None)), "a killed server's client reads end-of-stream");
        assert_eq!(
            refused,
            Err(NetError::Refused(addr.clone())),
            "nothing listens on a killed node"
        );

        world.restart(server);
        settle().await;
        let a = addr.clone();
        let again = world
            .spawn_on(client, move |rt| async move {
                let mut conn = rt.connect(&a).await?;
                conn.send(Bytes::from_static(b"ping")).await?;
                conn.recv().await
            })
            .await
            .expect("client ran");
        assert_eq!(
            again,
            Ok(Some(Bytes::from_static(b"ping"))),
            "the next incarnation serves"
        );
        println!("frames before the drop: {seen:?}; after the kill: {end:?}, connect {refused:?}; after the restart: {again:?}");
    });
}

/// A busy little run whose every observable event goes into a hash: virtual timestamps, random
/// draws, and the order in which concurrent clients' frames reach the server.
fn trace_hash(seed: u64) -> (u64, usize) {
    run_seed(seed, |world| async move {
        let events = Log::default();
        let server_events = events.clone();
        let server = world.add_node("server", move |rt| {
            let events = server_events.clone();
            async move {
                let mut listener = rt.listen("10.0.0.1:9092").await.expect("listen");
                loop {
                    let mut conn = listener.accept().await.expect("accept");
                    let events = events.clone();
                    let rt2 = rt.clone();
                    rt.spawn(async move {
                        while let Ok(Some(frame)) = conn.recv().await {
                            let draw = rt2.random_u64();
                            log(
                                &events,
                                format!("server {} {} {:?} {draw}", rt2.monotonic_ms(), rt2.now_ms(), frame),
                            );
                            conn.send(frame).await.expect("echo");
                        }
                    });
                }
            }
        });
        settle().await;
        let mut clients = Vec::new();
        for i in 0..3u8 {
            let node = idle_node(&world, &format!("client{i}"));
            let addr = world.addr(server, PORT);
            let events = events.clone();
            clients.push(world.spawn_on(node, move |rt| async move {
                let mut conn = rt.connect(&addr).await.expect("connect");
                for round in 0..5u8 {
                    let size = (rt.random_u64() % 64) as usize;
                    rt.sleep(Duration::from_millis(rt.random_u64() % 20)).await;
                    conn.send(Bytes::from(vec![i * 16 + round; size])).await.expect("send");
                    let echo = conn.recv().await.expect("recv").expect("open");
                    log(
                        &events,
                        format!("client{i} {} {} {}", rt.monotonic_ms(), rt.now_ms(), echo.len()),
                    );
                }
            }));
        }
        for client in clients {
            client.await.expect("client ran");
        }
        let events = events.lock().expect("log").clone();
        let mut hasher = DefaultHasher::new();
        events.hash(&mut hasher);
        (hasher.finish(), events.len())
    })
}

#[test]
fn same_seed_same_trace_other_seed_other_trace() {
    let (first, count) = trace_hash(7);
    assert_eq!(count, 30, "the trace must record every exchange");
    assert_eq!(trace_hash(7), (first, count));
    assert_ne!(trace_hash(8).0, first);
}

#[test]
fn killed_node_keeps_synced_data_and_loses_unsynced() {
    // Each incarnation reports what it found on disk, then writes a synced and an unsynced record.
    let mut lost_some = 0;
    for seed in 0..8 {
        let found = run_seed(seed, |world| async move {
            let found = Arc::new(Mutex::new(Vec::<(Vec<u8>, String)>::new()));
            let found_in = found.clone();
            let node = world.add_node("storage", move |rt| {
                let found = found_in.clone();
                async move {
                    // Held until the node dies: a restart must find the port free again.
                    let listener = rt.listen("10.0.0.1:9092").await;
                    let listening = listener.as_ref().map(|_| "listening".to_string());
                    let contents = rt.with_disk(|disk| {
                        if !disk.exists("log") {
                            disk.create("log").expect("create");
                        }
                        let contents = disk.read_all("log").expect("read");
                        disk.append("log", b"synced|").expect("append");
                        disk.sync("log").expect("sync");
                        disk.append("log", b"unsynced-unsynced|").expect("append");
                        contents
                    });
                    found
                        .lock()
                        .expect("lock")
                        .push((contents, listening.unwrap_or_else(|e| e.to_string())));
                    std::future::pending::<()>().await;
                    drop(listener);
                }
            });
            settle().await;
            world.kill(node);
            assert!(world.is_down(node));
            settle().await;
            world.restart(node);
            settle().await;
            // Restarting a node that is up bounces it: killed (disk crashed, ports freed) first.
            world.restart(node);
            settle().await;
            let found = found.lock().expect("lock").clone();
            found
        });
        assert_eq!(found.len(), 3, "seed {seed}: main runs once per incarnation");
        assert_eq!(found[0], (Vec::new(), "listening".to_string()));
        let (after, listening) = &found[1];
        assert_eq!(listening, "listening", "seed {seed}: kill must free the node's ports");
        assert!(
            after.starts_with(b"synced|"),
            "seed {seed}: synced data lost: {after:?}"
        );
        assert!(after.len() <= b"synced|unsynced-unsynced|".len());
        if after.len() < b"synced|unsynced-unsynced|".len() {
            lost_some += 1;
        }
        let (bounced, listening) = &found[2];
        assert_eq!(
            listening, "listening",
            "seed {seed}: a bounce must free the node's ports"
        );
        let synced_before_bounce = [after.as_slice(), b"synced|"].concat();
        assert!(bounced.starts_with(&synced_before_bounce), "seed {seed}: {bounced:?}");
    }
    assert!(lost_some > 0, "a crash must be able to lose unsynced writes");
}

#[test]
fn partition_stalls_and_refuses_repair_heals() {
    run_seed(4, |world| async move {
        let (server, client, addr) = echo_pair(&world).await;
        let mut conn = {
            let addr = addr.clone();
            world
                .spawn_on(
                    client,
                    move |rt| async move { rt.connect(&addr).await.expect("connect") },
                )
                .await
                .expect("connected")
        };

        world.inject(&Fault::Partition(server, client));
        let (conn_back, refused) = {
            let addr = addr.clone();
            world
                .spawn_on(client, move |rt| async move {
                    conn.send(Bytes::from_static(b"across"))
                        .await
                        .expect("send is buffered");
                    let stalled = madsim::time::timeout(Duration::from_secs(5), conn.recv()).await;
                    assert!(stalled.is_err(), "no echo may cross a partition: {stalled:?}");
                    (conn, rt.connect(&addr).await.map(|_| ()))
                })
                .await
                .expect("ran")
        };
        assert_eq!(refused, Err(NetError::Refused(addr.clone())));

        world.inject(&Fault::Partition(server, client).opposite());
        let (healed, fresh) = world
            .spawn_on(client, move |rt| async move {
                let mut conn = conn_back;
                let healed = madsim::time::timeout(Duration::from_secs(30), conn.recv()).await;
                (healed, echo_client(rt, addr, messages(&[3])).await)
            })
            .await
            .expect("ran");
        assert_eq!(healed, Ok(Ok(Some(Bytes::from_static(b"across")))));
        assert_eq!(fresh, Ok(messages(&[3])));
    });
}

#[test]
fn isolated_node_is_unreachable_until_it_rejoins() {
    run_seed(5, |world| async move {
        let (server, client, addr) = echo_pair(&world).await;
        let try_echo = |world: &World| {
            let addr = addr.clone();
            world.spawn_on(client, move |rt| echo_client(rt, addr, messages(&[5])))
        };
        world.inject(&Fault::Isolate(server));
        assert!(matches!(
            try_echo(&world).await.expect("ran"),
            Err(NetError::Refused(_))
        ));
        world.inject(&Fault::Isolate(server).opposite());
        assert_eq!(try_echo(&world).await.expect("ran"), Ok(messages(&[5])));
    });
}

#[test]
fn clock_skew_moves_wall_clock_not_monotonic() {
    run_seed(6, |world| async move {
        let node = idle_node(&world, "skewed");
        let read = |world: &World| world.spawn_on(node, |rt| async move { (rt.now_ms(), rt.monotonic_ms()) });
        let (wall0, mono0) = read(&world).await.expect("ran");
        world.inject(&Fault::Skew(node, -60_000));
        let (wall1, mono1) = read(&world).await.expect("ran");
        assert!(
            wall1 < wall0 - 59_000,
            "skew must move the wall clock: {wall0} -> {wall1}"
        );
        assert!(mono1 >= mono0, "the monotonic clock never goes backwards");
        world.inject(&Fault::Skew(node, -60_000).opposite());
        let (wall2, _) = read(&world).await.expect("ran");
        assert!(wall2 >= wall0, "unskew restores the wall clock: {wall0} -> {wall2}");
    });
}

#[test]
fn wall_clock_is_madsims_system_time_to_the_millisecond() {
    run_seed(7, |world| async move {
        let node = idle_node(&world, "clock");
        let compared = world
            .spawn_on(node, |rt| async move {
                let mut compared = 0;
                for i in 0..300u64 {
                    // Sleeps of whole and partial milliseconds; each task poll also moves
                    // madsim's clock by 50-100 ns, so the elapsed time has sub-millisecond parts.
                    madsim::time::sleep(Duration::from_micros(1 + i * 337)).await;
                    let system = madsim::time::TimeHandle::current()
                        .now_time()
                        .duration_since(std::time::UNIX_EPOCH)
                        .expect("after the epoch");
                    assert_eq!(
                        rt.now_ms(),
                        i64::try_from(system.as_millis()).expect("fits"),
                        "step {i}"
                    );
                    compared += 1;
                }
                compared
            })
            .await
            .expect("ran");
        println!("{compared} readings of the wall clock compared with madsim's SystemTime");
    });
}

#[test]
fn paused_node_answers_only_after_resume() {
    run_seed(9, |world| async move {
        let (server, client, addr) = echo_pair(&world).await;
        let mut conn = world
            .spawn_on(
                client,
                move |rt| async move { rt.connect(&addr).await.expect("connect") },
            )
            .await
            .expect("connected");
        world.inject(&Fault::Pause(server));
        let conn = world
            .spawn_on(client, move |_rt| async move {
                conn.send(Bytes::from_static(b"hello?")).await.expect("send");
                let stalled = madsim::time::timeout(Duration::from_secs(5), conn.recv()).await;
                assert!(stalled.is_err(), "a paused node must not answer: {stalled:?}");
                conn
            })
            .await
            .expect("ran");
        world.inject(&Fault::Pause(server).opposite());
        let answer = world
            .spawn_on(client, move |_rt| async move {
                let mut conn = conn;
                madsim::time::timeout(Duration::from_secs(5), conn.recv()).await
            })
            .await
            .expect("ran");
        assert_eq!(answer, Ok(Ok(Some(Bytes::from_static(b"hello?")))));
    });
}

/// Echoes every frame after `syncs_per_frame` appends+fsyncs on the node's disk.
async fn syncing_echo_server<R: Runtime>(rt: R, addr: String, syncs_per_frame: u32) {
    let mut listener = rt.listen(&addr).await.expect("listen");
    let mut conn = listener.accept().await.expect("accept");
    rt.with_disk(|d| d.create("wal").expect("create"));
    while let Ok(Some(frame)) = conn.recv().await {
        for _ in 0..syncs_per_frame {
            rt.with_disk(|d| {
                d.append("wal", &frame).expect("append");
                d.sync("wal").expect("sync");
            });
        }
        if conn.send(frame).await.is_err() {
            return;
        }
    }
}

/// Round trip of one small frame to a server that does `syncs` fsyncs before answering, in
/// virtual ms.
fn round_trip_ms_with_syncs(syncs: u32) -> u64 {
    run_seed(11, move |world| async move {
        let mut config = NodeConfig::named("server");
        config.disk_latency.latency_us_sync = 1_000;
        let addr = world.addr(NodeIndex(world.node_count()), PORT);
        let server = world.add_node_with(config, move |rt| syncing_echo_server(rt, addr.clone(), syncs));
        let client = idle_node(&world, "client");
        settle().await;
        let addr = world.addr(server, PORT);
        world
            .spawn_on(client, move |rt| async move {
                let mut conn = rt.connect(&addr).await.expect("connect");
                let start = rt.monotonic_ms();
                conn.send(Bytes::from_static(b"x")).await.expect("send");
                conn.recv().await.expect("recv").expect("echo");
                rt.monotonic_ms() - start
            })
            .await
            .expect("client task ran")
    })
}

#[test]
fn disk_latency_delays_the_nodes_next_answer() {
    // Each network hop costs 1-10 ms (madsim's latency range in `WorldConfig`), so a round trip
    // without disk work stays under 25 ms and one after 50 fsyncs of 1 ms takes at least 52.
    let without = round_trip_ms_with_syncs(0);
    let with = round_trip_ms_with_syncs(50);
    println!("round trip: {without} ms without fsync, {with} ms after 50 fsyncs of 1 ms");
    assert!(without < 25, "no disk work, no disk delay");
    assert!(with >= 52, "50 ms of fsync must show in virtual time");
}

/// Sleeps of 50 ms or more wait in the runtime's alarm queue (`gregor_sim::runtime::alarms`):
/// each ends at its own deadline, whatever order they were made in, a dropped one leaves the queue
/// at once (a request timeout that did not fire), and the rest still end on time after it.
#[test]
fn sleeps_end_at_their_deadlines_and_dropped_ones_leave_the_queue() {
    run_seed(11, |world| async move {
        let node = idle_node(&world, "sleeper");
        let (ended, waiting_after_drops, waiting_at_end) = world
            .spawn_on(node, |rt| async move {
                let start = rt.monotonic_ms();
                // Forty 30 s timeouts, each dropped when its "request" (a 2 ms sleep) finishes.
                for _ in 0..40 {
                    let timeout = rt.sleep(Duration::from_secs(30));
                    let answer = rt.sleep(Duration::from_millis(2));
                    let answered = gregor_core::client::conn::with_timeout(&rt, 30_000, answer).await;
                    assert!(answered.is_some(), "the 2 ms sleep ends before the 30 s one");
                    drop(timeout);
                }
                let waiting_after_drops = rt.sleeps_waiting();
                // Sleeps made longest first end shortest first, each at its deadline.
                let ended = Arc::new(Mutex::new(Vec::new()));
                let done = Arc::new(Mutex::new(0usize));
                let begun = rt.monotonic_ms();
                for ms in [500u64, 70, 300, 50, 120] {
                    let (rt2, ended, done) = (rt.clone(), ended.clone(), done.clone());
                    rt.spawn(async move {
                        rt2.sleep(Duration::from_millis(ms)).await;
                        ended.lock().expect("lock").push((ms, rt2.monotonic_ms() - begun));
                        *done.lock().expect("lock") += 1;
                    });
                }
                // A sleep dropped while earlier and later ones wait must not stall the later ones.
                drop(rt.sleep(Duration::from_millis(100)));
                for _ in 0..100 {
                    if *done.lock().expect("lock") == 5 {
                        break;
                    }
                    rt.sleep(Duration::from_millis(10)).await;
                }
                assert!(
                    rt.monotonic_ms() - start < 30_000,
                    "no sleep waited for a dropped timeout"
                );
                let ended = ended.lock().expect("lock").clone();
                (ended, waiting_after_drops, rt.sleeps_waiting())
            })
            .await
            .expect("ran");
        println!(
            "sleeps ended (asked ms, took ms): {ended:?}; waiting after 40 dropped timeouts: {waiting_after_drops}"
        );
        assert_eq!(waiting_after_drops, 0, "dropped sleeps leave the queue");
        assert_eq!(waiting_at_end, 0, "every sleep ended or was dropped");
        assert_eq!(
            ended,
            vec![(50, 50), (70, 70), (120, 120), (300, 300), (500, 500)],
            "each sleep ends at its own deadline, in deadline order"
        );
    });
}

/// A short sleep keeps the waker of the poll that added its madsim timer. Polled later with
/// another waker (a future first polled by one task or combinator, then awaited by another), it
/// must wake the new one at its deadline: the first waker here is a no-op that wakes no one.
#[test]
fn a_short_sleep_polled_again_with_another_waker_wakes_the_new_one() {
    run_seed(12, |world| async move {
        let node = idle_node(&world, "sleeper");
        let (first_poll_pending, answered, took_ms) = world
            .spawn_on(node, |rt| async move {
                let start = rt.monotonic_ms();
                let mut sleep = Box::pin(rt.sleep(Duration::from_millis(10)));
                let noop = std::task::Waker::noop();
                let first = sleep.as_mut().poll(&mut std::task::Context::from_waker(noop));
                // Bounded: a sleep that never wakes this task ends the wait after 1 s.
                let answered = gregor_core::client::conn::with_timeout(&rt, 1_000, sleep).await;
                (first.is_pending(), answered.is_some(), rt.monotonic_ms() - start)
            })
            .await
            .expect("ran");
        println!("first poll pending: {first_poll_pending}; woke the second waker: {answered} after {took_ms} ms");
        assert!(first_poll_pending, "a 10 ms sleep is pending at once");
        assert!(answered, "the sleep woke the task that awaited it");
        assert_eq!(took_ms, 10, "at its deadline");
    });
}

/// A frame sent while its receiver waits wakes the receiver once, at the frame's arrival: its
/// sender arms the receiver's timer (`runtime::net`), where the receiver used to be woken at the
/// send only to start that sleep itself. A frame already queued when the receiver comes back is
/// taken after the receiver's own sleep, which lasts at least 1 ms (madsim's stream delivered
/// frames already due 1 ms apart, and so does this network).
#[test]
fn a_waiting_receiver_is_polled_once_per_frame_at_its_arrival() {
    let config = gregor_sim::world::WorldConfig {
        // One latency for every frame: 4 ms (a range must not be empty).
        send_latency: Duration::from_millis(4)..Duration::from_nanos(4_000_001),
        ..Default::default()
    };
    let received = gregor_sim::world::run_seed_with(3, config, |world| async move {
        let server = idle_node(&world, "server");
        let client = idle_node(&world, "client");
        let addr = world.addr(server, PORT);
        let receiver = world.spawn_on(server, move |rt| async move {
            let mut listener = rt.listen(&addr).await.expect("listen");
            let mut conn = listener.accept().await.expect("accept");
            let mut received = Vec::new();
            for _ in 0..2 {
                let mut polls = 0;
                let mut recv = std::pin::pin!(conn.recv());
                let frame = std::future::poll_fn(|cx| {
                    polls += 1;
                    recv.as_mut().poll(cx)
                })
                .await;
                let frame = frame.expect("recv").expect("a frame");
                received.push((frame, madsim::time::Instant::now(), polls));
            }
            received
        });
        settle().await;
        let addr = world.addr(server, PORT);
        let sent_at = world
            .spawn_on(client, move |rt| async move {
                let mut conn = rt.connect(&addr).await.expect("connect");
                // The receiver is waiting by now.
                rt.sleep(Duration::from_millis(50)).await;
                let at = madsim::time::Instant::now();
                conn.send(Bytes::from_static(b"first")).await.expect("send");
                conn.send(Bytes::from_static(b"second")).await.expect("send");
                rt.sleep(Duration::from_millis(50)).await;
                at
            })
            .await
            .expect("client task ran");
        let received = receiver.await.expect("receiver task ran");
        received
            .into_iter()
            .map(|(frame, at, polls)| (frame, (at - sent_at).as_micros(), polls))
            .collect::<Vec<_>>()
    });
    println!("received (frame, us after the sends, polls of its recv): {received:?}");
    assert_eq!(received.len(), 2);
    let (first, first_us, first_polls) = &received[0];
    let (second, second_us, second_polls) = &received[1];
    assert_eq!((first.as_ref(), second.as_ref()), (&b"first"[..], &b"second"[..]));
    // Both arrive 4 ms after the sends (plus madsim's nanosecond steps between polls).
    assert!(
        (4_000..4_100).contains(first_us),
        "the first frame is taken at its arrival"
    );
    assert_eq!(*first_polls, 2, "waiting (pending), then woken once, at the arrival");
    assert!(
        (5_000..5_100).contains(second_us),
        "the second, already due, 1 ms after the first"
    );
    assert_eq!(*second_polls, 2, "the receiver's own 1 ms sleep, then the frame");
}
