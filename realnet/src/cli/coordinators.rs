//! `gregor coordinators list|add|remove`: the coordinator quorum's membership, changed one node at
//! a time (KIP-853's AddVoter/RemoveVoter over `CoordClient::membership`). Unlike the other client
//! subcommands this one speaks to the coordinators, not to a broker.
//!
//! - `list` prints the voters, the learners and the address of the leader that answered.
//! - `add ID=HOST:PORT` first records the address in the tree (`/coordinators/ID`, so every member
//!   can reach the new node: see `gregor_core::coord::server`), then adds the node as a learner
//!   and promotes it once the leader reports it caught up (bounded by `--catch-up-timeout-ms`);
//!   `--learner` stops after the first step. The new process is started beforehand with
//!   `gregor coordinator --join`.
//! - `remove ID` removes a voter or learner (a leader removing itself steps down).
//!
//! Contract: input is checked against the membership the leader reports before anything is
//! proposed (an unknown id, the last voter, a node already a member, a malformed address), and
//! each refusal names its reason. The leader accepts one change at a time: a change refused
//! because another is in progress (or a learner is not caught up yet) is retried by the client
//! within its attempts and then reported. A change whose answer was lost is re-read, not guessed.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use gregor_core::consensus::{MembershipChange, NodeId};
use gregor_core::coord::client::{CoordClient, CoordClientConfig, CoordError};
use gregor_core::coord::server::{is_host_port, COORDINATOR_ADDRS_PATH};
use gregor_core::coord::tree::{CreateMode, TreeError};
use gregor_core::runtime::Runtime;

use crate::runtime::RealRuntime;
use crate::server_config::{coordinator_secret, ServerConfig};

/// How long one membership request may wait (the leader answers once the change committed).
const REQUEST_TIMEOUT_MS: u64 = 5_000;
/// Pause between promotion attempts while the learner catches up.
const PROMOTE_RETRY_MS: u64 = 300;

/// Where the coordinators are and how to prove the cluster secret.
#[derive(Args, Debug)]
pub struct CoordinatorsArgs {
    /// The coordinators' addresses (`host:port`), comma-separated (`zookeeper.connect`).
    #[arg(long, value_delimiter = ',', required = true)]
    pub coordinators: Vec<String>,
    /// A file holding the cluster secret, when the coordinators have one.
    #[arg(long)]
    pub coordinator_auth_secret_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: CoordinatorsCommand,
}

#[derive(Subcommand, Debug)]
pub enum CoordinatorsCommand {
    /// Prints the voters, the learners and the leader's address.
    List,
    /// Adds a coordinator (started with `gregor coordinator --join`) as a learner, then promotes it.
    Add(AddArgs),
    /// Removes a voter or learner.
    Remove(RemoveArgs),
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// The new node as `ID=HOST:PORT` (its `--peers` entry).
    pub node: String,
    /// Stop once it is a learner (promote later with another `add`).
    #[arg(long)]
    pub learner: bool,
    /// How long to wait for the learner to catch up before giving up on the promotion.
    #[arg(long, default_value_t = 60_000)]
    pub catch_up_timeout_ms: u64,
}

#[derive(Args, Debug)]
pub struct RemoveArgs {
    /// The node id to remove.
    pub id: u64,
}

/// `ID=HOST:PORT`, checked.
pub fn parse_node(text: &str) -> anyhow::Result<(NodeId, String)> {
    let (id, addr) = text
        .split_once('=')
        .with_context(|| format!("{text:?} is not ID=HOST:PORT"))?;
    let id: u64 = id
        .trim()
        .parse()
        .with_context(|| format!("{text:?}: {id:?} is not a node id"))?;
    if id == 0 {
        bail!("{text:?}: node ids start at 1");
    }
    let addr = addr.trim();
    if !is_host_port(addr) {
        bail!("{text:?}: {addr:?} is not HOST:PORT with a port 1 to 65535");
    }
    Ok((NodeId(id), addr.to_string()))
}

fn ids(v: &[NodeId]) -> String {
    v.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(",")
}

fn explain(e: CoordError, what: &str) -> anyhow::Error {
    match e {
        CoordError::Unavailable => anyhow::anyhow!(
            "{what}: no leader accepted it in time (another membership change may be in progress, or the \
             learner is not caught up, or no coordinator leader is reachable); `gregor coordinators list` \
             shows the membership"
        ),
        CoordError::Unknown => {
            anyhow::anyhow!("{what}: the answer was lost; `gregor coordinators list` shows whether it happened")
        }
        CoordError::Tree(TreeError::BadArguments) => anyhow::anyhow!("{what}: the leader refused the change"),
        other => anyhow::anyhow!("{what}: {other}"),
    }
}

pub fn run(args: CoordinatorsArgs) -> anyhow::Result<()> {
    for a in &args.coordinators {
        if !is_host_port(a) {
            bail!("--coordinators {a:?} is not HOST:PORT");
        }
    }
    if let CoordinatorsCommand::Add(add) = &args.command {
        parse_node(&add.node)?;
    }
    let secret = coordinator_secret(args.coordinator_auth_secret_file.as_deref(), &ServerConfig::default())?;
    let mut config = CoordClientConfig::new(args.coordinators.clone());
    config.request_timeout_ms = REQUEST_TIMEOUT_MS;
    config.secret = secret;
    let rt = super::client_runtime()?;
    super::run(async move {
        let client = CoordClient::connect(rt.clone(), config)
            .await
            .map_err(|e| anyhow::anyhow!("cannot open a session with the coordinators: {e}"))?;
        let result = command(&rt, &client, &args.command).await;
        // Best effort: an unclosed session expires on its own.
        let _ = client.close().await;
        result
    })
}

