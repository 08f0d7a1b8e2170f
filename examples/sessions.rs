//! Sessionization of click events with event-time session windows.
//!
//! Exists to show event time end to end: seeded click events `(user,
//! timestamp, page)` arrive out of order (by up to 5 s), a bounded
//! out-of-orderness watermark strategy follows them, the stream is keyed by
//! user and grouped into session windows with a 5 minute gap, and a whole-window
//! `process` function turns each session into `user, start, end, clicks`. The
//! program prints the sessions, then checks them against sessions computed
//! directly (sort each user's clicks, split where the pause is longer than 5
//! minutes) and exits non-zero if they differ.
//!
//! Run with `cargo run --example sessions`.

use floe::StreamExecutionEnvironment;
use floe::text::SplitMix;
use floe::time::WatermarkStrategy;
use floe::window::{TimeWindow, WindowAssigner};
use std::collections::BTreeMap;

/// One click: who, when (ms since the epoch) and where.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Click {
    user: String,
    ts: i64,
    page: String,
}

/// One session as the window function reports it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Session {
    user: String,
    start: i64,
    end: i64,
    clicks: usize,
    /// In click order.
    pages: Vec<String>,
}

/// Inactivity that closes a session.
const GAP_MS: i64 = 5 * 60 * 1000;
/// How far out of order clicks arrive (and what the watermarks allow).
const OUT_OF_ORDER_MS: i64 = 5_000;
/// 2024-01-01T00:00:00Z: times are printed relative to it.
const BASE_MS: i64 = 1_704_067_200_000;
const USERS: [&str; 4] = ["ada", "bob", "cy", "dee"];
const PAGES: [&str; 6] = ["/", "/search", "/item", "/cart", "/checkout", "/help"];

/// Each user browses in 2..=4 bursts of 2..=7 clicks, 1 s..2 min apart,
/// with 10..60 min pauses between bursts. The clicks arrive ordered by
/// timestamp plus a random delay of up to `OUT_OF_ORDER_MS`. Seeded
/// (splitmix64), so every run prints the same.
fn generate(seed: u64) -> Vec<Click> {
    let mut rng = SplitMix(seed);
    // Uniform in `0..n`, as a time offset.
    let mut below = |n: u64| rng.below(n) as i64;
    let mut clicks = Vec::new();
    for user in USERS {
        let mut t = BASE_MS + below(20 * 60 * 1000);
        for _ in 0..2 + below(3) {
            for _ in 0..2 + below(6) {
                let page = PAGES[below(PAGES.len() as u64) as usize];
                clicks.push((
                    t + below(OUT_OF_ORDER_MS as u64 + 1),
                    Click {
                        user: user.to_string(),
                        ts: t,
                        page: page.to_string(),
                    },
                ));
                t += 1_000 + below(2 * 60 * 1000);
            }
            t += 10 * 60 * 1000 + below(50 * 60 * 1000);
        }
    }
    clicks.sort_by_key(|(arrival, c)| (*arrival, c.ts));
    clicks.into_iter().map(|(_, c)| c).collect()
}

/// `hh:mm:ss` after `BASE_MS`.
fn clock(ms: i64) -> String {
    let s = (ms - BASE_MS) / 1000;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Sessions computed without floe: per user, sorted clicks split at gaps
/// longer than `GAP_MS`; a session ends `GAP_MS` after its last click.
/// (Windows `[t, t + gap)` that touch merge, as in Flink, so a pause of
/// exactly the gap does not split a session.)
fn direct_sessions(clicks: &[Click]) -> Vec<Session> {
    let mut by_user: BTreeMap<&str, Vec<&Click>> = BTreeMap::new();
    for c in clicks {
        by_user.entry(&c.user).or_default().push(c);
    }
    let mut out = Vec::new();
    for (user, mut cs) in by_user {
        cs.sort_by_key(|c| c.ts);
        let mut current: Vec<&Click> = Vec::new();
        for c in cs {
            if let Some(last) = current.last()
                && c.ts - last.ts > GAP_MS
            {
                out.push(session_of(user, &current));
                current.clear();
            }
            current.push(c);
        }
        if !current.is_empty() {
            out.push(session_of(user, &current));
        }
    }
    out.sort();
    out
}

/// The pages of a session in click order.
fn path<'a>(clicks: impl Iterator<Item = &'a Click>) -> Vec<String> {
    let mut v: Vec<(i64, &str)> = clicks.map(|c| (c.ts, c.page.as_str())).collect();
    v.sort();
    v.into_iter().map(|(_, p)| p.to_string()).collect()
}

fn session_of(user: &str, clicks: &[&Click]) -> Session {
    let start = clicks.iter().map(|c| c.ts).min().unwrap_or_default();
    let last = clicks.iter().map(|c| c.ts).max().unwrap_or_default();
    let pages = path(clicks.iter().copied());
    Session {
        user: user.to_string(),
        start,
        end: last + GAP_MS,
        clicks: clicks.len(),
        pages,
    }
}

fn main() -> floe::Result<()> {
    let clicks = generate(42);
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);

    let strategy = WatermarkStrategy::<Click>::bounded_out_of_orderness(OUT_OF_ORDER_MS)
        .with_timestamp_assigner(|c, _| c.ts)
        .per_record();
    let sessions = env
        .from_collection(clicks.clone())
        .assign_timestamps_and_watermarks(strategy)
        .set_parallelism(1)
        .key_by(|c: &Click| c.user.clone())
        .window(WindowAssigner::session(GAP_MS))
        .process(
            |user: &String, w: &TimeWindow, clicks: Vec<Click>, out: &mut Vec<Session>| {
                let pages = path(clicks.iter());
                out.push(Session {
                    user: user.clone(),
                    start: w.start,
                    end: w.end,
                    clicks: clicks.len(),
                    pages,
                });
            },
        )
        .collect();
    env.execute()?;

    let mut got = sessions.take();
    got.sort();
    println!(
        "{} clicks of {} users, session gap {} min, out of order by up to {} s",
        clicks.len(),
        USERS.len(),
        GAP_MS / 60_000,
        OUT_OF_ORDER_MS / 1000
    );
    println!(
        "{:<5} {:>8} {:>8} {:>6}  pages in click order",
        "user", "start", "end", "clicks"
    );
    for s in &got {
        println!(
            "{:<5} {:>8} {:>8} {:>6}  {}",
            s.user,
            clock(s.start),
            clock(s.end),
            s.clicks,
            s.pages.join(" > ")
        );
    }
    let want = direct_sessions(&clicks);
    if got != want {
        eprintln!("sessions differ from the direct computation:\nwant {want:#?}\ngot {got:#?}");
        std::process::exit(1);
    }
    println!(
        "{} sessions; same as computed directly from the sorted clicks",
        got.len()
    );
    Ok(())
}
