//! Test helpers: the reference codec (`kafka-protocol`) on the client side of our codec.
//! Requests are encoded by its client encoder and decoded by ours; our responses are decoded by
//! its client decoder, which must consume every byte.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::RequestHeader as KpHeader;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use super::{decode_request, Limits, Reader, Request, RequestHeader};

/// A request frame (no length prefix) as a Kafka client would send it.
pub fn request_frame<R: Encodable + HeaderVersion>(api_key: i16, version: i16, body: &R) -> Vec<u8> {
    let mut buf = BytesMut::new();
    KpHeader::default()
        .with_request_api_key(api_key)
        .with_request_api_version(version)
        .with_correlation_id(0x0102_0304)
        .with_client_id(Some(StrBytes::from_static_str("test-client")))
        .encode(&mut buf, R::header_version(version))
        .expect("header encodes");
    body.encode(&mut buf, version)
        .expect("reference encoder accepts the request");
    buf.to_vec()
}

/// Decodes with our decoder, which must accept it.
pub fn decode_frame(frame: &[u8]) -> (RequestHeader, Request) {
    let (h, req) = decode_request(frame, Limits::default()).expect("our decoder accepts it");
    assert_eq!(h.correlation_id, 0x0102_0304);
    assert_eq!(h.client_id.as_deref(), Some("test-client"));
    (h, req)
}

/// Decodes our response body with the reference decoder, which must consume every byte.
pub fn response_as<R: Decodable>(body: Bytes, version: i16) -> R {
    let mut buf = body;
    let out = R::decode(&mut buf, version).expect("reference decoder accepts our response");
    assert!(buf.is_empty(), "{} bytes left after the reference decoder", buf.len());
    out
}

pub fn kp_uuid(id: super::Uuid) -> uuid::Uuid {
    uuid::Uuid::from_bytes(id.0)
}

pub fn our_uuid(id: uuid::Uuid) -> super::Uuid {
    super::Uuid(*id.as_bytes())
}

pub fn s(v: &'static str) -> StrBytes {
    StrBytes::from_static_str(v)
}

/// A tagged field no schema defines: flexible decoders must skip it.
pub fn unknown_tags() -> std::collections::BTreeMap<i32, Bytes> {
    std::collections::BTreeMap::from([(90, Bytes::from_static(b"future"))])
}

/// The client side at `version`, for a request or a response body `ours` encoded to `body`:
/// our decoder must give `ours` back and consume every byte; kafka-protocol's decoder (its
/// broker side for requests, client side for responses) must consume every byte too, and its
/// encoder must write exactly `body` again, which our decoder then reads as well. Returns the
/// reference's view for field-by-field checks.
pub fn client_round_trip<T, K>(
    version: i16,
    ours: &T,
    body: Bytes,
    decode: impl Fn(i16, &mut Reader<'_>) -> super::reader::Result<T>,
) -> K
where
    T: PartialEq + std::fmt::Debug,
    K: Decodable + Encodable,
{
    let ours_again = |bytes: &[u8]| {
        let mut r = Reader::new(bytes, Limits::default());
        let back = decode(version, &mut r).unwrap_or_else(|e| panic!("v{version}: our decoder refuses: {e}"));
        assert_eq!(r.remaining(), 0, "v{version}: our decoder left bytes");
        back
    };
    assert_eq!(&ours_again(&body), ours, "v{version}: our round trip");
    let mut buf = body.clone();
    let theirs = K::decode(&mut buf, version).unwrap_or_else(|e| panic!("v{version}: reference refuses: {e}"));
    assert!(buf.is_empty(), "v{version}: {} bytes left by the reference", buf.len());
    let mut again = BytesMut::new();
    theirs
        .encode(&mut again, version)
        .unwrap_or_else(|e| panic!("v{version}: reference cannot re-encode: {e}"));
    assert_eq!(&again[..], &body[..], "v{version}: reference re-encodes other bytes");
    assert_eq!(&ours_again(&again), ours, "v{version}: the reference's bytes");
    theirs
}

/// A body as kafka-protocol encodes it (its broker side for responses).
pub fn reference_body<K: Encodable>(k: &K, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    k.encode(&mut buf, version)
        .unwrap_or_else(|e| panic!("v{version}: reference encoder refuses: {e}"));
    buf.freeze()
}

/// Decodes a body with one of our decoders, which must consume every byte.
pub fn ours<T>(version: i16, body: &[u8], decode: impl Fn(i16, &mut Reader<'_>) -> super::reader::Result<T>) -> T {
    let mut r = Reader::new(body, Limits::default());
    let out = decode(version, &mut r).unwrap_or_else(|e| panic!("v{version}: our decoder refuses: {e}"));
    assert_eq!(r.remaining(), 0, "v{version}: our decoder left bytes");
    out
}

/// A client's `request` at `version`, framed in one buffer (its body written behind the header,
/// as `request_frame` does): the same bytes as `body` (the body encoded alone) framed after, the
/// broker reads back this header and request, and `size_hint` holds the body, so the frame's
/// writer never grows.
pub fn assert_request_framed_in_place(version: i16, request: Request, body: &Bytes, size_hint: usize) {
    let header = RequestHeader {
        api_key: request.api_key(),
        api_version: version,
        correlation_id: 43,
        client_id: Some("client-1".into()),
    };
    let one = super::request_frame(&header, &request);
    assert_eq!(one, super::encode_request(&header, body), "version {version}");
    let (read_header, read) = super::decode_request_bytes(&one, Limits::default()).expect("decodes");
    assert_eq!((read_header, read), (header, request), "version {version}");
    assert!(
        size_hint >= body.len(),
        "version {version}: hint {size_hint} < {}",
        body.len()
    );
}

/// The broker's `response` at `version`, framed in one buffer by `write` (its body written
/// behind the header): the same bytes as `body` framed after, the client reads back this
/// response, and `size_hint` holds the body.
pub fn assert_response_framed_in_place(
    version: i16,
    response: super::Response,
    body: &Bytes,
    size_hint: usize,
    write: impl FnOnce(&mut super::Writer),
) {
    let api_key = response.api_key();
    let header = RequestHeader {
        api_key,
        api_version: version,
        correlation_id: 44,
        client_id: None,
    };
    let one = super::encode_response_with(&header, size_hint, write);
    assert_eq!(one, super::encode_response(&header, body), "version {version}");
    let (correlation_id, read) =
        super::decode_response_bytes(api_key, version, &one, Limits::default()).expect("decodes");
    assert_eq!((correlation_id, read), (44, response), "version {version}");
    assert!(
        size_hint >= body.len(),
        "version {version}: hint {size_hint} < {}",
        body.len()
    );
}
