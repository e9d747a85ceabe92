//! `gregor consume TOPIC`: every partition of the topic read with core's [`Consumer`] (no
//! group: positions are this process's), each record's value printed as a line. With `--group`,
//! as a member of that consumer group ([`GroupConsumer`]): partitions as assigned, starting at
//! the group's committed offsets, and the offset after each printed record committed (commit
//! after print: at least once) after every poll and on exit. From the end of
//! each partition unless `--from-beginning`. Stops after `--max-messages`, or when no record has
//! come for `--timeout-ms`; without either it runs until killed, like Kafka's console consumer.

use std::io::Write;

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use gregor_core::client::consumer::{Consumer, ConsumerConfig};
use gregor_core::client::group::{GroupConfig, GroupConsumer, NoListener, TopicPartition};
use gregor_core::runtime::Runtime;

use super::ConnectArgs;

#[derive(clap::Args, Debug)]
pub struct ConsumeArgs {
    pub topic: String,
    /// Start at each partition's first record (default: only new records).
    #[arg(long)]
    pub from_beginning: bool,
    /// Stop after this many records.
    #[arg(long)]
    pub max_messages: Option<u64>,
    /// Stop when no record has arrived for this long.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Print each record's key before its value, separated by a tab.
    #[arg(long)]
    pub print_key: bool,
    /// Consume as a member of this consumer group, committing what was printed.
    #[arg(long)]
    pub group: Option<String>,
}

pub fn run(connect: &ConnectArgs, args: ConsumeArgs) -> anyhow::Result<()> {
    let rt = super::client_runtime()?;
    let mut cluster = connect.cluster(&rt)?;
    if let Some(group) = args.group.clone() {
        return super::run(consume_in_group(rt, cluster, group, args));
    }
    super::run(async move {
        let partitions = super::partition_count(&mut cluster, &args.topic).await?;
        let config = ConsumerConfig {
            reset_to_earliest: args.from_beginning,
            ..ConsumerConfig::default()
        };
        let mut consumer = Consumer::new(cluster, config, &args.topic);
        for p in 0..partitions {
            consumer.assign(p, None);
        }
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let mut printed = 0u64;
        let mut last_record_ms = rt.monotonic_ms();
        loop {
            if args.max_messages.is_some_and(|max| printed >= max) {
                break;
            }
            if args
                .timeout_ms
                .is_some_and(|t| rt.monotonic_ms().saturating_sub(last_record_ms) >= t)
            {
                break;
            }
            let polled = match consumer.poll().await {
                Ok(polled) => polled,
                Err(e) if e.is_retriable() => {
                    tracing::debug!(error = %e, "poll failed; retrying");
                    consumer.cluster.invalidate(&args.topic);
                    rt.sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
                Err(e) => bail!("reading {}: {e}", args.topic),
            };
            if !polled.records.is_empty() {
                last_record_ms = rt.monotonic_ms();
            }
            for r in polled.records {
                if args.max_messages.is_some_and(|max| printed >= max) {
                    break;
                }
                if args.print_key {
                    out.write_all(r.key.as_deref().unwrap_or(b"null"))?;
                    out.write_all(b"\t")?;
                }
                out.write_all(r.value.as_deref().unwrap_or(b"null"))?;
                out.write_all(b"\n")?;
                printed += 1;
            }
            out.flush().context("cannot write standard output")?;
        }
        eprintln!("consumed {printed} records from {}", args.topic);
        Ok(())
    })
}

async fn consume_in_group(
    rt: crate::runtime::RealRuntime,
    cluster: gregor_core::client::Cluster<crate::runtime::RealRuntime>,
    group: String,
    args: ConsumeArgs,
) -> anyhow::Result<()> {
    let mut config = GroupConfig::new(&group);
    config.consumer.reset_to_earliest = args.from_beginning;
    // Only what was printed is committed, below.
    config.enable_auto_commit = false;
    let mut consumer = GroupConsumer::new(cluster, config);
    consumer.subscribe(&[args.topic.as_str()], Box::new(NoListener));
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut printed = 0u64;
    let mut last_record_ms = rt.monotonic_ms();
    let result = loop {
        if args.max_messages.is_some_and(|max| printed >= max) {
            break Ok(());
        }
        if args
            .timeout_ms
            .is_some_and(|t| rt.monotonic_ms().saturating_sub(last_record_ms) >= t)
        {
            break Ok(());
        }
        let polled = match consumer.poll().await {
            Ok(polled) => polled,
            Err(e) if e.is_retriable() => {
                tracing::debug!(error = %e, "poll failed; retrying");
                rt.sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
            Err(e) => break Err(anyhow::anyhow!("reading {} in group {group}: {e}", args.topic)),
        };
        if !polled.records.is_empty() {
            last_record_ms = rt.monotonic_ms();
        }
        let mut next: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        for r in polled.records {
            if args.max_messages.is_some_and(|max| printed >= max) {
                break;
            }
            if args.print_key {
                out.write_all(r.record.key.as_deref().unwrap_or(b"null"))?;
                out.write_all(b"\t")?;
            }
            out.write_all(r.record.value.as_deref().unwrap_or(b"null"))?;
            out.write_all(b"\n")?;
            printed += 1;
            next.insert(TopicPartition::new(&r.topic, r.record.partition), r.record.offset + 1);
        }
        out.flush().context("cannot write standard output")?;
        if !next.is_empty() {
            if let Err(e) = consumer.commit_sync(&next).await {
                eprintln!("warning: commit failed (records may be read again): {e}");
            }
        }
    };
    consumer.close().await;
    eprintln!("consumed {printed} records from {} in group {group}", args.topic);
    result
}
