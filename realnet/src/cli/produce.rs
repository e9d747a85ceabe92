//! `gregor produce TOPIC`: one record per line of standard input (the line without its newline
//! is the value), sent with core's [`Producer`]. Lines already buffered are sent together as one
//! batch (at most `BATCH_RECORDS_MAX`), so piped input is batched and typed input goes out line
//! by line. With `--key` every record carries that key and goes to the partition Kafka's default
//! partitioner picks for it (murmur2); without, each batch goes to the next partition in turn.
//! At end of input it prints, per partition, the offsets acknowledged; a failed send stops the
//! command with an error saying how many records were acknowledged before it.

use std::collections::BTreeMap;
use std::io::BufRead;

use anyhow::{bail, Context};
use gregor_core::client::producer::{Producer, ProducerConfig, SendError};
use gregor_core::record::NewRecord;

use super::ConnectArgs;

/// Records in one batch at most.
pub const BATCH_RECORDS_MAX: usize = 1_000;
/// A batch's value bytes at most, below Kafka's default `max.message.bytes` (1 MiB).
pub const BATCH_BYTES_MAX: usize = 512 * 1024;

#[derive(clap::Args, Debug)]
pub struct ProduceArgs {
    pub topic: String,
    /// A key for every record.
    #[arg(long)]
    pub key: Option<String>,
    /// all (idempotent), 1 or 0.
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    pub acks: i16,
}

pub fn parse_acks(s: &str) -> Result<i16, String> {
    match s {
        "all" | "-1" => Ok(-1),
        "1" => Ok(1),
        "0" => Ok(0),
        _ => Err(format!("{s:?}: acks must be all, 1 or 0")),
    }
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), so a keyed record lands on
/// the partition a Java client would pick.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = SEED ^ (data.len() as u32);
    let chunks = data.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a keyed record among `partitions`, as Kafka's default partitioner.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

/// Reads the lines already buffered (at least one, waiting for it): `None` at end of input.
fn next_batch(input: &mut impl BufRead) -> anyhow::Result<Option<Vec<Vec<u8>>>> {
    let mut lines = Vec::new();
    let mut bytes = 0;
    loop {
        let mut line = Vec::new();
        let n = input
            .read_until(b'\n', &mut line)
            .context("cannot read standard input")?;
        if n == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        }
        bytes += line.len();
        lines.push(line);
        if lines.len() >= BATCH_RECORDS_MAX || bytes >= BATCH_BYTES_MAX || input.fill_buf()?.is_empty() {
            break;
        }
    }
    Ok((!lines.is_empty()).then_some(lines))
}

pub fn run(connect: &ConnectArgs, args: ProduceArgs) -> anyhow::Result<()> {
    let rt = super::client_runtime()?;
    let mut cluster = connect.cluster(&rt)?;
    super::run(async move {
        // Like Kafka's console producer, a missing topic is created (when the broker allows).
        let partitions = match cluster.refresh(&args.topic).await {
            Ok(layout) => layout.leaders.len() as i32,
            Err(e) => bail!("topic {}: {e}", args.topic),
        };
        if partitions < 1 {
            bail!("topic {} has no partitions", args.topic);
        }
        let config = ProducerConfig {
            acks: args.acks,
            enable_idempotence: args.acks == -1,
            delivery_timeout_ms: connect.request_timeout_ms.saturating_mul(2),
            ..ProducerConfig::default()
        };
        let mut producer = Producer::new(cluster, config);
        let key = args.key.as_ref().map(|k| k.as_bytes().to_vec());
        let fixed = key.as_deref().map(|k| partition_for_key(k, partitions));
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        let mut next_partition = 0;
        let mut acked: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
        let mut sent = 0u64;
        while let Some(lines) = next_batch(&mut input)? {
            let partition = fixed.unwrap_or_else(|| {
                next_partition = (next_partition + 1) % partitions;
                next_partition
            });
            let now = now_ms();
            let records: Vec<NewRecord> = lines
                .into_iter()
                .map(|value| NewRecord {
                    timestamp: now,
                    key: key.clone(),
                    value: Some(value),
                })
                .collect();
            let count = records.len() as i64;
            match producer.send(&args.topic, partition, &records).await {
                Ok(Some(base)) => {
                    let range = acked.entry(partition).or_insert((base, base));
                    range.1 = base + count - 1;
                }
                Ok(None) => {}
                Err(SendError::Failed(why)) => {
                    bail!("{sent} records acknowledged; then a batch of {count} to partition {partition} was refused: {why}")
                }
                Err(SendError::Unknown(why)) => bail!(
                    "{sent} records acknowledged; then a batch of {count} to partition {partition} may or may not be written: {why}"
                ),
            }
            sent += count as u64;
        }
        let ranges: Vec<String> = acked
            .iter()
            .map(|(p, (first, last))| format!("partition {p}: offsets {first}..={last}"))
            .collect();
        if args.acks == 0 {
            println!("sent {sent} records to {} (acks=0: none acknowledged)", args.topic);
        } else {
            println!("produced {sent} records to {} ({})", args.topic, ranges.join(", "));
        }
        Ok(())
    })
}

/// Wall-clock milliseconds for record timestamps.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_partitioner() {
        // Values from Kafka's UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 3] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
        ];
        for (input, want) in cases {
            assert_eq!(murmur2(input), want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn buffered_lines_form_one_batch_and_end_of_input_is_none() {
        let mut input: &[u8] = b"a\nb\r\nc";
        let batch = next_batch(&mut input).expect("read").expect("a batch");
        assert_eq!(batch, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert!(next_batch(&mut input).expect("read").is_none());
    }
}
