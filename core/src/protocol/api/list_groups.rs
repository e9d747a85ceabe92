//! ListGroups (key 16), v0–v5: the groups a broker coordinates. Flexible from v3. v4 (KIP-518)
//! filters by state and answers each group's state; v5 (KIP-848) filters by type and answers
//! each group's type ("classic" for every Gregor group).

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 16;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 5;
pub const FLEXIBLE_MIN: i16 = 3;
/// First version with `states_filter` and `group_state`.
pub const STATES_MIN: i16 = 4;
/// First version with `types_filter` and `group_type`.
pub const TYPES_MIN: i16 = 5;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsRequest {
    /// v4+: only groups in these states (empty: all).
    pub states_filter: Vec<String>,
    /// v5+: only groups of these types (empty: all).
    pub types_filter: Vec<String>,
}

impl ListGroupsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let strings = |r: &mut Reader<'_>, field| r.array(flex, min_bytes::string(flex), |r| r.string(flex, field));
        let states_filter = if version >= STATES_MIN {
            strings(r, "states_filter")?
        } else {
            vec![]
        };
        let types_filter = if version >= TYPES_MIN {
            strings(r, "types_filter")?
        } else {
            vec![]
        };
        r.skip_tagged_fields(flex)?;
        Ok(ListGroupsRequest {
            states_filter,
            types_filter,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsResponse {
    /// v1+.
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub groups: Vec<ListedGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    /// v4+.
    pub group_state: String,
    /// v5+.
    pub group_type: String,
}

impl ListGroupsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 1 {
            w.i32(self.throttle_time_ms);
        }
        w.i16(self.error_code);
        w.array(flex, &self.groups, |w, g| {
            w.string(flex, &g.group_id);
            w.string(flex, &g.protocol_type);
            if version >= STATES_MIN {
                w.string(flex, &g.group_state);
            }
            if version >= TYPES_MIN {
                w.string(flex, &g.group_type);
            }
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl ListGroupsRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= STATES_MIN {
            w.array(flex, &self.states_filter, |w, s| w.string(flex, s));
        }
        if version >= TYPES_MIN {
            w.array(flex, &self.types_filter, |w, s| w.string(flex, s));
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl ListGroupsResponse {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        let error_code = r.i16()?;
        let group_min = min_bytes::string(flex) * 2 + min_bytes::tags(flex);
        let groups = r.array(flex, group_min, |r| {
            let group_id = r.string(flex, "groups.group_id")?;
            let protocol_type = r.string(flex, "groups.protocol_type")?;
            let group_state = if version >= STATES_MIN {
                r.string(flex, "groups.group_state")?
            } else {
                String::new()
            };
            let group_type = if version >= TYPES_MIN {
                r.string(flex, "groups.group_type")?
            } else {
                String::new()
            };
            r.skip_tagged_fields(flex)?;
            Ok(ListedGroup {
                group_id,
                protocol_type,
                group_state,
                group_type,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(ListGroupsResponse {
            throttle_time_ms,
            error_code,
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

    pub(crate) fn sample(v: i16) -> kp::ListGroupsRequest {
        let mut sent = kp::ListGroupsRequest::default();
        if v >= STATES_MIN {
            sent.states_filter = vec![s("Stable"), s("Empty")];
        }
        if v >= TYPES_MIN {
            sent.types_filter = vec![s("classic")];
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
            let Request::ListGroups(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = ListGroupsRequest {
                states_filter: if v >= STATES_MIN {
                    vec!["Stable".into(), "Empty".into()]
                } else {
                    vec![]
                },
                types_filter: if v >= TYPES_MIN { vec!["classic".into()] } else { vec![] },
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = ListGroupsResponse {
            throttle_time_ms: 4,
            error_code: 0,
            groups: vec![
                ListedGroup {
                    group_id: "g-1".into(),
                    protocol_type: "consumer".into(),
                    group_state: "Stable".into(),
                    group_type: "classic".into(),
                },
                ListedGroup {
                    group_id: "g-2".into(),
                    protocol_type: String::new(),
                    group_state: "Empty".into(),
                    group_type: "classic".into(),
                },
            ],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::ListGroupsResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, if v >= 1 { 4 } else { 0 });
            assert_eq!(theirs.groups.len(), 2, "v{v}");
            let g = &theirs.groups[0];
            assert_eq!((&*g.group_id.0, &*g.protocol_type), ("g-1", "consumer"));
            assert_eq!(&*g.group_state, if v >= STATES_MIN { "Stable" } else { "" });
            assert_eq!(&*g.group_type, if v >= TYPES_MIN { "classic" } else { "" });
        }
    }

    pub(crate) fn client_request(v: i16) -> ListGroupsRequest {
        ListGroupsRequest {
            states_filter: if v >= STATES_MIN { vec!["Stable".into()] } else { vec![] },
            types_filter: if v >= TYPES_MIN { vec!["classic".into()] } else { vec![] },
        }
    }

    pub(crate) fn client_response(v: i16) -> ListGroupsResponse {
        ListGroupsResponse {
            throttle_time_ms: if v >= 1 { 2 } else { 0 },
            error_code: crate::ErrorCode::CoordinatorNotAvailable.code(),
            groups: vec![ListedGroup {
                group_id: "g".into(),
                protocol_type: "consumer".into(),
                group_state: if v >= STATES_MIN {
                    "Stable".into()
                } else {
                    String::new()
                },
                group_type: if v >= TYPES_MIN {
                    "classic".into()
                } else {
                    String::new()
                },
            }],
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::ListGroupsRequest = client_round_trip(v, &req, req.encode(v), ListGroupsRequest::decode);
            assert_eq!(theirs.states_filter.len(), usize::from(v >= STATES_MIN));
            let resp = client_response(v);
            let theirs: kp::ListGroupsResponse =
                client_round_trip(v, &resp, resp.encode(v), ListGroupsResponse::decode);
            assert_eq!(&*theirs.groups[0].group_id.0, "g");
        }
    }
}
