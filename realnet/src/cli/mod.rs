//! The `gregor` client subcommands (`topics`, `produce`, `consume`, `groups`, `perf`): thin shells over
//! core's own client ([`gregor_core::client`]) on [`RealRuntime`], speaking only the Kafka wire
//! protocol, so they work against any Kafka-protocol broker at the versions they pick.
//!
//! Contract: each command returns `Err` with a message naming what went wrong (an unknown topic,
//! a refused config, a broker that cannot be reached) and the binary exits non-zero; no input,
//! from the user or from the broker, panics. Every wait is bounded by `--request-timeout-ms` or
//! the command's own limits.

pub mod acls;
pub mod consume;
pub mod coordinators;
pub mod groups;
pub mod partitions;
pub mod perf;
pub mod produce;
pub mod topics;
pub mod users;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use anyhow::{bail, Context};
use gregor_core::client::{ClientConfig, Cluster, METADATA_VERSION};
use gregor_core::protocol::api::metadata::{MetadataRequest, MetadataRequestTopic, MetadataResponse};
use gregor_core::protocol::{Request, Response, Uuid};
use gregor_core::security::{Mechanism, SaslCredentials, SecurityProtocol};

use crate::runtime::{self, RealRuntime};
use crate::tls::TlsSettings;
use crate::FsDisk;

/// Where the broker is and how long to wait for it; shared by every client subcommand.
#[derive(clap::Args, Debug, Clone)]
pub struct ConnectArgs {
    /// A broker to bootstrap from, host:port (a comma-separated list is accepted).
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// How long one request may wait for its response.
    #[arg(long, default_value_t = 30_000)]
    pub request_timeout_ms: u64,
    /// Log in to a SASL listener as this user (`sasl.username`).
    #[arg(long)]
    pub sasl_user: Option<String>,
    /// The SASL password (`sasl.password`); prefer `--command-config`, which keeps it out of
    /// the process list.
    #[arg(long)]
    pub sasl_password: Option<String>,
    /// The SASL mechanism (`sasl.mechanism`; default PLAIN).
    #[arg(long)]
    pub sasl_mechanism: Option<String>,
    /// A client properties file (`key=value` lines, `#` comments), as Kafka's tools take:
    /// `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `sasl.mechanism`,
    /// `sasl.username`, `sasl.password`, and for TLS `ssl.ca.location` (PEM CAs to trust,
    /// required) with optional `ssl.certificate.location` + `ssl.key.location` (mutual TLS).
    /// Flags win.
    #[arg(long)]
    pub command_config: Option<std::path::PathBuf>,
}

impl ConnectArgs {
    pub fn bootstrap(&self) -> anyhow::Result<Vec<String>> {
        let addrs: Vec<String> = self
            .bootstrap_server
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if addrs.is_empty() {
            bail!("--bootstrap-server is empty");
        }
        for a in &addrs {
            let port = a.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
            if !matches!(port, Some(Ok(p)) if p != 0) {
                bail!("--bootstrap-server {a:?} is not host:port");
            }
        }
        Ok(addrs)
    }

