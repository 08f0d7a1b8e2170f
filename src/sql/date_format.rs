//! `DATE_FORMAT`, as Flink computes it (in UTC):
//!
//! - `DATE_FORMAT(TIMESTAMP, pattern)` (or a `TIMESTAMP_LTZ`) writes the
//!   timestamp in a pattern of Java's `DateTimeFormatter`;
//! - `DATE_FORMAT(STRING, pattern)` reads the string as `SimpleDateFormat`
//!   reads `yyyy-MM-dd HH:mm:ss` (leniently: a field past its range rolls
//!   over, text after the seconds is ignored; `NULL` if it does not read)
//!   and writes it in a pattern of `SimpleDateFormat`.
//!
//! The pattern is read as Java reads it: letters are fields (a run of one
//! letter is one field, its length the field's width or style), text in
//! single quotes is literal (`''` is a quote), any other character is
//! written as it is. A letter this module does not write (week-based
//! fields, time zones of a `DateTimeFormatter`) is refused, as is one Java
//! refuses.

use super::value::{civil_from_days, days_from_civil, write_int_padded};

/// Which of Java's two pattern languages a pattern is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patterns {
    /// `java.time.format.DateTimeFormatter` (a timestamp's).
    DateTime,
    /// `java.text.SimpleDateFormat` (a string's).
    Simple,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

const QUARTERS: [&str; 4] = ["1st quarter", "2nd quarter", "3rd quarter", "4th quarter"];

/// The fields of one instant (UTC).
struct Fields {
    year: i64,
    month: u32,
    day: u32,
    day_of_year: i64,
    /// 1 (Monday) to 7 (Sunday).
    weekday: i64,
    hour: i64,
    minute: i64,
    second: i64,
    milli: i64,
}

impl Fields {
    fn of(ms: i64) -> Fields {
        let days = ms.div_euclid(86_400_000);
        let of_day = ms.rem_euclid(86_400_000);
        let (year, month, day) = civil_from_days(days);
        Fields {
            year,
            month,
            day,
            day_of_year: days - days_from_civil(year, 1, 1) + 1,
            // 1970-01-01 was a Thursday.
            weekday: (days + 3).rem_euclid(7) + 1,
            hour: of_day / 3_600_000,
            minute: of_day / 60_000 % 60,
            second: of_day / 1000 % 60,
            milli: of_day % 1000,
        }
    }
}

/// Checks `pattern` as [`format`] reads it.
pub fn check(pattern: &str, patterns: Patterns) -> Result<(), String> {
    format(0, pattern, patterns, &mut String::new())
}

/// Appends the instant `ms` (milliseconds since the epoch, UTC) written in
/// `pattern` to `out`.
pub fn format(ms: i64, pattern: &str, patterns: Patterns, out: &mut String) -> Result<(), String> {
    let f = Fields::of(ms);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            if chars.next_if_eq(&'\'').is_some() {
                out.push('\'');
                continue;
            }
            loop {
                match chars.next() {
                    Some('\'') if chars.next_if_eq(&'\'').is_some() => out.push('\''),
                    Some('\'') => break,
                    Some(ch) => out.push(ch),
                    None => {
                        return Err(format!(
                            "DATE_FORMAT pattern '{pattern}' ends inside a quoted literal"
                        ));
                    }
                }
            }
        } else if c.is_ascii_alphabetic() {
            let mut n = 1;
            while chars.next_if_eq(&c).is_some() {
                n += 1;
            }
            let written = match patterns {
                Patterns::DateTime => date_time_field(&f, c, n, out),
                Patterns::Simple => simple_field(&f, c, n, out),
            };
            written.map_err(|why| format!("DATE_FORMAT pattern '{pattern}': {why}"))?;
        } else {
            match (patterns, c) {
                // Optional sections: every field this writes is there.
                (Patterns::DateTime, '[' | ']') => {}
                (Patterns::DateTime, '{' | '}' | '#') => {
                    return Err(format!(
                        "DATE_FORMAT pattern '{pattern}': '{c}' is reserved"
                    ));
                }
                _ => out.push(c),
            }
        }
    }
    Ok(())
}

