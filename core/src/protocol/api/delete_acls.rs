//! DeleteAcls (key 31), v1–v3: remove the ACLs matching each filter; one result per filter,
//! listing what it removed. Flexible from v2. v0 is not spoken, as for DescribeAcls.

use bytes::Bytes;

use super::describe_acls::AclFilterWire;
use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 31;
pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 3;
pub const FLEXIBLE_MIN: i16 = 2;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteAclsRequest {
    pub filters: Vec<AclFilterWire>,
}

impl DeleteAclsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let filter_min = AclFilterWire::bytes_min(flex) + min_bytes::tags(flex);
        let filters = r.array(flex, filter_min, |r| {
            let f = AclFilterWire::decode(flex, r)?;
            r.skip_tagged_fields(flex)?;
            Ok(f)
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(DeleteAclsRequest { filters })
    }

    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.array(flex, &self.filters, |w, f| {
            f.encode(flex, w);
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteAclsResponse {
    pub throttle_time_ms: i32,
    pub filter_results: Vec<DeleteAclsFilterResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteAclsFilterResult {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub matching_acls: Vec<DeleteAclsMatchingAcl>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteAclsMatchingAcl {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

impl DeleteAclsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.array(flex, &self.filter_results, |w, fr| {
            w.i16(fr.error_code);
            w.nullable_string(flex, fr.error_message.as_deref());
            w.array(flex, &fr.matching_acls, |w, m| {
                w.i16(m.error_code);
                w.nullable_string(flex, m.error_message.as_deref());
                w.i8(m.resource_type);
                w.string(flex, &m.resource_name);
                w.i8(m.pattern_type);
                w.string(flex, &m.principal);
                w.string(flex, &m.host);
                w.i8(m.operation);
                w.i8(m.permission_type);
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
        let tags = min_bytes::tags(flex);
        let throttle_time_ms = r.i32()?;
        let matching_min = 2 + 4 * string + 4 + tags;
        let result_min = 2 + string + min_bytes::array(flex) + tags;
        let filter_results = r.array(flex, result_min, |r| {
            let error_code = r.i16()?;
            let error_message = r.nullable_string(flex)?;
            let matching_acls = r.array(flex, matching_min, |r| {
                let m = DeleteAclsMatchingAcl {
                    error_code: r.i16()?,
                    error_message: r.nullable_string(flex)?,
                    resource_type: r.i8()?,
                    resource_name: r.string(flex, "matching_acls.resource_name")?,
                    pattern_type: r.i8()?,
                    principal: r.string(flex, "matching_acls.principal")?,
                    host: r.string(flex, "matching_acls.host")?,
                    operation: r.i8()?,
                    permission_type: r.i8()?,
                };
                r.skip_tagged_fields(flex)?;
                Ok(m)
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(DeleteAclsFilterResult {
                error_code,
                error_message,
                matching_acls,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(DeleteAclsResponse {
            throttle_time_ms,
            filter_results,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::delete_acls_request as kq;

    pub(crate) fn sample(v: i16) -> kp::DeleteAclsRequest {
        let mut f = kq::DeleteAclsFilter::default();
        f.resource_type_filter = 3;
        f.resource_name_filter = None;
        f.pattern_type_filter = 3;
        f.principal_filter = Some(s("User:bob"));
        f.host_filter = None;
        f.operation = 2;
        f.permission_type = 2;
        let mut sent = kp::DeleteAclsRequest::default();
        if v >= FLEXIBLE_MIN {
            f.unknown_tagged_fields = unknown_tags();
            sent.unknown_tagged_fields = unknown_tags();
        }
        sent.filters = vec![f];
        sent
    }

    pub(crate) fn sample_frames() -> Vec<Vec<u8>> {
        (VERSION_MIN..=VERSION_MAX)
            .map(|v| request_frame(API_KEY, v, &sample(v)))
            .collect()
    }

    fn want() -> AclFilterWire {
        AclFilterWire {
            resource_type: 3,
            resource_name: None,
            pattern_type: 3,
            principal: Some("User:bob".into()),
            host: None,
            operation: 2,
            permission_type: 2,
        }
    }

    #[test]
    fn request_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sample(v)));
            let Request::DeleteAcls(req) = req else {
                panic!("wrong api: {req:?}")
            };
            assert_eq!(req.filters, vec![want()], "v{v}");
        }
    }

    pub(crate) fn client_request(_v: i16) -> DeleteAclsRequest {
        DeleteAclsRequest { filters: vec![want()] }
    }

    pub(crate) fn client_response(_v: i16) -> DeleteAclsResponse {
        DeleteAclsResponse {
            throttle_time_ms: 1,
            filter_results: vec![DeleteAclsFilterResult {
                error_code: 0,
                error_message: None,
                matching_acls: vec![DeleteAclsMatchingAcl {
                    error_code: 0,
                    error_message: None,
                    resource_type: 3,
                    resource_name: "g".into(),
                    pattern_type: 3,
                    principal: "User:bob".into(),
                    host: "*".into(),
                    operation: 2,
                    permission_type: 2,
                }],
            }],
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::DeleteAclsRequest = client_round_trip(v, &req, req.encode(v), DeleteAclsRequest::decode);
            assert_eq!(theirs.filters[0].principal_filter.as_deref(), Some("User:bob"));
            let resp = client_response(v);
            let theirs: kp::DeleteAclsResponse =
                client_round_trip(v, &resp, resp.encode(v), DeleteAclsResponse::decode);
            assert_eq!(theirs.filter_results[0].matching_acls[0].resource_name.as_str(), "g");
        }
    }
}
