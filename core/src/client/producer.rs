//! The producer: sends record batches to partition leaders with `acks`, retries with backoff
//! within `delivery.timeout.ms`, and reports each send's outcome honestly: `Acked` (the broker
//! said so), `Failed` (certainly not written: refused before any attempt could have landed), or
//! `Unknown` (an attempt may have been written: a timeout, a lost connection).
//!
//! With `enable.idempotence` (KIP-98, no transactions) the producer asks once for a producer id
//! (InitProducerId), numbers each partition's records from sequence 0, builds each batch once
//! with its id, epoch and first sequence, and resends those exact bytes on every retry: a
//! broker that already wrote an attempt answers the retry with the original offset instead of
//! writing it twice. Without idempotence a retry after an attempt that was written duplicates the
//! record, which the checker reports.
//!
//! After any failed send the producer drops its id and asks for a new one before the next send:
//! sequences on the broker and here may disagree after a failure (an attempt may have been
//! written, or the broker refused the sequence with OUT_OF_ORDER_SEQUENCE_NUMBER or
//! UNKNOWN_PRODUCER_ID), and every later batch would then be refused. Those two codes end the
//! send at once (they are not retriable), reported as `Failed` only when no attempt may have
//! been written, else `Unknown`. Kafka's Java producer (2.5+, KIP-360) does much the same: for
//! an idempotent producer it bumps the epoch and resets sequences after such an error or an
//! expired batch, failing the batches concerned with OutOfOrderSequenceException; on
//! UNKNOWN_PRODUCER_ID whose cause is retention it resets the sequence and retries instead. A
//! fresh id is Gregor's stand-in for the epoch bump (the broker hands out fresh ids only).
//!
//! This is the sync producer: one batch per `send()`, one request in flight. The batching
//! producer ([`super::batching`]: `linger.ms`, `batch.size`, `buffer.memory`, `max.block.ms`,
//! `max.request.size`, several requests in flight, the partitioner) keeps these rules, and
//! shares [`ProducerConfig`]; its batching fields are ignored here.
//!
//! Not yet here (either producer): compression, transactions, KIP-360's epoch bump (a fresh id
//! instead, above), and `acks`-aware `delivery.timeout.ms` >= `linger.ms` + `request.timeout.ms`
//! validation as Kafka does at construction.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::partition_key::PartitionMap;
use crate::broker::producer_state::{last_sequence, next_sequence};
use crate::ids::{ProducerEpoch, ProducerId};
use crate::protocol::api::init_producer_id::InitProducerIdRequest;

use crate::protocol::api::produce::{ProducePartition, ProduceRequest, ProduceTopic};
use crate::protocol::{shared_name, Request, Response};
use crate::record::{build_batch, NewRecord, ProducerFields};
use crate::runtime::Runtime;
use crate::ErrorCode;

use super::{code, ClientError, Cluster, INIT_PRODUCER_ID_VERSION, PRODUCE_VERSION};

#[derive(Clone, Debug)]
pub struct ProducerConfig {
    /// `acks`: -1 (all), 0 or 1.
    pub acks: i16,
    /// `retries`
    pub retries: u32,
    /// `delivery.timeout.ms`
    pub delivery_timeout_ms: u64,
    /// `enable.idempotence`: needs `acks` -1, as Kafka requires. Off by default here (Kafka 3.0+
    /// turns it on) so that workloads opt in and the checker's negative controls keep their
    /// duplicates.
    pub enable_idempotence: bool,
    /// `linger.ms`: how long a batch waits for more records before it is sent (batching
    /// producer only, [`super::batching`]).
    pub linger_ms: u64,
    /// `batch.size`: a batch is closed (ready to send) once it holds this many bytes; a record
    /// larger than it gets a batch of its own.
    pub batch_bytes_max: usize,
    /// `buffer.memory`: the bytes of records buffered and in flight, at most.
    pub buffer_bytes_max: usize,
    /// `max.block.ms`: how long `send()` waits for buffer room or topic metadata.
    pub block_ms_max: u64,
    /// `max.request.size`: the bytes of one Produce request; a larger record fails alone.
    pub request_bytes_max: usize,
    /// `max.in.flight.requests.per.connection`: Produce requests sent to one broker and not yet
    /// answered; at most 5 with idempotence, as Kafka requires.
    pub in_flight_max: usize,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: -1,
            retries: i32::MAX as u32,
            delivery_timeout_ms: 120_000,
            enable_idempotence: false,
            linger_ms: 5,
            batch_bytes_max: 16_384,
            buffer_bytes_max: 32 * 1024 * 1024,
            block_ms_max: 60_000,
            request_bytes_max: 1_048_576,
            in_flight_max: 5,
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
    /// With idempotence: the id and epoch InitProducerId gave, until a send fails.
    identity: Option<(ProducerId, ProducerEpoch)>,
    /// With idempotence: the sequence of the next record per (topic, partition), for `identity`.
    /// Looked up by a borrowed name: a `(String, i32)` key was a copy of the name every send.
    next_sequences: PartitionMap<i32>,
    /// The topic name the last request carried, shared by the next to the same topic.
    topic_name: Option<Arc<str>>,
}

