//! The dashboard in a real browser: headless Chromium driven over WebDriver
//! (chromedriver: the one `scripts/services.sh start` runs, or one this test
//! starts when it is installed; the script installs it).
//!
//! A window job runs with a throttled sink (backpressure), periodic
//! checkpoints and one injected failure. The test waits for those events in
//! `/status`, opens each page of the dashboard and checks the rendered DOM
//! against the `/status` snapshot the page drew from (the page keeps it in
//! `window.floeStatus`) and against a fresh `/status`: vertex colours follow
//! the backpressured shares, the sources' watermarks and the checkpoint
//! table are those of `/status`, the failure is listed. Then it presses the
//! savepoint button (a savepoint appears on disk) and cancel (the process
//! ends). With `FLOE_UPDATE_SCREENSHOTS=1` it saves a screenshot of each page
//! into `docs/images/`.

mod http_common;
mod services;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long to wait for an event before failing with what was seen: long,
/// so a slow machine passes; the test never waits for time itself.
const PATIENCE: Duration = Duration::from_secs(180);

/// Flink's backpressure levels, as the dashboard draws them.
fn level(share: f64) -> &'static str {
    if share > 0.5 {
        "red"
    } else if share > 0.1 {
        "amber"
    } else {
        "green"
    }
}

/// `lines` window records `k<key>,<ts>,<value>`: 400 keys, the timestamp
/// rising 1 ms every 4 lines, so each 100 ms window fires for every key.
fn window_input(path: &Path, lines: usize) {
    let mut s = String::with_capacity(lines * 16);
    let mut rng = floe::text::SplitMix(7);
    for i in 0..lines {
        let x = rng.next();
        s.push_str(&format!("k{},{},{}\n", x % 400, i / 4, 1 + x % 9));
    }
    std::fs::write(path, s).expect("write the input");
}

struct Job {
    child: Child,
    addr: SocketAddr,
    _stderr: std::thread::JoinHandle<()>,
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_job(dir: &Path) -> Job {
    let input = dir.join("events.csv");
    window_input(&input, 1_600_000);
    let mut child = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["run", "window", "--window", "tumbling:100", "--agg", "sum"])
        // A sink throttled to 20,000 firings/s: backpressured, about 50 s
        // for the million firings (some 250 keys in each of the 4,000
        // windows). The
        // savepoint (aligned, as Flink's) waits for the firings of the
        // watermarks before its barrier to pass the sink: at 2,000/s that
        // took over a minute.
        .args(["--parallelism", "2", "--sink-rate", "20000"])
        // Unaligned: checkpoints complete under the backpressure.
        .args([
            "--checkpoint-interval",
            "200",
            "--unaligned",
            "--inject-failures",
            "1",
        ])
        // The sources hold at the end of the input (running, not finished)
        // until the test cancels the job: however slowly the browser's
        // steps run, the job is still running for its savepoint and its
        // cancel, instead of finishing in between.
        .args(["--finish-after-checkpoints", "1000000000"])
        .arg("--input")
        .arg(&input)
        .arg("--checkpoint-dir")
        .arg(dir.join("checkpoints"))
        .arg("--savepoint-dir")
        .arg(dir.join("savepoints"))
        .arg("--output")
        .arg(dir.join("out.txt"))
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--job-name",
            "dashboard-test",
            "--job-info",
            "team=streams",
            "--job-info",
            "region=eu-1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start floe");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    // Keeps reading stderr (so the job never blocks on a full pipe) and
    // hands over the endpoint's address.
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("metrics: http://") {
                let addr = rest.split('/').next().unwrap_or_default().to_string();
                let _ = tx.send(addr);
            }
        }
    });
    let addr = rx
        .recv_timeout(PATIENCE)
        .expect("floe printed its metrics address")
        .parse()
        .expect("a socket address");
    Job {
        child,
        addr,
        _stderr: reader,
    }
}

fn status(addr: SocketAddr) -> Value {
    http_common::get_json(addr, "/status")
}

/// The worst backpressured share per vertex.
fn worst_backpressure(st: &Value) -> Vec<(u64, f64)> {
    let mut worst = std::collections::BTreeMap::new();
    for s in st["subtasks"].as_array().expect("subtasks") {
        let v = s["vertex"].as_u64().expect("vertex");
        let b = s["backpressured_share"].as_f64().expect("share");
        let e = worst.entry(v).or_insert(0.0f64);
        *e = e.max(b);
    }
    worst.into_iter().collect()
}

