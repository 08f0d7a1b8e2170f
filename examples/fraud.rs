//! Flink's fraud-detection walkthrough, with a keyed process function and a
//! processing-time timer.
//!
//! Exists to show keyed timers: a small transaction (< 1.00) followed by a
//! large one (> 500.00) on the same account within one minute raises an
//! alert. The detector keeps, in keyed state (so it is checkpointed and
//! restored with the job), a per-account "last was small" flag — the arrival
//! of that small transaction and the time of its timer — and registers a
//! processing-time timer one minute ahead that clears the flag; any
//! following transaction also clears it (deleting the timer).
//!
//! To make processing time deterministic the job runs on a `ManualClock`
//! driven by the data: a replay source emits the embedded transactions one at
//! a time, as if they arrived in real time — before emitting one it waits
//! until the previous one has been processed and moves the clock to the new
//! one's arrival time. A timer therefore fires before the first transaction
//! that arrives at or after its time is processed, exactly as on a live
//! clock. The program prints the alerts and the expired flags, checks the
//! alerts against a direct computation and exits non-zero if they differ.
//!
//! Run with `cargo run --example fraud`.

use floe::connectors::{SourceFunction, SourcePoll};
use floe::operators::keyed::KeyedProcessFunction;
use floe::operators::process::{OnTimerContext, ProcessContext};
use floe::state::ValueStateDescriptor;
use floe::time::{Clock, ManualClock};
use floe::{OutputTag, Record, StreamExecutionEnvironment};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const SMALL_AMOUNT: f64 = 1.00;
const LARGE_AMOUNT: f64 = 500.00;
const ONE_MINUTE: i64 = 60 * 1000;

/// A card transaction and the processing time (ms) it arrives at.
#[derive(Clone, Debug)]
struct Transaction {
    account: u64,
    amount: f64,
    arrival: i64,
}

/// A small transaction followed by a large one within a minute.
#[derive(Clone, Debug, PartialEq)]
struct Alert {
    account: u64,
    small_at: i64,
    large_at: i64,
    amount: f64,
}

/// `(account, minutes:seconds, amount)`: the embedded input, in arrival order.
const TRANSACTIONS: &[(u64, &str, f64)] = &[
    (1, "00:05", 188.23),
    (2, "00:12", 0.42), // small ...
    (3, "00:20", 374.79),
    (2, "00:41", 725.00), // ... large 29 s later: alert
    (4, "01:02", 0.21),   // small ...
    (5, "01:15", 0.99),   // small ...
    (1, "01:30", 11.50),
    (3, "02:00", 0.08),   // small ...
    (5, "02:07", 12.95),  // ... not large: flag cleared, timer deleted
    (4, "02:10", 642.31), // ... large 68 s later: the timer cleared the flag
    (3, "02:40", 0.47),   // small again: flag stays, timer moves to 03:40
    (3, "02:59", 999.99), // ... large 19 s later: alert
    (5, "03:00", 0.50),   // small ...
    (1, "03:35", 0.01),   // small ...
    (5, "03:59", 501.00), // ... large 59 s later: alert
    (1, "04:35", 900.00), // ... large exactly 60 s later: the timer fired
    (2, "05:00", 0.99),   // small; its timer is still pending at the end
];

fn transactions() -> Vec<Transaction> {
    TRANSACTIONS
        .iter()
        .map(|&(account, at, amount)| {
            let minutes_seconds = at
                .split_once(':')
                .and_then(|(m, s)| Some((m.parse::<i64>().ok()?, s.parse::<i64>().ok()?)));
            let (m, s) = minutes_seconds.expect("embedded times are mm:ss");
            let secs = m * 60 + s;
            Transaction {
                account,
                amount,
                arrival: secs * 1000,
            }
        })
        .collect()
}

/// `mm:ss.mmm`.
fn at(ms: i64) -> String {
    format!("{:02}:{:02}.{:03}", ms / 60_000, ms / 1000 % 60, ms % 1000)
}

/// Emits the transactions one by one, each once the previous one was
/// processed, with the clock moved to its arrival time first.
struct Replay {
    transactions: Arc<Vec<Transaction>>,
    next: usize,
    clock: ManualClock,
    processed: Arc<AtomicUsize>,
}

impl SourceFunction<Transaction> for Replay {
    fn poll_batch(
        &mut self,
        _max: usize,
        out: &mut Vec<Record<Transaction>>,
    ) -> floe::Result<SourcePoll> {
        let Some(tx) = self.transactions.get(self.next) else {
            return Ok(SourcePoll::Finished);
        };
        if self.processed.load(Ordering::SeqCst) < self.next {
            return Ok(SourcePoll::Wait(Duration::from_millis(1)));
        }
        self.clock.set(tx.arrival);
        out.push(Record::new(tx.clone()));
        self.next += 1;
        Ok(SourcePoll::Ready)
    }
}

