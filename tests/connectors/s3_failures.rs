//! Object storage failing under a job, with a real S3 server (s3s-fs):
//!
//! - down at the start, or wrong credentials: one readable `error:` line
//!   and a non-zero exit, before any record;
//! - down mid-run (a private server killed with SIGKILL, then started
//!   again on its port and objects): checkpoints fail and say so, the job
//!   goes on under its tolerable checkpoint failures, checkpoints complete
//!   again once the server is back, and the output is the oracle's;
//! - slow (a proxy in this file holds every byte the server sends back):
//!   checkpoints time out, and complete again once it is fast.
//!
//! Every wait is for an event (a status line's counters, the end of the
//! process), never a sleep.

use crate::cli_common;
use crate::s3_common;

use cli_common::{free_port, pipelines_oracle, run_watching, sorted, status_field};
use s3_common::{S3, floe_s3, fresh_prefix, s3};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// `floe run pipelines` checkpointing to `url`, long enough (a throttled
/// sink) for a failure to come and go while it runs.
fn pipelines<'a>(output: &'a Path, url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "pipelines",
        "--records",
        "40000",
        "--seed",
        "5",
        "--parallelism",
        "2",
        "--output",
        s(output),
        "--sink-rate",
        "5000",
        "--checkpoint-interval",
        "50",
        "--checkpoint-dir",
        url,
        "--tolerable-failed-checkpoints",
        "1000",
    ];
    args.extend_from_slice(extra);
    args
}

/// [`pipelines`] with a status line every 5 ms, the events the tests of a
/// running job wait for. The sources hold at their end until 20 checkpoints
/// completed, so the job cannot finish before the outage (which begins at
/// the first completed checkpoint) is over and checkpoints complete again,
/// however slowly the machine runs it.
fn watched<'a>(output: &'a Path, url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = pipelines(output, url, extra);
    args.extend(["--status-interval", "5", "--finish-after-checkpoints", "20"]);
    args
}

