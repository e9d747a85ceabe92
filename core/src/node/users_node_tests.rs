//! SCRAM user management through the broker driver on a single node with SASL and an
//! authorizer: AlterUserScramCredentials stores a user a SCRAM login then accepts, with Kafka's
//! error codes for bad requests; DescribeUserScramCredentials lists names, mechanisms and
//! iterations only; both need the Cluster permission. (Cluster mode, where the coordinator is
//! the store, is `sim/tests/coord.rs`'s propagation test.)

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bytes::Bytes;

use super::authz::NodeAcls;
use super::driver_tests::{frame, run, TestRt};
use super::*;
use crate::disk::mem::MemDisk;
use crate::protocol::api::alter_user_scram_credentials::{
    AlterUserScramCredentialsRequest, ScramCredentialDeletion, ScramCredentialUpsertion,
};
use crate::protocol::api::describe_user_scram_credentials::DescribeUserScramCredentialsRequest;
use crate::protocol::client::decode_response;
use crate::protocol::{Request, Response};
use crate::security::acl::{Authorizer, AuthorizerConfig};
use crate::security::sasl_client::SaslClient;
use crate::security::scram;
use crate::security::{AuthStep, Mechanism, Principal, SaslCredentials};

struct Node {
    rt: TestRt,
    broker: SharedBroker,
    config: NodeConfig,
}

impl Node {
    fn new() -> Node {
        let rt = TestRt {
            now_ms: Rc::new(Cell::new(1)),
            disk: Rc::new(RefCell::new(MemDisk::new())),
        };
        let broker = rt.with_disk(|d| Broker::open(d, BrokerConfig::default(), 0).expect("open"));
        let mut config = NodeConfig::single_node("x:1", "x", 1, "c");
        let mut sasl = SaslConfig::plain(Default::default());
        sasl.mechanisms = vec![Mechanism::ScramSha256, Mechanism::ScramSha512];
        config.sasl = Some(Rc::new(sasl));
        config.acls = Some(NodeAcls::new(Authorizer::new(AuthorizerConfig {
            super_users: AuthorizerConfig::parse_super_users("User:admin"),
            allow_everyone_if_no_acl_found: false,
        })));
        Node {
            rt,
            broker: Rc::new(RefCell::new(broker)),
            config,
        }
    }

    fn call(&self, user: &str, request: Request) -> Response {
        let api_key = request.api_key();
        let mut ctx = ConnContext::new("10.1.1.1:40000");
        ctx.principal = Principal::user(user);
        let outcome = run(handle_frame_from(
            &self.rt,
            &self.broker,
            &self.config,
            &frame(request, 0),
            &mut ctx,
        ));
        let Outcome::Reply(bytes) = outcome else {
            panic!("no reply to api {api_key}")
        };
        decode_response(api_key, 0, &bytes, Limits::default())
            .expect("decodes")
            .1
    }

    fn alter(&self, who: &str, req: AlterUserScramCredentialsRequest) -> Vec<(String, i16)> {
        let Response::AlterUserScramCredentials(resp) = self.call(who, Request::AlterUserScramCredentials(req)) else {
            panic!("wrong api")
        };
        resp.results.into_iter().map(|r| (r.user, r.error_code)).collect()
    }

    /// A whole SCRAM login against the node's SASL config, as a connection would make it.
    fn login(&self, user: &str, password: &str, mechanism: Mechanism) -> bool {
        let sasl = self.config.sasl.as_deref().expect("sasl");
        let mut state = SaslState::for_listener(true);
        let (code, _) = state.handshake(sasl, mechanism.name(), 1);
        assert_eq!(code, ErrorCode::None);
        let mut client = SaslClient::new(
            SaslCredentials {
                mechanism,
                user: user.into(),
                password: password.into(),
            },
            "clientnonce".into(),
        );
        let mut token = client.first();
        for _ in 0..3 {
            match state.authenticate(sasl, &token, "servernonce").expect("in order") {
                AuthStep::Continue(reply) => match client.next(&reply) {
                    Ok(Some(t)) => token = t,
                    _ => return false,
                },
                AuthStep::Done { token, .. } => return client.next(&token).is_ok(),
                AuthStep::Failed { .. } => return false,
            }
        }
        false
    }
}

fn upsert(name: &str, m: Mechanism, password: &str, iterations: i32) -> ScramCredentialUpsertion {
    let salt = b"some salt".to_vec();
    ScramCredentialUpsertion {
        name: name.into(),
        mechanism: crate::security::users::mechanism_code(m),
        iterations,
        salted_password: Bytes::from(scram::hi(m, password.as_bytes(), &salt, iterations.max(1) as u32)),
        salt: Bytes::from(salt),
    }
}

