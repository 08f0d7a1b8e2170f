//! The few Kafka protocol messages the exactly-once sink sends itself —
//! `ApiVersions`, `FindCoordinator` (transaction key), `EndTxn`,
//! `DescribeProducers` and `WriteTxnMarkers` — encoded and decoded by
//! hand, because librdkafka cannot commit a transaction another producer
//! began, nor ask a partition for its open transactions.
//!
//! Framing: a request is `INT32 size` + header + body; request header v1
//! is `api_key INT16, api_version INT16, correlation_id INT32, client_id
//! NULLABLE_STRING`, v2 adds a tagged-field buffer; response header v0 is
//! `correlation_id INT32`, v1 adds a tagged-field buffer. Flexible versions
//! (`ApiVersions` ≥ 3, `FindCoordinator` ≥ 3, `EndTxn` ≥ 3) use compact
//! strings and arrays (unsigned varint length + 1) and end each structure
//! with tagged fields; the `ApiVersions` response keeps header v0 in every
//! version so that a client can read it before it knows any version.

/// `ApiVersions`.
pub const API_VERSIONS: i16 = 18;
/// `FindCoordinator`.
pub const FIND_COORDINATOR: i16 = 10;
/// `EndTxn`.
pub const END_TXN: i16 = 26;
/// `DescribeProducers` (KIP-664): a partition's active producers.
pub const DESCRIBE_PRODUCERS: i16 = 61;

/// `WriteTxnMarkers`: commit or abort markers written into partitions.
pub const WRITE_TXN_MARKERS: i16 = 27;

/// `FindCoordinator` key type of a transactional id.
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// The versions this client speaks, per API: `FindCoordinator` from 1
/// (v0 has no key type), `EndTxn` up to 4 (v5 belongs to transactions
/// version 2, whose epoch bumps at every commit change what a resumed
/// transaction means).
pub const SUPPORTED: [(i16, i16, i16); 5] = [
    (API_VERSIONS, 0, 3),
    (FIND_COORDINATOR, 1, 4),
    (END_TXN, 0, 4),
    (DESCRIBE_PRODUCERS, 0, 0),
    (WRITE_TXN_MARKERS, 1, 1),
];