impl<R: Runtime> Producer<R> {
    pub fn new(cluster: Cluster<R>, config: ProducerConfig) -> Self {
        Producer {
            cluster,
            config,
            identity: None,
            next_sequences: PartitionMap::new(),
            topic_name: None,
        }
    }

    /// The producer id and epoch in use (idempotence on, and asked for since the last failure).
    pub fn identity(&self) -> Option<(ProducerId, ProducerEpoch)> {
        self.identity
    }

    /// The producer id to use, asking a broker for one if there is none, retrying retriable
    /// errors until `deadline_ms` (monotonic).
    async fn ensure_identity(&mut self, deadline_ms: u64) -> Result<(ProducerId, ProducerEpoch), ClientError> {
        if let Some(identity) = self.identity {
            return Ok(identity);
        }
        let identity = init_producer_id(&mut self.cluster, deadline_ms).await?;
        self.identity = Some(identity);
        self.next_sequences = PartitionMap::new();
        Ok(identity)
    }

    /// Sends `records` as one batch to `topic`/`partition` and waits for the outcome. Returns the
    /// base offset when acknowledged (`None` for acks=0, which acknowledges nothing).
    pub async fn send(&mut self, topic: &str, partition: i32, records: &[NewRecord]) -> Result<Option<i64>, SendError> {
        let rt = self.cluster.rt.clone();
        let deadline = rt.monotonic_ms().saturating_add(self.config.delivery_timeout_ms);
        let idempotent = self.config.enable_idempotence;
        if idempotent && self.config.acks != -1 {
            return Err(SendError::Failed(
                "enable.idempotence needs acks=-1 (all), as Kafka requires".into(),
            ));
        }
        if records.is_empty() {
            return Err(SendError::Failed("a batch needs at least one record".into()));
        }
        let mut fields = ProducerFields::none();
        // The sequence after this batch, to remember once it is acknowledged.
        let mut after = None;
        if idempotent {
            let (id, epoch) = self
                .ensure_identity(deadline)
                .await
                .map_err(|e| SendError::Failed(format!("no producer id: {e}")))?;
            let base_sequence = self.next_sequences.get(topic, partition).copied().unwrap_or(0);
            let last_delta = i32::try_from(records.len() - 1)
                .map_err(|_| SendError::Failed(format!("{} records do not fit in one batch", records.len())))?;
            fields = ProducerFields {
                producer_id: id.0,
                producer_epoch: epoch.0,
                base_sequence,
            };
            after = Some(next_sequence(last_sequence(base_sequence, last_delta)));
        }
        // Built once: every retry resends these bytes, so the broker can recognise a duplicate.
        let batch = bytes::Bytes::from(build_batch(records, fields));
        let request = Request::Produce(ProduceRequest {
            transactional_id: None,
            acks: self.config.acks,
            timeout_ms: i32::try_from(self.cluster.config.request_timeout_ms).unwrap_or(i32::MAX),
            topics: vec![ProduceTopic {
                name: shared_name(&mut self.topic_name, topic),
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
                Ok(offset) => {
                    if let Some(next) = after {
                        self.next_sequences.insert(topic, partition, next);
                    }
                    return Ok(offset);
                }
                Err(e) => e,
            };
            let out_of_time = rt.monotonic_ms() >= deadline;
            if !error.is_retriable() || attempts > self.config.retries || out_of_time {
                if idempotent {
                    // Broker and producer may now disagree on this partition's sequence.
                    self.identity = None;
                    self.next_sequences = PartitionMap::new();
                }
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

/// Asks for a producer id until one comes or `deadline_ms` passes.
pub(super) async fn init_producer_id<R: Runtime>(
    cluster: &mut Cluster<R>,
    deadline_ms: u64,
) -> Result<(ProducerId, ProducerEpoch), ClientError> {
    let rt = cluster.rt.clone();
    let request = Request::InitProducerId(InitProducerIdRequest {
        transactional_id: None,
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
    });
    // Bounded: each round sleeps retry.backoff.ms or ends.
    loop {
        let result = match cluster.call_any(&request, INIT_PRODUCER_ID_VERSION).await {
            Ok(Response::InitProducerId(r)) if r.error_code == 0 && r.producer_id >= 0 && r.producer_epoch >= 0 => {
                Ok((ProducerId(r.producer_id), ProducerEpoch(r.producer_epoch)))
            }
            Ok(Response::InitProducerId(r)) if r.error_code != 0 => Err(ClientError::Broker(code(r.error_code))),
            Ok(Response::InitProducerId(r)) => Err(ClientError::Protocol(format!(
                "InitProducerId gave no id: {} / {}",
                r.producer_id, r.producer_epoch
            ))),
            Ok(_) => Err(ClientError::Protocol("InitProducerId answered with another API".into())),
            Err(e) => Err(e),
        };
        match result {
            Ok(identity) => return Ok(identity),
            Err(e) if e.is_retriable() && rt.monotonic_ms() < deadline_ms => {
                tracing::debug!(error = %e, "InitProducerId retry");
                rt.sleep(Duration::from_millis(cluster.config.retry_backoff_ms)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
