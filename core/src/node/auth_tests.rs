//! SASL through the node driver, frame by frame: what a SASL_PLAINTEXT listener serves before
//! and after a login, how it refuses, and the legacy (v0 handshake) bare-token exchange.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;

use super::driver_tests::{frame, run, TestRt};
use super::*;
use crate::disk::mem::MemDisk;
use crate::protocol::api::metadata::MetadataRequest;
use crate::protocol::api::sasl_authenticate::SaslAuthenticateRequest;
use crate::protocol::api::sasl_handshake::SaslHandshakeRequest;
use crate::protocol::client::decode_response;
use crate::protocol::Response;
use crate::security::Principal;
use crate::ErrorCode;

fn setup() -> (TestRt, SharedBroker, NodeConfig) {
    let rt = TestRt {
        now_ms: Rc::new(Cell::new(1)),
        disk: Rc::new(RefCell::new(MemDisk::new())),
    };
    let broker = rt.with_disk(|d| Broker::open(d, BrokerConfig::default(), 0).expect("open"));
    let mut config = NodeConfig::single_node("x:1", "x", 1, "c");
    let users = BTreeMap::from([("alice".to_string(), "alice-secret".to_string())]);
    config.sasl = Some(Rc::new(SaslConfig::plain(users)));
    (rt, Rc::new(RefCell::new(broker)), config)
}

fn sasl_ctx() -> ConnContext {
    let mut ctx = ConnContext::new("127.0.0.1:5000");
    ctx.sasl = SaslState::for_listener(true);
    ctx
}

fn handshake(v: i16) -> Bytes {
    frame(
        Request::SaslHandshake(SaslHandshakeRequest {
            mechanism: "PLAIN".into(),
        }),
        v,
    )
}

fn authenticate(token: &'static [u8], v: i16) -> Bytes {
    frame(
        Request::SaslAuthenticate(SaslAuthenticateRequest {
            auth_bytes: Bytes::from_static(token),
        }),
        v,
    )
}

fn metadata() -> Bytes {
    frame(
        Request::Metadata(MetadataRequest {
            topics: None,
            allow_auto_topic_creation: true,
            include_cluster_authorized_operations: false,
            include_topic_authorized_operations: false,
        }),
        1,
    )
}

fn decoded(api_key: i16, v: i16, bytes: &Bytes) -> Response {
    decode_response(api_key, v, bytes, Limits::default())
        .expect("decodes")
        .1
}

#[test]
fn a_request_before_login_closes_the_connection() {
    let (rt, broker, config) = setup();
    let mut ctx = sasl_ctx();
    let outcome = run(handle_frame_from(&rt, &broker, &config, &metadata(), &mut ctx));
    let Outcome::Close(why) = outcome else {
        panic!("Metadata served before authentication")
    };
    println!("closed: {why}");
    // ApiVersions is allowed before login.
    let api_versions = frame(Request::ApiVersions(Default::default()), 3);
    let outcome = run(handle_frame_from(&rt, &broker, &config, &api_versions, &mut ctx));
    assert!(matches!(outcome, Outcome::Reply(_)));
}

#[test]
fn plain_login_then_requests_are_served_as_the_user() {
    let (rt, broker, config) = setup();
    for v in 0..=2 {
        let mut ctx = sasl_ctx();
        let Outcome::Reply(r) = run(handle_frame_from(&rt, &broker, &config, &handshake(1), &mut ctx)) else {
            panic!("handshake not answered")
        };
        let Response::SaslHandshake(r) = decoded(17, 1, &r) else {
            panic!()
        };
        assert_eq!((r.error_code, r.mechanisms), (0, vec!["PLAIN".to_string()]));
        let login = authenticate(b"\0alice\0alice-secret", v);
        let Outcome::Reply(r) = run(handle_frame_from(&rt, &broker, &config, &login, &mut ctx)) else {
            panic!("authenticate not answered")
        };
        let Response::SaslAuthenticate(r) = decoded(36, v, &r) else {
            panic!()
        };
        assert_eq!(r.error_code, 0, "v{v}: {r:?}");
        assert_eq!(ctx.principal, Principal::user("alice"));
        let outcome = run(handle_frame_from(&rt, &broker, &config, &metadata(), &mut ctx));
        assert!(matches!(outcome, Outcome::Reply(_)), "v{v}: Metadata after login");
    }
}

