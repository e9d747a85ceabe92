//! The consumer: polls assigned partitions of one topic from a position, returning records in
//! offset order. When a position is out of range (retention passed it, or it is beyond the log
//! end), it resets per `auto.offset.reset` (`earliest` / `latest`) and says so: the records it
//! jumped over are the ones an unsafe retention setting loses.
//!
//! Group membership and offset commits arrive with issue #5; until then positions are the
//! application's (manual assignment).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;

use crate::protocol::api::fetch::{FetchPartition, FetchRequest, FetchResponse, FetchTopic};
use crate::protocol::api::list_offsets::{ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic};
use crate::protocol::{Request, Response};
use crate::record::{self, BatchHeader};
use crate::runtime::Runtime;
use crate::{short_eq, ErrorCode};

use super::conn::KafkaConn;
use super::{code, take_ready, ClientError, Cluster, Pending, FETCH_VERSION, LIST_OFFSETS_VERSION};

#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// `auto.offset.reset`: true for earliest, false for latest.
    pub reset_to_earliest: bool,
    /// `fetch.max.wait.ms`
    pub fetch_max_wait_ms: i32,
    /// `fetch.max.bytes`
    pub fetch_max_bytes: i32,
    /// `max.partition.fetch.bytes`
    pub partition_max_bytes: i32,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            reset_to_earliest: true,
            fetch_max_wait_ms: 500,
            fetch_max_bytes: 52_428_800,
            partition_max_bytes: 1_048_576,
        }
    }
}

/// One record as the application sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    /// Shares the fetched response's buffer (no copy per record).
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

/// The whole batches of a fetched record set, in order: (start, end, header) of each. Stops at
/// the first that is cut short (a partial batch at the end of a fetch: read it next time) or
/// whose header does not parse.
fn whole_batches(bytes: &[u8]) -> impl Iterator<Item = (usize, usize, BatchHeader)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let h = BatchHeader::parse(bytes.get(at..)?).ok()?;
        let end = at + h.total_bytes();
        if end > bytes.len() || h.total_bytes() < record::HEADER_BYTES {
            return None;
        }
        Some((std::mem::replace(&mut at, end), end, h))
    })
}

/// The records the whole batches of a fetched record set say they hold, bounded by what its
/// bytes could hold (the counts are the sender's word).
fn record_count(bytes: &[u8]) -> usize {
    whole_batches(bytes)
        .map(|(_, _, h)| usize::try_from(h.record_count).unwrap_or(0))
        .fold(0usize, usize::saturating_add)
        .min(bytes.len() / record::MIN_RECORD_BYTES)
}

/// What a poll returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Polled {
    pub records: Vec<ConsumerRecord>,
    /// Partitions whose position was reset: (partition, from, to).
    pub resets: Vec<(i32, i64, i64)>,
}

/// What [`Consumer::poll_with`] read, beside the records it handed over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PollSummary {
    /// Records handed over.
    pub records: usize,
    /// Partitions whose position was reset: (partition, from, to).
    pub resets: Vec<(i32, i64, i64)>,
}

/// What [`Consumer::poll_all_with`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PollAllSummary {
    /// Records handed over.
    pub records: usize,
    /// Partitions whose position was reset: (the consumer's place, partition, from, to).
    pub resets: Vec<(usize, i32, i64, i64)>,
}

/// Where a poll puts each record it reads: the fetched bytes they lie in, the partition, the
/// record. `make_room` is told each answer's record set before its records come.
trait Sink {
    fn make_room(&mut self, _records: &[u8]) {}
    fn record(&mut self, bytes: &Bytes, partition: i32, r: &record::RecordView<'_>);
}

impl Sink for Vec<ConsumerRecord> {
    /// Room for every record of the answer at once (a catching-up read brings thousands):
    /// growing by doubling copied them again and again. Counted here, so that a sink that keeps
    /// no list does not read the batch headers for it.
    fn make_room(&mut self, records: &[u8]) {
        self.reserve(record_count(records));
    }

