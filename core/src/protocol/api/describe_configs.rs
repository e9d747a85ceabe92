//! DescribeConfigs (key 32), v1–v4: topic and broker configuration, as admin clients and
//! `kafka-configs` read it. Flexible from v4. v0 (with `is_default` instead of a config source)
//! is not supported; every current client speaks v1+.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 32;
pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 4;
pub const FLEXIBLE_MIN: i16 = 4;

pub const RESOURCE_TYPE_TOPIC: i8 = 2;
pub const RESOURCE_TYPE_BROKER: i8 = 4;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsRequest {
    pub resources: Vec<DescribeConfigsResource>,
    pub include_synonyms: bool,
    /// v3+.
    pub include_documentation: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsResource {
    pub resource_type: i8,
    pub resource_name: String,
    /// `None`: every key.
    pub configuration_keys: Option<Vec<String>>,
}

impl DescribeConfigsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let res_min = 1 + min_bytes::string(flex) + min_bytes::array(flex) + min_bytes::tags(flex);
        let resources = r.array(flex, res_min, |r| {
            let resource_type = r.i8()?;
            let resource_name = r.string(flex, "resources.resource_name")?;
            let configuration_keys = r.nullable_array(flex, min_bytes::string(flex), |r| {
                r.string(flex, "resources.configuration_keys")
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(DescribeConfigsResource {
                resource_type,
                resource_name,
                configuration_keys,
            })
        })?;
        let include_synonyms = r.bool()?;
        let include_documentation = if version >= 3 { r.bool()? } else { false };
        r.skip_tagged_fields(flex)?;
        Ok(DescribeConfigsRequest {
            resources,
            include_synonyms,
            include_documentation,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsResponse {
    pub throttle_time_ms: i32,
    pub results: Vec<DescribeConfigsResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsResult {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub resource_type: i8,
    pub resource_name: String,
    pub configs: Vec<DescribeConfigsEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsEntry {
    pub name: String,
    pub value: Option<String>,
    pub read_only: bool,
    pub config_source: i8,
    pub is_sensitive: bool,
    pub synonyms: Vec<DescribeConfigsSynonym>,
    /// v3+.
    pub config_type: i8,
    /// v3+.
    pub documentation: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsSynonym {
    pub name: String,
    pub value: Option<String>,
    pub source: i8,
}

impl DescribeConfigsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.array(flex, &self.results, |w, res| {
            w.i16(res.error_code);
            w.nullable_string(flex, res.error_message.as_deref());
            w.i8(res.resource_type);
            w.string(flex, &res.resource_name);
            w.array(flex, &res.configs, |w, c| {
                w.string(flex, &c.name);
                w.nullable_string(flex, c.value.as_deref());
                w.bool(c.read_only);
                w.i8(c.config_source);
                w.bool(c.is_sensitive);
                w.array(flex, &c.synonyms, |w, s| {
                    w.string(flex, &s.name);
                    w.nullable_string(flex, s.value.as_deref());
                    w.i8(s.source);
                    w.no_tagged_fields(flex);
                });
                if version >= 3 {
                    w.i8(c.config_type);
                    w.nullable_string(flex, c.documentation.as_deref());
                }
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl DescribeConfigsRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.array(flex, &self.resources, |w, res| {
            w.i8(res.resource_type);
            w.string(flex, &res.resource_name);
            w.nullable_array(flex, res.configuration_keys.as_deref(), |w, k| w.string(flex, k));
            w.no_tagged_fields(flex);
        });
        w.bool(self.include_synonyms);
        if version >= 3 {
            w.bool(self.include_documentation);
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl DescribeConfigsResponse {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let string = min_bytes::string(flex);
        let array = min_bytes::array(flex);
        let tags = min_bytes::tags(flex);
        let throttle_time_ms = r.i32()?;
        let result_min = 2 + string + 1 + string + array + tags;
        let synonym_min = string + string + 1 + tags;
        let entry_min = string + string + 3 + array + if version >= 3 { 1 + string } else { 0 } + tags;
        let results = r.array(flex, result_min, |r| {
            let error_code = r.i16()?;
            let error_message = r.nullable_string(flex)?;
            let resource_type = r.i8()?;
            let resource_name = r.string(flex, "results.resource_name")?;
            let configs = r.array(flex, entry_min, |r| {
                let name = r.string(flex, "configs.name")?;
                let value = r.nullable_string(flex)?;
                let read_only = r.bool()?;
                let config_source = r.i8()?;
                let is_sensitive = r.bool()?;
                let synonyms = r.array(flex, synonym_min, |r| {
                    let name = r.string(flex, "synonyms.name")?;
                    let value = r.nullable_string(flex)?;
                    let source = r.i8()?;
                    r.skip_tagged_fields(flex)?;
                    Ok(DescribeConfigsSynonym { name, value, source })
                })?;
                let (config_type, documentation) = if version >= 3 {
                    (r.i8()?, r.nullable_string(flex)?)
                } else {
                    (0, None)
                };
                r.skip_tagged_fields(flex)?;
                Ok(DescribeConfigsEntry {
                    name,
                    value,
                    read_only,
                    config_source,
                    is_sensitive,
                    synonyms,
                    config_type,
                    documentation,
                })
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(DescribeConfigsResult {
                error_code,
                error_message,
                resource_type,
                resource_name,
                configs,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(DescribeConfigsResponse {
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
    use kafka_protocol::messages::describe_configs_request as kq;

    pub(crate) fn sample(v: i16) -> kp::DescribeConfigsRequest {
        let mut topic = kq::DescribeConfigsResource::default();
        topic.resource_type = RESOURCE_TYPE_TOPIC;
        topic.resource_name = s("orders");
        topic.configuration_keys = Some(vec![s("retention.ms")]);
        let mut broker = kq::DescribeConfigsResource::default();
        broker.resource_type = RESOURCE_TYPE_BROKER;
        broker.resource_name = s("1");
        broker.configuration_keys = None;
        let mut sent = kp::DescribeConfigsRequest::default();
        sent.resources = vec![topic, broker];
        sent.include_synonyms = true;
        sent.include_documentation = v >= 3;
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
            let Request::DescribeConfigs(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let want = DescribeConfigsRequest {
                resources: vec![
                    DescribeConfigsResource {
                        resource_type: RESOURCE_TYPE_TOPIC,
                        resource_name: "orders".into(),
                        configuration_keys: Some(vec!["retention.ms".into()]),
                    },
                    DescribeConfigsResource {
                        resource_type: RESOURCE_TYPE_BROKER,
                        resource_name: "1".into(),
                        configuration_keys: None,
                    },
                ],
                include_synonyms: true,
                include_documentation: v >= 3,
            };
            assert_eq!(req, want, "v{v}");
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let ours = DescribeConfigsResponse {
            throttle_time_ms: 1,
            results: vec![DescribeConfigsResult {
                error_code: 0,
                error_message: None,
                resource_type: RESOURCE_TYPE_TOPIC,
                resource_name: "orders".into(),
                configs: vec![DescribeConfigsEntry {
                    name: "retention.ms".into(),
                    value: Some("604800000".into()),
                    read_only: false,
                    config_source: 5,
                    is_sensitive: false,
                    synonyms: vec![DescribeConfigsSynonym {
                        name: "log.retention.ms".into(),
                        value: Some("604800000".into()),
                        source: 5,
                    }],
                    config_type: 5,
                    documentation: Some("how long".into()),
                }],
            }],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::DescribeConfigsResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, 1);
            let res = &theirs.results[0];
            assert_eq!(
                (res.resource_type, &*res.resource_name),
                (RESOURCE_TYPE_TOPIC, "orders")
            );
            let c = &res.configs[0];
            assert_eq!((&*c.name, c.value.as_deref()), ("retention.ms", Some("604800000")));
            assert_eq!(c.config_source, 5);
            assert_eq!(&*c.synonyms[0].name, "log.retention.ms");
            if v >= 3 {
                assert_eq!((c.config_type, c.documentation.as_deref()), (5, Some("how long")));
            }
        }
    }

    pub(crate) fn client_request(v: i16) -> DescribeConfigsRequest {
        DescribeConfigsRequest {
            resources: vec![
                DescribeConfigsResource {
                    resource_type: RESOURCE_TYPE_TOPIC,
                    resource_name: "orders".into(),
                    configuration_keys: Some(vec!["retention.ms".into()]),
                },
                DescribeConfigsResource {
                    resource_type: RESOURCE_TYPE_BROKER,
                    resource_name: "1".into(),
                    configuration_keys: None,
                },
            ],
            include_synonyms: true,
            include_documentation: v >= 3,
        }
    }

    pub(crate) fn client_response(v: i16) -> DescribeConfigsResponse {
        DescribeConfigsResponse {
            throttle_time_ms: 1,
            results: vec![DescribeConfigsResult {
                error_code: 0,
                error_message: None,
                resource_type: RESOURCE_TYPE_TOPIC,
                resource_name: "orders".into(),
                configs: vec![DescribeConfigsEntry {
                    name: "retention.ms".into(),
                    value: Some("1000".into()),
                    read_only: false,
                    config_source: 1,
                    is_sensitive: false,
                    synonyms: vec![DescribeConfigsSynonym {
                        name: "log.retention.ms".into(),
                        value: Some("604800000".into()),
                        source: 5,
                    }],
                    config_type: if v >= 3 { 5 } else { 0 },
                    documentation: if v >= 3 { Some("how long".into()) } else { None },
                }],
            }],
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::DescribeConfigsRequest =
                client_round_trip(v, &req, req.encode(v), DescribeConfigsRequest::decode);
            assert_eq!(theirs.resources[1].configuration_keys, None);
            let resp = client_response(v);
            let theirs: kp::DescribeConfigsResponse =
                client_round_trip(v, &resp, resp.encode(v), DescribeConfigsResponse::decode);
            assert_eq!(theirs.results[0].configs[0].synonyms[0].source, 5);
        }
    }
}