/// `v` in decimal, zero-padded to `width` digits (a sign before them).
fn number(out: &mut String, v: i64, width: usize) {
    // Writing into a String cannot fail.
    let _ = write_int_padded(out, v, width);
}

/// How many decimal digits `v` has.
fn digit_count(v: i64) -> usize {
    v.unsigned_abs()
        .checked_ilog10()
        .map_or(1, |l| l as usize + 1)
}

/// Text of `full`: its first three letters (`n` < 4), itself (4), its first
/// letter (5).
fn text(out: &mut String, full: &str, n: usize, letter: char) -> Result<(), String> {
    match n {
        1..=3 => out.push_str(&full[..3]),
        4 => out.push_str(full),
        5 => out.push_str(&full[..1]),
        _ => return Err(format!("too many pattern letters: {letter}")),
    }
    Ok(())
}

/// A `DateTimeFormatter` field: letter `c`, `n` times.
fn date_time_field(f: &Fields, c: char, n: usize, out: &mut String) -> Result<(), String> {
    let at_most = |max: usize| match n <= max {
        true => Ok(()),
        false => Err(format!("too many pattern letters: {c}")),
    };
    let hour12 = |h: i64| if h % 12 == 0 { 12 } else { h % 12 };
    match c {
        'y' | 'u' => {
            let v = match c {
                // Year of era: 1 BC is year 1 of its era.
                'y' if f.year <= 0 => 1 - f.year,
                _ => f.year,
            };
            if n == 2 {
                number(out, v.rem_euclid(100), 2);
            } else {
                // Wider than its width from 4 letters on: a sign first.
                if n >= 4 && v >= 0 && digit_count(v) > n {
                    out.push('+');
                }
                number(out, v, n);
            }
        }
        'M' | 'L' => match n {
            1 | 2 => number(out, i64::from(f.month), n),
            _ => text(out, MONTHS[f.month as usize - 1], n, c)?,
        },
        'd' => {
            at_most(2)?;
            number(out, i64::from(f.day), n);
        }
        'D' => {
            at_most(3)?;
            number(out, f.day_of_year, n);
        }
        'H' | 'k' | 'K' | 'h' | 'm' | 's' => {
            at_most(2)?;
            let v = match c {
                'H' => f.hour,
                'k' if f.hour == 0 => 24,
                'k' => f.hour,
                'K' => f.hour % 12,
                'h' => hour12(f.hour),
                'm' => f.minute,
                _ => f.second,
            };
            number(out, v, n);
        }
        'S' => {
            at_most(9)?;
            // The fraction of the second, to `n` digits (truncated).
            let nanos = f.milli * 1_000_000;
            number(out, nanos / 10i64.pow(9 - n as u32), n);
        }
        'n' => number(out, f.milli * 1_000_000, n),
        'A' => number(
            out,
            ((f.hour * 60 + f.minute) * 60 + f.second) * 1000 + f.milli,
            n,
        ),
        'E' => text(out, DAYS[f.weekday as usize - 1], n, c)?,
        'a' => {
            at_most(1)?;
            out.push_str(if f.hour < 12 { "AM" } else { "PM" });
        }
        'G' => match (n, f.year > 0) {
            (1..=3, true) => out.push_str("AD"),
            (1..=3, false) => out.push_str("BC"),
            (4, true) => out.push_str("Anno Domini"),
            (4, false) => out.push_str("Before Christ"),
            (5, true) => out.push('A'),
            (5, false) => out.push('B'),
            _ => return Err(format!("too many pattern letters: {c}")),
        },
        'Q' | 'q' => {
            let q = (i64::from(f.month) - 1) / 3 + 1;
            match n {
                1 | 2 | 5 => number(out, q, if n == 2 { 2 } else { 1 }),
                3 => {
                    out.push('Q');
                    number(out, q, 1);
                }
                4 => out.push_str(QUARTERS[q as usize - 1]),
                _ => return Err(format!("too many pattern letters: {c}")),
            }
        }
        'e' | 'c' | 'w' | 'W' | 'Y' | 'F' | 'g' | 'B' => {
            return Err(format!(
                "pattern letter '{c}' (locale or week based) is not supported"
            ));
        }
        'V' | 'v' | 'z' | 'O' | 'X' | 'x' | 'Z' => {
            return Err(format!(
                "pattern letter '{c}' needs a time zone, which a timestamp has not"
            ));
        }
        _ => return Err(format!("unknown pattern letter: {c}")),
    }
    Ok(())
}