async fn command(
    rt: &RealRuntime,
    client: &CoordClient<RealRuntime>,
    command: &CoordinatorsCommand,
) -> anyhow::Result<()> {
    let (voters, learners) = client
        .membership(None)
        .await
        .map_err(|e| explain(e, "cannot read the membership"))?;
    match command {
        CoordinatorsCommand::List => {
            println!("voters: {}", ids(&voters));
            println!("learners: {}", ids(&learners));
            println!("leader: {}", client.server().unwrap_or_else(|| "unknown".into()));
            Ok(())
        }
        CoordinatorsCommand::Remove(r) => {
            let id = NodeId(r.id);
            if !voters.contains(&id) && !learners.contains(&id) {
                bail!(
                    "coordinator {} is not a member (voters {}, learners {})",
                    r.id,
                    ids(&voters),
                    ids(&learners)
                );
            }
            if voters == [id] {
                bail!("coordinator {} is the last voter: add another before removing it", r.id);
            }
            change(client, MembershipChange::Remove(id), &format!("remove {}", r.id)).await?;
            // Best effort: a stale entry only names a node no member sends to.
            let _ = client.delete(&format!("{COORDINATOR_ADDRS_PATH}/{}", r.id), None).await;
            Ok(())
        }
        CoordinatorsCommand::Add(a) => {
            let (id, addr) = parse_node(&a.node)?;
            if voters.contains(&id) {
                bail!("coordinator {} is already a voter", id.0);
            }
            if !learners.contains(&id) {
                record_address(client, id, &addr).await?;
                change(
                    client,
                    MembershipChange::AddLearner(id),
                    &format!("add {} as a learner", id.0),
                )
                .await?;
            }
            if a.learner {
                return Ok(());
            }
            promote(rt, client, id, a.catch_up_timeout_ms).await
        }
    }
}

/// Writes `/coordinators/ID = HOST:PORT` (creating the parent), so every member learns it.
async fn record_address(client: &CoordClient<RealRuntime>, id: NodeId, addr: &str) -> anyhow::Result<()> {
    let what = format!("record coordinator {}'s address", id.0);
    match client.create(COORDINATOR_ADDRS_PATH, b"", CreateMode::Persistent).await {
        Ok(_) | Err(CoordError::Tree(TreeError::NodeExists)) => {}
        Err(e) => return Err(explain(e, &what)),
    }
    let path = format!("{COORDINATOR_ADDRS_PATH}/{}", id.0);
    match client.create(&path, addr.as_bytes(), CreateMode::Persistent).await {
        Ok(_) => Ok(()),
        Err(CoordError::Tree(TreeError::NodeExists)) => {
            client
                .set_data(&path, addr.as_bytes(), None)
                .await
                .map_err(|e| explain(e, &what))?;
            Ok(())
        }
        Err(e) => Err(explain(e, &what)),
    }
}

/// Proposes `change` and prints the membership once it committed; a lost answer is re-read.
async fn change(client: &CoordClient<RealRuntime>, change: MembershipChange, what: &str) -> anyhow::Result<()> {
    let (voters, learners) = match client.membership(Some(change)).await {
        Ok(m) => m,
        Err(CoordError::Unknown) => client
            .membership(None)
            .await
            .map_err(|e| explain(e, "cannot read the membership"))?,
        Err(e) => return Err(explain(e, what)),
    };
    let done = match change {
        MembershipChange::AddLearner(id) => learners.contains(&id),
        MembershipChange::PromoteLearner(id) => voters.contains(&id),
        MembershipChange::Remove(id) => !voters.contains(&id) && !learners.contains(&id),
    };
    if !done {
        bail!(
            "{what}: not done (voters {}, learners {}); try again",
            ids(&voters),
            ids(&learners)
        );
    }
    println!("{what}: done; voters: {}; learners: {}", ids(&voters), ids(&learners));
    Ok(())
}

/// Promotes learner `id` once the leader reports it caught up; bounded by `timeout_ms`.
async fn promote(
    rt: &RealRuntime,
    client: &CoordClient<RealRuntime>,
    id: NodeId,
    timeout_ms: u64,
) -> anyhow::Result<()> {
    let what = format!("promote {} to voter", id.0);
    let deadline = rt.monotonic_ms() + timeout_ms;
    loop {
        match client.membership(Some(MembershipChange::PromoteLearner(id))).await {
            Ok((voters, learners)) if voters.contains(&id) => {
                println!("{what}: done; voters: {}; learners: {}", ids(&voters), ids(&learners));
                return Ok(());
            }
            Ok(_) | Err(CoordError::Unavailable | CoordError::Unknown) => {}
            Err(e) => return Err(explain(e, &what)),
        }
        let (voters, learners) = client
            .membership(None)
            .await
            .map_err(|e| explain(e, "cannot read the membership"))?;
        if voters.contains(&id) {
            println!("{what}: done; voters: {}; learners: {}", ids(&voters), ids(&learners));
            return Ok(());
        }
        if !learners.contains(&id) {
            bail!(
                "{what}: it is no longer a learner (voters {}, learners {})",
                ids(&voters),
                ids(&learners)
            );
        }
        if rt.monotonic_ms() >= deadline {
            bail!(
                "{what}: still a learner after {timeout_ms} ms (not caught up, or another change in progress); \
                 run `gregor coordinators add` again to retry the promotion"
            );
        }
        rt.sleep(Duration::from_millis(PROMOTE_RETRY_MS)).await;
    }
}
