//! Cluster mode: the broker's SCRAM users kept equal to the ones stored in the coordinator
//! (`/config/users/NAME`, [`users`](crate::security::users)), and AlterUserScramCredentials
//! written there. The same shape as [`acl_sync`](super::acl_sync): one task per broker with its
//! own coordinator session; per session it creates the parents, then repeatedly reads every
//! user znode with watches, replaces the stored users of the broker's [`SaslConfig`], carries out
//! queued jobs (compare-and-set per user, retried on a clash), and waits for a watch, a job, a
//! change of coordinator server, or `refresh_ms`.
//!
//! Propagation bound: as for ACLs, a user added or deleted reaches every broker's cache within
//! one coordinator read after its watch fires, or `refresh_ms` when the watch was lost (server
//! change, session expiry, failover). Established connections stay authenticated (as in
//! Kafka); new logins use the cache. The config file's users (`sasl.scram.users`) are a
//! bootstrap layer under the stored ones and are not written to the coordinator.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use crate::coord::client::{CoordClient, CoordClientConfig, CoordError};
use crate::coord::tree::{CreateMode, TreeError};
use crate::error_code::ErrorCode;
use crate::runtime::Runtime;
use crate::security::users::{self, Change, Failure, StoredUsers};
use crate::security::SaslConfig;

/// Jobs queued at most; more are refused at once.
const USER_JOBS_MAX: usize = 1_000;
/// Compare-and-set attempts per user before the job reports a failure.
const CAS_ATTEMPTS_MAX: u32 = 20;
/// How long a connection waits for its job's answer.
const USER_JOB_TIMEOUT_MS: u64 = 30_000;

/// One user's changes.
type Job = Vec<(String, Vec<Change>)>;
/// One result per user of a job.
type Answer = Vec<Result<(), Failure>>;

struct Queued {
    job: Job,
    reply: Rc<RefCell<Option<Answer>>>,
}

/// User writes handed from connections to the sync task. Clones share the queue.
#[derive(Clone, Default)]
pub struct UserAdmin(Rc<RefCell<VecDeque<Queued>>>);

impl fmt::Debug for UserAdmin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserAdmin({} queued)", self.0.borrow().len())
    }
}

impl UserAdmin {
    /// Stores each user's changes; one result per user.
    pub async fn alter<R: Runtime>(&self, rt: &R, job: Job) -> Vec<Result<(), Failure>> {
        let n = job.len();
        let timed_out = || {
            vec![
                Err((
                    ErrorCode::RequestTimedOut,
                    "the coordinator did not answer in time".to_string()
                ));
                n
            ]
        };
        if self.0.borrow().len() >= USER_JOBS_MAX {
            return timed_out();
        }
        let reply = Rc::new(RefCell::new(None));
        self.0.borrow_mut().push_back(Queued {
            job,
            reply: reply.clone(),
        });
        let deadline = rt.monotonic_ms().saturating_add(USER_JOB_TIMEOUT_MS);
        while rt.monotonic_ms() < deadline {
            if let Some(answer) = reply.borrow_mut().take() {
                return answer;
            }
            rt.sleep(Duration::from_millis(5)).await;
        }
        timed_out()
    }
}

fn fatal(e: &CoordError) -> bool {
    matches!(
        e,
        CoordError::SessionExpired | CoordError::Tree(TreeError::SessionExpired) | CoordError::Closed
    )
}

fn coord_failure(e: &CoordError) -> Failure {
    (ErrorCode::CoordinatorNotAvailable, format!("coordinator: {e}"))
}