/// A response could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed Kafka {api} response: {reason}")]
pub struct DecodeError {
    /// The API whose response it is.
    pub api: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// Whether `version` of `api` is a flexible version (compact encodings,
/// tagged fields).
pub fn flexible(api: i16, version: i16) -> bool {
    match api {
        API_VERSIONS | FIND_COORDINATOR | END_TXN => version >= 3,
        DESCRIBE_PRODUCERS => true,
        WRITE_TXN_MARKERS => version >= 1,
        _ => false,
    }
}

/// Appends an unsigned varint.
fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a string: compact (varint length + 1) or classic (INT16 length).
fn put_string(out: &mut Vec<u8>, s: &str, compact: bool) {
    if compact {
        put_uvarint(out, s.len() as u64 + 1);
    } else {
        out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

/// A whole request, with its size prefix. `body` is the request body for
/// `version`; the header is v2 for a flexible version, v1 otherwise.
pub fn frame(api: i16, version: i16, correlation_id: i32, client_id: &str, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0; 4];
    out.extend_from_slice(&api.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    // The client id stays a classic nullable string in header v2 too.
    put_string(&mut out, client_id, false);
    if flexible(api, version) {
        put_uvarint(&mut out, 0);
    }
    out.extend_from_slice(body);
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    out
}

/// The body of an `ApiVersions` request.
pub fn api_versions_request(version: i16) -> Vec<u8> {
    let mut out = Vec::new();
    if version >= 3 {
        put_string(&mut out, "floe", true);
        put_string(&mut out, env!("CARGO_PKG_VERSION"), true);
        put_uvarint(&mut out, 0);
    }
    out
}

/// The body of a `FindCoordinator` request for a transactional id
/// (versions 1 to 4).
pub fn find_coordinator_request(version: i16, transactional_id: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if version >= 4 {
        out.push(KEY_TYPE_TRANSACTION as u8);
        put_uvarint(&mut out, 2); // one key
        put_string(&mut out, transactional_id, true);
        put_uvarint(&mut out, 0);
    } else {
        put_string(&mut out, transactional_id, version >= 3);
        out.push(KEY_TYPE_TRANSACTION as u8);
        if version >= 3 {
            put_uvarint(&mut out, 0);
        }
    }
    out
}

/// The body of an `EndTxn` request (versions 0 to 4).
pub fn end_txn_request(
    version: i16,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    committed: bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    put_string(&mut out, transactional_id, version >= 3);
    out.extend_from_slice(&producer_id.to_be_bytes());
    out.extend_from_slice(&producer_epoch.to_be_bytes());
    out.push(committed as u8);
    if version >= 3 {
        put_uvarint(&mut out, 0);
    }
    out
}

mod producers;
pub use producers::*;

/// Reads a response's fields in order.
struct Reader<'a> {
    api: &'static str,
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn fail<T>(&self, reason: impl Into<String>) -> Result<T, DecodeError> {
        Err(DecodeError {
            api: self.api,
            reason: reason.into(),
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return self.fail(format!("{n} bytes wanted, {} left", self.bytes.len()));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, DecodeError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, DecodeError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        let b = self.take(8)?;
        Ok(i64::from_be_bytes(b.try_into().expect("8 bytes")))
    }

    fn uvarint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        self.fail("varint longer than 64 bits")
    }

    /// A string or nullable string, compact or classic; `None` for null.
    fn string(&mut self, compact: bool) -> Result<Option<String>, DecodeError> {
        let len = if compact {
            match self.uvarint()? {
                0 => return Ok(None),
                n => (n - 1) as usize,
            }
        } else {
            match self.i16()? {
                -1 => return Ok(None),
                n if n < 0 => return self.fail(format!("string length {n}")),
                n => n as usize,
            }
        };
        let bytes = self.take(len)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Some(s.to_string())),
            Err(_) => self.fail("a string is not UTF-8"),
        }
    }

    /// An array's element count, compact or classic (null counts as none).
    fn array_len(&mut self, compact: bool) -> Result<usize, DecodeError> {
        if compact {
            Ok(self.uvarint()?.saturating_sub(1) as usize)
        } else {
            Ok(self.i32()?.max(0) as usize)
        }
    }

    /// Skips a tagged-field buffer (no tag is needed here).
    fn skip_tags(&mut self) -> Result<(), DecodeError> {
        let count = self.uvarint()?;
        for _ in 0..count {
            self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
}

/// Splits a response (without its size prefix) into its correlation id
/// and body: response header v1 (tagged fields) for a flexible version,
/// except for `ApiVersions`, which always answers with header v0.
pub fn response_body(api: i16, version: i16, frame: &[u8]) -> Result<(i32, &[u8]), DecodeError> {
    let mut r = Reader {
        api: api_name(api),
        bytes: frame,
    };
    let correlation_id = r.i32()?;
    if api != API_VERSIONS && flexible(api, version) {
        r.skip_tags()?;
    }
    Ok((correlation_id, r.bytes))
}

/// The name of an API, for messages.
pub fn api_name(api: i16) -> &'static str {
    match api {
        API_VERSIONS => "ApiVersions",
        FIND_COORDINATOR => "FindCoordinator",
        END_TXN => "EndTxn",
        DESCRIBE_PRODUCERS => "DescribeProducers",
        WRITE_TXN_MARKERS => "WriteTxnMarkers",
        _ => "unknown API",
    }
}

/// One API of an `ApiVersions` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiRange {
    /// The API key.
    pub api: i16,
    /// The oldest version the broker speaks.
    pub min: i16,
    /// The newest.
    pub max: i16,
}

/// An `ApiVersions` response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiVersions {
    /// The error code (35, `UNSUPPORTED_VERSION`: the broker answered in v0
    /// and lists the `ApiVersions` versions it speaks).
    pub error_code: i16,
    /// The APIs the broker serves.
    pub apis: Vec<ApiRange>,
}

