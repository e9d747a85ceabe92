//! JoinGroup (key 11), v0–v9: a member joins a consumer group and, if leader, receives every
//! member's protocol metadata. Flexible from v6. `member_id` is empty on first join; from v4 the
//! coordinator answers MEMBER_ID_REQUIRED with an assigned id (KIP-394).

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 11;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 9;
pub const FLEXIBLE_MIN: i16 = 6;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupRequest {
    pub group_id: String,
    pub session_timeout_ms: i32,
    /// v1+; equal to `session_timeout_ms` before, as Kafka defines it.
    pub rebalance_timeout_ms: i32,
    pub member_id: String,
    /// v5+.
    pub group_instance_id: Option<String>,
    pub protocol_type: String,
    pub protocols: Vec<JoinGroupProtocol>,
    /// v8+.
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupProtocol {
    pub name: String,
    /// Opaque to the broker (the consumer's subscription).
    pub metadata: Bytes,
}

impl JoinGroupRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let group_id = r.string(flex, "group_id")?;
        let session_timeout_ms = r.i32()?;
        let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { session_timeout_ms };
        let member_id = r.string(flex, "member_id")?;
        let group_instance_id = if version >= 5 { r.nullable_string(flex)? } else { None };
        let protocol_type = r.string(flex, "protocol_type")?;
        let proto_min = min_bytes::string(flex) * 2 + min_bytes::tags(flex);
        let protocols = r.array(flex, proto_min, |r| {
            let name = r.string(flex, "protocols.name")?;
            let metadata = r.bytes(flex, "protocols.metadata")?;
            r.skip_tagged_fields(flex)?;
            Ok(JoinGroupProtocol { name, metadata })
        })?;
        let reason = if version >= 8 { r.nullable_string(flex)? } else { None };
        r.skip_tagged_fields(flex)?;
        Ok(JoinGroupRequest {
            group_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            member_id,
            group_instance_id,
            protocol_type,
            protocols,
            reason,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupResponse {
    /// v2+.
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub generation_id: i32,
    /// v7+.
    pub protocol_type: Option<String>,
    /// Nullable from v7; written as "" before when `None`.
    pub protocol_name: Option<String>,
    pub leader: String,
    /// v9+.
    pub skip_assignment: bool,
    pub member_id: String,
    pub members: Vec<JoinGroupMember>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupMember {
    pub member_id: String,
    /// v5+.
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

impl JoinGroupResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 2 {
            w.i32(self.throttle_time_ms);
        }
        w.i16(self.error_code);
        w.i32(self.generation_id);
        if version >= 7 {
            w.nullable_string(flex, self.protocol_type.as_deref());
            w.nullable_string(flex, self.protocol_name.as_deref());
        } else {
            w.string(flex, self.protocol_name.as_deref().unwrap_or_default());
        }
        w.string(flex, &self.leader);
        if version >= 9 {
            w.bool(self.skip_assignment);
        }
        w.string(flex, &self.member_id);
        w.array(flex, &self.members, |w, m| {
            w.string(flex, &m.member_id);
            if version >= 5 {
                w.nullable_string(flex, m.group_instance_id.as_deref());
            }
            w.bytes(flex, &m.metadata);
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl JoinGroupRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.string(flex, &self.group_id);
        w.i32(self.session_timeout_ms);
        if version >= 1 {
            w.i32(self.rebalance_timeout_ms);
        }
        w.string(flex, &self.member_id);
        if version >= 5 {
            w.nullable_string(flex, self.group_instance_id.as_deref());
        }
        w.string(flex, &self.protocol_type);
        w.array(flex, &self.protocols, |w, p| {
            w.string(flex, &p.name);
            w.bytes(flex, &p.metadata);
            w.no_tagged_fields(flex);
        });
        if version >= 8 {
            w.nullable_string(flex, self.reason.as_deref());
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl JoinGroupResponse {
    /// Before v7 the protocol name is a plain string, so it decodes as `Some` (maybe empty).
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = if version >= 2 { r.i32()? } else { 0 };
        let error_code = r.i16()?;
        let generation_id = r.i32()?;
        let (protocol_type, protocol_name) = if version >= 7 {
            (r.nullable_string(flex)?, r.nullable_string(flex)?)
        } else {
            (None, Some(r.string(flex, "protocol_name")?))
        };
        let leader = r.string(flex, "leader")?;
        let skip_assignment = if version >= 9 { r.bool()? } else { false };
        let member_id = r.string(flex, "member_id")?;
        let string = min_bytes::string(flex);
        let member_min = string + if version >= 5 { string } else { 0 } + string + min_bytes::tags(flex);
        let members = r.array(flex, member_min, |r| {
            let member_id = r.string(flex, "members.member_id")?;
            let group_instance_id = if version >= 5 { r.nullable_string(flex)? } else { None };
            let metadata = r.bytes(flex, "members.metadata")?;
            r.skip_tagged_fields(flex)?;
            Ok(JoinGroupMember {
                member_id,
                group_instance_id,
                metadata,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(JoinGroupResponse {
            throttle_time_ms,
            error_code,
            generation_id,
            protocol_type,
            protocol_name,
            leader,
            skip_assignment,
            member_id,
            members,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::join_group_request as kjq;

    pub(crate) fn sample(v: i16) -> kp::JoinGroupRequest {
        let mut p = kjq::JoinGroupRequestProtocol::default();
        p.name = s("range");
        p.metadata = Bytes::from_static(b"\x00\x01subscription");
        let mut sent = kp::JoinGroupRequest::default();
        sent.group_id = kp::GroupId(s("group-a"));
        sent.session_timeout_ms = 10_000;
        if v >= 1 {
            sent.rebalance_timeout_ms = 30_000;
        }
        sent.member_id = s("m-1");
        if v >= 5 {
            sent.group_instance_id = Some(s("instance-1"));
        }
        sent.protocol_type = s("consumer");
        sent.protocols = vec![p];
        if v >= 8 {
            sent.reason = Some(s("rejoin"));
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
            let Request::JoinGroup(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = JoinGroupRequest {
                group_id: "group-a".into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: if v >= 1 { 30_000 } else { 10_000 },
                member_id: "m-1".into(),
                group_instance_id: if v >= 5 { Some("instance-1".into()) } else { None },
                protocol_type: "consumer".into(),
                protocols: vec![JoinGroupProtocol {
                    name: "range".into(),
                    metadata: Bytes::from_static(b"\x00\x01subscription"),
                }],
                reason: if v >= 8 { Some("rejoin".into()) } else { None },
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = JoinGroupResponse {
            throttle_time_ms: 3,
            error_code: 0,
            generation_id: 7,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            leader: "m-1".into(),
            skip_assignment: true,
            member_id: "m-2".into(),
            members: vec![JoinGroupMember {
                member_id: "m-1".into(),
                group_instance_id: Some("instance-1".into()),
                metadata: Bytes::from_static(b"sub"),
            }],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::JoinGroupResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, if v >= 2 { 3 } else { 0 });
            assert_eq!((theirs.error_code, theirs.generation_id), (0, 7));
            let ptype = if v >= 7 { Some("consumer") } else { None };
            assert_eq!(theirs.protocol_type.as_deref(), ptype);
            assert_eq!(theirs.protocol_name.as_deref(), Some("range"));
            assert_eq!((&*theirs.leader, &*theirs.member_id), ("m-1", "m-2"));
            assert_eq!(theirs.skip_assignment, v >= 9);
            let m = &theirs.members[0];
            assert_eq!((&*m.member_id, &m.metadata[..]), ("m-1", &b"sub"[..]));
            let instance = if v >= 5 { Some("instance-1") } else { None };
            assert_eq!(m.group_instance_id.as_deref(), instance);
        }
    }

    pub(crate) fn client_request(v: i16) -> JoinGroupRequest {
        JoinGroupRequest {
            group_id: "g".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: if v >= 1 { 30_000 } else { 10_000 },
            member_id: "m".into(),
            group_instance_id: if v >= 5 { Some("i".into()) } else { None },
            protocol_type: "consumer".into(),
            protocols: vec![
                JoinGroupProtocol {
                    name: "range".into(),
                    metadata: Bytes::from_static(b"subscription"),
                },
                JoinGroupProtocol {
                    name: "roundrobin".into(),
                    metadata: Bytes::new(),
                },
            ],
            reason: if v >= 8 { Some("why".into()) } else { None },
        }
    }

    pub(crate) fn client_response(v: i16) -> JoinGroupResponse {
        JoinGroupResponse {
            throttle_time_ms: if v >= 2 { 1 } else { 0 },
            error_code: 0,
            generation_id: 5,
            protocol_type: if v >= 7 { Some("consumer".into()) } else { None },
            protocol_name: Some("range".into()),
            leader: "m1".into(),
            skip_assignment: v >= 9,
            member_id: "m2".into(),
            members: vec![JoinGroupMember {
                member_id: "m1".into(),
                group_instance_id: if v >= 5 { Some("i1".into()) } else { None },
                metadata: Bytes::from_static(b"subscription"),
            }],
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::JoinGroupRequest = client_round_trip(v, &req, req.encode(v), JoinGroupRequest::decode);
            assert_eq!(theirs.session_timeout_ms, 10_000);
            assert_eq!(theirs.rebalance_timeout_ms, if v >= 1 { 30_000 } else { -1 });
            let resp = client_response(v);
            let theirs: kp::JoinGroupResponse = client_round_trip(v, &resp, resp.encode(v), JoinGroupResponse::decode);
            assert_eq!((&*theirs.leader, &*theirs.member_id), ("m1", "m2"));
        }
    }
}
