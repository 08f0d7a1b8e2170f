//! A `floe run … --group` process of a test and its stderr lines.

use super::{WATCHDOG, floe};
use std::io::BufRead;
use std::process::Child;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// One group member: its process and the stderr lines it printed.
pub struct Member {
    pub child: Child,
    lines: Receiver<String>,
    pub seen: Vec<String>,
}

/// The window job the group tests run: one-second tumbling sums, no
/// out-of-orderness.
pub const WINDOW_ARGS: [&str; 6] = [
    "--window",
    "tumbling:1000",
    "--agg",
    "sum",
    "--watermark-interval",
    "100",
];

impl Member {
    /// A member of group `group` running `job` from `input` into `output`
    /// (URLs), over `partitions` key groups: a 6 s
    /// session timeout, checkpoints every 200 ms into `dir`, parallelism
    /// 2, then `extra`.
    pub fn of_group(
        job: &str,
        input: &str,
        output: &str,
        group: &str,
        dir: &str,
        partitions: i32,
        extra: &[&str],
    ) -> Member {
        let args: Vec<String> = [
            "run",
            job,
            "--input",
            input,
            "--output",
            output,
            "--group",
            group,
            "--group-partitions",
            &partitions.to_string(),
            "--session-timeout",
            "6000",
            "--checkpoint-dir",
            dir,
            "--checkpoint-interval",
            "200",
            "--parallelism",
            "2",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
        Member::from_args(&args)
    }

    /// Starts `floe ARGS`, its stderr read line by line.
    pub fn from_args(args: &[String]) -> Member {
        let mut child = floe(args).spawn().expect("floe runs");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Member {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Takes the lines printed so far.
    pub fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
    }

    /// Waits for a line that `matches` (after those seen), within the
    /// watchdog.
    pub fn wait_line(&mut self, what: &str, matches: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + WATCHDOG;
        loop {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let hit = matches(&line);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("member ended before {what}:\n{}", self.seen.join("\n"))
                }
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {WATCHDOG:?}:\n{}",
                self.seen.join("\n")
            );
        }
    }

    /// Waits for a `rebalance generation=…` line.
    pub fn wait_rebalance(&mut self, what: &str) {
        self.wait_line(what, |l| l.starts_with("rebalance generation="));
    }

    /// The generation of the last `rebalance generation=…` line so far.
    pub fn generation(&mut self) -> Option<u32> {
        self.drain();
        self.seen.iter().rev().find_map(|l| {
            l.strip_prefix("rebalance generation=")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
    }

    /// The `rebalance` lines printed so far.
    pub fn rebalances(&mut self) -> usize {
        self.drain();
        self.seen
            .iter()
            .filter(|l| l.starts_with("rebalance generation="))
            .count()
    }

    /// Sends `signal` (`-STOP`, `-CONT`, `-9`, `-TERM`) to the process.
    pub fn signal(&self, signal: &str) {
        let _ = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
    }

    /// `kill -9`, then its exit.
    pub fn kill9(mut self) {
        self.signal("-9");
        let _ = self.child.wait();
    }

    /// SIGTERM, then its exit: the status and every stderr line.
    pub fn terminate(mut self) -> (std::process::ExitStatus, Vec<String>) {
        self.signal("-TERM");
        let deadline = Instant::now() + WATCHDOG;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                // The reader thread ends with the pipe.
                while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
                    self.seen.push(line);
                }
                return (status, self.seen);
            }
            self.drain();
            assert!(
                Instant::now() < deadline,
                "member still running {WATCHDOG:?} after SIGTERM:\n{}",
                self.seen.join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits, within the watchdog, until every member's last rebalance is of
/// one generation: they hold the group's partitions between them, and each
/// reads from its own run what is produced next.
pub fn wait_one_generation(members: &mut [&mut Member]) {
    let deadline = Instant::now() + WATCHDOG;
    loop {
        let generations: Vec<Option<u32>> = members.iter_mut().map(|m| m.generation()).collect();
        if generations[0].is_some() && generations.iter().all(|g| *g == generations[0]) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the members' last rebalances are of generations {generations:?} after {WATCHDOG:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
