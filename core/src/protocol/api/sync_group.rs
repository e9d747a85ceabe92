//! SyncGroup (key 14), v0–v5: the leader hands in the assignment, every member gets its own.
//! Flexible from v4; from v5 both sides name the protocol type and name (KIP-559).

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 14;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 5;
pub const FLEXIBLE_MIN: i16 = 4;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    /// v3+.
    pub group_instance_id: Option<String>,
    /// v5+.
    pub protocol_type: Option<String>,
    /// v5+.
    pub protocol_name: Option<String>,
    /// Empty unless sent by the leader.
    pub assignments: Vec<SyncGroupAssignment>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupAssignment {
    pub member_id: String,
    pub assignment: Bytes,
}

impl SyncGroupRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let group_id = r.string(flex, "group_id")?;
        let generation_id = r.i32()?;
        let member_id = r.string(flex, "member_id")?;
        let group_instance_id = if version >= 3 { r.nullable_string(flex)? } else { None };
        let (protocol_type, protocol_name) = if version >= 5 {
            (r.nullable_string(flex)?, r.nullable_string(flex)?)
        } else {
            (None, None)
        };
        let assign_min = min_bytes::string(flex) * 2 + min_bytes::tags(flex);
        let assignments = r.array(flex, assign_min, |r| {
            let member_id = r.string(flex, "assignments.member_id")?;
            let assignment = r.bytes(flex, "assignments.assignment")?;
            r.skip_tagged_fields(flex)?;
            Ok(SyncGroupAssignment { member_id, assignment })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(SyncGroupRequest {
            group_id,
            generation_id,
            member_id,
            group_instance_id,
            protocol_type,
            protocol_name,
            assignments,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupResponse {
    /// v1+.
    pub throttle_time_ms: i32,
    pub error_code: i16,
    /// v5+.
    pub protocol_type: Option<String>,
    /// v5+.
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncGroupResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 1 {
            w.i32(self.throttle_time_ms);
        }
        w.i16(self.error_code);
        if version >= 5 {
            w.nullable_string(flex, self.protocol_type.as_deref());
            w.nullable_string(flex, self.protocol_name.as_deref());
        }
        w.bytes(flex, &self.assignment);
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl SyncGroupRequest {
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
        if version >= 5 {
            w.nullable_string(flex, self.protocol_type.as_deref());
            w.nullable_string(flex, self.protocol_name.as_deref());
        }
        w.array(flex, &self.assignments, |w, a| {
            w.string(flex, &a.member_id);
            w.bytes(flex, &a.assignment);
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl SyncGroupResponse {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        let error_code = r.i16()?;
        let (protocol_type, protocol_name) = if version >= 5 {
            (r.nullable_string(flex)?, r.nullable_string(flex)?)
        } else {
            (None, None)
        };
        let assignment = r.bytes(flex, "assignment")?;
        r.skip_tagged_fields(flex)?;
        Ok(SyncGroupResponse {
            throttle_time_ms,
            error_code,
            protocol_type,
            protocol_name,
            assignment,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::sync_group_request as ksq;

    pub(crate) fn sample(v: i16) -> kp::SyncGroupRequest {
        let mut a = ksq::SyncGroupRequestAssignment::default();
        a.member_id = s("m-1");
        a.assignment = Bytes::from_static(b"partitions 0-3");
        let mut sent = kp::SyncGroupRequest::default();
        sent.group_id = kp::GroupId(s("group-a"));
        sent.generation_id = 7;
        sent.member_id = s("m-1");
        if v >= 3 {
            sent.group_instance_id = Some(s("instance-1"));
        }
        if v >= 5 {
            sent.protocol_type = Some(s("consumer"));
            sent.protocol_name = Some(s("range"));
        }
        sent.assignments = vec![a];
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
            let Request::SyncGroup(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = SyncGroupRequest {
                group_id: "group-a".into(),
                generation_id: 7,
                member_id: "m-1".into(),
                group_instance_id: if v >= 3 { Some("instance-1".into()) } else { None },
                protocol_type: if v >= 5 { Some("consumer".into()) } else { None },
                protocol_name: if v >= 5 { Some("range".into()) } else { None },
                assignments: vec![SyncGroupAssignment {
                    member_id: "m-1".into(),
                    assignment: Bytes::from_static(b"partitions 0-3"),
                }],
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = SyncGroupResponse {
            throttle_time_ms: 2,
            error_code: 0,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignment: Bytes::from_static(b"mine"),
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::SyncGroupResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, if v >= 1 { 2 } else { 0 });
            assert_eq!(&theirs.assignment[..], b"mine");
            let (t, n) = if v >= 5 {
                (Some("consumer"), Some("range"))
            } else {
                (None, None)
            };
            assert_eq!(theirs.protocol_type.as_deref(), t);
            assert_eq!(theirs.protocol_name.as_deref(), n);
        }
    }

    pub(crate) fn client_request(v: i16) -> SyncGroupRequest {
        SyncGroupRequest {
            group_id: "g".into(),
            generation_id: 5,
            member_id: "m".into(),
            group_instance_id: if v >= 3 { Some("i".into()) } else { None },
            protocol_type: if v >= 5 { Some("consumer".into()) } else { None },
            protocol_name: if v >= 5 { Some("range".into()) } else { None },
            assignments: vec![SyncGroupAssignment {
                member_id: "m".into(),
                assignment: Bytes::from_static(b"assignment"),
            }],
        }
    }

    pub(crate) fn client_response(v: i16) -> SyncGroupResponse {
        SyncGroupResponse {
            throttle_time_ms: if v >= 1 { 2 } else { 0 },
            error_code: crate::ErrorCode::RebalanceInProgress.code(),
            protocol_type: if v >= 5 { Some("consumer".into()) } else { None },
            protocol_name: if v >= 5 { Some("range".into()) } else { None },
            assignment: Bytes::from_static(b"assignment"),
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::SyncGroupRequest = client_round_trip(v, &req, req.encode(v), SyncGroupRequest::decode);
            assert_eq!(theirs.generation_id, 5);
            let resp = client_response(v);
            let theirs: kp::SyncGroupResponse = client_round_trip(v, &resp, resp.encode(v), SyncGroupResponse::decode);
            assert_eq!(&theirs.assignment[..], b"assignment");
        }
    }
}
