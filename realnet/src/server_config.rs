//! `--config FILE` for `gregor broker` and `gregor coordinator`: a TOML file whose keys are Kafka's
//! server.properties names, written either quoted (`"broker.id" = 1`) or as TOML's dotted keys
//! (`broker.id = 1`, which TOML reads as nested tables; both are flattened back to the dotted
//! name). Unknown keys and bad values are errors naming the file and the key: a typo must not be
//! silently ignored by a server that then runs with a default.
//!
//! Broker keys: `broker.id`, `listeners` (`PLAINTEXT://host:port` or `host:port`; one listener),
//! `advertised.host.name`, `log.dirs` (one directory), `zookeeper.connect` (the coordinators,
//! `host:port,host:port`), `zookeeper.session.timeout.ms`, `replica.lag.time.max.ms`,
//! `min.insync.replicas`, `num.partitions`, and the log defaults `log.retention.ms`,
//! `log.retention.bytes`, `log.segment.bytes`, `log.flush.interval.messages`,
//! `log.flush.interval.ms`. Coordinator keys: `node.id`, `controller.quorum.voters`
//! (`1@host:port,2@host:port,...`, KRaft's spelling), `log.dirs`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context};

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
    let one = listeners.trim();
    if one.contains(',') {
        bail!("listeners: {one:?}: one listener only (security protocols come with issue #7)");
    }
    let addr = match one.split_once("://") {
        Some((protocol, addr)) if protocol.eq_ignore_ascii_case("PLAINTEXT") => addr,
        Some((protocol, _)) => bail!("listeners: protocol {protocol:?} is not supported yet; use PLAINTEXT"),
        None => one,
    };
    Ok(addr.to_string())
}

pub const BROKER_KEYS: &[&str] = &[
    "broker.id",
    "listeners",
    "advertised.host.name",
    "log.dirs",
    "zookeeper.connect",
    "zookeeper.session.timeout.ms",
    "replica.lag.time.max.ms",
    "min.insync.replicas",
    "num.partitions",
    "log.retention.ms",
    "log.retention.bytes",
    "log.segment.bytes",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "offsets.topic.num.partitions",
    "offsets.topic.replication.factor",
    "auto.leader.rebalance.enable",
];

pub const COORDINATOR_KEYS: &[&str] = &["node.id", "controller.quorum.voters", "log.dirs"];

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
        assert!(listener_address("SASL_SSL://h:1").is_err());
        assert!(ServerConfig::parse("broker.id = [1]\n", "b.toml", BROKER_KEYS).is_err());
        assert!(ServerConfig::parse("broker.id = \n", "b.toml", BROKER_KEYS).is_err());
    }
}
