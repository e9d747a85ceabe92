//! LeaveGroup (key 13), v0–v5: members leave a group. Flexible from v4. Before v3 one member
//! (`member_id`) leaves; from v3 (KIP-345) a batch of members, each by member id or instance id.
//! Decoding presents both forms as `members`.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 13;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 5;
pub const FLEXIBLE_MIN: i16 = 4;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveGroupRequest {
    pub group_id: String,
    /// v0–v2's single `member_id` as one member, or v3+'s `members`.
    pub members: Vec<MemberIdentity>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberIdentity {
    pub member_id: String,
    /// v3+.
    pub group_instance_id: Option<String>,
    /// v5+.
    pub reason: Option<String>,
}

impl LeaveGroupRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let group_id = r.string(flex, "group_id")?;
        let members = if version <= 2 {
            vec![MemberIdentity {
                member_id: r.string(flex, "member_id")?,
                ..MemberIdentity::default()
            }]
        } else {
            let member_min = min_bytes::string(flex) * 2 + min_bytes::tags(flex);
            r.array(flex, member_min, |r| {
                let member_id = r.string(flex, "members.member_id")?;
                let group_instance_id = r.nullable_string(flex)?;
                let reason = if version >= 5 { r.nullable_string(flex)? } else { None };
                r.skip_tagged_fields(flex)?;
                Ok(MemberIdentity {
                    member_id,
                    group_instance_id,
                    reason,
                })
            })?
        };
        r.skip_tagged_fields(flex)?;
        Ok(LeaveGroupRequest { group_id, members })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveGroupResponse {
    /// v1+.
    pub throttle_time_ms: i32,
    pub error_code: i16,
    /// v3+.
    pub members: Vec<MemberResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberResponse {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub error_code: i16,
}

impl LeaveGroupResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 1 {
            w.i32(self.throttle_time_ms);
        }
        w.i16(self.error_code);
        if version >= 3 {
            w.array(flex, &self.members, |w, m| {
                w.string(flex, &m.member_id);
                w.nullable_string(flex, m.group_instance_id.as_deref());
                w.i16(m.error_code);
                w.no_tagged_fields(flex);
            });
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl LeaveGroupRequest {
    /// v0–v2 carry exactly one member, by member id: another count is a programmer error.
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.string(flex, &self.group_id);
        if version <= 2 {
            assert_eq!(self.members.len(), 1, "v0-v2 leave exactly one member");
            w.string(flex, &self.members[0].member_id);
        } else {
            w.array(flex, &self.members, |w, m| {
                w.string(flex, &m.member_id);
                w.nullable_string(flex, m.group_instance_id.as_deref());
                if version >= 5 {
                    w.nullable_string(flex, m.reason.as_deref());
                }
                w.no_tagged_fields(flex);
            });
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl LeaveGroupResponse {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        let error_code = r.i16()?;
        let members = if version >= 3 {
            let member_min = min_bytes::string(flex) * 2 + 2 + min_bytes::tags(flex);
            r.array(flex, member_min, |r| {
                let member_id = r.string(flex, "members.member_id")?;
                let group_instance_id = r.nullable_string(flex)?;
                let error_code = r.i16()?;
                r.skip_tagged_fields(flex)?;
                Ok(MemberResponse {
                    member_id,
                    group_instance_id,
                    error_code,
                })
            })?
        } else {
            Vec::new()
        };
        r.skip_tagged_fields(flex)?;
        Ok(LeaveGroupResponse {
            throttle_time_ms,
            error_code,
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
    use kafka_protocol::messages::leave_group_request as klq;

    pub(crate) fn sample(v: i16) -> kp::LeaveGroupRequest {
        let mut sent = kp::LeaveGroupRequest::default();
        sent.group_id = kp::GroupId(s("group-a"));
        if v <= 2 {
            sent.member_id = s("m-1");
        } else {
            let mut m = klq::MemberIdentity::default();
            m.member_id = s("m-1");
            m.group_instance_id = Some(s("instance-1"));
            if v >= 5 {
                m.reason = Some(s("shutdown"));
            }
            sent.members = vec![m];
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
            let Request::LeaveGroup(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let member = MemberIdentity {
                member_id: "m-1".into(),
                group_instance_id: if v >= 3 { Some("instance-1".into()) } else { None },
                reason: if v >= 5 { Some("shutdown".into()) } else { None },
            };
            let want = LeaveGroupRequest {
                group_id: "group-a".into(),
                members: vec![member],
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = LeaveGroupResponse {
            throttle_time_ms: 2,
            error_code: 0,
            members: vec![MemberResponse {
                member_id: "m-1".into(),
                group_instance_id: Some("instance-1".into()),
                error_code: 25,
            }],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::LeaveGroupResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, if v >= 1 { 2 } else { 0 });
            if v >= 3 {
                let m = &theirs.members[0];
                assert_eq!((&*m.member_id, m.error_code), ("m-1", 25));
                assert_eq!(m.group_instance_id.as_deref(), Some("instance-1"));
            } else {
                assert!(theirs.members.is_empty());
            }
        }
    }

    pub(crate) fn client_request(v: i16) -> LeaveGroupRequest {
        let members = if v <= 2 {
            vec![MemberIdentity {
                member_id: "m1".into(),
                ..MemberIdentity::default()
            }]
        } else {
            vec![
                MemberIdentity {
                    member_id: "m1".into(),
                    group_instance_id: Some("i1".into()),
                    reason: if v >= 5 { Some("bye".into()) } else { None },
                },
                MemberIdentity {
                    member_id: "m2".into(),
                    group_instance_id: None,
                    reason: None,
                },
            ]
        };
        LeaveGroupRequest {
            group_id: "g".into(),
            members,
        }
    }

    pub(crate) fn client_response(v: i16) -> LeaveGroupResponse {
        LeaveGroupResponse {
            throttle_time_ms: if v >= 1 { 1 } else { 0 },
            error_code: 0,
            members: if v >= 3 {
                vec![MemberResponse {
                    member_id: "m1".into(),
                    group_instance_id: Some("i1".into()),
                    error_code: crate::ErrorCode::UnknownMemberId.code(),
                }]
            } else {
                vec![]
            },
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::LeaveGroupRequest = client_round_trip(v, &req, req.encode(v), LeaveGroupRequest::decode);
            if v <= 2 {
                assert_eq!(&*theirs.member_id, "m1");
            } else {
                assert_eq!(theirs.members.len(), 2);
            }
            let resp = client_response(v);
            let _: kp::LeaveGroupResponse = client_round_trip(v, &resp, resp.encode(v), LeaveGroupResponse::decode);
        }
    }
}