/// A `SimpleDateFormat` field: letter `c`, `n` times.
fn simple_field(f: &Fields, c: char, n: usize, out: &mut String) -> Result<(), String> {
    match c {
        'G' => out.push_str(if f.year > 0 { "AD" } else { "BC" }),
        'y' => {
            let v = if f.year <= 0 { 1 - f.year } else { f.year };
            match n {
                2 => number(out, v.rem_euclid(100), 2),
                _ => number(out, v, n),
            }
        }
        'M' | 'L' => match n {
            1 | 2 => number(out, i64::from(f.month), n),
            3 => out.push_str(&MONTHS[f.month as usize - 1][..3]),
            _ => out.push_str(MONTHS[f.month as usize - 1]),
        },
        'E' => match n {
            1..=3 => out.push_str(&DAYS[f.weekday as usize - 1][..3]),
            _ => out.push_str(DAYS[f.weekday as usize - 1]),
        },
        'a' => out.push_str(if f.hour < 12 { "AM" } else { "PM" }),
        'z' if n < 4 => out.push_str("UTC"),
        'z' => out.push_str("Coordinated Universal Time"),
        'Z' => out.push_str("+0000"),
        'X' if n <= 3 => out.push('Z'),
        'X' => return Err("invalid ISO 8601 format: length=4".into()),
        'd' | 'D' | 'u' | 'H' | 'k' | 'K' | 'h' | 'm' | 's' | 'S' => {
            let v = match c {
                'd' => i64::from(f.day),
                'D' => f.day_of_year,
                'u' => f.weekday,
                'H' => f.hour,
                'k' if f.hour == 0 => 24,
                'k' => f.hour,
                'K' => f.hour % 12,
                'h' if f.hour % 12 == 0 => 12,
                'h' => f.hour % 12,
                'm' => f.minute,
                's' => f.second,
                _ => f.milli,
            };
            number(out, v, n);
        }
        'w' | 'W' | 'F' | 'Y' => {
            return Err(format!(
                "pattern letter '{c}' (locale or week based) is not supported"
            ));
        }
        _ => return Err(format!("illegal pattern character '{c}'")),
    }
    Ok(())
}

