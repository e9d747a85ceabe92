//! Cluster mode: the broker's ACL cache kept equal to the ACLs stored in the coordinator, and
//! CreateAcls / DeleteAcls written there.
//!
//! One task per broker, with its own coordinator session (so ACL traffic never delays the
//! cluster task's ISR writes). Per session it creates the persistent parents
//! ([`znode::parent_paths`]), then repeatedly: reads every ACL znode with watches (a full scan:
//! a cluster holds few patterns), replaces the cache with what it read, carries out queued
//! CreateAcls / DeleteAcls jobs (compare-and-set on each pattern's znode, retried on a version
//! clash, so concurrent writers on any brokers never lose each other's entries), and waits for
//! a watch to fire, a job, or `refresh_ms`.
//!
//! Propagation bound: a change written to the coordinator reaches every broker's cache when its
//! watch fires and the broker re-reads (one coordinator round trip); if the watch is lost (the
//! broker's coordinator server changed, its session expired, the coordinator failed over) the
//! next scan within `refresh_ms` picks the change up. So a revoked ACL stops authorizing on
//! every broker that can reach the coordinator within `refresh_ms` plus one read after the
//! DeleteAcls was answered. A broker cut off from the coordinator keeps its last cache, as a
//! Kafka broker cut off from ZooKeeper does.

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use crate::coord::client::{CoordClient, CoordClientConfig, CoordError};
use crate::coord::tree::{CreateMode, TreeError};
use crate::error_code::ErrorCode;
use crate::runtime::Runtime;
use crate::security::acl::znode::{self, STORED_TYPES};
use crate::security::acl::{AclBinding, AclFilter, AclSet};

use super::authz::NodeAcls;
use super::handlers::acls;
use crate::protocol::api::create_acls::{AclCreationResult, CreateAclsRequest, CreateAclsResponse};
use crate::protocol::api::delete_acls::{DeleteAclsFilterResult, DeleteAclsRequest, DeleteAclsResponse};

/// Jobs queued at most; more are refused at once.
const ACL_JOBS_MAX: usize = 1_000;
/// Compare-and-set attempts per pattern before the job reports a failure.
const CAS_ATTEMPTS_MAX: u32 = 20;
/// How long a connection waits for its job's answer.
const ACL_JOB_TIMEOUT_MS: u64 = 30_000;

pub type Failure = (ErrorCode, String);

enum Job {
    Create(Vec<AclBinding>),
    Delete(Vec<AclFilter>),
}

/// One result per binding (create) or per filter (delete, with what it removed).
enum Answer {
    Created(Vec<Result<(), Failure>>),
    Deleted(Vec<Result<Vec<AclBinding>, Failure>>),
}

struct Queued {
    job: Job,
    reply: Rc<RefCell<Option<Answer>>>,
}

/// ACL writes handed from connections to the ACL task. Clones share the queue.
#[derive(Clone, Default)]
pub struct AclAdmin(Rc<RefCell<VecDeque<Queued>>>);

impl fmt::Debug for AclAdmin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AclAdmin({} queued)", self.0.borrow().len())
    }
}

impl AclAdmin {
    async fn submit<R: Runtime>(&self, rt: &R, job: Job) -> Option<Answer> {
        if self.0.borrow().len() >= ACL_JOBS_MAX {
            return None;
        }
        let reply = Rc::new(RefCell::new(None));
        self.0.borrow_mut().push_back(Queued {
            job,
            reply: reply.clone(),
        });
        let deadline = rt.monotonic_ms().saturating_add(ACL_JOB_TIMEOUT_MS);
        while rt.monotonic_ms() < deadline {
            if let Some(answer) = reply.borrow_mut().take() {
                return Some(answer);
            }
            rt.sleep(Duration::from_millis(5)).await;
        }
        None
    }

    /// Stores `bindings`; one result per binding.
    pub async fn create<R: Runtime>(&self, rt: &R, bindings: Vec<AclBinding>) -> Vec<Result<(), Failure>> {
        let n = bindings.len();
        match self.submit(rt, Job::Create(bindings)).await {
            Some(Answer::Created(results)) => results,
            _ => vec![Err(timed_out()); n],
        }
    }

