//! The producer: sends record batches to partition leaders with `acks`, retries with backoff
//! within `delivery.timeout.ms`, and reports each send's outcome honestly: `Acked` (the broker
//! said so), `Failed` (certainly not written: refused before any attempt could have landed), or
//! `Unknown` (an attempt may have been written: a timeout, a lost connection).
//!
//! Not yet here (issue #5): idempotence (producer ids and sequence numbers), `linger.ms` /
//! `batch.size` accumulation and the bounded `buffer.memory`. Without idempotence a retry after
//! an attempt that was written duplicates the record, which the checker reports.

use std::time::Duration;

use crate::protocol::api::produce::{ProducePartition, ProduceRequest, ProduceTopic};
use crate::protocol::{Request, Response};
use crate::record::{build_batch, NewRecord, ProducerFields};
use crate::runtime::Runtime;
use crate::ErrorCode;

use super::{code, ClientError, Cluster, PRODUCE_VERSION};

#[derive(Clone, Debug)]
pub struct ProducerConfig {
    /// `acks`: -1 (all), 0 or 1.
    pub acks: i16,
    /// `retries`
    pub retries: u32,
    /// `delivery.timeout.ms`
    pub delivery_timeout_ms: u64,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: -1,
            retries: i32::MAX as u32,
            delivery_timeout_ms: 120_000,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendError {
    /// Certainly not written.
    Failed(String),
    /// Maybe written: an attempt's outcome is unknown.
    Unknown(String),
}

pub struct Producer<R: Runtime> {
    pub cluster: Cluster<R>,
    pub config: ProducerConfig,
}

impl<R: Runtime> Producer<R> {
    pub fn new(cluster: Cluster<R>, config: ProducerConfig) -> Self {
        Producer { cluster, config }
    }

    /// Sends `records` as one batch to `topic`/`partition` and waits for the outcome. Returns the
    /// base offset when acknowledged (`None` for acks=0, which acknowledges nothing).
    pub async fn send(&mut self, topic: &str, partition: i32, records: &[NewRecord]) -> Result<Option<i64>, SendError> {
        let rt = self.cluster.rt.clone();
        let deadline = rt.monotonic_ms().saturating_add(self.config.delivery_timeout_ms);
        let batch = bytes::Bytes::from(build_batch(records, ProducerFields::none()));
        let request = Request::Produce(ProduceRequest {
            transactional_id: None,
            acks: self.config.acks,
            timeout_ms: i32::try_from(self.cluster.config.request_timeout_ms).unwrap_or(i32::MAX),
            topics: vec![ProduceTopic {
                name: topic.to_string(),
                partitions: vec![ProducePartition {
                    index: partition,
                    records: Some(batch),
                }],
            }],
        });
        let mut maybe_written = false;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let result = self.attempt(topic, partition, &request, &mut maybe_written).await;
            let error = match result {
                Ok(offset) => return Ok(offset),
                Err(e) => e,
            };
            let out_of_time = rt.monotonic_ms() >= deadline;
            if !error.is_retriable() || attempts > self.config.retries || out_of_time {
                let why = format!("after {attempts} attempt(s): {error}");
                return Err(if maybe_written {
                    SendError::Unknown(why)
                } else {
                    SendError::Failed(why)
                });
            }
            tracing::debug!(topic, partition, attempts, %error, "produce retry");
            rt.sleep(Duration::from_millis(self.cluster.config.retry_backoff_ms))
                .await;
        }
    }

    async fn attempt(
        &mut self,
        topic: &str,
        partition: i32,
        request: &Request,
        maybe_written: &mut bool,
    ) -> Result<Option<i64>, ClientError> {
        let (addr, _epoch) = self.cluster.leader(topic, partition).await?;
        let acks = self.config.acks;
        let conn = match self.cluster.conn(&addr).await {
            Ok(conn) => conn,
            Err(e) => {
                self.cluster.invalidate(topic);
                return Err(e);
            }
        };
        if acks == 0 {
            *maybe_written = true;
            let sent = conn.send_only(request, PRODUCE_VERSION).await;
            if sent.is_err() {
                self.cluster.drop_conn(&addr);
            }
            return sent.map(|()| None);
        }
        // From here on the broker may write the batch whatever we hear back, unless it answers
        // with an error (Kafka's contract: an error answer means this attempt was not written).
        let before = *maybe_written;
        *maybe_written = true;
        let response = match conn.call(request, PRODUCE_VERSION).await {
            Ok(r) => r,
            Err(e) => {
                self.cluster.drop_conn(&addr);
                self.cluster.invalidate(topic);
                return Err(e);
            }
        };
        let Response::Produce(resp) = response else {
            return Err(ClientError::Protocol("Produce answered with another API".into()));
        };
        let p = resp
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|p| p.index == partition)
            .ok_or_else(|| ClientError::Protocol("Produce response lacks the partition".into()))?;
        match code(p.error_code) {
            ErrorCode::None => Ok(Some(p.base_offset)),
            c => {
                if matches!(
                    c,
                    ErrorCode::NotLeaderOrFollower | ErrorCode::UnknownTopicOrPartition | ErrorCode::FencedLeaderEpoch
                ) {
                    self.cluster.invalidate(topic);
                }
                *maybe_written = before;
                Err(ClientError::Broker(c))
            }
        }
    }
}