#[test]
fn a_wrong_password_is_answered_sasl_authentication_failed_after_a_delay_and_closes() {
    let (rt, broker, config) = setup();
    for token in [&b"\0alice\0wrong"[..], b"garbage", b""] {
        let mut ctx = sasl_ctx();
        run(handle_frame_from(&rt, &broker, &config, &handshake(1), &mut ctx));
        let before_ms = rt.now_ms();
        let login = frame(
            Request::SaslAuthenticate(SaslAuthenticateRequest {
                auth_bytes: Bytes::copy_from_slice(token),
            }),
            1,
        );
        let Outcome::ReplyThenClose(r, why) = run(handle_frame_from(&rt, &broker, &config, &login, &mut ctx)) else {
            panic!("{token:?}: not refused")
        };
        let Response::SaslAuthenticate(r) = decoded(36, 1, &r) else {
            panic!()
        };
        assert_eq!(r.error_code, ErrorCode::SaslAuthenticationFailed.code());
        assert!(!why.contains("alice-secret"));
        let delayed_ms = rt.now_ms() - before_ms;
        assert!(
            delayed_ms >= 100,
            "{token:?}: refused without the rate-limit delay ({delayed_ms} ms)"
        );
        assert!(ctx.principal.is_anonymous());
        println!("{token:?}: refused after {delayed_ms} ms: {why}");
    }
}

#[test]
fn a_v0_handshake_takes_bare_tokens() {
    let (rt, broker, config) = setup();
    let mut ctx = sasl_ctx();
    let Outcome::Reply(_) = run(handle_frame_from(&rt, &broker, &config, &handshake(0), &mut ctx)) else {
        panic!("handshake not answered")
    };
    let bare = Bytes::from_static(b"\0alice\0alice-secret");
    let Outcome::Reply(r) = run(handle_frame_from(&rt, &broker, &config, &bare, &mut ctx)) else {
        panic!("bare token not answered")
    };
    assert!(r.is_empty(), "PLAIN's server token is empty");
    assert_eq!(ctx.principal, Principal::user("alice"));
    let outcome = run(handle_frame_from(&rt, &broker, &config, &metadata(), &mut ctx));
    assert!(matches!(outcome, Outcome::Reply(_)));
    // A wrong bare token closes without an answer.
    let mut ctx = sasl_ctx();
    run(handle_frame_from(&rt, &broker, &config, &handshake(0), &mut ctx));
    let bad = Bytes::from_static(b"\0alice\0nope");
    let outcome = run(handle_frame_from(&rt, &broker, &config, &bad, &mut ctx));
    assert!(matches!(outcome, Outcome::Close(_)));
}

#[test]
fn sasl_requests_on_a_plaintext_listener_are_illegal() {
    let (rt, broker, mut config) = setup();
    config.sasl = None;
    let mut ctx = ConnContext::new("p:1");
    let Outcome::ReplyThenClose(r, _) = run(handle_frame_from(&rt, &broker, &config, &handshake(1), &mut ctx)) else {
        panic!("handshake on PLAINTEXT not refused")
    };
    let Response::SaslHandshake(r) = decoded(17, 1, &r) else {
        panic!()
    };
    assert_eq!(r.error_code, ErrorCode::IllegalSaslState.code());
    let outcome = run(handle_frame_from(
        &rt,
        &broker,
        &config,
        &metadata(),
        &mut ConnContext::new("p:1"),
    ));
    assert!(matches!(outcome, Outcome::Reply(_)), "PLAINTEXT serves without login");
}
