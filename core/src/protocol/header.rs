//! Request and response headers, and which header version each API version uses.
//!
//! Contract (Kafka's `RequestHeader.json`/`ResponseHeader.json`): request header v1 is
//! api_key, api_version, correlation_id, client_id (a *non-compact* nullable string even in v2);
//! v2 adds a tagged-field section. A request uses v2 exactly when its API version is flexible.
//! Response header v0 is the correlation id; v1 adds tagged fields, except that ApiVersions
//! responses always use v0 so a client can read them before it knows what the broker speaks.
//! (Header v0, without client_id, is only ControlledShutdown v0, which Gregor does not accept.)

use super::reader::{Reader, Result};
use super::writer::Writer;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

impl RequestHeader {
    /// Reads the header fields shared by v1 and v2; the caller skips v2's tagged fields once it
    /// knows whether the API version is flexible.
    pub fn decode_v1(r: &mut Reader<'_>) -> Result<RequestHeader> {
        Ok(RequestHeader {
            api_key: r.i16()?,
            api_version: r.i16()?,
            correlation_id: r.i32()?,
            client_id: r.nullable_string(false)?,
        })
    }
}

/// Writes the response header for `api_key` at `api_version` whose request versions from
/// `flexible_min` on are flexible.
pub fn encode_response_header(
    w: &mut Writer,
    api_key: i16,
    api_version: i16,
    flexible_min: i16,
    correlation_id: i32,
) {
    w.i32(correlation_id);
    let always_v0 = api_key == super::api::api_versions::API_KEY;
    w.no_tagged_fields(!always_v0 && api_version >= flexible_min);
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::{self as kp, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    use crate::protocol::testing::unknown_tags;
    use crate::protocol::{api, decode_request, encode_response, Limits, Request};

    #[test]
    fn header_v2_tagged_fields_are_skipped() {
        let mut buf = BytesMut::new();
        kp::RequestHeader::default()
            .with_request_api_key(api::metadata::API_KEY)
            .with_request_api_version(12)
            .with_correlation_id(5)
            .with_client_id(Some(StrBytes::from_static_str("c")))
            .with_unknown_tagged_fields(unknown_tags())
            .encode(&mut buf, 2)
            .expect("header encodes");
        let mut body = kp::MetadataRequest::default();
        body.topics = None;
        body.encode(&mut buf, 12).expect("body encodes");
        let (h, req) = decode_request(&buf, Limits::default()).expect("valid frame");
        assert_eq!((h.correlation_id, h.client_id.as_deref()), (5, Some("c")));
        assert!(matches!(req, Request::Metadata(m) if m.topics.is_none()));
    }

    /// ApiVersions answers always use response header v0; other flexible versions use v1.
    #[test]
    fn response_header_versions() {
        let cases = [
            (api::api_versions::API_KEY, 3, 0),
            (api::api_versions::API_KEY, 0, 0),
            (api::metadata::API_KEY, 8, 0),
            (api::metadata::API_KEY, 9, 1),
            (api::fetch::API_KEY, 12, 1),
        ];
        for (api_key, api_version, header_version) in cases {
            let request = super::RequestHeader {
                api_key,
                api_version,
                correlation_id: 77,
                client_id: None,
            };
            let mut frame: Bytes = encode_response(&request, b"body");
            let h = ResponseHeader::decode(&mut frame, header_version).expect("header decodes");
            assert_eq!(h.correlation_id, 77);
            assert_eq!(&frame[..], b"body", "key {api_key} v{api_version}");
        }
    }
}
