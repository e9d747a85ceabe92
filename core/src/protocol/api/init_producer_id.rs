//! InitProducerId (key 22), v0–v4: a producer id and epoch for idempotent or transactional
//! producers. Flexible from v2. From v3 (KIP-360) a producer may pass its current id and epoch
//! to have the epoch bumped instead of getting a new id.

use bytes::Bytes;

use crate::protocol::reader::{Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 22;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 4;
pub const FLEXIBLE_MIN: i16 = 2;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InitProducerIdRequest {
    /// `None` for an idempotent (non-transactional) producer.
    pub transactional_id: Option<String>,
    pub transaction_timeout_ms: i32,
    /// v3+; -1 before.
    pub producer_id: i64,
    /// v3+; -1 before.
    pub producer_epoch: i16,
}

impl InitProducerIdRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let transactional_id = r.nullable_string(flex)?;
        let transaction_timeout_ms = r.i32()?;
        let (producer_id, producer_epoch) = if version >= 3 { (r.i64()?, r.i16()?) } else { (-1, -1) };
        r.skip_tagged_fields(flex)?;
        Ok(InitProducerIdRequest {
            transactional_id,
            transaction_timeout_ms,
            producer_id,
            producer_epoch,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InitProducerIdResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl InitProducerIdResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.i16(self.error_code);
        w.i64(self.producer_id);
        w.i16(self.producer_epoch);
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl InitProducerIdRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.nullable_string(flex, self.transactional_id.as_deref());
        w.i32(self.transaction_timeout_ms);
        if version >= 3 {
            w.i64(self.producer_id);
            w.i16(self.producer_epoch);
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl InitProducerIdResponse {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = r.i32()?;
        let error_code = r.i16()?;
        let producer_id = r.i64()?;
        let producer_epoch = r.i16()?;
        r.skip_tagged_fields(flex)?;
        Ok(InitProducerIdResponse {
            throttle_time_ms,
            error_code,
            producer_id,
            producer_epoch,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;

    pub(crate) fn sample(v: i16) -> kp::InitProducerIdRequest {
        let mut sent = kp::InitProducerIdRequest::default();
        sent.transactional_id = Some(kp::TransactionalId(s("tx-1")));
        sent.transaction_timeout_ms = 60_000;
        if v >= 3 {
            sent.producer_id = kp::ProducerId(1000);
            sent.producer_epoch = 4;
        }
        if v >= FLEXIBLE_MIN {
            sent.unknown_tagged_fields = unknown_tags();
        }
        sent
    }

    pub(crate) fn sample_frames() -> Vec<Vec<u8>> {
        (VERSION_MIN..=VERSION_MAX)
            .map(|v| request_frame(API_KEY, v, &sample(v)))
            .collect()
    }

    #[test]
    fn request_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sample(v)));
            let Request::InitProducerId(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = InitProducerIdRequest {
                transactional_id: Some("tx-1".into()),
                transaction_timeout_ms: 60_000,
                producer_id: if v >= 3 { 1000 } else { -1 },
                producer_epoch: if v >= 3 { 4 } else { -1 },
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = InitProducerIdResponse {
            throttle_time_ms: 1,
            error_code: 0,
            producer_id: 1000,
            producer_epoch: 5,
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::InitProducerIdResponse = response_as(ours.encode(v), v);
            let got = (theirs.throttle_time_ms, theirs.error_code, theirs.producer_id.0);
            assert_eq!(got, (1, 0, 1000));
            assert_eq!(theirs.producer_epoch, 5);
        }
    }

    pub(crate) fn client_request(v: i16) -> InitProducerIdRequest {
        InitProducerIdRequest {
            transactional_id: Some("tx".into()),
            transaction_timeout_ms: 60_000,
            producer_id: if v >= 3 { 5 } else { -1 },
            producer_epoch: if v >= 3 { 2 } else { -1 },
        }
    }

    pub(crate) fn client_response(_v: i16) -> InitProducerIdResponse {
        InitProducerIdResponse {
            throttle_time_ms: 1,
            error_code: 0,
            producer_id: 1000,
            producer_epoch: 3,
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::InitProducerIdRequest =
                client_round_trip(v, &req, req.encode(v), InitProducerIdRequest::decode);
            assert_eq!(theirs.transaction_timeout_ms, 60_000);
            let resp = client_response(v);
            let theirs: kp::InitProducerIdResponse =
                client_round_trip(v, &resp, resp.encode(v), InitProducerIdResponse::decode);
            assert_eq!((theirs.producer_id.0, theirs.producer_epoch), (1000, 3));
        }
    }
}
