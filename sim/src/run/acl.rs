//! `[acl]` scenarios: every broker serves SASL PLAIN with an authorizer (`super.users =
//! User:admin`, no ACL means denied), producers log in as `User:producer-N`, brokers' replica
//! fetchers and the harness's own clients (setup, final read, observers) as `User:admin`. An ACL
//! driver on the admin node grants Write on the topic to every producer, then revokes and grants
//! it again for the toggled producers on the scenario's schedule through DeleteAcls and
//! CreateAcls (answered once the coordinator committed them), while the nemesis runs. It records
//! each revocation window for the checker ([`crate::checker::acl`]), and at the end the harness
//! reads every record of every live replica's log.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use gregor_core::client::Cluster;
use gregor_core::disk::Disk;
use gregor_core::error_code::ErrorCode;
use gregor_core::node::authz::NodeAcls;
use gregor_core::protocol::api::create_acls::{AclCreation, CreateAclsRequest};
use gregor_core::protocol::api::delete_acls::DeleteAclsRequest;
use gregor_core::protocol::api::describe_acls::AclFilterWire;
use gregor_core::protocol::{Request, Response};
use gregor_core::record::{records, BatchHeader, HEADER_BYTES};
use gregor_core::runtime::Runtime;
use gregor_core::security::acl::{
    Authorizer, AuthorizerConfig, Operation, PatternType, Permission, ResourceType, WILDCARD,
};
use gregor_core::security::sasl::Mechanism;
use gregor_core::security::{SaslConfig, SaslCredentials};
use gregor_core::BrokerId;

use super::cluster::live_brokers;
use crate::checker::acl::RevokedWindow;
use crate::history::{Partition, Value};
use crate::runtime::SimRuntime;
use crate::scenario::{Acl, Scenario};
use crate::world::{NodeIndex, World};

/// The super user brokers and the harness log in as.
pub const ADMIN: &str = "admin";
/// CreateAcls / DeleteAcls version the driver speaks.
const ACLS_VERSION: i16 = 1;
/// How long the driver waits between attempts of an unanswered ACL request.
const RETRY_MS: u64 = 100;

thread_local! {
    /// Whether this run's clients log in (set per run; one OS thread per seed).
    static SECURED: Cell<bool> = const { Cell::new(false) };
}

/// Turns client logins on or off for the run on this thread.
pub fn set_secured(on: bool) {
    SECURED.with(|s| s.set(on));
}

fn password(user: &str) -> String {
    format!("{user}-secret")
}

fn credentials(user: &str) -> SaslCredentials {
    SaslCredentials {
        mechanism: Mechanism::Plain,
        user: user.to_string(),
        password: password(user),
    }
}

/// The login of the harness client named `name`: `producer-N` logs in as itself, every other
/// client as the super user; `None` when the run is not secured.
pub fn client_login(name: &str) -> Option<SaslCredentials> {
    if !SECURED.with(Cell::get) {
        return None;
    }
    Some(credentials(if name.starts_with("producer-") { name } else { ADMIN }))
}

/// A broker's SASL listener and authorizer, and its inter-broker login.
pub fn broker_security(s: &Scenario, a: &Acl) -> (Rc<SaslConfig>, NodeAcls, SaslCredentials) {
    let users: BTreeMap<String, String> = std::iter::once(ADMIN.to_string())
        .chain((0..s.producer.count).map(|p| format!("producer-{p}")))
        .map(|u| {
            let pw = password(&u);
            (u, pw)
        })
        .collect();
    let mut acls = NodeAcls::new(Authorizer::new(AuthorizerConfig {
        super_users: AuthorizerConfig::parse_super_users(&format!("User:{ADMIN}")),
        allow_everyone_if_no_acl_found: false,
    }));
    acls.mutant_ignore_revocations = a.mutant_ignore_revocations;
    (Rc::new(SaslConfig::plain(users)), acls, credentials(ADMIN))
}

fn write_acl(topic: &str, producer: u32) -> AclCreation {
    AclCreation {
        resource_type: ResourceType::Topic.code(),
        resource_name: topic.to_string(),
        pattern_type: PatternType::Literal.code(),
        principal: format!("User:producer-{producer}"),
        host: WILDCARD.to_string(),
        operation: Operation::Write.code(),
        permission_type: Permission::Allow.code(),
    }
}

fn write_filter(topic: &str, producer: u32) -> AclFilterWire {
    AclFilterWire {
        resource_type: ResourceType::Topic.code(),
        resource_name: Some(topic.to_string()),
        pattern_type: PatternType::Literal.code(),
        principal: Some(format!("User:producer-{producer}")),
        host: Some(WILDCARD.to_string()),
        operation: Operation::Write.code(),
        permission_type: Permission::Allow.code(),
    }
}

/// Sends `request` until a broker answers it with no error, or `until_ms` passes; `true` when
/// answered.
async fn until_answered(rt: &SimRuntime, cluster: &mut Cluster<SimRuntime>, request: &Request, until_ms: u64) -> bool {
    while rt.monotonic_ms() < until_ms {
        let ok = match cluster.call_any(request, ACLS_VERSION).await {
            Ok(Response::CreateAcls(r)) => r.results.iter().all(|x| x.error_code == ErrorCode::None.code()),
            Ok(Response::DeleteAcls(r)) => r.filter_results.iter().all(|x| x.error_code == ErrorCode::None.code()),
            Ok(_) => false,
            Err(e) => {
                tracing::debug!(target: "acl-driver", error = %e, "ACL request failed; retrying");
                false
            }
        };
        if ok {
            return true;
        }
        rt.sleep(Duration::from_millis(RETRY_MS)).await;
    }
    false
}