    /// Removes what each filter matches; one result per filter.
    pub async fn delete<R: Runtime>(&self, rt: &R, filters: Vec<AclFilter>) -> Vec<Result<Vec<AclBinding>, Failure>> {
        let n = filters.len();
        match self.submit(rt, Job::Delete(filters)).await {
            Some(Answer::Deleted(results)) => results,
            _ => vec![Err(timed_out()); n],
        }
    }
}

fn timed_out() -> Failure {
    (
        ErrorCode::RequestTimedOut,
        "the coordinator did not answer in time".into(),
    )
}

fn fatal(e: &CoordError) -> bool {
    matches!(
        e,
        CoordError::SessionExpired | CoordError::Tree(TreeError::SessionExpired) | CoordError::Closed
    )
}

/// Runs for the life of the broker: keeps `acls`' cache equal to the coordinator's ACLs and
/// serves `admin`'s jobs.
pub async fn run_acl_sync<R: Runtime>(
    rt: R,
    client_config: CoordClientConfig,
    refresh_ms: u64,
    acls: NodeAcls,
    admin: AclAdmin,
) {
    loop {
        let client = match CoordClient::connect(rt.clone(), client_config.clone()).await {
            Ok(client) => client,
            Err(e) => {
                tracing::info!(target: "acl", error = %e, "no coordinator session for ACLs yet; retrying");
                rt.sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let session = Session {
            rt: rt.clone(),
            client,
            acls: acls.clone(),
            admin: admin.clone(),
            refresh_ms,
        };
        session.run().await;
        tracing::warn!(target: "acl", "ACL coordinator session ended; opening a new one");
    }
}

struct Session<R: Runtime> {
    rt: R,
    client: CoordClient<R>,
    acls: NodeAcls,
    admin: AclAdmin,
    refresh_ms: u64,
}

impl<R: Runtime> Session<R> {
    async fn run(&self) {
        for parent in znode::parent_paths() {
            loop {
                match self.client.create(&parent, b"", CreateMode::Persistent).await {
                    Ok(_) | Err(CoordError::Tree(TreeError::NodeExists)) => break,
                    Err(e) if fatal(&e) => return,
                    Err(_) => self.rt.sleep(Duration::from_millis(100)).await,
                }
            }
        }
        loop {
            let servers = self.client.server_changes();
            match self.scan(true).await {
                Ok(mut set) => {
                    if self.acls.mutant_ignore_revocations {
                        for kept in self.acls.acls.borrow().bindings() {
                            set.add(kept);
                        }
                    }
                    let changed = *self.acls.acls.borrow() != set;
                    if changed {
                        tracing::info!(target: "acl", acls = set.len(), "ACL cache updated from the coordinator");
                    }
                    *self.acls.acls.borrow_mut() = set;
                }
                Err(e) if fatal(&e) => return,
                Err(e) => {
                    tracing::debug!(target: "acl", error = %e, "reading ACLs failed; retrying");
                    self.rt.sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
            let popped = self.admin.0.borrow_mut().pop_front();
            if let Some(queued) = popped {
                let answer = match queued.job {
                    Job::Create(bindings) => Answer::Created(self.create_all(bindings).await),
                    Job::Delete(filters) => Answer::Deleted(self.delete_all(filters).await),
                };
                *queued.reply.borrow_mut() = Some(answer);
                if self.client.is_expired() {
                    return;
                }
                // Re-read at once, so this broker's cache shows its own write.
                continue;
            }
            self.wait(servers).await;
            if self.client.is_expired() {
                return;
            }
        }
    }

    /// Waits for a watch, a job, a change of coordinator server (its watches are gone), or
    /// `refresh_ms`.
    async fn wait(&self, servers: u64) {
        let deadline = self.rt.monotonic_ms().saturating_add(self.refresh_ms);
        while self.rt.monotonic_ms() < deadline {
            let mut fired = false;
            while self.client.try_next_watch_event().is_some() {
                fired = true;
            }
            if fired
                || !self.admin.0.borrow().is_empty()
                || self.client.is_expired()
                || self.client.server_changes() != servers
            {
                return;
            }
            self.rt.sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every stored ACL; with `watch`, leaves watches on every directory and znode read.
    async fn scan(&self, watch: bool) -> Result<AclSet, CoordError> {
        let mut set = AclSet::default();
        for root in [znode::LITERAL_ROOT, znode::PREFIXED_ROOT] {
            for t in STORED_TYPES {
                let dir = znode::type_path(root, t);
                let children = match self.client.children(&dir, watch, true).await {
                    Ok(c) => c,
                    Err(CoordError::Tree(TreeError::NoNode)) => continue,
                    Err(e) => return Err(e),
                };
                for child in children {
                    let Some(pattern) = znode::pattern_of(root, t, &child) else {
                        tracing::warn!(target: "acl", %dir, %child, "ignoring an ACL znode with a bad name");
                        continue;
                    };
                    let path = format!("{dir}/{child}");
                    let data = match self.client.get(&path, watch, false).await {
                        Ok((data, _)) => data,
                        Err(CoordError::Tree(TreeError::NoNode)) => continue,
                        Err(e) => return Err(e),
                    };
                    match znode::decode_entries(&data) {
                        Some(entries) => set.set_entries(pattern, entries),
                        None => tracing::warn!(target: "acl", %path, "ignoring an undecodable ACL znode"),
                    }
                }
            }
        }
        Ok(set)
    }

    async fn create_all(&self, bindings: Vec<AclBinding>) -> Vec<Result<(), Failure>> {
        let mut out = Vec::with_capacity(bindings.len());
        for b in bindings {
            let entry = b.entry.clone();
            out.push(
                self.update(&b.pattern, |entries| {
                    entries.insert(entry.clone());
                })
                .await
                .map(|_| ()),
            );
        }
        out
    }

    async fn delete_all(&self, filters: Vec<AclFilter>) -> Vec<Result<Vec<AclBinding>, Failure>> {
        let mut out = Vec::with_capacity(filters.len());
        for filter in filters {
            let current = match self.scan(false).await {
                Ok(set) => set,
                Err(e) => {
                    out.push(Err(coord_failure(&e)));
                    continue;
                }
            };
            let patterns: BTreeSet<_> = current.matching(&filter).into_iter().map(|b| b.pattern).collect();
            let mut removed = Vec::new();
            let mut failed = None;
            for pattern in patterns {
                let f = filter.clone();
                let p = pattern.clone();
                match self
                    .update(&pattern, |entries| {
                        entries.retain(|e| {
                            !f.matches(&AclBinding {
                                pattern: p.clone(),
                                entry: e.clone(),
                            })
                        })
                    })
                    .await
                {
                    Ok(gone) => removed.extend(gone.into_iter().map(|entry| AclBinding {
                        pattern: pattern.clone(),
                        entry,
                    })),
                    Err(e) => failed = Some(e),
                }
            }
            out.push(match failed {
                Some(e) => Err(e),
                None => Ok(removed),
            });
        }
        out
    }

    /// Read-modify-write of one pattern's znode by compare-and-set; an emptied znode is
    /// deleted. Returns the entries `change` removed.
    async fn update(
        &self,
        pattern: &crate::security::acl::ResourcePattern,
        change: impl Fn(&mut BTreeSet<crate::security::acl::AccessControlEntry>),
    ) -> Result<Vec<crate::security::acl::AccessControlEntry>, Failure> {
        let path =
            znode::pattern_path(pattern).ok_or((ErrorCode::InvalidRequest, "not a storable pattern".to_string()))?;
        for _ in 0..CAS_ATTEMPTS_MAX {
            let current = match self.client.get(&path, false, true).await {
                Ok((data, stat)) => Some((
                    znode::decode_entries(&data)
                        .ok_or((ErrorCode::UnknownServerError, format!("{path} holds undecodable ACLs")))?,
                    stat.version,
                )),
                Err(CoordError::Tree(TreeError::NoNode)) => None,
                Err(e) if fatal(&e) => return Err(coord_failure(&e)),
                Err(_) => continue,
            };
            let before = current.as_ref().map(|(e, _)| e.clone()).unwrap_or_default();
            let mut after = before.clone();
            change(&mut after);
            if after == before {
                return Ok(Vec::new());
            }
            let removed: Vec<_> = before.difference(&after).cloned().collect();
            let written = match (current, after.is_empty()) {
                (None, _) => self
                    .client
                    .create(&path, &znode::encode_entries(&after), CreateMode::Persistent)
                    .await
                    .map(|_| ()),
                (Some((_, version)), false) => self
                    .client
                    .set_data(&path, &znode::encode_entries(&after), Some(version))
                    .await
                    .map(|_| ()),
                (Some((_, version)), true) => self.client.delete(&path, Some(version)).await,
            };
            match written {
                Ok(()) => return Ok(removed),
                Err(e) if fatal(&e) => return Err(coord_failure(&e)),
                // A clash (NodeExists, BadVersion, NoNode) or an unknown outcome: read again;
                // an applied write then shows as "nothing to change".
                Err(_) => continue,
            }
        }
        Err((
            ErrorCode::UnknownServerError,
            format!("{path}: too many concurrent updates"),
        ))
    }
}

fn coord_failure(e: &CoordError) -> Failure {
    (ErrorCode::CoordinatorNotAvailable, format!("coordinator: {e}"))
}

impl AclAdmin {
    /// CreateAcls in cluster mode: invalid creations are answered at once, the rest stored.
    pub async fn create_acls_request<R: Runtime>(
        &self,
        rt: &R,
        req: &CreateAclsRequest,
        admitted: Result<(), ErrorCode>,
    ) -> CreateAclsResponse {
        let checked: Vec<Result<AclBinding, Failure>> = req
            .creations
            .iter()
            .map(|c| {
                admitted.map_err(|e| (e, "not allowed to create ACLs".to_string()))?;
                acls::binding_of(c).map_err(|why| (ErrorCode::InvalidRequest, why.to_string()))
            })
            .collect();
        let valid: Vec<AclBinding> = checked.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
        let mut stored = if valid.is_empty() {
            Vec::new()
        } else {
            self.create(rt, valid).await
        }
        .into_iter();
        let results = checked
            .into_iter()
            .map(|r| {
                match r.and_then(|_| {
                    stored
                        .next()
                        .unwrap_or_else(|| Err((ErrorCode::UnknownServerError, "no answer".into())))
                }) {
                    Ok(()) => AclCreationResult::default(),
                    Err((code, why)) => AclCreationResult {
                        error_code: code.code(),
                        error_message: Some(why),
                    },
                }
            })
            .collect();
        CreateAclsResponse {
            throttle_time_ms: 0,
            results,
        }
    }

    /// DeleteAcls in cluster mode.
    pub async fn delete_acls_request<R: Runtime>(
        &self,
        rt: &R,
        req: &DeleteAclsRequest,
        admitted: Result<(), ErrorCode>,
    ) -> DeleteAclsResponse {
        let checked: Vec<Result<AclFilter, Failure>> = req
            .filters
            .iter()
            .map(|f| {
                admitted.map_err(|e| (e, "not allowed to delete ACLs".to_string()))?;
                acls::filter_of(f).ok_or((ErrorCode::InvalidRequest, "unknown code in the filter".to_string()))
            })
            .collect();
        let valid: Vec<AclFilter> = checked.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
        let mut done = if valid.is_empty() {
            Vec::new()
        } else {
            self.delete(rt, valid).await
        }
        .into_iter();
        let filter_results = checked
            .into_iter()
            .map(|r| {
                match r.and_then(|_| {
                    done.next()
                        .unwrap_or_else(|| Err((ErrorCode::UnknownServerError, "no answer".into())))
                }) {
                    Ok(removed) => DeleteAclsFilterResult {
                        error_code: 0,
                        error_message: None,
                        matching_acls: removed.into_iter().map(acls::matching_acl).collect(),
                    },
                    Err((code, why)) => DeleteAclsFilterResult {
                        error_code: code.code(),
                        error_message: Some(why),
                        matching_acls: Vec::new(),
                    },
                }
            })
            .collect();
        DeleteAclsResponse {
            throttle_time_ms: 0,
            filter_results,
        }
    }
}