    fn record(&mut self, bytes: &Bytes, partition: i32, r: &record::RecordView<'_>) {
        self.push(ConsumerRecord {
            partition,
            offset: r.offset.0,
            timestamp: r.timestamp,
            key: r.key.map(|k| bytes.slice_ref(k)),
            value: r.value.map(|v| bytes.slice_ref(v)),
        });
    }
}

/// [`Consumer::poll_with`]'s closure as a [`Sink`].
struct Each<F>(F);

impl<F: FnMut(i32, &record::RecordView<'_>)> Sink for Each<F> {
    fn record(&mut self, _bytes: &Bytes, partition: i32, r: &record::RecordView<'_>) {
        (self.0)(partition, r)
    }
}

/// What a Fetch in flight ends with: its connection, given back when the call succeeded, and
/// the answer.
type FetchDone<R> = (Option<KafkaConn<R>>, Result<Response, ClientError>);

/// A Fetch in flight to one leader: its address and the partitions it asked for, each with the
/// position it asked from. It may outlive the poll that sent it, as in Kafka's consumer, which
/// keeps one a broker in flight.
struct Asked {
    addr: Arc<str>,
    asked: Vec<(i32, i64)>,
}

impl Asked {
    fn asks_for(&self, partition: i32) -> bool {
        self.asked.iter().any(|&(p, _)| p == partition)
    }
}

/// The Fetches of one consumer answered in one wait, with what they asked for.
pub(crate) struct Answers<R: Runtime>(Vec<(Asked, FetchDone<R>)>);

impl<R: Runtime> Default for Answers<R> {
    fn default() -> Self {
        Answers(Vec::new())
    }
}

/// The partitions a poll had an outcome for (read, failed, or reset), those that failed, and
/// the first error.
#[derive(Default)]
pub(crate) struct Tally {
    considered: usize,
    failed: usize,
    first_error: Option<ClientError>,
}

impl Tally {
    fn fail(&mut self, e: ClientError) {
        self.considered += 1;
        self.failed += 1;
        self.first_error.get_or_insert(e);
    }

    /// The poll's outcome: what it read, or its first error when every partition it heard about
    /// failed and nothing was read.
    fn verdict(self, summary: PollSummary) -> Result<PollSummary, ClientError> {
        match self.first_error {
            // A partition can fail after handing over records (a corrupt batch behind good ones
            // in one response): those records and the positions past them must reach the caller,
            // or they are skipped for good. A campaign seed lost offset 121 this way when all
            // three partitions failed in the same poll.
            Some(e) if self.failed == self.considered && summary.records == 0 && summary.resets.is_empty() => Err(e),
            _ => Ok(summary),
        }
    }
}

pub struct Consumer<R: Runtime> {
    pub cluster: Cluster<R>,
    pub config: ConsumerConfig,
    topic: Arc<str>,
    /// partition → next offset to read; `None` until reset by `auto.offset.reset`.
    positions: BTreeMap<i32, Option<i64>>,
    /// The Fetches in flight, at most one a leader.
    in_flight: Vec<Pending<Asked, FetchDone<R>>>,
}

impl<R: Runtime> Consumer<R> {
    pub fn new(cluster: Cluster<R>, config: ConsumerConfig, topic: &str) -> Self {
        Consumer {
            cluster,
            config,
            topic: topic.into(),
            positions: BTreeMap::new(),
            in_flight: Vec::new(),
        }
    }

    /// Reads `partition` from `position` on (`None`: per `auto.offset.reset`).
    pub fn assign(&mut self, partition: i32, position: Option<i64>) {
        self.positions.insert(partition, position);
    }

    /// Stops reading `partition` and forgets its position.
    pub fn unassign(&mut self, partition: i32) {
        self.positions.remove(&partition);
    }

    /// Whether any partition is assigned (without listing them).
    pub fn has_assignment(&self) -> bool {
        !self.positions.is_empty()
    }

    /// The assigned partitions.
    pub fn assigned(&self) -> Vec<i32> {
        self.positions.keys().copied().collect()
    }

    pub fn position(&self, partition: i32) -> Option<i64> {
        self.positions.get(&partition).copied().flatten()
    }