impl ApiVersions {
    /// The highest version both sides speak of `api`, if any.
    pub fn pick(&self, api: i16) -> Option<i16> {
        let (_, lo, hi) = SUPPORTED.iter().find(|(a, _, _)| *a == api)?;
        let theirs = self.apis.iter().find(|r| r.api == api)?;
        let best = (*hi).min(theirs.max);
        (best >= (*lo).max(theirs.min)).then_some(best)
    }
}

/// Decodes an `ApiVersions` response body of `version` (0 to 3).
pub fn decode_api_versions(version: i16, body: &[u8]) -> Result<ApiVersions, DecodeError> {
    let mut r = Reader {
        api: "ApiVersions",
        bytes: body,
    };
    let compact = version >= 3;
    let error_code = r.i16()?;
    let n = r.array_len(compact)?;
    let mut apis = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        apis.push(ApiRange {
            api: r.i16()?,
            min: r.i16()?,
            max: r.i16()?,
        });
        if compact {
            r.skip_tags()?;
        }
    }
    if version >= 1 {
        r.i32()?; // throttle_time_ms
    }
    if compact {
        r.skip_tags()?;
    }
    Ok(ApiVersions { error_code, apis })
}

/// A `FindCoordinator` response (for one key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coordinator {
    /// The error code.
    pub error_code: i16,
    /// The broker's error message, if any.
    pub error_message: Option<String>,
    /// The coordinator's node id.
    pub node_id: i32,
    /// Its host.
    pub host: String,
    /// Its port.
    pub port: i32,
}

/// Decodes a `FindCoordinator` response body of `version` (1 to 4).
pub fn decode_find_coordinator(version: i16, body: &[u8]) -> Result<Coordinator, DecodeError> {
    let mut r = Reader {
        api: "FindCoordinator",
        bytes: body,
    };
    r.i32()?; // throttle_time_ms
    if version >= 4 {
        let n = r.array_len(true)?;
        if n != 1 {
            return r.fail(format!("{n} coordinators for one key"));
        }
        r.string(true)?; // the key
        let node_id = r.i32()?;
        let host = r.string(true)?.unwrap_or_default();
        let port = r.i32()?;
        let error_code = r.i16()?;
        let error_message = r.string(true)?;
        r.skip_tags()?;
        r.skip_tags()?;
        return Ok(Coordinator {
            error_code,
            error_message,
            node_id,
            host,
            port,
        });
    }
    let compact = version >= 3;
    let error_code = r.i16()?;
    let error_message = r.string(compact)?;
    let node_id = r.i32()?;
    let host = r.string(compact)?.unwrap_or_default();
    let port = r.i32()?;
    if compact {
        r.skip_tags()?;
    }
    Ok(Coordinator {
        error_code,
        error_message,
        node_id,
        host,
        port,
    })
}

/// Decodes an `EndTxn` response body of `version` (0 to 4): its error code.
pub fn decode_end_txn(version: i16, body: &[u8]) -> Result<i16, DecodeError> {
    let mut r = Reader {
        api: "EndTxn",
        bytes: body,
    };
    r.i32()?; // throttle_time_ms
    let error_code = r.i16()?;
    if version >= 3 {
        r.skip_tags()?;
    }
    Ok(error_code)
}

#[cfg(test)]
mod tests {
    //! Every expected byte string below is written out field by field from
    //! the Kafka protocol's message definitions, not produced by the
    //! encoder under test.
    use super::*;

