//! A minimal HTTP/1.1 client over `std::net` for the tests that drive the
//! router and the service examples: one request per connection.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

/// Sends `method path` with an optional JSON body to `addr`; returns
/// (status code, body).
pub fn request(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the server");
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send the request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the response");
    let raw = String::from_utf8(raw).expect("a UTF-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (code, body)
}

/// GET `path`.
pub fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    request(addr, "GET", path, None)
}

/// POST `path` with a JSON body (or none).
pub fn post(addr: SocketAddr, path: &str, body: Option<&str>) -> (u16, String) {
    request(addr, "POST", path, body)
}

/// GET `path` and parse the JSON body, asserting a 200.
pub fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (code, body) = get(addr, path);
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).expect("a JSON body")
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).expect("a chunk length");
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

/// Sums a Prometheus counter or gauge over its series whose labels contain
/// every one of `labels` (`operator="Keyed Sum"`).
pub fn metric_sum(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    let mut sum = None;
    for line in text
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
    {
        let (series, value) = line.rsplit_once(' ').expect("series and value");
        if labels.iter().all(|l| series.contains(l)) {
            *sum.get_or_insert(0.0) += value.parse::<f64>().expect("a number");
        }
    }
    sum
}
