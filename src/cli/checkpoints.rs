//! `floe checkpoints list|verify`: inspect a checkpoint directory, or a
//! checkpoint prefix on object storage (`s3://BUCKET/PREFIX`).
//!
//! `list` reads the store's database only; `verify` reads every file and
//! checks every checksum, and exits non-zero on the first damaged checkpoint
//! it reports (after reporting them all), so it can gate a restore in a
//! script.

use floe::checkpoint::location::is_single_snapshot;
use floe::checkpoint::{CheckpointError, CheckpointMetadata, load_snapshot, open_existing_storage};
use std::io::Write;
use std::path::Path;

/// Prints one line on stdout. A reader that went away (`| head`) ends the
/// printing, not the command: `verify` still checks every checkpoint and
/// exits as it finds them.
macro_rules! say {
    ($($arg:tt)*) => {
        say(format_args!($($arg)*))
    };
}

fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    // A closed pipe or a full disk cannot be reported on stdout itself;
    // the command's result still goes to the exit code.
    let _ = out.write_fmt(line).and_then(|()| out.write_all(b"\n"));
}

/// `floe checkpoints list DIR`: one line per committed checkpoint, newest
/// last, after a header line, columns: `id  time  size_bytes  duration_ms
/// alignment_ms  channel_state_bytes  kind` (time: UTC ISO-8601 of the
/// trigger; kind: `aligned` or `unaligned`). Err on an unreadable directory.
pub fn list(dir: &Path) -> floe::Result<()> {
    let store = open_existing_storage(dir)?;
    let checkpoints = store.list()?;
    say!("{}", header());
    for meta in &checkpoints {
        say!("{}", row(meta));
    }
    Ok(())
}

fn header() -> String {
    format!(
        "{:>8}  {:<24}  {:>12}  {:>11}  {:>12}  {:>19}  kind",
        "id", "time", "size_bytes", "duration_ms", "alignment_ms", "channel_state_bytes"
    )
}

fn row(meta: &CheckpointMetadata) -> String {
    format!(
        "{:>8}  {:<24}  {:>12}  {:>11}  {:>12}  {:>19}  {}",
        meta.id.0,
        iso8601_utc(meta.trigger_ms),
        meta.size_bytes(),
        meta.duration_ms,
        meta.alignment_ms,
        meta.channel_state_bytes,
        if meta.unaligned {
            "unaligned"
        } else {
            "aligned"
        }
    )
}

/// `floe checkpoints verify PATH`: checks every checksum of every committed
/// checkpoint of the checkpoint directory PATH (or of the one savepoint or
/// `chk-<id>` directory PATH), printing `checkpoint N: ok` or
/// `checkpoint N: CORRUPT <reason>` for each; Err (non-zero exit) with the
/// first fault if any.
pub fn verify(path: &Path) -> floe::Result<()> {
    if is_single_snapshot(path)? {
        // One snapshot: a savepoint, a `chk-<id>` directory or a `_metadata`.
        return match load_snapshot(path) {
            Ok(loaded) => {
                say!("checkpoint {}: ok", loaded.meta.id.0);
                Ok(())
            }
            Err(e @ CheckpointError::NotFound { .. }) => Err(e.into()),
            Err(e) => {
                say!("checkpoint {}: CORRUPT {}", label(&e, path), reason(&e));
                Err(e.into())
            }
        };
    }
    let store = open_existing_storage(path)?;
    let checkpoints = store.list()?;
    if checkpoints.is_empty() {
        say!("no committed checkpoints in '{}'", path.display());
    }
    let mut first_fault = None;
    for meta in &checkpoints {
        match store.verified_metadata(meta.id) {
            Ok(_) => say!("checkpoint {}: ok", meta.id.0),
            Err(e) => {
                say!("checkpoint {}: CORRUPT {}", meta.id.0, reason(&e));
                first_fault.get_or_insert(e);
            }
        }
    }
    match first_fault {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// The checkpoint an error names, or `path`.
fn label(e: &CheckpointError, path: &Path) -> String {
    match e {
        CheckpointError::Corrupt { checkpoint, .. }
        | CheckpointError::Version { checkpoint, .. } => checkpoint.clone(),
        _ => path.display().to_string(),
    }
}

/// What is wrong, without repeating the checkpoint.
fn reason(e: &CheckpointError) -> String {
    match e {
        CheckpointError::Corrupt { file, reason, .. } => {
            format!("'{}': {reason}", file.display())
        }
        CheckpointError::Version {
            found, expected, ..
        } => format!("format version {found}, this floe reads {expected}"),
        other => other.to_string(),
    }
}

/// `ms` since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn iso8601_utc(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_known_instants() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601_utc(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(iso8601_utc(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn civil_from_days_round_trips_day_by_day() {
        // Oracle: walk the calendar one day at a time from 1900-01-01.
        let days_in = |y: i64, m: u32| match m {
            2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let (mut y, mut m, mut d) = (1900i64, 1u32, 1u32);
        for days in -25_567..200_000 {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            d += 1;
            if d > days_in(y, m) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }
}