    #[test]
    fn api_versions_v3_request_uses_header_v2_and_compact_strings() {
        let body = api_versions_request(3);
        let version = env!("CARGO_PKG_VERSION").as_bytes();
        let mut expected = vec![5, b'f', b'l', b'o', b'e', version.len() as u8 + 1];
        expected.extend_from_slice(version);
        expected.push(0); // no tagged fields
        assert_eq!(body, expected);
        let framed = frame(API_VERSIONS, 3, 7, "ab", &[]);
        assert_eq!(
            framed,
            [
                0, 0, 0, 13, // size
                0, 18, // api key
                0, 3, // version
                0, 0, 0, 7, // correlation id
                0, 2, b'a', b'b', // client id: classic nullable string
                0,    // header tagged fields
            ]
        );
        // v0: an empty body, header v1 (no tagged fields).
        assert!(api_versions_request(0).is_empty());
        assert_eq!(
            frame(API_VERSIONS, 0, 1, "", &[]),
            [0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0]
        );
    }

    #[test]
    fn api_versions_v3_response_with_tagged_fields() {
        // Header v0 (correlation id only), then: error 0, COMPACT_ARRAY of
        // two entries (varint 3), each ending with an empty tag buffer;
        // throttle 0; a tag buffer holding one tagged field (tag 3,
        // ZkMigrationReady, size 1, false), as brokers send.
        let frame = [
            0, 0, 0, 9, // correlation id
            0, 0, // error_code
            3, // two api keys
            0, 26, 0, 0, 0, 4, 0, // EndTxn 0..4
            0, 10, 0, 0, 0, 6, 0, // FindCoordinator 0..6
            0, 0, 0, 0, // throttle_time_ms
            1, 3, 1, 0, // one tagged field: tag 3, 1 byte
        ];
        let (id, body) = response_body(API_VERSIONS, 3, &frame).expect("header");
        assert_eq!(id, 9);
        let v = decode_api_versions(3, body).expect("decodes");
        assert_eq!(v.error_code, 0);
        assert_eq!(
            v.apis,
            [
                ApiRange {
                    api: 26,
                    min: 0,
                    max: 4
                },
                ApiRange {
                    api: 10,
                    min: 0,
                    max: 6
                }
            ]
        );
        assert_eq!(v.pick(END_TXN), Some(4));
        assert_eq!(v.pick(FIND_COORDINATOR), Some(4));
        assert_eq!(v.pick(API_VERSIONS), None, "not listed");
    }

    #[test]
    fn api_versions_v0_unsupported_version_answer() {
        // A broker that does not speak the requested version answers in
        // v0: error 35, INT32 array of (key, min, max), no throttle.
        let body = [0, 35, 0, 0, 0, 1, 0, 18, 0, 0, 0, 2];
        let v = decode_api_versions(0, &body).expect("decodes");
        assert_eq!(v.error_code, 35);
        assert_eq!(
            v.apis,
            [ApiRange {
                api: 18,
                min: 0,
                max: 2
            }]
        );
        // v1 adds the throttle time after the array.
        let body = [0, 0, 0, 0, 0, 1, 0, 26, 0, 1, 0, 2, 0, 0, 0, 0];
        let v = decode_api_versions(1, &body).expect("decodes");
        assert_eq!(v.pick(END_TXN), Some(2));
        assert!(
            decode_api_versions(1, &body[..12]).is_err(),
            "throttle missing"
        );
    }

    #[test]
    fn find_coordinator_requests_per_version() {
        // v1: STRING key, INT8 key type.
        assert_eq!(
            find_coordinator_request(1, "t-0"),
            [0, 3, b't', b'-', b'0', 1]
        );
        // v3: COMPACT_STRING key, INT8 key type, tagged fields.
        assert_eq!(
            find_coordinator_request(3, "t-0"),
            [4, b't', b'-', b'0', 1, 0]
        );
        // v4: INT8 key type, COMPACT_ARRAY of COMPACT_STRING keys, tags.
        assert_eq!(
            find_coordinator_request(4, "t-0"),
            [1, 2, 4, b't', b'-', b'0', 0]
        );
    }

