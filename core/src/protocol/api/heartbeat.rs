//! Heartbeat (key 12), v0–v4: a group member says it is alive in a generation. Flexible from v4.

use bytes::Bytes;

use crate::protocol::reader::{Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 12;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 4;
pub const FLEXIBLE_MIN: i16 = 4;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    /// v3+ (static membership, KIP-345).
    pub group_instance_id: Option<String>,
}

impl HeartbeatRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let group_id = r.string(flex, "group_id")?;
        let generation_id = r.i32()?;
        let member_id = r.string(flex, "member_id")?;
        let group_instance_id = if version >= 3 { r.nullable_string(flex)? } else { None };
        r.skip_tagged_fields(flex)?;
        Ok(HeartbeatRequest {
            group_id,
            generation_id,
            member_id,
            group_instance_id,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatResponse {
    /// v1+.
    pub throttle_time_ms: i32,
    pub error_code: i16,
}

impl HeartbeatResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 1 {
            w.i32(self.throttle_time_ms);
        }
        w.i16(self.error_code);
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl HeartbeatRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.string(flex, &self.group_id);
        w.i32(self.generation_id);
        w.string(flex, &self.member_id);
        if version >= 3 {
            w.nullable_string(flex, self.group_instance_id.as_deref());
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl HeartbeatResponse {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        let error_code = r.i16()?;
        r.skip_tagged_fields(flex)?;
        Ok(HeartbeatResponse {
            throttle_time_ms,
            error_code,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;

    pub(crate) fn sample(v: i16) -> kp::HeartbeatRequest {
        let mut sent = kp::HeartbeatRequest::default();
        sent.group_id = kp::GroupId(s("group-a"));
        sent.generation_id = 3;
        sent.member_id = s("m-1");
        if v >= 3 {
            sent.group_instance_id = Some(s("instance-1"));
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
            let Request::Heartbeat(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = HeartbeatRequest {
                group_id: "group-a".into(),
                generation_id: 3,
                member_id: "m-1".into(),
                group_instance_id: if v >= 3 { Some("instance-1".into()) } else { None },
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = HeartbeatResponse {
            throttle_time_ms: 9,
            error_code: 27,
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::HeartbeatResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.error_code, 27);
            assert_eq!(theirs.throttle_time_ms, if v >= 1 { 9 } else { 0 });
        }
    }

    pub(crate) fn client_request(v: i16) -> HeartbeatRequest {
        HeartbeatRequest {
            group_id: "g".into(),
            generation_id: 5,
            member_id: "m".into(),
            group_instance_id: if v >= 3 { Some("i".into()) } else { None },
        }
    }

    pub(crate) fn client_response(v: i16) -> HeartbeatResponse {
        HeartbeatResponse {
            throttle_time_ms: if v >= 1 { 3 } else { 0 },
            error_code: crate::ErrorCode::RebalanceInProgress.code(),
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::HeartbeatRequest = client_round_trip(v, &req, req.encode(v), HeartbeatRequest::decode);
            assert_eq!((&*theirs.group_id.0, theirs.generation_id), ("g", 5));
            let resp = client_response(v);
            let theirs: kp::HeartbeatResponse = client_round_trip(v, &resp, resp.encode(v), HeartbeatResponse::decode);
            assert_eq!(theirs.error_code, 27);
        }
    }
}
