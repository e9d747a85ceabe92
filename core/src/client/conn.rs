//! One client connection to one broker: frames requests with correlation ids, waits for the
//! matching response within a timeout, decodes it with the bounded client codec.
//!
//! Fault model: the peer may be gone, slow, or send garbage. A timeout or a decode error poisons
//! the connection (a late reply would otherwise be taken for the next request's): the caller
//! drops it and connects again.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use thiserror::Error;

use crate::protocol::api::sasl_authenticate::SaslAuthenticateRequest;
use crate::protocol::api::sasl_handshake::SaslHandshakeRequest;
use crate::protocol::client::{decode_response_bytes_on, request_frame};
use crate::protocol::{DecodeError, Limits, Request, RequestHeader, Response};
use crate::runtime::{Connection, NetError, Runtime};
use crate::security::{SaslClient, SaslCredentials};
use crate::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClientError {
    #[error("network: {0}")]
    Net(#[from] NetError),
    #[error("undecodable response: {0}")]
    Decode(#[from] DecodeError),
    #[error("no response within {0} ms")]
    Timeout(u64),
    #[error("broker answered {0:?}")]
    Broker(ErrorCode),
    #[error("{0}")]
    Protocol(String),
}

impl ClientError {
    /// Whether a retry (after reconnecting and refreshing metadata) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Net(_) | ClientError::Timeout(_) | ClientError::Decode(_) => true,
            ClientError::Broker(code) => code.is_retriable(),
            ClientError::Protocol(_) => false,
        }
    }
}

/// The most SaslAuthenticate round trips one login may take.
const SASL_ROUND_TRIPS_MAX: usize = 4;

fn broker_error(code: i16) -> ClientError {
    ErrorCode::from_code(code).map_or_else(
        || ClientError::Protocol(format!("broker answered error code {code}")),
        ClientError::Broker,
    )
}

/// Runs `f` for at most `ms` of the runtime's time; `None` if it did not finish.
pub async fn with_timeout<R: Runtime, T>(rt: &R, ms: u64, f: impl Future<Output = T>) -> Option<T> {
    before(rt.sleep(Duration::from_millis(ms)), f).await
}

