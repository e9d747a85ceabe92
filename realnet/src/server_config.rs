//! `--config FILE` for `gregor broker` and `gregor coordinator`: a TOML file whose keys are Kafka's
//! server.properties names, written either quoted (`"broker.id" = 1`) or as TOML's dotted keys
//! (`broker.id = 1`, which TOML reads as nested tables; both are flattened back to the dotted
//! name). Unknown keys and bad values are errors naming the file and the key: a typo must not be
//! silently ignored by a server that then runs with a default.
//!
//! Broker keys: `broker.id`, `listeners` (`host:port`, `PROTOCOL://host:port` or `NAME://host:port`
//! with `listener.security.protocol.map` = `NAME:PROTOCOL`; one listener; PLAINTEXT, SSL,
//! SASL_PLAINTEXT or SASL_SSL), the TLS keys `ssl.certificate.location`, `ssl.key.location`,
//! `ssl.ca.location`, `ssl.client.auth` (see [`tls_settings`]), the SASL keys `sasl.enabled.mechanisms`, `sasl.plain.users`,
//! `sasl.inter.broker.username`, `sasl.inter.broker.password`,
//! `connection.failed.authentication.delay.ms` (see [`sasl_config`]),
//! `advertised.host.name`, `log.dirs` (one directory), `zookeeper.connect` (the coordinators,
//! `host:port,host:port`), `zookeeper.session.timeout.ms`, `replica.lag.time.max.ms`,
//! `min.insync.replicas`, `num.partitions`, and the log defaults `log.retention.ms`,
//! `log.retention.bytes`, `log.segment.bytes`, `log.flush.interval.messages`,
//! `log.flush.interval.ms`. Coordinator keys: `node.id`, `controller.quorum.voters`
//! (`1@host:port,2@host:port,...`, KRaft's spelling), `log.dirs`. Both: `coordinator.auth.secret.file`
//! (see [`coordinator_secret`]).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context};
use gregor_core::coord::ClusterSecret;
use gregor_core::security::scram::{self, ScramCredential};
use gregor_core::security::{Mechanism, SaslConfig, SaslCredentials, SecurityProtocol};

/// A config file's keys, flattened to dotted names, values as text.
#[derive(Debug, Default)]
pub struct ServerConfig {
    pub file: String,
    values: BTreeMap<String, String>,
}

fn flatten(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, String>) -> anyhow::Result<()> {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out)?,
            toml::Value::String(s) => {
                out.insert(key, s.clone());
            }
            toml::Value::Integer(i) => {
                out.insert(key, i.to_string());
            }
            toml::Value::Boolean(b) => {
                out.insert(key, b.to_string());
            }
            other => bail!("{key}: {} values are not accepted", other.type_str()),
        }
    }
    Ok(())
}

impl ServerConfig {
    pub fn load(path: &Path, allowed: &[&str]) -> anyhow::Result<ServerConfig> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {file}"))?;
        Self::parse(&text, &file, allowed)
    }

    pub fn parse(text: &str, file: &str, allowed: &[&str]) -> anyhow::Result<ServerConfig> {
        let table: toml::Table = text.parse().with_context(|| format!("{file} is not valid TOML"))?;
        let mut values = BTreeMap::new();
        flatten("", &table, &mut values).with_context(|| file.to_string())?;
        for key in values.keys() {
            if !allowed.contains(&key.as_str()) {
                bail!("{file}: unknown key {key:?} (known: {})", allowed.join(", "));
            }
        }
        Ok(ServerConfig {
            file: file.to_string(),
            values,
        })
    }

    pub fn text(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    pub fn number<T: std::str::FromStr>(&self, key: &str) -> anyhow::Result<Option<T>> {
        self.text(key)
            .map(|v| {
                v.trim()
                    .parse::<T>()
                    .map_err(|_| anyhow::anyhow!("{}: {key}: {v:?} is not a valid number", self.file))
            })
            .transpose()
    }

    /// The log defaults, in the topic-level names `LogConfig::apply` takes.
    pub fn log_overrides(&self) -> Vec<(&'static str, &str)> {
        [
            ("log.retention.ms", "retention.ms"),
            ("log.retention.bytes", "retention.bytes"),
            ("log.segment.bytes", "segment.bytes"),
            ("log.flush.interval.messages", "flush.messages"),
            ("log.flush.interval.ms", "flush.ms"),
        ]
        .into_iter()
        .filter_map(|(server, topic)| self.text(server).map(|v| (topic, v)))
        .collect()
    }
}

