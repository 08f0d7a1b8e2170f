//! Where the real servers of `scripts/services.sh start` listen: from the
//! environment, or from the `target/services.env` file the script writes.
//!
//! A test that needs a server and finds none fails with a pointer to the
//! script; with `FLOE_SKIP_SERVICES=1` it says it was skipped instead.

#![allow(dead_code)]

/// The value of `var` (e.g. `FLOE_TEST_WEBDRIVER`), or `None` when the
/// servers are skipped on purpose; panics when they are simply missing.
pub fn required(var: &str, what: &str) -> Option<String> {
    if let Ok(v) = std::env::var(var) {
        return Some(v);
    }
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/services.env");
    let prefix = format!("export {var}=");
    if let Ok(text) = std::fs::read_to_string(&file)
        && let Some(v) = text.lines().find_map(|l| l.strip_prefix(prefix.as_str()))
    {
        return Some(v.to_string());
    }
    if std::env::var("FLOE_SKIP_SERVICES").as_deref() == Ok("1") {
        eprintln!("skipped: {what} needs {var} (FLOE_SKIP_SERVICES=1)");
        return None;
    }
    panic!(
        "{what} needs {var}: run `scripts/services.sh start` (it writes \
         target/services.env), or set FLOE_SKIP_SERVICES=1 to skip it"
    );
}

/// A WebDriver endpoint: `FLOE_TEST_WEBDRIVER` (from the environment or
/// `target/services.env`), or a chromedriver this test starts on a free
/// port when one is installed. `None` only with `FLOE_SKIP_SERVICES=1`.
pub fn webdriver(what: &str) -> Option<(String, Option<ChildGuard>)> {
    if std::env::var_os("FLOE_TEST_WEBDRIVER").is_some() || services_file_has("FLOE_TEST_WEBDRIVER")
    {
        return required("FLOE_TEST_WEBDRIVER", what).map(|url| (url, None));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    match std::process::Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(child) => {
            let guard = ChildGuard(child);
            // Ready once it accepts connections (it starts in milliseconds).
            let start = std::time::Instant::now();
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(60),
                    "chromedriver did not listen on {port}"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Some((format!("http://127.0.0.1:{port}"), Some(guard)))
        }
        Err(_) => required("FLOE_TEST_WEBDRIVER", what).map(|url| (url, None)),
    }
}

fn services_file_has(var: &str) -> bool {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/services.env");
    std::fs::read_to_string(file).is_ok_and(|t| t.contains(&format!("export {var}=")))
}

/// Kills the process it holds when dropped.
pub struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `sql` on the test server on a fresh connection: its rows, or the
/// server's error.
#[cfg(feature = "postgres")]
pub fn try_query(url: &str, sql: &str) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    let (url, sql) = (url.to_string(), sql.to_string());
    actix::System::new().block_on(async move {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect to the test server");
        actix::spawn(async move {
            let _ = conn.await;
        });
        client.query(&sql, &[]).await
    })
}

/// [`try_query`], failing the test on an error.
#[cfg(feature = "postgres")]
pub fn query(url: &str, sql: &str) -> Vec<tokio_postgres::Row> {
    try_query(url, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}