/// The flag of an account whose last transaction was small.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct Flag {
    /// Arrival of the small transaction (for the alert).
    small_at: i64,
    /// When its timer fires.
    timer: i64,
}

/// The walkthrough's `FraudDetector`.
#[derive(Clone)]
struct FraudDetector {
    /// The account's flag, in keyed state.
    flag: ValueStateDescriptor<Flag>,
    /// (account, timer time) of every expired flag.
    expired: OutputTag<(u64, i64)>,
    processed: Arc<AtomicUsize>,
}

impl KeyedProcessFunction<u64, Transaction, Alert> for FraudDetector {
    fn process_element(
        &mut self,
        tx: Transaction,
        ctx: &mut ProcessContext<'_, '_, Alert, u64>,
    ) -> floe::Result<()> {
        let now = ctx.current_processing_time();
        if let Some(flag) = ctx.value_state(&self.flag)?.value()? {
            if tx.amount > LARGE_AMOUNT {
                ctx.collect(Alert {
                    account: tx.account,
                    small_at: flag.small_at,
                    large_at: now,
                    amount: tx.amount,
                });
            }
            ctx.delete_processing_time_timer(flag.timer);
            ctx.value_state(&self.flag)?.clear()?;
        }
        if tx.amount < SMALL_AMOUNT {
            let timer = now + ONE_MINUTE;
            ctx.register_processing_time_timer(timer);
            ctx.value_state(&self.flag)?.update(Flag {
                small_at: now,
                timer,
            })?;
        }
        self.processed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut OnTimerContext<'_, '_, Alert, u64>,
    ) -> floe::Result<()> {
        let account = *ctx.current_key();
        ctx.value_state(&self.flag)?.clear()?;
        let tag = self.expired.clone();
        ctx.output(&tag, (account, timestamp));
        Ok(())
    }
}

/// The alerts computed directly: a flag set at `t` is gone from `t + 1 min`.
fn direct_alerts(txs: &[Transaction]) -> Vec<Alert> {
    let mut small: HashMap<u64, i64> = HashMap::new();
    let mut alerts = Vec::new();
    for tx in txs {
        let flagged = small
            .get(&tx.account)
            .copied()
            .filter(|&t| tx.arrival < t + ONE_MINUTE);
        if let Some(t) = flagged
            && tx.amount > LARGE_AMOUNT
        {
            alerts.push(Alert {
                account: tx.account,
                small_at: t,
                large_at: tx.arrival,
                amount: tx.amount,
            });
        }
        small.remove(&tx.account);
        if tx.amount < SMALL_AMOUNT {
            small.insert(tx.account, tx.arrival);
        }
    }
    alerts
}

fn main() -> floe::Result<()> {
    let txs = Arc::new(transactions());
    let clock = ManualClock::new(0);
    let processed = Arc::new(AtomicUsize::new(0));
    let expired = OutputTag::<(u64, i64)>::new("flag-expired");

    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let source = {
        let (txs, clock, processed) = (txs.clone(), clock.clone(), processed.clone());
        env.add_source("Transactions", move |_| {
            Ok(Replay {
                transactions: txs.clone(),
                next: 0,
                clock: clock.clone(),
                processed: processed.clone(),
            })
        })
        .set_parallelism(1)
    };
    let detector = FraudDetector {
        flag: ValueStateDescriptor::new("flag"),
        expired: expired.clone(),
        processed,
    };
    let alerts = source
        .key_by(|tx: &Transaction| tx.account)
        .process_with_clock(detector, clock.clone())
        .name("Fraud Detector");
    let expirations = alerts.get_side_output(&expired).collect();
    let alerts = alerts.collect();
    env.execute()?;

    println!(
        "{} transactions replayed; the clock ends at {}",
        txs.len(),
        at(clock.now_ms())
    );
    let mut expirations = expirations.take();
    // When exactly a timer fired depends on which subtask checked the clock
    // first; which timers fired does not.
    expirations.sort_by_key(|&(account, t)| (t, account));
    for (account, t) in &expirations {
        println!("flag of account {account} expired (timer at {})", at(*t));
    }
    let mut got = alerts.take();
    got.sort_by_key(|a| (a.large_at, a.account));
    for a in &got {
        println!(
            "ALERT account {}: small transaction at {}, then {:.2} at {}",
            a.account,
            at(a.small_at),
            a.amount,
            at(a.large_at)
        );
    }
    let want = direct_alerts(&txs);
    if got != want {
        eprintln!("alerts differ from the direct computation:\nwant {want:#?}\ngot {got:#?}");
        std::process::exit(1);
    }
    println!("{} alerts; same as computed directly", got.len());
    Ok(())
}