/// `text` read as `SimpleDateFormat("yyyy-MM-dd HH:mm:ss")` reads it, in
/// UTC: digits for each field, the separators as they are, whatever follows
/// the seconds ignored; a field past its range rolls over into the next
/// larger one (month 13 is January of the next year). `None` if it does not
/// read.
pub fn parse_default(text: &str) -> Option<i64> {
    let mut rest = text.as_bytes();
    let mut fields = [0i64; 6];
    for (i, field) in fields.iter_mut().enumerate() {
        if i > 0 {
            let sep = [b'-', b'-', b' ', b':', b':'][i - 1];
            rest = rest.strip_prefix(&[sep])?;
        }
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        *field = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
        rest = &rest[digits..];
    }
    let [y, mo, d, h, mi, s] = fields;
    let months = y * 12 + mo - 1;
    let first = days_from_civil(months.div_euclid(12), months.rem_euclid(12) as u32 + 1, 1);
    let seconds = ((first + d - 1) * 24 + h) * 3600 + mi * 60 + s;
    Some(seconds * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::value::parse_timestamp;

    fn dt(ts: &str, pattern: &str) -> String {
        let mut out = String::new();
        format(
            parse_timestamp(ts).expect("a timestamp"),
            pattern,
            Patterns::DateTime,
            &mut out,
        )
        .expect("formats");
        out
    }

    fn simple(text: &str, pattern: &str) -> Option<String> {
        let ms = parse_default(text)?;
        let mut out = String::new();
        format(ms, pattern, Patterns::Simple, &mut out).expect("formats");
        Some(out)
    }

    #[test]
    fn timestamps_are_written_as_java_time_writes_them() {
        // Each line as java.time's LocalDateTime.format(ofPattern(p)) gives it.
        let t = "2024-03-09 07:05:03.042";
        assert_eq!(dt(t, "yyyy-MM-dd HH:mm:ss"), "2024-03-09 07:05:03");
        assert_eq!(
            dt(t, "yyyy-MM-dd'T'HH:mm:ss.SSS"),
            "2024-03-09T07:05:03.042"
        );
        assert_eq!(dt(t, "yy/M/d H:m:s S"), "24/3/9 7:5:3 0");
        assert_eq!(dt(t, "EEE, d MMM yyyy hh:mm a"), "Sat, 9 Mar 2024 07:05 AM");
        assert_eq!(dt(t, "EEEE MMMM"), "Saturday March");
        assert_eq!(dt(t, "D DDD Q QQQ QQQQ"), "69 069 1 Q1 1st quarter");
        assert_eq!(dt(t, "'o''clock' ''"), "o'clock '");
        assert_eq!(
            dt("2024-12-31 23:59:59.999", "D h a k K"),
            "366 11 PM 23 11"
        );
        assert_eq!(dt("2024-01-01 00:00:00", "h k K"), "12 24 0");
        assert_eq!(
            dt("1969-12-31 23:59:59.5", "yyyy-MM-dd HH:mm:ss.SS E"),
            "1969-12-31 23:59:59.50 Wed"
        );
    }

    #[test]
    fn strings_are_read_and_written_as_simple_date_format_does() {
        assert_eq!(
            simple("2024-01-01 00:00:49.756", "yyyyMMdd HH:mm:ss.SSS").as_deref(),
            Some("20240101 00:00:49.000")
        );
        // Lenient: month 13 and second 60 roll over.
        assert_eq!(
            simple("2023-13-01 23:59:60", "yyyy-MM-dd HH:mm:ss").as_deref(),
            Some("2024-01-02 00:00:00")
        );
        assert_eq!(simple("2024-01-01", "yyyy"), None);
        assert_eq!(simple("x2024-01-01 00:00:00", "yyyy"), None);
        assert_eq!(
            simple("2024-07-04 15:00:00", "EEEE, MMMM d, y h a z Z X").as_deref(),
            Some("Thursday, July 4, 2024 3 PM UTC +0000 Z")
        );
    }

    #[test]
    fn letters_java_refuses_or_floe_does_not_write_are_refused() {
        for (p, patterns) in [
            ("yyyy-MM-ddTHH", Patterns::DateTime),
            ("ddd", Patterns::DateTime),
            ("HH:mm z", Patterns::DateTime),
            ("ww", Patterns::DateTime),
            ("'open", Patterns::DateTime),
            ("{", Patterns::DateTime),
            ("yyyy-MM-ddTHH", Patterns::Simple),
            ("YYYY", Patterns::Simple),
            ("'open", Patterns::Simple),
        ] {
            let e = check(p, patterns).expect_err(p);
            assert!(e.starts_with("DATE_FORMAT pattern"), "{e}");
        }
        check("[yyyy]", Patterns::DateTime).expect("optional sections");
        check("yyyy-MM-dd HH:mm:ss.SSS", Patterns::Simple).expect("plain");
    }
}