    fn properties(&self) -> anyhow::Result<BTreeMap<String, String>> {
        Ok(match &self.command_config {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
                client_properties(&text)
            }
            None => BTreeMap::new(),
        })
    }

    /// The TLS client `--command-config` asks for (`security.protocol` SSL or SASL_SSL);
    /// `None` otherwise.
    pub fn tls(&self) -> anyhow::Result<Option<TlsSettings>> {
        let props = self.properties()?;
        let protocol = props.get("security.protocol").map(|p| p.to_ascii_uppercase());
        if !matches!(protocol.as_deref(), Some("SSL" | "SASL_SSL")) {
            return Ok(None);
        }
        let path = |k: &str| props.get(k).map(std::path::PathBuf::from);
        let ca = path("ssl.ca.location").context("security.protocol SSL/SASL_SSL needs ssl.ca.location")?;
        let identity = match (path("ssl.certificate.location"), path("ssl.key.location")) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => bail!("ssl.certificate.location and ssl.key.location go together"),
        };
        let client = crate::tls::client_config(&ca, identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path())))?;
        Ok(Some(TlsSettings {
            client: Some(client),
            ..TlsSettings::default()
        }))
    }

    /// The SASL login the flags and `--command-config` ask for; `None` for PLAINTEXT.
    pub fn sasl(&self) -> anyhow::Result<Option<SaslCredentials>> {
        let props = self.properties()?;
        let prop = |k: &str| props.get(k).cloned();
        let user = self.sasl_user.clone().or_else(|| prop("sasl.username"));
        let password = self.sasl_password.clone().or_else(|| prop("sasl.password"));
        let mechanism = self.sasl_mechanism.clone().or_else(|| prop("sasl.mechanism"));
        let protocol = prop("security.protocol").unwrap_or_default().to_ascii_uppercase();
        if !protocol.is_empty() && SecurityProtocol::parse(&protocol).is_none() {
            bail!("security.protocol {protocol}: not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL");
        }
        let wants_sasl = user.is_some() || password.is_some() || protocol.starts_with("SASL");
        if !wants_sasl {
            return Ok(None);
        }
        let (Some(user), Some(password)) = (user, password) else {
            bail!("SASL needs both a user and a password (--sasl-user/--sasl-password or sasl.username/sasl.password)");
        };
        let name = mechanism.unwrap_or_else(|| "PLAIN".into());
        let mechanism = Mechanism::parse(&name).with_context(|| format!("unknown SASL mechanism {name:?}"))?;
        Ok(Some(SaslCredentials {
            mechanism,
            user,
            password,
        }))
    }

    /// A client on a fresh runtime (the caller runs it inside [`run`]), over TLS when
    /// `--command-config` asks for it.
    pub fn cluster(&self, rt: &RealRuntime) -> anyhow::Result<Cluster<RealRuntime>> {
        let rt = match self.tls()? {
            Some(tls) => rt.clone().with_tls(tls),
            None => rt.clone(),
        };
        let config = ClientConfig {
            client_id: "gregor-cli".into(),
            request_timeout_ms: self.request_timeout_ms.max(1),
            sasl: self.sasl()?,
            ..ClientConfig::default()
        };
        Ok(Cluster::new(rt, self.bootstrap()?, config))
    }
}

/// `key=value` lines of a Java-style properties file (no escapes or continuations); `#` and `!`
/// start comments.
fn client_properties(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// A runtime for a client: the client touches no disk, but [`RealRuntime`] carries one, so it
/// gets the temporary directory, where it writes nothing.
pub fn client_runtime() -> anyhow::Result<RealRuntime> {
    let disk = FsDisk::open(std::env::temp_dir()).context("cannot open the temporary directory")?;
    Ok(RealRuntime::new(Rc::new(RefCell::new(disk)), runtime::entropy_seed()))
}

/// Runs a client future on a new monoio runtime on this thread.
pub fn run<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    runtime::block_on(f).context("cannot start the I/O runtime")?
}

/// Metadata for `topics` (all when `None`) without creating any.
pub async fn metadata(cluster: &mut Cluster<RealRuntime>, topics: Option<&[&str]>) -> anyhow::Result<MetadataResponse> {
    let request = Request::Metadata(MetadataRequest {
        topics: topics.map(|names| {
            names
                .iter()
                .map(|n| MetadataRequestTopic {
                    topic_id: Uuid::ZERO,
                    name: Some(n.to_string()),
                })
                .collect()
        }),
        allow_auto_topic_creation: false,
        include_cluster_authorized_operations: false,
        include_topic_authorized_operations: false,
    });
    match cluster.call_any(&request, METADATA_VERSION).await {
        Ok(Response::Metadata(m)) => Ok(m),
        Ok(_) => bail!("Metadata answered with another API"),
        Err(e) => Err(anyhow::anyhow!("cannot reach the cluster: {e}")),
    }
}

/// The partition count of an existing `topic`; an error naming it when it does not exist.
pub async fn partition_count(cluster: &mut Cluster<RealRuntime>, topic: &str) -> anyhow::Result<i32> {
    let meta = metadata(cluster, Some(&[topic])).await?;
    let t = meta
        .topics
        .iter()
        .find(|t| t.name.as_deref() == Some(topic))
        .with_context(|| format!("metadata lacks topic {topic}"))?;
    if t.error_code != 0 {
        bail!("topic {topic}: {:?}", gregor_core::client::code(t.error_code));
    }
    if t.partitions.is_empty() {
        bail!("topic {topic} has no partitions");
    }
    Ok(t.partitions.len() as i32)
}