/// `PLAINTEXT://host:port` or `host:port` -> `host:port`.
pub fn listener_address(listeners: &str) -> anyhow::Result<String> {
    Ok(listener(listeners, None)?.0)
}

/// One listener: `host:port` (PLAINTEXT), `PROTOCOL://host:port`, or `NAME://host:port` with
/// `NAME:PROTOCOL` in `listener.security.protocol.map` (`map`), as Kafka spells them. Gives the
/// address and its security protocol.
pub fn listener(listeners: &str, map: Option<&str>) -> anyhow::Result<(String, SecurityProtocol)> {
    let one = listeners.trim();
    if one.contains(',') {
        bail!("listeners: {one:?}: one listener only");
    }
    let Some((name, addr)) = one.split_once("://") else {
        return Ok((one.to_string(), SecurityProtocol::Plaintext));
    };
    let mapped = map.into_iter().flat_map(|m| m.split(',')).find_map(|entry| {
        let (n, p) = entry.trim().split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| p.trim())
    });
    let protocol = match mapped {
        Some(p) => SecurityProtocol::parse(p)
            .with_context(|| format!("listener.security.protocol.map: {p:?} is not a security protocol"))?,
        None => SecurityProtocol::parse(name).with_context(|| {
            format!("listeners: {name:?} is neither a security protocol nor in listener.security.protocol.map")
        })?,
    };
    Ok((addr.to_string(), protocol))
}

/// The TLS side of a broker whose listener is SSL or SASL_SSL (`None` otherwise): the listener
/// serves `ssl.certificate.location` + `ssl.key.location` (PEM), and asks clients for a
/// certificate chaining to `ssl.ca.location` when `ssl.client.auth = required` (default `none`).
/// Its replica fetchers reach the other brokers' listeners over TLS too, trusting
/// `ssl.ca.location` and presenting the broker's own certificate; the coordinators
/// (`coordinators`) listen in plaintext and are reached without TLS. Any unreadable or
/// mismatched file fails startup with its name.
pub fn tls_settings(
    file: &ServerConfig,
    protocol: SecurityProtocol,
    coordinators: &[String],
) -> anyhow::Result<Option<crate::tls::TlsSettings>> {
    let path = |k: &str| file.text(k).map(|v| Path::new(v.trim()).to_path_buf());
    if !protocol.uses_tls() {
        if let Some(k) = ["ssl.certificate.location", "ssl.key.location", "ssl.client.auth"]
            .into_iter()
            .find(|k| file.text(k).is_some())
        {
            tracing::warn!(
                "{}: {k} is set but the listener is {}: ignored",
                file.file,
                protocol.name()
            );
        }
        return Ok(None);
    }
    let cert = path("ssl.certificate.location").with_context(|| {
        format!(
            "{}: a {} listener needs ssl.certificate.location",
            file.file,
            protocol.name()
        )
    })?;
    let key = path("ssl.key.location")
        .with_context(|| format!("{}: a {} listener needs ssl.key.location", file.file, protocol.name()))?;
    let ca = path("ssl.ca.location");
    let client_auth = match file.text("ssl.client.auth").map(str::trim) {
        None | Some("none") => false,
        Some("required") => true,
        Some(other) => bail!(
            "{}: ssl.client.auth must be required or none, not {other:?} (requested is not supported)",
            file.file
        ),
    };
    let server = crate::tls::server_config(&cert, &key, ca.as_deref(), client_auth)
        .with_context(|| format!("{}: the TLS listener", file.file))?;
    let client = match &ca {
        Some(ca) => Some(
            crate::tls::client_config(ca, Some((&cert, &key)))
                .with_context(|| format!("{}: the inter-broker TLS client", file.file))?,
        ),
        None => {
            tracing::warn!(
                "TLS listener without ssl.ca.location: replica fetchers cannot verify the other brokers and will not connect"
            );
            None
        }
    };
    Ok(Some(crate::tls::TlsSettings {
        server: Some(server),
        client,
        plaintext_addrs: coordinators.iter().cloned().collect(),
    }))
}