    #[test]
    fn find_coordinator_responses_per_version() {
        // v1: throttle, error, NULLABLE_STRING message (null), node, host, port.
        let v1 = [
            0, 0, 0, 0, // throttle
            0, 0, // error
            0xff, 0xff, // null message
            0, 0, 0, 1, // node 1
            0, 9, b'1', b'2', b'7', b'.', b'0', b'.', b'0', b'.', b'1', // host
            0, 0, 0x23, 0x84, // port 9092
        ];
        let c = decode_find_coordinator(1, &v1).expect("decodes");
        assert_eq!(
            c,
            Coordinator {
                error_code: 0,
                error_message: None,
                node_id: 1,
                host: "127.0.0.1".into(),
                port: 9092
            }
        );
        // v3: compact, an error with a message, tags.
        let v3 = [
            0, 0, 0, 0, // throttle
            0, 15, // COORDINATOR_NOT_AVAILABLE
            3, b'n', b'o', // message "no"
            0xff, 0xff, 0xff, 0xff, // node -1
            1,    // empty host
            0xff, 0xff, 0xff, 0xff, // port -1
            0,    // tags
        ];
        let c = decode_find_coordinator(3, &v3).expect("decodes");
        assert_eq!(c.error_code, 15);
        assert_eq!(c.error_message.as_deref(), Some("no"));
        assert_eq!(c.node_id, -1);
        // v4: throttle, COMPACT_ARRAY of coordinators (key, node, host,
        // port, error, message, tags), tags.
        let v4 = [
            0, 0, 0, 0, // throttle
            2, // one coordinator
            2, b'k', // key "k"
            0, 0, 0, 3, // node 3
            2, b'h', // host "h"
            0, 0, 0x23, 0x85, // port 9093
            0, 0, // error
            0, // null message
            0, // entry tags
            0, // tags
        ];
        let c = decode_find_coordinator(4, &v4).expect("decodes");
        assert_eq!(
            c,
            Coordinator {
                error_code: 0,
                error_message: None,
                node_id: 3,
                host: "h".into(),
                port: 9093
            }
        );
        assert!(decode_find_coordinator(4, &v4[..12]).is_err());
    }

    #[test]
    fn end_txn_requests_and_responses() {
        // v0: STRING id, INT64 producer id, INT16 epoch, BOOLEAN.
        assert_eq!(
            end_txn_request(0, "x", 0x0102, 5, true),
            [0, 1, b'x', 0, 0, 0, 0, 0, 0, 1, 2, 0, 5, 1]
        );
        // v3: COMPACT_STRING id, ..., tagged fields.
        assert_eq!(
            end_txn_request(3, "x", -1, -1, false),
            [
                2, b'x', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0
            ]
        );
        // Responses: throttle, error (+ tags from v3); v3 responses carry
        // header v1 (tags after the correlation id).
        assert_eq!(decode_end_txn(0, &[0, 0, 0, 0, 0, 48]), Ok(48));
        let frame = [0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 90, 0];
        let (id, body) = response_body(END_TXN, 3, &frame).expect("header");
        assert_eq!(id, 4);
        assert_eq!(decode_end_txn(3, body), Ok(90));
        // A response header with one tagged field (tag 0, 2 bytes).
        let frame = [0, 0, 0, 4, 1, 0, 2, 9, 9, 0, 0, 0, 0, 0, 0, 0];
        let (_, body) = response_body(END_TXN, 4, &frame).expect("header");
        assert_eq!(decode_end_txn(4, body), Ok(0));
        assert!(decode_end_txn(3, &[0, 0, 0, 0, 0]).is_err(), "truncated");
    }

    #[test]
    fn varints_of_long_strings() {
        // A 200-byte compact string: length + 1 = 201 = 0xc9 → [0xc9, 0x01].
        let id = "a".repeat(200);
        let body = end_txn_request(3, &id, 0, 0, true);
        assert_eq!(&body[..2], &[0xc9, 0x01]);
        assert_eq!(body.len(), 2 + 200 + 8 + 2 + 1 + 1);
    }
}
