//! The driver's parked JoinGroup: a request that must wait for another member really waits
//! (its future stays pending across polls) and is answered, encoded, once the other joins.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use super::*;
use crate::disk::mem::MemDisk;
use crate::protocol::api::join_group::{JoinGroupProtocol, JoinGroupRequest, JoinGroupResponse};
use crate::protocol::api::sync_group::SyncGroupRequest;
use crate::protocol::client::{decode_response, request_frame};
use crate::protocol::header::RequestHeader;
use crate::protocol::{Request, Response};
use crate::runtime::{Connection, Listener};

#[derive(Clone)]
pub(crate) struct TestRt {
    pub(crate) now_ms: Rc<Cell<i64>>,
    pub(crate) disk: Rc<RefCell<MemDisk>>,
}

pub(crate) struct NoConn;

impl Connection for NoConn {
    async fn send(&mut self, _frame: Bytes) -> Result<(), NetError> {
        Err(NetError::Io("none".into()))
    }
    async fn recv(&mut self) -> Result<Option<Bytes>, NetError> {
        Ok(None)
    }
    fn peer(&self) -> String {
        "none".into()
    }
}

pub(crate) struct NoListener;

impl Listener for NoListener {
    type Conn = NoConn;
    async fn accept(&mut self) -> Result<NoConn, NetError> {
        Err(NetError::Io("none".into()))
    }
}

/// A sleep that returns to the caller once (so the test sees the request waiting), then ends
/// with the clock advanced.
struct Sleep {
    yielded: bool,
    now_ms: Rc<Cell<i64>>,
    ms: i64,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            self.now_ms.set(self.now_ms.get() + self.ms);
            Poll::Ready(())
        } else {
            self.yielded = true;
            Poll::Pending
        }
    }
}

impl Runtime for TestRt {
    type Disk = MemDisk;
    type Conn = NoConn;
    type Listener = NoListener;
    fn now_ms(&self) -> i64 {
        self.now_ms.get()
    }
    fn monotonic_ms(&self) -> u64 {
        u64::try_from(self.now_ms.get()).expect("test clock is positive")
    }
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + 'static {
        Sleep {
            yielded: false,
            now_ms: self.now_ms.clone(),
            ms: i64::try_from(duration.as_millis()).expect("short"),
        }
    }
    fn spawn(&self, _task: impl Future<Output = ()> + 'static) {
        panic!("the test drives handle_frame directly");
    }
    async fn connect(&self, _addr: &str) -> Result<NoConn, NetError> {
        Err(NetError::Io("none".into()))
    }
    async fn listen(&self, _addr: &str) -> Result<NoListener, NetError> {
        Ok(NoListener)
    }
    fn with_disk<T>(&self, f: impl FnOnce(&mut MemDisk) -> T) -> T {
        f(&mut self.disk.borrow_mut())
    }
    fn random_u64(&self) -> u64 {
        0xfeed
    }
}

pub(crate) fn frame(request: Request, version: i16) -> Bytes {
    let header = RequestHeader {
        api_key: request.api_key(),
        api_version: version,
        correlation_id: 1,
        client_id: Some("app".into()),
    };
    request_frame(&header, &request)
}

fn join(member_id: &str) -> Bytes {
    frame(
        Request::JoinGroup(JoinGroupRequest {
            group_id: "g".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            member_id: member_id.into(),
            group_instance_id: None,
            protocol_type: "consumer".into(),
            protocols: vec![JoinGroupProtocol {
                name: "range".into(),
                metadata: Bytes::from_static(b"sub"),
            }],
            reason: None,
        }),
        5,
    )
}

fn poll_once<T>(f: Pin<&mut impl Future<Output = T>>) -> Poll<T> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

pub(crate) fn run<T>(f: impl Future<Output = T>) -> T {
    let mut f = pin!(f);
    for _ in 0..100 {
        if let Poll::Ready(v) = poll_once(f.as_mut()) {
            return v;
        }
    }
    panic!("did not finish")
}

fn join_response(outcome: Outcome) -> JoinGroupResponse {
    let Outcome::Reply(bytes) = outcome else {
        panic!("no reply")
    };
    match decode_response(11, 5, &bytes, Limits::default()).expect("decodes") {
        (_, Response::JoinGroup(r)) => r,
        (_, other) => panic!("{other:?}"),
    }
}

#[test]
fn a_parked_join_waits_in_the_driver_and_is_answered_when_the_group_completes() {
    let rt = TestRt {
        now_ms: Rc::new(Cell::new(1)),
        disk: Rc::new(RefCell::new(MemDisk::new())),
    };
    let broker = rt.with_disk(|d| Broker::open(d, BrokerConfig::default(), 0).expect("open"));
    let broker: SharedBroker = Rc::new(RefCell::new(broker));
    let config = NodeConfig::single_node("x:1", "x", 1, "c");
    let required = join_response(run(handle_frame(&rt, &broker, &config, &join(""))));
    let a = required.member_id;
    let first = join_response(run(handle_frame(&rt, &broker, &config, &join(&a))));
    assert_eq!(first.generation_id, 1);
    let sync = frame(
        Request::SyncGroup(SyncGroupRequest {
            group_id: "g".into(),
            generation_id: 1,
            member_id: a.clone(),
            ..SyncGroupRequest::default()
        }),
        3,
    );
    assert!(matches!(
        run(handle_frame(&rt, &broker, &config, &sync)),
        Outcome::Reply(_)
    ));
    let b = join_response(run(handle_frame(&rt, &broker, &config, &join("")))).member_id;
    let b_join = join(&b);
    let mut waiting = pin!(handle_frame(&rt, &broker, &config, &b_join));
    for _ in 0..5 {
        assert!(poll_once(waiting.as_mut()).is_pending(), "b waits for a to rejoin");
    }
    let a_again = join_response(run(handle_frame(&rt, &broker, &config, &join(&a))));
    let Poll::Ready(outcome) = poll_once(waiting.as_mut()) else {
        panic!("b still waiting after a rejoined");
    };
    let b_joined = join_response(outcome);
    assert_eq!((a_again.generation_id, b_joined.generation_id), (2, 2));
    assert_eq!(b_joined.leader, a);
    assert_eq!(a_again.members.len(), 2);
}