/// The SASL settings of a SASL listener: `sasl.enabled.mechanisms` (default PLAIN),
/// `sasl.plain.users` (`name:password,name:password`, Kafka's JAAS `user_NAME="password"`;
/// a password cannot hold a comma), `sasl.scram.users` (same form; stored salted, see below),
/// `connection.failed.authentication.delay.ms` (default 100).
pub fn sasl_config(file: &ServerConfig) -> anyhow::Result<SaslConfig> {
    let mut users = BTreeMap::new();
    for entry in file.text("sasl.plain.users").unwrap_or_default().split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let Some((user, password)) = entry.split_once(':') else {
            bail!("{}: sasl.plain.users: an entry is not name:password", file.file);
        };
        users.insert(user.trim().to_string(), password.to_string());
    }
    let mut config = SaslConfig::plain(users);
    if let Some(list) = file.text("sasl.enabled.mechanisms") {
        config.mechanisms = list
            .split(',')
            .map(|m| {
                Mechanism::parse(m).with_context(|| format!("{}: sasl.enabled.mechanisms: {m:?} unknown", file.file))
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(ms) = file.number("connection.failed.authentication.delay.ms")? {
        config.failed_authentication_delay_ms = ms;
    }
    // SCRAM users from the file: the broker derives salted credentials (a random 16-byte salt,
    // 4096 iterations, both SHA-256 and SHA-512) at start and keeps only those.
    for entry in file.text("sasl.scram.users").unwrap_or_default().split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let Some((user, password)) = entry.split_once(':') else {
            bail!("{}: sasl.scram.users: an entry is not name:password", file.file);
        };
        for m in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            let mut salt = [0u8; 16];
            salt.iter_mut().for_each(|b| *b = crate::runtime::entropy_seed() as u8);
            let credential = ScramCredential::from_password(m, password, &salt, scram::ITERATIONS_MIN);
            config.set_scram(user.trim(), m, Some(credential));
        }
    }
    Ok(config)
}

/// The credentials this broker's replica fetchers log in with on a SASL listener:
/// `sasl.inter.broker.username` / `sasl.inter.broker.password`, PLAIN (Kafka takes them from the
/// JAAS `KafkaServer` section). `None` when not given.
pub fn inter_broker_credentials(file: &ServerConfig) -> Option<SaslCredentials> {
    Some(SaslCredentials {
        mechanism: Mechanism::Plain,
        user: file.text("sasl.inter.broker.username")?.to_string(),
        password: file.text("sasl.inter.broker.password")?.to_string(),
    })
}

pub const BROKER_KEYS: &[&str] = &[
    "broker.id",
    "listeners",
    "advertised.host.name",
    "log.dirs",
    "zookeeper.connect",
    "zookeeper.session.timeout.ms",
    "replica.lag.time.max.ms",
    "follower.replication.throttled.rate",
    "leader.replication.throttled.rate",
    "min.insync.replicas",
    "num.partitions",
    "log.retention.ms",
    "log.retention.bytes",
    "log.segment.bytes",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "offsets.topic.num.partitions",
    "offsets.topic.replication.factor",
    "listener.security.protocol.map",
    "sasl.enabled.mechanisms",
    "sasl.plain.users",
    "sasl.scram.users",
    "sasl.inter.broker.username",
    "sasl.inter.broker.password",
    "connection.failed.authentication.delay.ms",
    "authorizer.class.name",
    "super.users",
    "allow.everyone.if.no.acl.found",
    "auto.leader.rebalance.enable",
    "leader.imbalance.per.broker.percentage",
    "leader.imbalance.check.interval.seconds",
    "auto.rebalance.enable",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.ca.location",
    "ssl.client.auth",
    COORDINATOR_SECRET_KEY,
];

pub const COORDINATOR_KEYS: &[&str] = &[
    "node.id",
    "controller.quorum.voters",
    "log.dirs",
    COORDINATOR_SECRET_KEY,
];

/// The config key naming the cluster secret's file, for coordinators and brokers alike.
pub const COORDINATOR_SECRET_KEY: &str = "coordinator.auth.secret.file";

