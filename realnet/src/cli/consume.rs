//! `gregor consume TOPIC`: every partition of the topic read with core's [`Consumer`] (no
//! group: positions are this process's), each record's value printed as a line. From the end of
//! each partition unless `--from-beginning`. Stops after `--max-messages`, or when no record has
//! come for `--timeout-ms`; without either it runs until killed, like Kafka's console consumer.

use std::io::Write;

use anyhow::{bail, Context};
use gregor_core::client::consumer::{Consumer, ConsumerConfig};
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
}

pub fn run(connect: &ConnectArgs, args: ConsumeArgs) -> anyhow::Result<()> {
    let rt = super::client_runtime()?;
    let mut cluster = connect.cluster(&rt)?;
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