    /// Sends a Fetch to each leader of assigned partitions that has none in flight, and returns
    /// with the first answers, from whichever leaders; the Fetches still out are awaited by the
    /// next polls. An answer for a partition unassigned or moved since it was asked for is
    /// dropped. A partition that fails does not cost the others their records (their positions
    /// have moved past them): the poll returns what it read, and fails only when every partition
    /// it heard about failed and nothing was read.
    pub async fn poll(&mut self) -> Result<Polled, ClientError> {
        let (answers, tally) = self.send_and_wait().await;
        self.take_answers_as_records(answers, tally).await
    }

    /// [`poll`](Self::poll), handing each record to `each` (its partition, the record as it lies
    /// in the fetched bytes) instead of building a [`ConsumerRecord`] of it: no reference count
    /// taken per key and value, no list of records. The same records in the same order, each
    /// once: a batch this client cannot read is handed over not at all. A record's slices live
    /// only for the call.
    pub async fn poll_with(
        &mut self,
        each: impl FnMut(i32, &record::RecordView<'_>),
    ) -> Result<PollSummary, ClientError> {
        let (answers, tally) = self.send_and_wait().await;
        self.take_answers_with(answers, tally, each).await
    }

    /// A poll's fetch, up to its answers: [`Self::send_fetches`], then [`Self::first_answers`] of
    /// this consumer alone.
    async fn send_and_wait(&mut self) -> (Answers<R>, Tally) {
        let tally = self.send_fetches().await;
        let mut answers = Self::first_answers(&mut [&mut *self]).await;
        (answers.pop().unwrap_or_default(), tally)
    }

    /// The fetch of a poll of several consumers together (a group's topics, or
    /// [`Self::poll_all_with`]'s): each sends its Fetches, then one wait for the first answers of
    /// any of them, so that one whose leaders have nothing new (a long poll of
    /// `fetch.max.wait.ms`) holds up none of the others' records. Each consumer's answers and
    /// tally, in the order given.
    pub(crate) async fn send_and_wait_all(consumers: &mut [&mut Self]) -> Vec<(Answers<R>, Tally)> {
        let mut tallies = Vec::with_capacity(consumers.len());
        for c in consumers.iter_mut() {
            tallies.push(c.send_fetches().await);
        }
        Self::first_answers(consumers).await.into_iter().zip(tallies).collect()
    }

    /// Polls `consumers` (one per topic, each with its partitions assigned) as one Kafka consumer
    /// `assign()`ed all their partitions polls: every Fetch goes out, the poll returns with the
    /// first answers of any, and each record goes to `each` with its consumer's place in
    /// `consumers` and its partition. An error only when every consumer's poll failed or found
    /// nothing and one failed, as a single consumer's.
    pub async fn poll_all_with(
        consumers: &mut [&mut Self],
        mut each: impl FnMut(usize, i32, &record::RecordView<'_>),
    ) -> Result<PollAllSummary, ClientError> {
        let answers = Self::send_and_wait_all(consumers).await;
        let mut summary = PollAllSummary::default();
        let mut first_error = None;
        for (i, (c, (answers, tally))) in consumers.iter_mut().zip(answers).enumerate() {
            match c
                .take_answers_with(answers, tally, |partition, r| each(i, partition, r))
                .await
            {
                Ok(s) => {
                    summary.records += s.records;
                    summary
                        .resets
                        .extend(s.resets.into_iter().map(|(p, from, to)| (i, p, from, to)));
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if summary.records == 0 => Err(e),
            _ => Ok(summary),
        }
    }

    /// A poll's first step: sends a Fetch to each leader of assigned partitions that has none in
    /// flight, after dropping the Fetches whose answers could no longer be used. What it returns
    /// counts the partitions that failed on the way (no position, no leader).
    pub(crate) async fn send_fetches(&mut self) -> Tally {
        let mut tally = Tally::default();
        // A Fetch none of whose partitions is still assigned at the position it asked from is not
        // waited for: its answer could not be used. It goes with its connection.
        self.drop_unwanted_fetches();
        // One Fetch per leader for all its partitions, as Kafka's consumer sends one per broker,
        // for every leader without one in flight; a partition already asked for waits for its
        // answer. A leader answers as soon as any of its partitions has records (min.bytes 1).
        let partitions: Vec<i32> = self.positions.keys().copied().collect();
        // Each leader to send a Fetch to, with its partitions, in the order first met.
        let mut fetches: Vec<(Arc<str>, Vec<FetchPartition>)> = Vec::new();
        for partition in partitions {
            if self.in_flight.iter().any(|(f, _)| f.asks_for(partition)) {
                continue;
            }
            match self.position_and_leader(partition).await {
                Ok((position, addr, epoch)) => {
                    if self.in_flight.iter().any(|(f, _)| short_eq::same(&f.addr, &addr)) {
                        // Its leader's Fetch went out without it (it was assigned or moved since):
                        // the next one asks for it.
                        continue;
                    }
                    let asked = FetchPartition {
                        partition,
                        current_leader_epoch: epoch,
                        fetch_offset: position,
                        last_fetched_epoch: -1,
                        log_start_offset: -1,
                        partition_max_bytes: self.config.partition_max_bytes,
                    };
                    match fetches.iter_mut().find(|(l, _)| short_eq::same(l, &addr)) {
                        Some((_, partitions)) => partitions.push(asked),
                        None => fetches.push((addr, vec![asked])),
                    }
                }
                Err(e) => tally.fail(e),
            }
        }
        for (addr, partitions) in fetches {
            self.start_fetch(addr, partitions);
        }
        tally
    }

    /// Drops the Fetches in flight none of whose partitions is still assigned at the position it
    /// asked from, with their connections.
    pub(crate) fn drop_unwanted_fetches(&mut self) {
        let positions = &self.positions;
        self.in_flight
            .retain(|(f, _)| f.asked.iter().any(|&(p, at)| positions.get(&p) == Some(&Some(at))));
    }

    /// Waits until a Fetch in flight of any of `consumers` is answered, then takes out every one
    /// answered by then: each consumer's, in its order. The poll returns with the first answers,
    /// whichever leaders (or, for a group's topics, whichever consumers) they come from; the
    /// other Fetches stay in flight for the next polls. Waiting for every leader's answer made
    /// one leader cut off from this client stall every partition for request.timeout.ms, and
    /// waiting for each topic in turn made an idle topic's long poll hold up the others. Done at
    /// once when none has a Fetch in flight.
    pub(crate) async fn first_answers(consumers: &mut [&mut Self]) -> Vec<Answers<R>> {
        if consumers.iter().all(|c| c.in_flight.is_empty()) {
            return consumers.iter().map(|_| Answers::default()).collect();
        }
        let n = consumers.len();
        std::future::poll_fn(|cx| {
            // Built only when something is done: most wakes of a consumer's task find nothing.
            let mut done: Vec<Answers<R>> = Vec::new();
            for (i, c) in consumers.iter_mut().enumerate() {
                let ready = take_ready(&mut c.in_flight, cx);
                if !ready.is_empty() {
                    if done.is_empty() {
                        done.resize_with(n, Answers::default);
                    }
                    done[i] = Answers(ready);
                }
            }
            if done.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(done)
            }
        })
        .await
    }

    /// A poll's last step: takes `answers` (this consumer's, from [`Self::first_answers`]) into
    /// `sink` and the positions, adding each partition's outcome to `tally`, the first step's.
    async fn take_answers(
        &mut self,
        answers: Answers<R>,
        mut tally: Tally,
        sink: &mut impl Sink,
    ) -> Result<PollSummary, ClientError> {
        let mut summary = PollSummary::default();
        for (fetch, (conn, answer)) in answers.0 {
            let answer = match answer {
                Ok(Response::Fetch(resp)) => Ok(resp),
                Ok(_) => Err(ClientError::Protocol("Fetch answered with another API".into())),
                Err(e) => Err(e),
            };
            match (conn, &answer) {
                // Taken back before the answer is read: an out-of-range partition's reset asks
                // the same leader on it.
                (Some(conn), Ok(_)) => self.cluster.put_conn(&fetch.addr, conn),
                // Its connection is gone with the error (a late answer must not answer the next
                // request), and the leader may have moved.
                _ => self.cluster.invalidate(&self.topic),
            }
            for (partition, position) in fetch.asked {
                // Unassigned or moved (a seek, a rebalance) while the Fetch was out: its answer
                // is for a position the application left.
                if self.positions.get(&partition) != Some(&Some(position)) {
                    continue;
                }
                let result = match &answer {
                    Ok(resp) => {
                        self.take_answer(partition, position, &fetch.addr, resp, sink, &mut summary)
                            .await
                    }
                    Err(e) => Err(e.clone()),
                };
                match result {
                    Ok(()) => tally.considered += 1,
                    Err(e) => tally.fail(e),
                }
            }
        }
        tally.verdict(summary)
    }

    /// [`Self::take_answers`] into a list of records, as [`Self::poll`] returns them.
    pub(crate) async fn take_answers_as_records(
        &mut self,
        answers: Answers<R>,
        tally: Tally,
    ) -> Result<Polled, ClientError> {
        let mut records = Vec::new();
        let summary = self.take_answers(answers, tally, &mut records).await?;
        Ok(Polled {
            records,
            resets: summary.resets,
        })
    }

    /// [`Self::take_answers`] handing each record to `each`, as [`Self::poll_with`] does.
    pub(crate) async fn take_answers_with(
        &mut self,
        answers: Answers<R>,
        tally: Tally,
        each: impl FnMut(i32, &record::RecordView<'_>),
    ) -> Result<PollSummary, ClientError> {
        self.take_answers(answers, tally, &mut Each(each)).await
    }

    /// A partition's position (reset per `auto.offset.reset` when it has none) and its leader:
    /// address and epoch.
    async fn position_and_leader(&mut self, partition: i32) -> Result<(i64, Arc<str>, i32), ClientError> {
        let position = match self.position(partition) {
            Some(p) => p,
            None => {
                let reset = self.reset(partition).await?;
                // Where a consumer without a position starts decides what it will never see
                // (auto.offset.reset=latest skips everything already in the log): say so.
                tracing::info!(
                    topic = %self.topic,
                    partition,
                    offset = reset,
                    "no position; auto.offset.reset={} starts here",
                    if self.config.reset_to_earliest { "earliest (the log start)" } else { "latest (the log end)" }
                );
                self.positions.insert(partition, Some(reset));
                reset
            }
        };
        let (addr, epoch) = self.cluster.leader(&self.topic, partition).await?;
        Ok((position, addr, epoch))
    }

    /// Sends a Fetch for `partitions` to their leader at `addr`, on the connection the cluster
    /// keeps for it (one is opened if it has none). The call owns the connection while it is
    /// out, so that it can outlive this poll, and hands it back with the answer.
    fn start_fetch(&mut self, addr: Arc<str>, partitions: Vec<FetchPartition>) {
        let asked = partitions.iter().map(|p| (p.partition, p.fetch_offset)).collect();
        let request = Request::Fetch(FetchRequest {
            replica_id: -1,
            max_wait_ms: self.config.fetch_max_wait_ms,
            min_bytes: 1,
            max_bytes: self.config.fetch_max_bytes,
            isolation_level: 1,
            session_id: 0,
            session_epoch: -1,
            topics: vec![FetchTopic {
                topic: self.topic.clone(),
                partitions,
                ..FetchTopic::default()
            }],
            ..FetchRequest::default()
        });
        let conn = match self.cluster.take_conn(&addr) {
            Some(conn) => Ok(conn),
            None => Err((self.cluster.rt.clone(), self.cluster.config.clone(), addr.to_string())),
        };
        let call = Box::pin(async move {
            let mut conn = match conn {
                Ok(conn) => conn,
                Err((rt, config, addr)) => match KafkaConn::connect_as(&rt, &addr, &config).await {
                    Ok(conn) => conn,
                    Err(e) => return (None, Err(e)),
                },
            };
            match conn.call(&request, FETCH_VERSION).await {
                Ok(answer) => (Some(conn), Ok(answer)),
                Err(e) => (None, Err(e)),
            }
        });
        self.in_flight.push((Asked { addr, asked }, call));
    }

    /// Takes `partition`'s part of its leader's answer (at `addr`): its records to `sink`, its
    /// position past them; an error code or a batch this client cannot read as an error.
    async fn take_answer(
        &mut self,
        partition: i32,
        position: i64,
        addr: &str,
        resp: &FetchResponse,
        sink: &mut impl Sink,
        summary: &mut PollSummary,
    ) -> Result<(), ClientError> {
        let Some(p) = resp
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition_index == partition)
        else {
            return Ok(());
        };
        match code(p.error_code) {
            ErrorCode::None => {}
            ErrorCode::OffsetOutOfRange => {
                let to = self.reset(partition).await?;
                tracing::info!(topic = %self.topic, partition, from = position, to, "position out of range; reset");
                summary.resets.push((partition, position, to));
                self.positions.insert(partition, Some(to));
                return Ok(());
            }
            c => {
                if c.is_retriable() {
                    self.cluster.invalidate(&self.topic);
                }
                return Err(ClientError::Broker(c));
            }
        }
        let bytes = p.records.clone().unwrap_or_default();
        sink.make_room(&bytes);
        let mut next = position;
        let mut failed = None;
        // A batch's records, read whole before any is handed over: a batch this client
        // cannot read is handed over not at all, and the position stays before it, as for a
        // damaged one. Records of the batches before it are the caller's, and the position
        // passes them. One list for the answer's batches.
        let mut views = Vec::new();
        for (at, end, h) in whole_batches(&bytes) {
            let batch = &bytes[at..end];
            // `check.crcs` (Kafka's default): a batch damaged on its way is never handed to
            // the application; the position stays before it and the next poll fetches it anew.
            if let Err(e) = record::validate_parsed(&h, batch) {
                let e = format!(
                    "corrupt record batch in {}-{partition} at offset {next}: {e}",
                    self.topic
                );
                failed = Some((e, true));
                break;
            }
            views.clear();
            if record::for_each_record(&h, batch, |r| views.push(r)).is_none() {
                let e = format!(
                    "compressed or malformed batch in {}-{partition} at offset {next}: not supported by this client yet",
                    self.topic
                );
                failed = Some((e, false));
                break;
            }
            for r in views.iter().filter(|r| r.offset.0 >= position) {
                next = r.offset.0 + 1;
                sink.record(&bytes, partition, r);
                summary.records += 1;
            }
            next = next.max(h.next_offset().0);
        }
        self.positions.insert(partition, Some(next));
        // A damaged batch may be the connection's doing: the next poll reads it on a new one.
        if let Some((e, damaged)) = failed {
            if damaged {
                self.cluster.drop_conn(addr);
            }
            return Err(ClientError::Protocol(e));
        }
        Ok(())
    }

    /// The offset `auto.offset.reset` points at now.
    async fn reset(&mut self, partition: i32) -> Result<i64, ClientError> {
        let (addr, _) = self.cluster.leader(&self.topic, partition).await?;
        let timestamp = if self.config.reset_to_earliest { -2 } else { -1 };
        let request = Request::ListOffsets(ListOffsetsRequest {
            replica_id: -1,
            isolation_level: 1,
            topics: vec![ListOffsetsTopic {
                name: self.topic.to_string(),
                partitions: vec![ListOffsetsPartition {
                    partition_index: partition,
                    current_leader_epoch: -1,
                    timestamp,
                }],
            }],
        });
        let response = match self.cluster.conn(&addr).await {
            Ok(conn) => conn.call(&request, LIST_OFFSETS_VERSION).await,
            Err(e) => Err(e),
        };
        let response = response.inspect_err(|_| self.cluster.drop_conn(&addr))?;
        let Response::ListOffsets(resp) = response else {
            return Err(ClientError::Protocol("ListOffsets answered with another API".into()));
        };
        let p = resp
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| ClientError::Protocol("ListOffsets response lacks the partition".into()))?;
        match code(p.error_code) {
            ErrorCode::None => Ok(p.offset),
            c => Err(ClientError::Broker(c)),
        }
    }
}
