//! The bytewise paths against the general ones they shortcut: the
//! parser against `parse_line` (trimming, `str::parse`), the firing
//! line against `format!`.

use super::*;
use floe::text::SplitMix;

fn same(a: &Event, b: &Event) -> bool {
    (&a.key, a.ts, a.value, &a.line) == (&b.key, b.ts, b.value, &b.line)
}

/// Random lines built from pieces that trip the parsers (signs, spaces,
/// a vertical tab and Unicode whitespace, commas, 18- and 19-digit
/// numbers, a key longer than the inline 23 bytes): wherever the
/// bytewise parser gives an event, `parse_line` gives the same one, and
/// every usual line takes the bytewise path.
#[test]
fn plain_lines_parse_as_parse_line_does() {
    let keys = [
        "k1",
        "",
        " k",
        "k ",
        "k\u{b}",
        "\u{a0}k",
        "k\u{3000}",
        "é",
        "a b",
        "a-key-longer-than-twenty-three-bytes",
        "k,x",
    ];
    let numbers = [
        "0",
        "-0",
        "+7",
        "-",
        "+",
        "12",
        " 12",
        "12 ",
        "1_0",
        "x",
        "",
        "999999999999999999",
        "-999999999999999999",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "1699999999855",
        "1,2",
    ];
    let mut rng = SplitMix(16);
    let mut plain = 0;
    for case in 0..20_000 {
        let line = format!(
            "{},{},{}",
            rng.pick(&keys),
            rng.pick(&numbers),
            rng.pick(&numbers)
        );
        let keep = case % 2 == 0;
        if let Some(fast) = parse_plain(line.as_bytes(), keep) {
            plain += 1;
            let slow = parse_line(&line, keep).expect("a plain line is a good line");
            assert!(same(&fast, &slow), "{line:?}: {fast:?} != {slow:?}");
        }
    }
    assert!(plain > 1000, "only {plain} lines took the bytewise path");
    for line in ["k7872,1699999999855,54", "k0,-5,+3", ",1,2", "kü1,0,-0"] {
        let fast = parse_plain(line.as_bytes(), true).expect("plain");
        let slow = parse_line(line, true).expect("good");
        assert!(same(&fast, &slow), "{line:?}");
    }
}

/// Wherever a timestamp is in `always_in_range`, `try_assign` accepts
/// it: timestamps near both ends of the `i64` range, for window sizes,
/// slides, offsets and gaps from 1 ms to near `i64::MAX`.
#[test]
fn timestamps_always_in_range_have_their_windows() {
    use floe::window::assigner::SessionGap;
    let mut rng = SplitMix(11);
    let sizes = [
        1,
        2,
        3,
        1000,
        86_400_000,
        i64::MAX / 3,
        i64::MAX / 2 - 1,
        i64::MAX,
    ];
    let mut checked = 0;
    for _ in 0..200 {
        let size = sizes[(rng.next() % sizes.len() as u64) as usize];
        let slide = 1 + (rng.next() as i64 & i64::MAX) % size;
        let offset = (rng.next() as i64) % slide;
        let assigners = [
            WindowAssigner::<Event>::Tumbling {
                size,
                offset: (rng.next() as i64) % size,
            },
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            },
            WindowAssigner::Session {
                gap: SessionGap::Static(size),
            },
            WindowAssigner::Global,
        ];
        for assigner in &assigners {
            let safe = always_in_range(assigner).expect("a bound for these windows");
            for _ in 0..50 {
                let near = (rng.next() % (4 * size.min(1 << 40) as u64 + 8)) as i64;
                let ts = match rng.next() % 4 {
                    0 => i64::MIN.saturating_add(near),
                    1 => i64::MAX.saturating_sub(near),
                    2 => safe.start().saturating_add(near % 3 - 1),
                    _ => safe.end().saturating_add(near % 3 - 1),
                };
                if safe.contains(&ts) {
                    checked += 1;
                    let e = Event {
                        key: SmolStr::new("k"),
                        ts,
                        value: 0,
                        line: None,
                    };
                    assert!(
                        assigner.try_assign(&e, ts, |_| {}).is_ok(),
                        "ts {ts} in {safe:?} has no window"
                    );
                }
            }
        }
    }
    assert!(checked > 10_000, "only {checked} timestamps in range");
}

/// An event without its line is written as one with `line: None`, and
/// reads one written with a line (dropping it): in-flight events of an
/// unaligned checkpoint restore whether or not either job kept lines.
#[test]
fn events_with_and_without_lines_read_each_other() {
    let mut rng = SplitMix(23);
    for i in 0..2_000 {
        let key = ["k1", "", "é,ü", "a-key-longer-than-twenty-three-bytes"][i % 4];
        let (ts, value) = (rng.next() as i64, rng.next() as i64);
        let line = format!("{key},{ts},{value}");
        let kept: Event = Event {
            key: SmolStr::new(key),
            ts,
            value,
            line: (i % 3 != 0).then(|| line.clone()),
        };
        let bytes = postcard::to_stdvec(&kept).expect("encodes");
        let bare: Event<NoLine> = postcard::from_bytes(&bytes).expect("reads a kept line");
        assert_eq!((&bare.key, bare.ts, bare.value), (&kept.key, ts, value));
        let bytes = postcard::to_stdvec(&bare).expect("encodes");
        let back: Event = postcard::from_bytes(&bytes).expect("reads no line");
        let none = Event { line: None, ..kept };
        assert!(same(&back, &none), "{back:?} != {none:?}");
    }
}

/// The usual event, without its line, is the key and two integers: the
/// bytes each record carries across the keyBy channel.
#[test]
fn an_event_without_its_line_is_key_and_two_integers() {
    assert_eq!(
        std::mem::size_of::<Event<NoLine>>(),
        std::mem::size_of::<SmolStr>() + 16
    );
    let plain: Event<NoLine> = parse_plain(b"k7,1699999999855,-54", true).expect("plain");
    let general: Event<NoLine> = parse_line("k7,1699999999855,-54", true).expect("good");
    assert_eq!(
        (&plain.key, plain.ts, plain.value),
        (&general.key, general.ts, general.value)
    );
    assert_eq!(
        (plain.key.as_str(), plain.ts, plain.value),
        ("k7", 1_699_999_999_855, -54)
    );
}
