//! CreateAcls (key 30), v1–v3: add ACL bindings; one result per creation, in order. Flexible
//! from v2. v0 (no pattern type) is not spoken, as for DescribeAcls. Codes travel as INT8s and
//! are judged by the handler.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 30;
pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 3;
pub const FLEXIBLE_MIN: i16 = 2;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateAclsRequest {
    pub creations: Vec<AclCreation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclCreation {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

impl CreateAclsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let creation_min = 4 + 3 * min_bytes::string(flex) + min_bytes::tags(flex);
        let creations = r.array(flex, creation_min, |r| {
            let c = AclCreation {
                resource_type: r.i8()?,
                resource_name: r.string(flex, "creations.resource_name")?,
                pattern_type: r.i8()?,
                principal: r.string(flex, "creations.principal")?,
                host: r.string(flex, "creations.host")?,
                operation: r.i8()?,
                permission_type: r.i8()?,
            };
            r.skip_tagged_fields(flex)?;
            Ok(c)
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(CreateAclsRequest { creations })
    }

    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.array(flex, &self.creations, |w, c| {
            w.i8(c.resource_type);
            w.string(flex, &c.resource_name);
            w.i8(c.pattern_type);
            w.string(flex, &c.principal);
            w.string(flex, &c.host);
            w.i8(c.operation);
            w.i8(c.permission_type);
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateAclsResponse {
    pub throttle_time_ms: i32,
    pub results: Vec<AclCreationResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclCreationResult {
    pub error_code: i16,
    pub error_message: Option<String>,
}

impl CreateAclsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.array(flex, &self.results, |w, res| {
            w.i16(res.error_code);
            w.nullable_string(flex, res.error_message.as_deref());
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }

    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = r.i32()?;
        let result_min = 2 + min_bytes::string(flex) + min_bytes::tags(flex);
        let results = r.array(flex, result_min, |r| {
            let res = AclCreationResult {
                error_code: r.i16()?,
                error_message: r.nullable_string(flex)?,
            };
            r.skip_tagged_fields(flex)?;
            Ok(res)
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(CreateAclsResponse {
            throttle_time_ms,
            results,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::create_acls_request as kq;

    pub(crate) fn sample(v: i16) -> kp::CreateAclsRequest {
        let mut c = kq::AclCreation::default();
        c.resource_type = 2;
        c.resource_name = s("pay.");
        c.resource_pattern_type = 4;
        c.principal = s("User:alice");
        c.host = s("*");
        c.operation = 4;
        c.permission_type = 3;
        let mut sent = kp::CreateAclsRequest::default();
        if v >= FLEXIBLE_MIN {
            c.unknown_tagged_fields = unknown_tags();
            sent.unknown_tagged_fields = unknown_tags();
        }
        sent.creations = vec![c];
        sent
    }

    pub(crate) fn sample_frames() -> Vec<Vec<u8>> {
        (VERSION_MIN..=VERSION_MAX)
            .map(|v| request_frame(API_KEY, v, &sample(v)))
            .collect()
    }

    fn want() -> AclCreation {
        AclCreation {
            resource_type: 2,
            resource_name: "pay.".into(),
            pattern_type: 4,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: 4,
            permission_type: 3,
        }
    }

    #[test]
    fn request_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sample(v)));
            let Request::CreateAcls(req) = req else {
                panic!("wrong api: {req:?}")
            };
            assert_eq!(req.creations, vec![want()], "v{v}");
        }
    }

    pub(crate) fn client_request(_v: i16) -> CreateAclsRequest {
        CreateAclsRequest {
            creations: vec![want()],
        }
    }

    pub(crate) fn client_response(_v: i16) -> CreateAclsResponse {
        CreateAclsResponse {
            throttle_time_ms: 1,
            results: vec![
                AclCreationResult::default(),
                AclCreationResult {
                    error_code: crate::ErrorCode::ClusterAuthorizationFailed.code(),
                    error_message: Some("no".into()),
                },
            ],
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::CreateAclsRequest = client_round_trip(v, &req, req.encode(v), CreateAclsRequest::decode);
            assert_eq!(theirs.creations[0].resource_pattern_type, 4);
            let resp = client_response(v);
            let theirs: kp::CreateAclsResponse =
                client_round_trip(v, &resp, resp.encode(v), CreateAclsResponse::decode);
            assert_eq!(theirs.results[1].error_code, 31);
        }
    }
}