/// Runs for the life of the broker: keeps `sasl`'s stored users equal to the coordinator's and
/// serves `admin`'s jobs.
pub async fn run_user_sync<R: Runtime>(
    rt: R,
    client_config: CoordClientConfig,
    refresh_ms: u64,
    sasl: Rc<SaslConfig>,
    admin: UserAdmin,
) {
    loop {
        let client = match CoordClient::connect(rt.clone(), client_config.clone()).await {
            Ok(client) => client,
            Err(e) => {
                tracing::info!(target: "users", error = %e, "no coordinator session for SCRAM users yet; retrying");
                rt.sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let session = Session {
            rt: rt.clone(),
            client,
            sasl: sasl.clone(),
            admin: admin.clone(),
            refresh_ms,
        };
        session.run().await;
        tracing::warn!(target: "users", "SCRAM users' coordinator session ended; opening a new one");
    }
}

struct Session<R: Runtime> {
    rt: R,
    client: CoordClient<R>,
    sasl: Rc<SaslConfig>,
    admin: UserAdmin,
    refresh_ms: u64,
}

impl<R: Runtime> Session<R> {
    async fn run(&self) {
        for parent in users::parent_paths() {
            loop {
                match self.client.create(parent, b"", CreateMode::Persistent).await {
                    Ok(_) | Err(CoordError::Tree(TreeError::NodeExists)) => break,
                    Err(e) if fatal(&e) => return,
                    Err(_) => self.rt.sleep(Duration::from_millis(100)).await,
                }
            }
        }
        loop {
            let servers = self.client.server_changes();
            match self.scan().await {
                Ok(stored) => {
                    let n = stored.len();
                    if self.sasl.replace_stored_users(stored) {
                        tracing::info!(target: "users", users = n, "SCRAM users updated from the coordinator");
                    }
                }
                Err(e) if fatal(&e) => return,
                Err(e) => {
                    tracing::debug!(target: "users", error = %e, "reading SCRAM users failed; retrying");
                    self.rt.sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
            let popped = self.admin.0.borrow_mut().pop_front();
            if let Some(queued) = popped {
                let mut answer = Vec::with_capacity(queued.job.len());
                for (user, changes) in &queued.job {
                    answer.push(self.update(user, changes).await);
                }
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

    /// Waits for a watch, a job, a change of coordinator server, or `refresh_ms`.
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

    /// Every stored user, leaving watches on the directory and each znode read.
    async fn scan(&self) -> Result<StoredUsers, CoordError> {
        let mut out = StoredUsers::new();
        let children = match self.client.children(users::USERS_ROOT, true, true).await {
            Ok(c) => c,
            Err(CoordError::Tree(TreeError::NoNode)) => return Ok(out),
            Err(e) => return Err(e),
        };
        for child in children {
            let Some(user) = users::user_of(&child) else {
                tracing::warn!(target: "users", %child, "ignoring a user znode with a bad name");
                continue;
            };
            let path = users::user_path(&user);
            let data = match self.client.get(&path, true, false).await {
                Ok((data, _)) => data,
                Err(CoordError::Tree(TreeError::NoNode)) => continue,
                Err(e) => return Err(e),
            };
            match users::decode_user(&data) {
                Some(creds) if !creds.is_empty() => {
                    out.insert(user, creds);
                }
                Some(_) => {}
                None => tracing::warn!(target: "users", %path, "ignoring an undecodable user znode"),
            }
        }
        Ok(out)
    }

    /// Read-modify-write of one user's znode by compare-and-set; an emptied znode is deleted.
    async fn update(&self, user: &str, changes: &[Change]) -> Result<(), Failure> {
        let path = users::user_path(user);
        for _ in 0..CAS_ATTEMPTS_MAX {
            let current = match self.client.get(&path, false, true).await {
                Ok((data, stat)) => Some((
                    users::decode_user(&data)
                        .ok_or((ErrorCode::UnknownServerError, format!("{path} is undecodable")))?,
                    stat.version,
                )),
                Err(CoordError::Tree(TreeError::NoNode)) => None,
                Err(e) if fatal(&e) => return Err(coord_failure(&e)),
                Err(_) => continue,
            };
            let before = current.as_ref().map(|(c, _)| c.clone()).unwrap_or_default();
            let mut after = before.clone();
            users::apply(&mut after, changes)?;
            if after == before {
                return Ok(());
            }
            let written = match (current, after.is_empty()) {
                (None, _) => self
                    .client
                    .create(&path, &users::encode_user(&after), CreateMode::Persistent)
                    .await
                    .map(|_| ()),
                (Some((_, version)), false) => self
                    .client
                    .set_data(&path, &users::encode_user(&after), Some(version))
                    .await
                    .map(|_| ()),
                (Some((_, version)), true) => self.client.delete(&path, Some(version)).await,
            };
            match written {
                Ok(()) => return Ok(()),
                Err(e) if fatal(&e) => return Err(coord_failure(&e)),
                // A clash or an unknown outcome: read again. An applied upsertion then shows as
                // "nothing to change"; an applied deletion as RESOURCE_NOT_FOUND, as a retried
                // deletion would in Kafka.
                Err(_) => continue,
            }
        }
        Err((
            ErrorCode::UnknownServerError,
            format!("{path}: too many concurrent updates"),
        ))
    }
}