fn deletion(name: &str, mechanism: i8) -> ScramCredentialDeletion {
    ScramCredentialDeletion {
        name: name.into(),
        mechanism,
    }
}

#[test]
fn an_added_user_logs_in_a_deleted_one_does_not_and_listing_shows_no_secret() {
    let node = Node::new();
    let m = Mechanism::ScramSha256;
    assert!(!node.login("alice", "alice-pw", m), "no user yet");
    let added = node.alter(
        "admin",
        AlterUserScramCredentialsRequest {
            deletions: vec![],
            upsertions: vec![upsert("alice", m, "alice-pw", 8192)],
        },
    );
    assert_eq!(added, vec![("alice".to_string(), 0)]);
    assert!(node.login("alice", "alice-pw", m), "the stored credential logs in");
    assert!(!node.login("alice", "wrong", m), "a wrong password is refused");
    assert!(
        !node.login("alice", "alice-pw", Mechanism::ScramSha512),
        "only the mechanism stored"
    );

    let Response::DescribeUserScramCredentials(listed) = node.call(
        "admin",
        Request::DescribeUserScramCredentials(DescribeUserScramCredentialsRequest { users: None }),
    ) else {
        panic!("wrong api")
    };
    assert_eq!(listed.error_code, 0);
    assert_eq!(listed.results.len(), 1);
    assert_eq!(listed.results[0].user, "alice");
    assert_eq!(
        (
            listed.results[0].credential_infos[0].mechanism,
            listed.results[0].credential_infos[0].iterations
        ),
        (1, 8192)
    );

    let deleted = node.alter(
        "admin",
        AlterUserScramCredentialsRequest {
            deletions: vec![deletion("alice", 1)],
            upsertions: vec![],
        },
    );
    assert_eq!(deleted, vec![("alice".to_string(), 0)]);
    assert!(!node.login("alice", "alice-pw", m), "a deleted user cannot log in");
    println!("compared 5 logins and 2 alter answers");
}

#[test]
fn alter_and_describe_answer_with_kafkas_error_codes() {
    let node = Node::new();
    let m = Mechanism::ScramSha256;
    let got = node.alter(
        "admin",
        AlterUserScramCredentialsRequest {
            deletions: vec![deletion("ghost", 1), deletion("x", 7)],
            upsertions: vec![
                upsert("", m, "pw", 4096),
                upsert("low", m, "pw", 1000),
                upsert("twice", m, "pw", 4096),
                upsert("twice", Mechanism::ScramSha512, "pw", 4096),
                upsert("ok", m, "pw", 4096),
            ],
        },
    );
    let want = vec![
        ("ghost".to_string(), ErrorCode::ResourceNotFound.code()),
        ("x".to_string(), ErrorCode::UnsupportedSaslMechanism.code()),
        (String::new(), ErrorCode::UnacceptableCredential.code()),
        ("low".to_string(), ErrorCode::UnacceptableCredential.code()),
        ("twice".to_string(), ErrorCode::DuplicateResource.code()),
        ("ok".to_string(), 0),
    ];
    assert_eq!(got, want);
    assert!(!node.login("twice", "pw", m), "a refused upsertion stores nothing");

    let Response::DescribeUserScramCredentials(d) = node.call(
        "admin",
        Request::DescribeUserScramCredentials(DescribeUserScramCredentialsRequest {
            users: Some(vec!["ok".into(), "nobody".into(), "dup".into(), "dup".into()]),
        }),
    ) else {
        panic!("wrong api")
    };
    let codes: Vec<(String, i16)> = d.results.iter().map(|r| (r.user.clone(), r.error_code)).collect();
    assert_eq!(
        codes,
        vec![
            ("ok".to_string(), 0),
            ("nobody".to_string(), ErrorCode::ResourceNotFound.code()),
            ("dup".to_string(), ErrorCode::DuplicateResource.code()),
        ]
    );
    println!("compared {} alter and {} describe results", want.len(), codes.len());
}

#[test]
fn managing_users_needs_the_cluster_permission() {
    let node = Node::new();
    let m = Mechanism::ScramSha256;
    let got = node.alter(
        "mallory",
        AlterUserScramCredentialsRequest {
            deletions: vec![],
            upsertions: vec![upsert("mallory2", m, "pw", 4096)],
        },
    );
    assert_eq!(
        got,
        vec![("mallory2".to_string(), ErrorCode::ClusterAuthorizationFailed.code())]
    );
    assert!(!node.login("mallory2", "pw", m), "nothing stored");
    let Response::DescribeUserScramCredentials(d) = node.call(
        "mallory",
        Request::DescribeUserScramCredentials(DescribeUserScramCredentialsRequest { users: None }),
    ) else {
        panic!("wrong api")
    };
    assert_eq!(d.error_code, ErrorCode::ClusterAuthorizationFailed.code());
    assert!(d.results.is_empty());
}
