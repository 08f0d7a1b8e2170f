//! `env.execute()` inside a real actix-web 4 handler.
//!
//! The bug this guards: `execute()` spawned the job's manager on the
//! calling arbiter, then parked that arbiter in `block_on` waiting for the
//! job — a deadlock of that worker for good; later requests routed to it
//! hung. `execute()` now runs every job on a thread and actix system of its
//! own, so a handler that calls it blocks its worker only for the job's
//! run.
//!
//! The server has two workers and gets more concurrent requests than that,
//! each running a job of its own size; every response must be that job's
//! result, checked against a plain `HashMap` count. Requests go over a
//! plain `TcpStream` with a read timeout, so a hang fails the test instead
//! of stalling the suite.

use actix_web::{App, HttpServer, web};
use floe::StreamExecutionEnvironment;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Turns a hang (the deadlock) into a failure; a slow machine only waits
/// longer.
const LIMIT: Duration = Duration::from_secs(300);
const WORKERS: usize = 2;
const WORDS: u64 = 13;

fn word(i: u64) -> String {
    format!("w{}", floe::text::mix64(i) % WORDS)
}

/// The oracle: the count per word of `word(0..n)`, computed without floe.
fn oracle(n: u64) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for i in 0..n {
        *m.entry(word(i)).or_insert(0) += 1;
    }
    m
}

/// Renders counts one `word=count` line each, sorted.
fn render(counts: &BTreeMap<String, u64>) -> String {
    counts.iter().map(|(w, c)| format!("{w}={c}\n")).collect()
}

/// The handler: runs a keyed count of `word(0..n)` with the blocking
/// `execute()`, on the worker's own thread, and answers with the counts.
async fn count(n: web::Path<u64>) -> String {
    let n = n.into_inner();
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let updates = env
        .from_generator(n, |i| (word(i), 1u64))
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .collect();
    match env.execute() {
        Ok(_) => render(&updates.take().into_iter().collect()),
        Err(e) => format!("error: {e}"),
    }
}

/// Starts the server on an ephemeral port in a system of its own.
fn start_server() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let server = HttpServer::new(|| App::new().route("/count/{n}", web::get().to(count)))
                .workers(WORKERS)
                .bind(("127.0.0.1", 0))
                .expect("binds an ephemeral port");
            tx.send(server.addrs()[0])
                .expect("the test waits for the address");
            server.run().await.expect("the server runs");
        });
    });
    rx.recv_timeout(LIMIT).expect("the server starts")
}

/// One GET over a plain TCP connection; the response's body.
fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .unwrap_or_else(|e| panic!("no response to {path} within {LIMIT:?} (a hung worker): {e}"));
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

#[test]
fn execute_inside_actix_web_handlers_answers_every_request() {
    let addr = start_server();
    // Three times the workers, all at once: every worker runs jobs back to
    // back, and none may be left hanging.
    let sizes: Vec<u64> = (0..3 * WORKERS as u64).map(|k| 2_000 + 777 * k).collect();
    let clients: Vec<_> = sizes
        .iter()
        .map(|&n| std::thread::spawn(move || (n, get(addr, &format!("/count/{n}")))))
        .collect();
    for client in clients {
        let (n, body) = client.join().expect("the client thread");
        assert_eq!(body, render(&oracle(n)), "the job of {n} records");
    }
    // The workers are free again afterwards.
    assert_eq!(get(addr, "/count/500"), render(&oracle(500)));
}
