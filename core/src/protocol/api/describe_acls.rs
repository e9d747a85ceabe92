//! DescribeAcls (key 29), v1–v3: the ACLs matching one filter, grouped by resource pattern.
//! Flexible from v2. v0 (no pattern type) is not spoken: every client that sends ACL requests
//! (librdkafka, kafka-python, the Java admin) speaks v1. Codes (resource type, pattern type,
//! operation, permission) travel as Kafka's INT8s and are judged by the handler, so decoding
//! never fails on a code it does not know. [`AclFilterWire`] is shared with DeleteAcls.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 29;
pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 3;
pub const FLEXIBLE_MIN: i16 = 2;

/// A filter as it travels: `None` strings match anything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclFilterWire {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission_type: i8,
}

impl AclFilterWire {
    /// Its smallest encoding: four INT8s and three string lengths.
    pub(crate) fn bytes_min(flex: bool) -> usize {
        4 + 3 * min_bytes::string(flex)
    }

    pub(crate) fn decode(flex: bool, r: &mut Reader<'_>) -> Result<Self> {
        Ok(AclFilterWire {
            resource_type: r.i8()?,
            resource_name: r.nullable_string(flex)?,
            pattern_type: r.i8()?,
            principal: r.nullable_string(flex)?,
            host: r.nullable_string(flex)?,
            operation: r.i8()?,
            permission_type: r.i8()?,
        })
    }

    pub(crate) fn encode(&self, flex: bool, w: &mut Writer) {
        w.i8(self.resource_type);
        w.nullable_string(flex, self.resource_name.as_deref());
        w.i8(self.pattern_type);
        w.nullable_string(flex, self.principal.as_deref());
        w.nullable_string(flex, self.host.as_deref());
        w.i8(self.operation);
        w.i8(self.permission_type);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeAclsRequest {
    pub filter: AclFilterWire,
}

impl DescribeAclsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let filter = AclFilterWire::decode(flex, r)?;
        r.skip_tagged_fields(flex)?;
        Ok(DescribeAclsRequest { filter })
    }

    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        self.filter.encode(flex, &mut w);
        w.no_tagged_fields(flex);
        w.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeAclsResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub resources: Vec<DescribeAclsResource>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeAclsResource {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub acls: Vec<AclDescription>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclDescription {
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

impl DescribeAclsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.i16(self.error_code);
        w.nullable_string(flex, self.error_message.as_deref());
        w.array(flex, &self.resources, |w, res| {
            w.i8(res.resource_type);
            w.string(flex, &res.resource_name);
            w.i8(res.pattern_type);
            w.array(flex, &res.acls, |w, a| {
                w.string(flex, &a.principal);
                w.string(flex, &a.host);
                w.i8(a.operation);
                w.i8(a.permission_type);
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }

    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let string = min_bytes::string(flex);
        let throttle_time_ms = r.i32()?;
        let error_code = r.i16()?;
        let error_message = r.nullable_string(flex)?;
        let acl_min = 2 * string + 2 + min_bytes::tags(flex);
        let resource_min = 2 + string + min_bytes::array(flex) + min_bytes::tags(flex);
        let resources = r.array(flex, resource_min, |r| {
            let resource_type = r.i8()?;
            let resource_name = r.string(flex, "resources.resource_name")?;
            let pattern_type = r.i8()?;
            let acls = r.array(flex, acl_min, |r| {
                let a = AclDescription {
                    principal: r.string(flex, "acls.principal")?,
                    host: r.string(flex, "acls.host")?,
                    operation: r.i8()?,
                    permission_type: r.i8()?,
                };
                r.skip_tagged_fields(flex)?;
                Ok(a)
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(DescribeAclsResource {
                resource_type,
                resource_name,
                pattern_type,
                acls,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(DescribeAclsResponse {
            throttle_time_ms,
            error_code,
            error_message,
            resources,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;

    pub(crate) fn sample(v: i16) -> kp::DescribeAclsRequest {
        let mut sent = kp::DescribeAclsRequest::default();
        sent.resource_type_filter = 2;
        sent.resource_name_filter = Some(s("orders"));
        sent.pattern_type_filter = 2;
        sent.principal_filter = None;
        sent.host_filter = Some(s("*"));
        sent.operation = 3;
        sent.permission_type = 1;
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

    fn want_filter() -> AclFilterWire {
        AclFilterWire {
            resource_type: 2,
            resource_name: Some("orders".into()),
            pattern_type: 2,
            principal: None,
            host: Some("*".into()),
            operation: 3,
            permission_type: 1,
        }
    }

    #[test]
    fn request_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sample(v)));
            let Request::DescribeAcls(req) = req else {
                panic!("wrong api: {req:?}")
            };
            assert_eq!(req.filter, want_filter(), "v{v}");
        }
    }

    pub(crate) fn client_request(_v: i16) -> DescribeAclsRequest {
        DescribeAclsRequest { filter: want_filter() }
    }

    pub(crate) fn client_response(_v: i16) -> DescribeAclsResponse {
        DescribeAclsResponse {
            throttle_time_ms: 1,
            error_code: 0,
            error_message: None,
            resources: vec![DescribeAclsResource {
                resource_type: 2,
                resource_name: "orders".into(),
                pattern_type: 4,
                acls: vec![AclDescription {
                    principal: "User:alice".into(),
                    host: "*".into(),
                    operation: 3,
                    permission_type: 3,
                }],
            }],
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::DescribeAclsRequest =
                client_round_trip(v, &req, req.encode(v), DescribeAclsRequest::decode);
            assert_eq!(theirs.resource_name_filter.as_deref(), Some("orders"));
            let resp = client_response(v);
            let theirs: kp::DescribeAclsResponse =
                client_round_trip(v, &resp, resp.encode(v), DescribeAclsResponse::decode);
            assert_eq!(theirs.resources[0].acls[0].principal.as_str(), "User:alice");
            assert_eq!(theirs.resources[0].pattern_type, 4);
        }
    }
}