/// `f`'s output, or `None` if `sleep` completes first (polled after `f`, as [`with_timeout`]).
pub async fn before<T>(sleep: impl Future<Output = ()>, f: impl Future<Output = T>) -> Option<T> {
    let mut f = pin!(f);
    let mut sleep = pin!(sleep);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = f.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        if sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

pub struct KafkaConn<R: Runtime> {
    rt: R,
    conn: R::Conn,
    /// Shared with every request's header.
    client_id: Arc<str>,
    next_correlation_id: i32,
    limits: Limits,
    timeout_ms: u64,
    pub addr: String,
    /// The topic the last answer named: the next naming it shares it (see
    /// [`decode_response_bytes_on`]).
    topic: Option<Arc<str>>,
}

impl<R: Runtime> KafkaConn<R> {
    pub async fn connect(rt: &R, addr: &str, client_id: &str, timeout_ms: u64) -> Result<Self, ClientError> {
        let conn = with_timeout(rt, timeout_ms, rt.connect(addr))
            .await
            .ok_or(ClientError::Timeout(timeout_ms))??;
        Ok(KafkaConn {
            rt: rt.clone(),
            conn,
            client_id: client_id.into(),
            next_correlation_id: 0,
            limits: Limits::default(),
            timeout_ms,
            addr: addr.to_string(),
            topic: None,
        })
    }

    /// Connects as `config` says: its client id and timeout, and its SASL login when it has one.
    pub async fn connect_as(rt: &R, addr: &str, config: &super::ClientConfig) -> Result<Self, ClientError> {
        let mut conn = Self::connect(rt, addr, &config.client_id, config.request_timeout_ms).await?;
        if let Some(creds) = &config.sasl {
            conn.authenticate(creds).await?;
        }
        Ok(conn)
    }

    /// Logs in with SaslHandshake v1 and SaslAuthenticate v1 (Kafka 1.0+ and 2.0+), one round
    /// trip per token of the mechanism. A refusal is `Broker(SaslAuthenticationFailed)` (or the
    /// handshake's error); the connection must then be dropped.
    pub async fn authenticate(&mut self, creds: &SaslCredentials) -> Result<(), ClientError> {
        let handshake = Request::SaslHandshake(SaslHandshakeRequest {
            mechanism: creds.mechanism.name().to_string(),
        });
        let Response::SaslHandshake(resp) = self.call(&handshake, 1).await? else {
            return Err(ClientError::Protocol("SaslHandshake answered with another API".into()));
        };
        if resp.error_code != 0 {
            return Err(broker_error(resp.error_code));
        }
        let nonce = format!("{:016x}{:016x}", self.rt.random_u64(), self.rt.random_u64());
        let mut client = SaslClient::new(creds.clone(), nonce);
        let mut token = client.first();
        // A mechanism takes a few round trips (SCRAM two); more is a server leading us on.
        for _ in 0..SASL_ROUND_TRIPS_MAX {
            let request = Request::SaslAuthenticate(SaslAuthenticateRequest {
                auth_bytes: bytes::Bytes::from(token),
            });
            let Response::SaslAuthenticate(resp) = self.call(&request, 1).await? else {
                return Err(ClientError::Protocol(
                    "SaslAuthenticate answered with another API".into(),
                ));
            };
            if resp.error_code != 0 {
                return Err(broker_error(resp.error_code));
            }
            match client.next(&resp.auth_bytes).map_err(ClientError::Protocol)? {
                Some(next) => token = next,
                None => return Ok(()),
            }
        }
        Err(ClientError::Protocol(format!(
            "SASL exchange longer than {SASL_ROUND_TRIPS_MAX} round trips"
        )))
    }

    fn frame(&mut self, request: &Request, version: i16) -> (i32, bytes::Bytes) {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader {
            api_key: request.api_key(),
            api_version: version,
            correlation_id,
            client_id: Some(self.client_id.clone()),
        };
        (correlation_id, request_frame(&header, request))
    }

    /// Sends a request that gets no response (Produce with acks=0).
    pub async fn send_only(&mut self, request: &Request, version: i16) -> Result<(), ClientError> {
        let (_, frame) = self.frame(request, version);
        Ok(self.conn.send(frame).await?)
    }

    /// Sends `request` without waiting for its response, for pipelining: the caller receives
    /// the responses in order with [`KafkaConn::recv_response`] (a broker answers the requests of
    /// one connection in the order they came). Returns the request's correlation id.
    pub async fn send_request(&mut self, request: &Request, version: i16) -> Result<i32, ClientError> {
        let (correlation_id, frame) = self.frame(request, version);
        self.conn.send(frame).await?;
        Ok(correlation_id)
    }

    /// Receives the response to the oldest request sent with [`KafkaConn::send_request`] and
    /// not yet answered, within `timeout_ms`. Any error poisons the connection.
    pub async fn recv_response(
        &mut self,
        api_key: i16,
        version: i16,
        correlation_id: i32,
        timeout_ms: u64,
    ) -> Result<Response, ClientError> {
        let timeout = self.rt.sleep(Duration::from_millis(timeout_ms));
        let exchange = self.read_response(api_key, version, correlation_id);
        before(timeout, exchange)
            .await
            .ok_or(ClientError::Timeout(timeout_ms))?
    }

    /// Reads the next response frame and checks it answers `correlation_id` (no timeout).
    async fn read_response(
        &mut self,
        api_key: i16,
        version: i16,
        correlation_id: i32,
    ) -> Result<Response, ClientError> {
        let reply = self.conn.recv().await?.ok_or(ClientError::Net(NetError::Closed))?;
        let (got, response) = decode_response_bytes_on(api_key, version, &reply, self.limits, &mut self.topic)?;
        if got != correlation_id {
            return Err(ClientError::Protocol(format!(
                "response for correlation id {got}, expected {correlation_id}"
            )));
        }
        Ok(response)
    }

    /// Sends `request` at `version` and waits for its response. `call_with_timeout`'s future
    /// itself: an `async fn` here wrapped it in one more state machine, polled for every call.
    pub fn call<'a>(
        &'a mut self,
        request: &'a Request,
        version: i16,
    ) -> impl Future<Output = Result<Response, ClientError>> + 'a {
        let timeout_ms = self.timeout_ms;
        self.call_with_timeout(request, version, timeout_ms)
    }

    /// As [`KafkaConn::call`], waiting up to `timeout_ms` (a JoinGroup may wait for the whole
    /// rebalance, longer than `request.timeout.ms`).
    pub async fn call_with_timeout(
        &mut self,
        request: &Request,
        version: i16,
        timeout_ms: u64,
    ) -> Result<Response, ClientError> {
        let (correlation_id, frame) = self.frame(request, version);
        let api_key = request.api_key();
        // The sleep borrows nothing (`Runtime::sleep` is 'static), so the exchange may borrow
        // the connection mutably beside it; a runtime clone per call cost its reference counts.
        let timeout = self.rt.sleep(Duration::from_millis(timeout_ms));
        let exchange = async {
            self.conn.send(frame).await?;
            self.read_response(api_key, version, correlation_id).await
        };
        before(timeout, exchange)
            .await
            .ok_or(ClientError::Timeout(timeout_ms))?
    }
}