/// The first vertex whose subtasks have a watermark (the window operator's:
/// sources report none of their own).
fn watermark_vertex(st: &Value) -> Option<u64> {
    st["subtasks"]
        .as_array()?
        .iter()
        .find(|s| s["watermark"].is_i64())
        .and_then(|s| s["vertex"].as_u64())
}

/// Waits until `/status` satisfies `ready`; fails with the last snapshot.
fn wait_for(addr: SocketAddr, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let st = status(addr);
        if ready(&st) {
            return st;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "waited {PATIENCE:?} for {what}; last /status: {st}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn browser(webdriver: &str) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1300,900"]
        }),
    );
    // chromedriver listens on loopback: plain HTTP.
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(webdriver)
        .await
        .expect("a WebDriver session (is chromedriver running? scripts/services.sh start)")
}

/// Reads, in one script (the page redraws every poll, so elements found in
/// one WebDriver call may be gone by the next), the `/status` snapshot the
/// page drew and the attribute `name` of every element matching each
/// `(css, name)` query (`"text"`: the element's text).
async fn read(c: &Client, queries: &[(&str, &str)]) -> (Value, Vec<Vec<Option<String>>>) {
    let queries: Vec<Value> = queries
        .iter()
        .map(|(css, name)| serde_json::json!([css, name]))
        .collect();
    let v = c
        .execute(
            "return [window.floeStatus, arguments[0].map(([css, name]) =>
                 Array.from(document.querySelectorAll(css)).map(e =>
                     name === 'text' ? e.textContent : e.getAttribute(name)))];",
            vec![Value::Array(queries)],
        )
        .await
        .expect("read the page");
    let lists = v[1]
        .as_array()
        .expect("lists")
        .iter()
        .map(|l| {
            l.as_array()
                .expect("a list")
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .collect();
    (v[0].clone(), lists)
}

/// Opens `url` and waits until an element matching `css` is drawn.
async fn open(c: &Client, url: &str, css: &str) {
    c.goto(url).await.expect("open a dashboard page");
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{url}: no {css} drawn: {e}"));
}

/// Presses the button `css`, then "Yes" in the page's confirmation.
async fn press_and_confirm(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .expect("the button")
        .click()
        .await
        .expect("click");
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#confirm-yes"))
        .await
        .expect("a confirmation")
        .click()
        .await
        .expect("confirm");
}

async fn screenshot(c: &Client, name: &str) {
    if std::env::var_os("FLOE_UPDATE_SCREENSHOTS").is_none() {
        return;
    }
    let png = c.screenshot().await.expect("a screenshot");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("docs/images")
        .join(format!("dashboard-{name}.png"));
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("docs/images");
    std::fs::write(&path, png).expect("save the screenshot");
}

#[test]
fn dashboard_renders_the_running_job_and_its_actions_work() {
    let Some((webdriver, _driver)) = services::webdriver("the dashboard test") else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    let job = start_job(dir.path());
    let addr = job.addr;
    // The events the pages show: checkpoints, a restart, watermarks, and a
    // vertex backpressured by the throttled sink.
    wait_for(
        addr,
        "2 checkpoints, a restart, watermarks and backpressure",
        |st| {
            st["checkpoints"]["completed"].as_u64() >= Some(2)
                && st["failover"]["restarts"].as_u64() >= Some(1)
                && watermark_vertex(st).is_some()
                && worst_backpressure(st).iter().any(|(_, b)| *b > 0.5)
        },
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let c = browser(&webdriver).await;
        let base = format!("http://{addr}/dashboard/");
        open(&c, &base, "#job-graph .vertex").await;

        // Overview: one box per vertex of /status, coloured by its worst
        // subtask's backpressured share in the snapshot it drew.
        let (shown, found) = read(
            &c,
            &[
                ("#job-graph .vertex", "data-level"),
                ("#job-graph .vertex", "data-vertex"),
                ("#job-graph .edge", "data-partitioner"),
            ],
        )
        .await;
        let [levels, ids, edges] = <[_; 3]>::try_from(found).expect("three lists");
        let fresh = status(addr);
        assert_eq!(
            shown["graph"], fresh["graph"],
            "the page draws the job's graph"
        );
        let worst = worst_backpressure(&shown);
        assert_eq!(levels.len(), worst.len(), "one box per vertex");
        for ((id, level_shown), (vertex, share)) in ids.iter().zip(&levels).zip(&worst) {
            assert_eq!(id.as_deref(), Some(vertex.to_string().as_str()));
            assert_eq!(
                level_shown.as_deref(),
                Some(level(*share)),
                "vertex {vertex}: share {share}"
            );
        }
        // The sources feed the throttled sink's vertex: they are red.
        let source_vertex = shown["graph"]["vertices"][0]["id"]
            .as_u64()
            .expect("a vertex");
        let source = worst
            .iter()
            .find(|(v, _)| *v == source_vertex)
            .expect("the sources");
        assert_eq!(level(source.1), "red", "{shown}");
        assert!(
            edges.iter().any(|p| p.as_deref() == Some("hash")),
            "{edges:?}"
        );
        // The job's `info` (`--job-info`) as cards: each key and value of
        // the /status drawn, and those the command line gave.
        let (shown, found) = read(
            &c,
            &[
                ("#overview .card[id^='job-info-'] .label", "text"),
                ("#overview .card[id^='job-info-'] .value", "text"),
            ],
        )
        .await;
        let [labels, values] = <[_; 2]>::try_from(found).expect("two lists");
        let drawn: std::collections::BTreeMap<String, String> = labels
            .into_iter()
            .zip(values)
            .map(|(k, v)| (k.unwrap_or_default(), v.unwrap_or_default()))
            .collect();
        let info: std::collections::BTreeMap<String, String> =
            serde_json::from_value(shown["info"].clone()).expect("an info object");
        assert_eq!(drawn, info, "one card per info entry");
        assert_eq!(
            (info.get("team"), info.get("region")),
            (Some(&"streams".to_string()), Some(&"eu-1".to_string()))
        );
        screenshot(&c, "overview").await;

        // Vertex detail of the first vertex with watermarks: each subtask's
        // watermark and each input channel's, with the channel holding the
        // watermark back marked, are those of the snapshot drawn; and
        // watermarks only rise between it and a later /status.
        let wm_vertex = watermark_vertex(&shown).expect("a vertex with watermarks");
        open(
            &c,
            &format!("{base}#/vertex/{wm_vertex}"),
            "#channels tbody tr",
        )
        .await;
        let (shown, found) = read(
            &c,
            &[
                ("#subtasks tbody tr td[data-watermark]", "data-watermark"),
                ("#channels tbody tr td[data-watermark]", "data-watermark"),
                ("#channels tbody tr", "data-holding"),
                ("#subtasks tbody tr td[data-records-in]", "data-records-in"),
            ],
        )
        .await;
        let [marks, channel_marks, holding, records_in] =
            <[_; 4]>::try_from(found).expect("four lists");
        let later = status(addr);
        let mine: Vec<&Value> = shown["subtasks"]
            .as_array()
            .expect("subtasks")
            .iter()
            .filter(|s| s["vertex"].as_u64() == Some(wm_vertex))
            .collect();
        // An ended input's watermark (i64::MAX) is shown as "end".
        let text = |w: &Value| {
            Some(match w.as_f64() {
                Some(f) if f >= 9.2e18 => "end".to_string(),
                _ => w.as_i64().map(|w| w.to_string()).unwrap_or_default(),
            })
        };
        let expected: Vec<Option<String>> = mine.iter().map(|s| text(&s["watermark"])).collect();
        assert_eq!(marks, expected, "subtask watermarks as in /status");
        let expected: Vec<Option<String>> = mine
            .iter()
            .flat_map(|s| {
                s["inputs"]
                    .as_array()
                    .expect("inputs")
                    .iter()
                    .map(|c| text(&c["watermark"]))
            })
            .collect();
        assert_eq!(channel_marks, expected, "channel watermarks as in /status");
        let expected: Vec<Option<String>> = mine
            .iter()
            .flat_map(|s| {
                s["inputs"].as_array().expect("inputs").iter().map(|c| {
                    Some((s["holding_back"].as_u64() == c["channel"].as_u64()).to_string())
                })
            })
            .collect();
        assert_eq!(
            holding, expected,
            "the channel holding the watermark back is marked"
        );
        // Records into each subtask as drawn; together they are the records
        // into the vertex's first operator (summed by /status separately).
        let expected: Vec<Option<String>> = mine
            .iter()
            .map(|s| Some(s["records_in"].to_string()))
            .collect();
        assert_eq!(records_in, expected, "records in per subtask as in /status");
        let vertex = shown["graph"]["vertices"]
            .as_array()
            .expect("vertices")
            .iter()
            .find(|v| v["id"].as_u64() == Some(wm_vertex))
            .expect("the vertex");
        let head = vertex["operators"][0].as_u64().expect("an operator");
        let head_in = shown["operators"]
            .as_array()
            .expect("operators")
            .iter()
            .find(|o| o["id"].as_u64() == Some(head))
            .and_then(|o| o["records_in"].as_u64())
            .expect("the head operator's records");
        let summed: u64 = mine.iter().filter_map(|s| s["records_in"].as_u64()).sum();
        assert_eq!(
            summed, head_in,
            "subtasks' records in add up to the operator's"
        );
        for (s, t) in shown["subtasks"]
            .as_array()
            .expect("subtasks")
            .iter()
            .zip(later["subtasks"].as_array().expect("subtasks"))
        {
            if let (Some(a), Some(b)) = (s["watermark"].as_i64(), t["watermark"].as_i64()) {
                assert!(a <= b, "a watermark went back: {a} then {b}");
            }
        }
        screenshot(&c, "vertex").await;

        // Checkpoints: the table lists the history of the snapshot drawn,
        // newest first, with its statuses and durations; the completed ones
        // are in a fresh /status too (history keeps the last 20).
        open(
            &c,
            &format!("{base}#/checkpoints"),
            "#checkpoint-history tbody tr",
        )
        .await;
        let (shown, found) = read(
            &c,
            &[
                ("#checkpoint-history tbody tr", "data-checkpoint-id"),
                ("#checkpoint-history tbody tr", "data-status"),
                ("#checkpoint-chart rect.bar", "data-checkpoint-id"),
            ],
        )
        .await;
        let [ids, statuses, bars] = <[_; 3]>::try_from(found).expect("three lists");
        let history = shown["checkpoints"]["history"].as_array().expect("history");
        let expect_ids: Vec<Option<String>> = history
            .iter()
            .rev()
            .map(|h| Some(h["id"].to_string()))
            .collect();
        let expect_status: Vec<Option<String>> = history
            .iter()
            .rev()
            .map(|h| h["status"].as_str().map(str::to_string))
            .collect();
        assert_eq!(ids, expect_ids);
        assert_eq!(statuses, expect_status);
        assert_eq!(bars.len(), history.len(), "one bar per checkpoint");
        screenshot(&c, "checkpoints").await;

        // Failures: the injected one, with the restart that followed.
        open(
            &c,
            &format!("{base}#/failures"),
            "#failure-history tbody tr",
        )
        .await;
        let (shown, found) = read(&c, &[("#failure-history tbody tr", "text")]).await;
        let rows = &found[0];
        assert_eq!(
            rows.len(),
            shown["failures"].as_array().expect("failures").len()
        );
        let text = rows
            .iter()
            .flatten()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        assert!(text.contains("injected"), "{text}");
        screenshot(&c, "failures").await;

        // Savepoint button: asks, then a savepoint appears on disk.
        open(&c, &base, "#job-graph .vertex").await;
        press_and_confirm(&c, "#btn-savepoint").await;
        let banner = c
            .wait()
            .at_most(PATIENCE)
            .for_element(Locator::Css("#banner[data-result]"))
            .await
            .expect("the savepoint's result");
        let text = banner.text().await.expect("banner text");
        assert_eq!(
            banner.attr("data-result").await.expect("attr").as_deref(),
            Some("ok"),
            "the savepoint failed: {text}"
        );
        let path = text.rsplit(": ").next().expect("a path").trim().to_string();
        assert!(
            Path::new(&path).join("_metadata").is_file(),
            "the savepoint the page reported ({text}) is on disk"
        );

        // Cancel: asks, then the job ends canceled.
        press_and_confirm(&c, "#btn-cancel").await;
        c.close().await.expect("close the browser");
    });
    let mut job = job;
    let exit = job.child.wait().expect("floe ends");
    assert!(!exit.success(), "a canceled job does not exit 0: {exit:?}");
}
