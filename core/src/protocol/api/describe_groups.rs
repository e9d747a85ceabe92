//! DescribeGroups (key 15), v0–v5: a group's state, protocol and members (client id, host,
//! subscription metadata and assignment). Flexible from v5. v3 adds authorized operations, v4
//! each member's group instance id (KIP-345). v6 (KIP-1043: GROUP_ID_NOT_FOUND and an error
//! message) is not spoken: a client falls back to v5.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 15;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 5;
pub const FLEXIBLE_MIN: i16 = 5;
/// First version with `include_authorized_operations` and `authorized_operations`.
pub const AUTHORIZED_OPERATIONS_MIN: i16 = 3;
/// First version with each member's `group_instance_id`.
pub const INSTANCE_ID_MIN: i16 = 4;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeGroupsRequest {
    pub groups: Vec<String>,
    /// v3+.
    pub include_authorized_operations: bool,
}

impl DescribeGroupsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let groups = r.array(flex, min_bytes::string(flex), |r| r.string(flex, "groups"))?;
        let include_authorized_operations = if version >= AUTHORIZED_OPERATIONS_MIN {
            r.bool()?
        } else {
            false
        };
        r.skip_tagged_fields(flex)?;
        Ok(DescribeGroupsRequest {
            groups,
            include_authorized_operations,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeGroupsResponse {
    /// v1+.
    pub throttle_time_ms: i32,
    pub groups: Vec<DescribedGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedGroup {
    pub error_code: i16,
    pub group_id: String,
    /// Kafka's state names: "Empty", "PreparingRebalance", "CompletingRebalance", "Stable",
    /// "Dead".
    pub group_state: String,
    pub protocol_type: String,
    /// The chosen protocol (for consumers, the assignor's name).
    pub protocol_data: String,
    pub members: Vec<DescribedMember>,
    /// v3+; `i32::MIN` when not asked for.
    pub authorized_operations: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedMember {
    pub member_id: String,
    /// v4+.
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The member's metadata for the chosen protocol (for consumers, its subscription).
    pub member_metadata: Bytes,
    /// What the leader assigned it (for consumers, a ConsumerProtocolAssignment).
    pub member_assignment: Bytes,
}

impl DescribeGroupsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 1 {
            w.i32(self.throttle_time_ms);
        }
        w.array(flex, &self.groups, |w, g| {
            w.i16(g.error_code);
            w.string(flex, &g.group_id);
            w.string(flex, &g.group_state);
            w.string(flex, &g.protocol_type);
            w.string(flex, &g.protocol_data);
            w.array(flex, &g.members, |w, m| {
                w.string(flex, &m.member_id);
                if version >= INSTANCE_ID_MIN {
                    w.nullable_string(flex, m.group_instance_id.as_deref());
                }
                w.string(flex, &m.client_id);
                w.string(flex, &m.client_host);
                w.bytes(flex, &m.member_metadata);
                w.bytes(flex, &m.member_assignment);
                w.no_tagged_fields(flex);
            });
            if version >= AUTHORIZED_OPERATIONS_MIN {
                w.i32(g.authorized_operations);
            }
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl DescribeGroupsRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.array(flex, &self.groups, |w, g| w.string(flex, g));
        if version >= AUTHORIZED_OPERATIONS_MIN {
            w.bool(self.include_authorized_operations);
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl DescribeGroupsResponse {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        let member_min = min_bytes::string(flex) * 5 + min_bytes::tags(flex);
        let group_min = 2 + min_bytes::string(flex) * 4 + min_bytes::array(flex) + min_bytes::tags(flex);
        let groups = r.array(flex, group_min, |r| {
            let error_code = r.i16()?;
            let group_id = r.string(flex, "groups.group_id")?;
            let group_state = r.string(flex, "groups.group_state")?;
            let protocol_type = r.string(flex, "groups.protocol_type")?;
            let protocol_data = r.string(flex, "groups.protocol_data")?;
            let members = r.array(flex, member_min, |r| {
                let member_id = r.string(flex, "members.member_id")?;
                let group_instance_id = if version >= INSTANCE_ID_MIN {
                    r.nullable_string(flex)?
                } else {
                    None
                };
                let client_id = r.string(flex, "members.client_id")?;
                let client_host = r.string(flex, "members.client_host")?;
                let member_metadata = r.bytes(flex, "members.member_metadata")?;
                let member_assignment = r.bytes(flex, "members.member_assignment")?;
                r.skip_tagged_fields(flex)?;
                Ok(DescribedMember {
                    member_id,
                    group_instance_id,
                    client_id,
                    client_host,
                    member_metadata,
                    member_assignment,
                })
            })?;
            let authorized_operations = if version >= AUTHORIZED_OPERATIONS_MIN {
                r.i32()?
            } else {
                i32::MIN
            };
            r.skip_tagged_fields(flex)?;
            Ok(DescribedGroup {
                error_code,
                group_id,
                group_state,
                protocol_type,
                protocol_data,
                members,
                authorized_operations,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(DescribeGroupsResponse {
            throttle_time_ms,
            groups,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;

    pub(crate) fn sample(v: i16) -> kp::DescribeGroupsRequest {
        let mut sent = kp::DescribeGroupsRequest::default();
        sent.groups = vec![kp::GroupId(s("group-a")), kp::GroupId(s("group-b"))];
        if v >= AUTHORIZED_OPERATIONS_MIN {
            sent.include_authorized_operations = true;
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
            let Request::DescribeGroups(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = DescribeGroupsRequest {
                groups: vec!["group-a".into(), "group-b".into()],
                include_authorized_operations: v >= AUTHORIZED_OPERATIONS_MIN,
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    fn described(v: i16) -> DescribedGroup {
        DescribedGroup {
            error_code: 0,
            group_id: "group-a".into(),
            group_state: "Stable".into(),
            protocol_type: "consumer".into(),
            protocol_data: "range".into(),
            members: vec![DescribedMember {
                member_id: "m-1".into(),
                group_instance_id: if v >= INSTANCE_ID_MIN { Some("i-1".into()) } else { None },
                client_id: "client-1".into(),
                client_host: "/127.0.0.1".into(),
                member_metadata: Bytes::from_static(b"subscription"),
                member_assignment: Bytes::from_static(b"assignment"),
            }],
            authorized_operations: if v >= AUTHORIZED_OPERATIONS_MIN { 8 } else { i32::MIN },
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        for v in VERSION_MIN..=VERSION_MAX {
            let ours = DescribeGroupsResponse {
                throttle_time_ms: 6,
                groups: vec![described(v)],
            };
            let theirs: kp::DescribeGroupsResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, if v >= 1 { 6 } else { 0 });
            let g = &theirs.groups[0];
            assert_eq!(
                (&*g.group_id.0, &*g.group_state, &*g.protocol_type, &*g.protocol_data),
                ("group-a", "Stable", "consumer", "range")
            );
            let m = &g.members[0];
            assert_eq!(
                (&*m.member_id, &*m.client_id, &*m.client_host),
                ("m-1", "client-1", "/127.0.0.1")
            );
            assert_eq!(
                (&m.member_metadata[..], &m.member_assignment[..]),
                (&b"subscription"[..], &b"assignment"[..])
            );
            assert_eq!(m.group_instance_id.as_deref(), (v >= INSTANCE_ID_MIN).then_some("i-1"));
            if v >= AUTHORIZED_OPERATIONS_MIN {
                assert_eq!(g.authorized_operations, 8);
            }
        }
    }

    pub(crate) fn client_request(v: i16) -> DescribeGroupsRequest {
        DescribeGroupsRequest {
            groups: vec!["g".into()],
            include_authorized_operations: v >= AUTHORIZED_OPERATIONS_MIN,
        }
    }

    pub(crate) fn client_response(v: i16) -> DescribeGroupsResponse {
        let mut empty = described(v);
        empty.group_id = "h".into();
        empty.group_state = "Dead".into();
        empty.members.clear();
        empty.error_code = crate::ErrorCode::CoordinatorNotAvailable.code();
        DescribeGroupsResponse {
            throttle_time_ms: if v >= 1 { 1 } else { 0 },
            groups: vec![described(v), empty],
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::DescribeGroupsRequest =
                client_round_trip(v, &req, req.encode(v), DescribeGroupsRequest::decode);
            assert_eq!(theirs.groups.len(), 1);
            let resp = client_response(v);
            let theirs: kp::DescribeGroupsResponse =
                client_round_trip(v, &resp, resp.encode(v), DescribeGroupsResponse::decode);
            assert_eq!(theirs.groups[1].error_code, 15);
        }
    }
}