/// The cluster secret the coordinators and brokers prove to each other on the coordinator port
/// (`gregor_core::coord::auth`): the contents of the file `flag` names, else of the file
/// `coordinator.auth.secret.file` names, with surrounding whitespace trimmed (so `echo` or an
/// editor's final newline does not matter); at least 16 bytes. `None` when neither is given.
/// Errors name the file, never its contents; a file others may read draws a warning.
pub fn coordinator_secret(flag: Option<&Path>, file: &ServerConfig) -> anyhow::Result<Option<ClusterSecret>> {
    let path = match (flag, file.text(COORDINATOR_SECRET_KEY)) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(p)) => Path::new(p.trim()).to_path_buf(),
        (None, None) => return Ok(None),
    };
    let shown = path.display();
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read the cluster secret file {shown}"))?;
    let text = bytes.trim_ascii();
    let secret = ClusterSecret::new(text).map_err(|why| anyhow::anyhow!("{shown}: {why}"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(&path) {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!("{shown}: the cluster secret file is readable by others than its owner (chmod 600 it)");
            }
        }
    }
    Ok(Some(secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_and_quoted_keys_read_alike_and_unknown_keys_are_refused() {
        let dotted = ServerConfig::parse(
            "broker.id = 2\nlisteners = \"PLAINTEXT://127.0.0.1:9093\"\nlog.dirs = \"/tmp/b2\"\n",
            "b.toml",
            BROKER_KEYS,
        )
        .expect("parses");
        let quoted = ServerConfig::parse(
            "\"broker.id\" = 2\n\"listeners\" = \"127.0.0.1:9093\"\n\"log.dirs\" = \"/tmp/b2\"\n",
            "b.toml",
            BROKER_KEYS,
        )
        .expect("parses");
        assert_eq!(dotted.number::<i32>("broker.id").expect("number"), Some(2));
        assert_eq!(quoted.text("log.dirs"), Some("/tmp/b2"));
        assert_eq!(
            listener_address(dotted.text("listeners").expect("set")).expect("addr"),
            "127.0.0.1:9093"
        );
        let e = ServerConfig::parse("broker.idd = 2\n", "b.toml", BROKER_KEYS).expect_err("typo");
        assert!(e.to_string().contains("broker.idd"), "{e}");
        let e = ServerConfig::parse("broker.id = \"two\"\n", "b.toml", BROKER_KEYS)
            .expect("parses")
            .number::<i32>("broker.id")
            .expect_err("not a number");
        assert!(e.to_string().contains("broker.id"), "{e}");
        assert_eq!(
            listener("SASL_SSL://h:1", None).expect("sasl_ssl"),
            ("h:1".to_string(), SecurityProtocol::SaslSsl)
        );
        assert_eq!(
            listener("SASL_PLAINTEXT://h:1", None).expect("sasl"),
            ("h:1".to_string(), SecurityProtocol::SaslPlaintext)
        );
        assert_eq!(
            listener("CLIENT://h:2", Some("INTERNAL:PLAINTEXT, CLIENT:SASL_PLAINTEXT")).expect("mapped"),
            ("h:2".to_string(), SecurityProtocol::SaslPlaintext)
        );
        assert!(listener("CLIENT://h:2", None).is_err());
        let sasl = ServerConfig::parse(
            "\"sasl.plain.users\" = \"alice:a:b, bob:pw\"\n\"sasl.enabled.mechanisms\" = \"PLAIN\"\n",
            "b.toml",
            BROKER_KEYS,
        )
        .expect("parses");
        let c = sasl_config(&sasl).expect("sasl config");
        let scram =
            ServerConfig::parse("\"sasl.scram.users\" = \"carol:pw\"\n", "b.toml", BROKER_KEYS).expect("parses");
        assert_eq!(sasl_config(&scram).expect("scram").scram_users().len(), 2);
        assert_eq!(c.plain_users.get("alice").map(String::as_str), Some("a:b"));
        assert_eq!(c.plain_users.get("bob").map(String::as_str), Some("pw"));
        let bad =
            ServerConfig::parse("\"sasl.enabled.mechanisms\" = \"GSSAPI\"\n", "b.toml", BROKER_KEYS).expect("parses");
        assert!(sasl_config(&bad).is_err());
        assert!(ServerConfig::parse("broker.id = [1]\n", "b.toml", BROKER_KEYS).is_err());
        assert!(ServerConfig::parse("broker.id = \n", "b.toml", BROKER_KEYS).is_err());
    }
}
