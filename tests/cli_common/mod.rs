//! Helpers of the CLI test files: running the `floe` binary, reading its
//! summary line, and a small seeded generator for test inputs.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output};

// A test that also includes `common` gets the generator twice, as two
// identical modules: harmless, each test uses one.
#[allow(clippy::duplicate_mod)]
#[path = "../common/rng.rs"]
mod rng;
#[allow(unused_imports)]
pub use rng::{SplitMix, WindowInput, window_input};

pub fn floe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("floe binary runs")
}

/// Runs `floe args...`, asserts success and returns its stderr.
pub fn run_ok(args: &[&str]) -> String {
    let out = floe(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "floe {args:?} failed with {:?}; stderr:\n{stderr}",
        out.status
    );
    stderr
}

/// Runs `floe args...`, asserts it failed with exactly one clean stderr line
/// starting `error:`, and returns that line.
pub fn fails_with_one_error_line(args: &[&str]) -> String {
    let out = floe(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.code().is_some_and(|c| c != 0),
        "floe {args:?}: expected a non-zero exit code, got {:?}; stderr:\n{stderr}",
        out.status
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "floe {args:?}: stderr shows a panic:\n{stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "floe {args:?}: expected exactly one line on stderr, got:\n{stderr}"
    );
    assert!(
        lines[0].starts_with("error:") && lines[0].len() > "error: ".len(),
        "floe {args:?}: the stderr line should start with 'error:' and say something: {}",
        lines[0]
    );
    lines[0].to_string()
}

/// The value of `name=` on the summary line (the one starting `records=`).
pub fn summary_field(stderr: &str, name: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("records="))
        .unwrap_or_else(|| panic!("no summary line in stderr:\n{stderr}"));
    let prefix = format!("{name}=");
    let value = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {name}= in the summary line: {line}"));
    value
        .parse()
        .unwrap_or_else(|_| panic!("{name}={value} is not a number: {line}"))
}

/// Kills the child when the test ends, passing or not.
pub struct Reap(pub Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP port free right now on 127.0.0.1.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().expect("local addr").port()
}

/// GET `path` from 127.0.0.1:`port`; returns (status code, body).
pub fn get(port: u16, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the endpoint");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    (code, body.to_string())
}

/// Runs `floe args...`, asserts success and returns (stdout, stderr).
pub fn run_ok_output(args: &[&str]) -> (String, String) {
    let out = floe(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "floe {args:?} failed with {:?}; stderr:\n{stderr}",
        out.status
    );
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The word-count oracle of a text: maximal runs of alphanumeric
/// characters, lowercased, counted in a HashMap.
pub fn count_words(text: &str) -> std::collections::HashMap<String, u64> {
    let mut counts = std::collections::HashMap::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if !word.is_empty() {
            *counts.entry(word.to_lowercase()).or_insert(0) += 1;
        }
    }
    counts
}

/// Parses `word,count` lines, failing on a word written twice.
pub fn parse_counts(text: &str) -> std::collections::HashMap<String, u64> {
    let mut counts = std::collections::HashMap::new();
    for line in text.lines() {
        let (word, count) = line
            .rsplit_once(',')
            .unwrap_or_else(|| panic!("bad output line {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {line:?}"));
        assert!(
            counts.insert(word.to_string(), count).is_none(),
            "{word} written twice"
        );
    }
    counts
}

/// The lines `floe run pipelines --records N --seed S` must write (without
/// `--state`), sorted: generate, parse, filter, enrich, as the job defines
/// them.
pub fn pipelines_oracle(records: u64, seed: u64) -> Vec<String> {
    let mix = floe::text::mix64;
    let mut out: Vec<String> = (0..records)
        .filter_map(|i| {
            let h = mix(i ^ mix(seed));
            let (key, value) = (h % 97, (h >> 16) % 10_000);
            (value % 3 != 0).then(|| format!("{i},k{key},{value},{}", (value * 7 + key) % 13))
        })
        .collect();
    out.sort();
    out
}

/// The lines of `text`, sorted.
pub fn sorted(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// The oracle of a tumbling-window sum job: sums per (key, window of
/// `window_ms`) in a `HashMap`, as sorted `key,start,end,sum` lines.
pub fn tumbling_sums(events: &[(String, i64, i64)], window_ms: i64) -> Vec<String> {
    let mut sums: std::collections::HashMap<(String, i64), i64> = Default::default();
    for (key, ts, value) in events {
        let start = ts.div_euclid(window_ms) * window_ms;
        *sums.entry((key.clone(), start)).or_insert(0) += value;
    }
    let mut lines: Vec<String> = sums
        .into_iter()
        .map(|((k, start), v)| format!("{k},{start},{},{v}", start + window_ms))
        .collect();
    lines.sort();
    lines
}

/// A finished run whose endpoint still serves.
pub struct Served {
    _child: Reap,
    pub port: u16,
    /// Every stderr line up to and including the summary line.
    pub stderr: String,
}

impl Served {
    /// `GET /status`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let (code, body) = get(self.port, "/status");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).expect("/status is JSON")
    }

    /// `GET /metrics`.
    pub fn metrics(&self) -> String {
        let (code, body) = get(self.port, "/metrics");
        assert_eq!(code, 200, "{body}");
        body
    }
}

/// Runs `floe ARGS` with an endpoint that lingers, and waits for the
/// summary line (the job has then ended).
pub fn serve(args: &[&str]) -> Served {
    use std::io::BufRead;
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{port}"))
        .args(["--metrics-linger-ms", "120000"])
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("floe runs");
    let mut child = Reap(child);
    let stderr = child.0.stderr.take().expect("stderr piped");
    let mut seen = String::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.expect("stderr line");
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("records=") {
            return Served {
                _child: child,
                port,
                stderr: seen,
            };
        }
    }
    panic!("floe {args:?} ended without a summary line:\n{seen}");
}

/// `floe args...` set up to be watched: stdout discarded, stderr piped,
/// logging at its defaults.
pub fn floe_command<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_floe"));
    command
        .args(args)
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    command
}

/// Runs `command` (from [`floe_command`]) and hands each stderr line, as it
/// comes, to `on_line` with the running child, which may signal it at the
/// event it waits for (a completed checkpoint, a records count); returns
/// the exit status and the whole stderr once the process ended.
pub fn run_watching(
    command: &mut Command,
    mut on_line: impl FnMut(&str, &mut Child),
) -> (std::process::ExitStatus, String) {
    use std::io::BufRead;
    let mut child = command.spawn().expect("floe starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut all = String::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.expect("stderr line");
        on_line(&line, &mut child);
        all.push_str(&line);
        all.push('\n');
    }
    (child.wait().expect("floe exits"), all)
}

/// Whether `line` is a status line counting a completed checkpoint.
pub fn checkpointed(line: &str) -> bool {
    status_field(line, "checkpoints").is_some_and(|n| n > 0)
}

/// The field `name` of a status line, if `line` is one and has it.
pub fn status_field(line: &str, name: &str) -> Option<u64> {
    line.strip_prefix("status ")?
        .split(' ')
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))?
        .parse()
        .ok()
}

/// Sends `signal` (`-TERM`, `-INT`, …) to `child` with kill(1).
pub fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill {signal} failed");
}
