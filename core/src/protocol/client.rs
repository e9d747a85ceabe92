//! The client side of the Kafka wire codec: requests out, responses in. Gregor's own clients
//! (the simulator's producers and consumers, the follower's replica fetcher, the `gregor` CLI
//! and `gregor perf`) frame requests here and read the broker's answers.
//!
//! Contract: a response is as untrusted as a request (a client may talk to any server, and the
//! simulator corrupts frames), so [`decode_response`] keeps [`decode_request`]'s promises: it
//! never panics, allocates only in proportion to the bytes it was given, refuses trailing
//! bytes, and reports every failure as a [`DecodeError`]. [`Limits::request_bytes_max`] caps the
//! response frame here: set it from what the client asked for (fetch `max_bytes` plus slack).
//! Encoding our own requests trusts them: a value a version cannot carry (two FindCoordinator
//! keys at v3) is a programmer error and asserts, as on the broker side.
//!
//! Use: pick a version from the broker's ApiVersions answer, `encode_request(&header,
//! &request.encode(version))` (or [`request_frame`]), remember `(api_key, api_version)` under the
//! correlation id, and hand the reply frame to [`decode_response`] with them.
//!
//! [`decode_request`]: super::decode_request

use bytes::{Bytes, BytesMut};

use super::api::api_versions;
use super::header::{request_header_version, RequestHeader};
use super::reader::{DecodeError, Limits, Reader};
use super::writer::Writer;
use super::{api_support, check_len, Request, Response};

/// Frames a request: header v0, v1 or v2 as the API version requires (see `header.rs`), then
/// `body` (from a request's `encode`). The transport adds the 4-byte length prefix.
pub fn encode_request(header: &RequestHeader, body: &[u8]) -> Bytes {
    let flexible_min = api_support(header.api_key).map(|s| s.flexible_min);
    let header_version = request_header_version(header.api_key, header.api_version, flexible_min);
    let mut w = Writer::new();
    w.i16(header.api_key);
    w.i16(header.api_version);
    w.i32(header.correlation_id);
    if header_version >= 1 {
        // Non-compact even in header v2: Kafka kept it readable by brokers of any age.
        w.nullable_string(false, header.client_id.as_deref());
    }
    w.no_tagged_fields(header_version >= 2);
    let mut out = BytesMut::from(&w.finish()[..]);
    out.extend_from_slice(body);
    out.freeze()
}

/// The whole request frame (header and body, no length prefix). Sending one API's body under
/// another's header is a programmer error.
pub fn request_frame(header: &RequestHeader, request: &Request) -> Bytes {
    assert_eq!(header.api_key, request.api_key(), "request body for another API");
    encode_request(header, &request.encode(header.api_version))
}

/// Decodes one response frame (without its length prefix) to the request the client sent as
/// `api_key` at `api_version`, giving the correlation id and the body. Record sets are copied
/// out of `frame`; [`decode_response_bytes`] shares its allocation instead.
pub fn decode_response(
    api_key: i16,
    api_version: i16,
    frame: &[u8],
    limits: Limits,
) -> Result<(i32, Response), DecodeError> {
    check_len(frame.len(), limits)?;
    decode_with(api_key, api_version, Reader::new(frame, limits))
}

/// As [`decode_response`], but fetched record sets are slices of `frame` (zero copy).
pub fn decode_response_bytes(
    api_key: i16,
    api_version: i16,
    frame: &Bytes,
    limits: Limits,
) -> Result<(i32, Response), DecodeError> {
    check_len(frame.len(), limits)?;
    decode_with(api_key, api_version, Reader::from_bytes(frame, limits))
}

fn decode_with(api_key: i16, api_version: i16, mut r: Reader<'_>) -> Result<(i32, Response), DecodeError> {
    let correlation_id = r.i32()?;
    // Asking about an API or version Gregor does not speak is the caller's mistake, but the
    // answer is still bytes off the wire: an error, not a panic.
    let header = || RequestHeader {
        api_key,
        api_version,
        correlation_id,
        client_id: None,
    };
    let Some(support) = api_support(api_key) else {
        return Err(DecodeError::UnknownApiKey {
            api_key,
            header: header(),
        });
    };
    if !support.supports(api_version) {
        return Err(DecodeError::UnsupportedVersion { header: header() });
    }
    // Response header v1 (tagged fields) from the first flexible version, except ApiVersions,
    // whose answers always use v0 so a client can read them before it knows the broker.
    let always_v0 = api_key == api_versions::API_KEY;
    r.skip_tagged_fields(!always_v0 && support.is_flexible(api_version))?;
    let body = r.clone();
    let response = Response::decode(api_key, api_version, &mut r).and_then(|resp| {
        r.finish()?;
        Ok(resp)
    });
    match response {
        Ok(response) => Ok((correlation_id, response)),
        Err(err) if always_v0 && api_version > 0 => {
            // KIP-511: a broker that does not know our ApiVersions version answers in v0 with
            // UNSUPPORTED_VERSION (as Kafka's own client retries the parse). Anything else that
            // fails at our version is the original error.
            let mut r = body;
            match api_versions::ApiVersionsResponse::decode(0, &mut r) {
                Ok(v0) if v0.error_code == crate::ErrorCode::UnsupportedVersion.code() && r.finish().is_ok() => {
                    Ok((correlation_id, Response::ApiVersions(v0)))
                }
                _ => Err(err),
            }
        }
        Err(err) => Err(err),
    }
}