/// Grants Write to every producer; returns once answered (before the workload starts).
pub async fn grant_all(rt: SimRuntime, s: Scenario, brokers: usize) {
    let mut cluster = super::client(&rt, "acl-driver".into(), brokers);
    let topic = &s.topic().name;
    let request = Request::CreateAcls(CreateAclsRequest {
        creations: (0..s.producer.count).map(|p| write_acl(topic, p)).collect(),
    });
    assert!(
        until_answered(&rt, &mut cluster, &request, rt.monotonic_ms() + 60_000).await,
        "the initial grants were not answered in 60 s of virtual time"
    );
}

/// Revokes and grants Write for the toggled producers on the schedule, from `start_ms` until
/// `until_ms`; returns the revocation windows (the last one open when no grant followed).
pub async fn drive(rt: SimRuntime, s: Scenario, brokers: usize, start_ms: u64, until_ms: u64) -> Vec<RevokedWindow> {
    let a = s.acl.clone().expect("drive runs for [acl] scenarios");
    let topic = s.topic().name.clone();
    let mut cluster = super::client(&rt, "acl-driver".into(), brokers);
    let toggled: Vec<u32> = (0..a.toggled_producers).collect();
    let mut windows = Vec::new();
    let mut next_ms = start_ms + (a.granted_s * 1_000.0) as u64;
    while next_ms < until_ms {
        rt.sleep(Duration::from_millis(next_ms.saturating_sub(rt.monotonic_ms())))
            .await;
        let revoke = Request::DeleteAcls(DeleteAclsRequest {
            filters: toggled.iter().map(|&p| write_filter(&topic, p)).collect(),
        });
        let issued = rt.monotonic_ms();
        if !until_answered(&rt, &mut cluster, &revoke, until_ms).await {
            break;
        }
        let answered = rt.monotonic_ms();
        tracing::info!(target: "acl-driver", issued, answered, "Write revoked");
        let first = windows.len();
        for &producer in &toggled {
            windows.push(RevokedWindow {
                producer,
                revoke_issued_ms: issued,
                revoke_answered_ms: answered,
                from_ms: answered + a.bound_ms,
                until_ms: u64::MAX,
            });
        }
        rt.sleep(Duration::from_millis((a.revoked_s * 1_000.0) as u64)).await;
        if rt.monotonic_ms() >= until_ms {
            break;
        }
        let grant_issued = rt.monotonic_ms();
        for w in &mut windows[first..] {
            w.until_ms = grant_issued;
        }
        let grant = Request::CreateAcls(CreateAclsRequest {
            creations: toggled.iter().map(|&p| write_acl(&topic, p)).collect(),
        });
        if !until_answered(&rt, &mut cluster, &grant, until_ms).await {
            break;
        }
        tracing::info!(target: "acl-driver", issued = grant_issued, answered = rt.monotonic_ms(), "Write granted");
        next_ms = rt.monotonic_ms() + (a.granted_s * 1_000.0) as u64;
    }
    windows
}

/// Bytes one read of a replica's log takes at most.
const READ_BYTES_MAX: u64 = 1 << 20;
/// Reads per partition replica at most.
const READS_MAX: usize = 100_000;

/// Every record of every live replica of `topic`: (broker, partition, offset, value), from the
/// log start to the log end (past the high watermark too: "appears in any log").
pub fn collect_records(world: &World, topic: &str, partitions: u32) -> Vec<(BrokerId, Partition, i64, Value)> {
    let mut out = Vec::new();
    for (i, b) in live_brokers() {
        let b = b.borrow();
        for p in 0..partitions as i32 {
            let Some(log) = b.log(topic, p) else { continue };
            let read = world.state(NodeIndex(i)).with_disk(|disk| -> Result<(), String> {
                let mut at = log.log_start_offset();
                for _ in 0..READS_MAX {
                    if at >= log.log_end_offset() {
                        return Ok(());
                    }
                    let slice = log.read(disk, at, READ_BYTES_MAX, None).map_err(|e| e.to_string())?;
                    if slice.next_offset <= at || slice.len == 0 {
                        return Err(format!("no progress reading at offset {}", at.0));
                    }
                    let mut buf = vec![0u8; slice.len as usize];
                    disk.read_at(&slice.path, slice.position, &mut buf)
                        .map_err(|e| e.to_string())?;
                    let mut pos = 0;
                    while pos + HEADER_BYTES <= buf.len() {
                        let header = BatchHeader::parse(&buf[pos..]).map_err(|e| e.to_string())?;
                        let end = pos + header.total_bytes();
                        let batch = buf.get(pos..end).ok_or("a batch runs past the slice")?;
                        for r in records(batch).ok_or("undecodable batch")? {
                            if let Some(v) = r.value.and_then(Value::from_bytes) {
                                out.push((BrokerId(i as i32), Partition::of_first(p), r.offset.0, v));
                            }
                        }
                        pos = end;
                    }
                    at = slice.next_offset;
                }
                Err("the replica read did not finish".into())
            });
            if let Err(e) = read {
                tracing::warn!(target: "checker", broker = i, partition = p, error = %e, "replica records unreadable; left out");
            }
        }
    }
    out
}