/// Runs `args` against `s3` expecting a failure before the job starts:
/// exactly one stderr line, `error: …`, which it returns.
fn one_error_line(s3: &S3, args: &[&str]) -> String {
    let out = floe_s3(s3, args).output().expect("floe runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.code().is_some_and(|c| c != 0),
        "a non-zero exit: {:?}; stderr:\n{stderr}",
        out.status
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one stderr line:\n{stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    lines[0].to_string()
}

#[test]
fn server_down_at_start_is_one_error_line() {
    let Some(s3) = s3("S3 down at start") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let down = s3.at(&format!("http://127.0.0.1:{}", free_port()));
    let url = s3.url(&fresh_prefix("down-at-start"));
    let line = one_error_line(&down, &pipelines(&dir.path().join("out"), &url, &[]));
    assert!(
        line.contains(&url) && line.to_lowercase().contains("connection refused"),
        "{line}"
    );
    // `--resume` and `checkpoints list` read first: the same one line.
    let line = one_error_line(&down, &["checkpoints", "list", &url]);
    assert!(line.to_lowercase().contains("connection refused"), "{line}");
}

#[test]
fn wrong_credentials_are_one_error_line() {
    let Some(s3) = s3("S3 wrong credentials") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wrong = S3 {
        secret_key: "not-the-secret".into(),
        ..s3.clone()
    };
    let url = s3.url(&fresh_prefix("credentials"));
    let line = one_error_line(&wrong, &pipelines(&dir.path().join("out"), &url, &[]));
    assert!(line.contains("access denied"), "{line}");
}

/// A private s3s-fs (its own port and objects), killed when dropped.
struct PrivateServer {
    s3: S3,
    port: u16,
    child: Option<Child>,
    _data: tempfile::TempDir,
}

impl PrivateServer {
    fn start(shared: &S3) -> PrivateServer {
        let data = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(data.path().join(&shared.bucket)).unwrap();
        let port = free_port();
        let mut server = PrivateServer {
            s3: S3 {
                data: data.path().to_path_buf(),
                ..shared.at(&format!("http://127.0.0.1:{port}"))
            },
            port,
            child: None,
            _data: data,
        };
        server.restart();
        server
    }

    /// Starts the server (again) on its port and objects; returns once it
    /// accepts connections.
    fn restart(&mut self) {
        let child = Command::new(&self.s3.server)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", &self.s3.access_key])
            .args(["--secret-key", &self.s3.secret_key])
            .arg(&self.s3.data)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("s3s-fs starts");
        self.child = Some(child);
        let start = std::time::Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(60), "s3s-fs listens");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL; returns once the port refuses connections.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
fn server_down_mid_run_fails_checkpoints_and_the_job_goes_on() {
    let Some(shared) = s3("S3 down mid-run") else {
        return;
    };
    let mut server = PrivateServer::start(&shared);
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.txt");
    let url = server.s3.url(&fresh_prefix("down-mid-run"));
    let args = watched(&output, &url, &[]);
    let command = &mut floe_s3(&server.s3.clone(), &args);
    // 0: wait for a checkpoint, kill; 1: wait for a failed one, restart;
    // 2: wait for a checkpoint after the restart.
    let (mut phase, mut completed_before) = (0, 0);
    let (status, stderr) = run_watching(command, |line, _| {
        let completed = status_field(line, "checkpoints");
        let failed = status_field(line, "failed_checkpoints");
        match phase {
            0 if completed.is_some_and(|n| n > 0) => {
                server.kill();
                phase = 1;
            }
            1 if failed.is_some_and(|n| n > 0) => {
                completed_before = completed.unwrap_or(0);
                server.restart();
                phase = 2;
            }
            2 if completed.is_some_and(|n| n > completed_before) => phase = 3,
            _ => {}
        }
    });
    assert!(status.success(), "the job ends; stderr:\n{stderr}");
    assert_eq!(phase, 3, "the job outlived the outage; stderr:\n{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("object storage:") && l.contains("retry")),
        "failed requests say so; stderr:\n{stderr}"
    );
    let got = sorted(&std::fs::read_to_string(&output).expect("output"));
    assert!(got == pipelines_oracle(40_000, 5), "{} lines", got.len());
}

/// A TCP proxy to `upstream` that, while `slow` is set, holds each chunk
/// the server sends back for `delay`.
fn slow_proxy(upstream: u16, slow: Arc<AtomicBool>, delay: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || pipe(client, server, None));
            let slow = slow.clone();
            std::thread::spawn(move || pipe(s2, c2, Some((slow, delay))));
        }
    });
    port
}

fn pipe(mut from: TcpStream, mut to: TcpStream, slow: Option<(Arc<AtomicBool>, Duration)>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((flag, delay)) = &slow
            && flag.load(Ordering::Acquire)
        {
            std::thread::sleep(*delay);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

#[test]
fn slow_server_times_checkpoints_out_and_the_job_goes_on() {
    let Some(s3) = s3("slow S3") else {
        return;
    };
    let upstream: u16 = s3
        .endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("endpoint port");
    let slow = Arc::new(AtomicBool::new(false));
    let proxy = slow_proxy(upstream, slow.clone(), Duration::from_secs(3));
    let through = s3.at(&format!("http://127.0.0.1:{proxy}"));
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.txt");
    let url = s3.url(&fresh_prefix("slow"));
    let args = watched(&output, &url, &["--checkpoint-timeout", "1000"]);
    let (mut phase, mut completed_before) = (0, 0);
    let (status, stderr) = run_watching(&mut floe_s3(&through, &args), |line, _| {
        let completed = status_field(line, "checkpoints");
        let failed = status_field(line, "failed_checkpoints");
        match phase {
            0 if completed.is_some_and(|n| n > 0) => {
                slow.store(true, Ordering::Release);
                phase = 1;
            }
            1 if failed.is_some_and(|n| n > 0) => {
                completed_before = completed.unwrap_or(0);
                slow.store(false, Ordering::Release);
                phase = 2;
            }
            2 if completed.is_some_and(|n| n > completed_before) => phase = 3,
            _ => {}
        }
    });
    assert!(status.success(), "the job ends; stderr:\n{stderr}");
    assert_eq!(
        phase, 3,
        "checkpoints timed out, then completed; stderr:\n{stderr}"
    );
    let got = sorted(&std::fs::read_to_string(&output).expect("output"));
    assert!(got == pipelines_oracle(40_000, 5), "{} lines", got.len());
}
