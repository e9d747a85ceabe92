//! Request and response headers, and which header version each API version uses.
//!
//! Contract (Kafka's `RequestHeader.json`/`ResponseHeader.json`): request header v0 is
//! api_key, api_version, correlation_id; v1 adds client_id (a *non-compact* nullable string even
//! in v2); v2 adds a tagged-field section. A request uses v2 exactly when its API version is
//! flexible, v0 only for ControlledShutdown v0, v1 otherwise. Response header v0 is the
//! correlation id; v1 adds tagged fields, except that ApiVersions responses always use v0 so a
//! client can read them before it knows what the broker speaks.

use std::sync::Arc;

use super::reader::{Reader, Result};
use super::writer::Writer;

/// ControlledShutdown, the one API whose v0 request carries header v0.
const CONTROLLED_SHUTDOWN_KEY: i16 = 7;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    /// v1+; `None` in header v0. Shared: a connection sends the same one with every request.
    pub client_id: Option<Arc<str>>,
}

/// The request header version for an API version, given the API's first flexible version
/// (`None`: not known to Gregor, taken as never flexible).
pub fn request_header_version(api_key: i16, api_version: i16, flexible_min: Option<i16>) -> i16 {
    if api_key == CONTROLLED_SHUTDOWN_KEY && api_version == 0 {
        0
    } else if flexible_min.is_some_and(|f| api_version >= f) {
        2
    } else {
        1
    }
}

impl RequestHeader {
    /// Reads the header up to and including client_id, and returns it with its header version.
    /// The caller reads header v2's tagged fields itself, once it has checked the version is one
    /// it supports: KIP-511 wants an answer even when the rest cannot be parsed. A client id equal
    /// to `last` (the connection's previous one) is shared with it rather than copied; `last`
    /// becomes this request's.
    pub fn decode_fixed(
        r: &mut Reader<'_>,
        flexible_min: impl Fn(i16) -> Option<i16>,
        last: &mut Option<Arc<str>>,
    ) -> Result<(RequestHeader, i16)> {
        let api_key = r.i16()?;
        let api_version = r.i16()?;
        let correlation_id = r.i32()?;
        let version = request_header_version(api_key, api_version, flexible_min(api_key));
        let client_id = if version >= 1 {
            r.nullable_string_shared(last)?
        } else {
            None
        };
        let header = RequestHeader {
            api_key,
            api_version,
            correlation_id,
            client_id,
        };
        Ok((header, version))
    }
}

/// Writes the response header for `api_key` at `api_version` whose request versions from
/// `flexible_min` on are flexible.
pub fn encode_response_header(w: &mut Writer, api_key: i16, api_version: i16, flexible_min: i16, correlation_id: i32) {
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

    #[test]
    fn header_versions_follow_flexibility() {
        use super::request_header_version as v;
        assert_eq!(v(7, 0, None), 0);
        assert_eq!(v(7, 1, None), 1);
        assert_eq!(v(3, 8, Some(9)), 1);
        assert_eq!(v(3, 9, Some(9)), 2);
        assert_eq!(v(18, 99, Some(3)), 2);
        // Header v0 has no client id: the body starts right after the correlation id.
        let frame = [0, 7, 0, 0, 0, 0, 0, 4, 0, 0, 0, 1];
        let mut r = crate::protocol::Reader::new(&frame, crate::protocol::Limits::default());
        let (h, hv) = super::RequestHeader::decode_fixed(&mut r, |_| None, &mut None).expect("header v0");
        assert_eq!((hv, h.correlation_id, h.client_id, r.remaining()), (0, 4, None, 4));
    }

    /// A connection's requests share its client id: the same bytes again give the same
    /// allocation, other bytes a new one (which the next request then shares), and a null or
    /// malformed id is read as it would be without the last one.
    #[test]
    fn a_repeated_client_id_is_shared_and_a_new_one_replaces_it() {
        let header = |id: &[u8]| {
            let mut frame = vec![0, 3, 0, 1, 0, 0, 0, 9];
            frame.extend_from_slice(&(id.len() as i16).to_be_bytes());
            frame.extend_from_slice(id);
            frame
        };
        let decode = |frame: &[u8], last: &mut Option<std::sync::Arc<str>>| {
            let mut r = crate::protocol::Reader::new(frame, crate::protocol::Limits::default());
            super::RequestHeader::decode_fixed(&mut r, |_| None, last).map(|(h, _)| h.client_id)
        };
        let mut last = None;
        let first = decode(&header(b"producer-7"), &mut last)
            .expect("valid")
            .expect("an id");
        let again = decode(&header(b"producer-7"), &mut last)
            .expect("valid")
            .expect("an id");
        assert_eq!(&*again, "producer-7");
        assert!(
            std::sync::Arc::ptr_eq(&first, &again),
            "the same id is shared, not copied"
        );
        // Same length, other bytes: a new id, kept for the next request.
        let other = decode(&header(b"producer-8"), &mut last)
            .expect("valid")
            .expect("an id");
        assert_eq!(&*other, "producer-8");
        assert!(last.as_ref().is_some_and(|l| std::sync::Arc::ptr_eq(l, &other)));
        let invalid = decode(&header(&[0xff, 0xfe]), &mut last);
        assert!(matches!(
            invalid,
            Err(crate::protocol::DecodeError::InvalidUtf8 { offset: 10 })
        ));
        let null = [0, 3, 0, 1, 0, 0, 0, 9, 0xff, 0xff];
        assert_eq!(decode(&null, &mut last).expect("valid"), None);
        assert_eq!(last.as_deref(), Some("producer-8"), "a null id keeps the last one");
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
