//! Helpers of the object storage tests: the S3 server of
//! `scripts/services.sh start s3` (s3s-fs), a fresh prefix per test so the
//! tests run in parallel, the `floe` binary pointed at it, and the bucket's
//! objects read back from the server's files.
#![allow(dead_code)]

#[path = "../services/mod.rs"]
mod services;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The test server.
#[derive(Clone, Debug)]
pub struct S3 {
    pub endpoint: String,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    /// The server's root directory: an object is the file `BUCKET/KEY`.
    pub data: PathBuf,
    /// The s3s-fs binary, for a test that runs a private server.
    pub server: PathBuf,
}

/// The server of `scripts/services.sh start s3`; `None` when the services
/// are skipped on purpose (`FLOE_SKIP_SERVICES=1`).
pub fn s3(what: &str) -> Option<S3> {
    let var = |name: &str| services::required(name, what);
    Some(S3 {
        endpoint: var("FLOE_TEST_S3_ENDPOINT")?,
        bucket: var("FLOE_TEST_S3_BUCKET")?,
        access_key: var("FLOE_TEST_S3_ACCESS_KEY")?,
        secret_key: var("FLOE_TEST_S3_SECRET_KEY")?,
        data: var("FLOE_TEST_S3_DATA")?.into(),
        server: var("FLOE_TEST_S3_SERVER")?.into(),
    })
}

/// A prefix no other test (nor an earlier run) uses: `name-PID-NANOS`.
pub fn fresh_prefix(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("tests/{name}-{}-{nanos}", std::process::id())
}

impl S3 {
    /// `s3://BUCKET/PREFIX`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// The same server and keys at another endpoint (a proxy, a dead port).
    pub fn at(&self, endpoint: &str) -> S3 {
        S3 {
            endpoint: endpoint.to_string(),
            ..self.clone()
        }
    }

    /// The environment the `floe` binary reads its S3 settings from.
    pub fn env(&self, command: &mut Command) {
        command
            .env("AWS_ACCESS_KEY_ID", &self.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret_key)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", &self.endpoint)
            .env("AWS_ALLOW_HTTP", "true");
    }

    /// The relative keys of every object under `prefix`, sorted (read from
    /// the server's files: what a LIST of the bucket returns).
    pub fn objects(&self, prefix: &str) -> Vec<String> {
        let root = self.data.join(&self.bucket).join(prefix);
        let mut out = Vec::new();
        walk(&root, &root, &mut out);
        out.sort();
        out
    }

    /// The file holding the object `prefix/rel`.
    pub fn object_file(&self, prefix: &str, rel: &str) -> PathBuf {
        self.data.join(&self.bucket).join(prefix).join(rel)
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        // s3s-fs keeps its own bookkeeping next to the objects.
        if name.to_string_lossy().starts_with(".") {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// `floe args...` with the S3 settings of `s3`, set up to be watched
/// (stdout discarded, stderr piped, logging at its defaults).
pub fn floe_s3<S: AsRef<std::ffi::OsStr>>(s3: &S3, args: &[S]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_floe"));
    command
        .args(args)
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    s3.env(&mut command);
    command
}

/// Runs `floe args...` against `s3` to its end: exit status, stdout and
/// stderr.
pub fn run_s3(s3: &S3, args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let out = floe_s3(s3, args)
        .stdout(std::process::Stdio::piped())
        .output()
        .expect("floe runs");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`run_s3`], asserting success; returns stderr.
pub fn run_s3_ok(s3: &S3, args: &[&str]) -> String {
    let (status, _, stderr) = run_s3(s3, args);
    assert!(
        status.success(),
        "floe {args:?} failed with {status:?}; stderr:\n{stderr}"
    );
    stderr
}

/// The ids of `floe checkpoints list URL`, oldest first.
pub fn listed_ids(s3: &S3, url: &str) -> Vec<u64> {
    let (status, stdout, stderr) = run_s3(s3, &["checkpoints", "list", url]);
    assert!(status.success(), "checkpoints list {url}: {stderr}");
    stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}
