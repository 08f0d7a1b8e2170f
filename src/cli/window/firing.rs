//! The window job's output lines, `key,window_start,window_end,value`.
//!
//! One line format, two shapes of record:
//!
//! - [`Firing`], one record per result, for the outputs that take a line at
//!   a time: the transactional file, Kafka, PostgreSQL, a throttled sink,
//!   and session windows (their operator hands on each result as it fires).
//! - [`FiringLines`], many results to a record, for tumbling and sliding
//!   windows written directly (stdout, or a file without checkpointing):
//!   the window function writes each window's results straight into a
//!   block of lines, which the sink chained to the window writes at once.
//!   No record per result, no sink loop per line; written blocks go back to
//!   the window function through a [`BlockPool`], so a firing writes into
//!   memory already touched rather than into fresh pages.
//!
//! Either way a line is assembled by [`put_line`]: the window's bounds are
//! formatted once per window ([`WindowBounds`]), and each field is copied
//! with moves of fixed size (no `memmove` call per field). The bytes are
//! exactly `format!("{key},{start},{end},{value}\n")`'s.

use crate::cli::output::{WriteBlock, WriteLine};
use floe::window::TimeWindow;
use smol_str::SmolStr;
use std::sync::{Arc, Mutex};

/// One firing: the line `key,window_start,window_end,value`. Records of
/// this type, not formatted strings, go from the window to the sink, which
/// writes them bytewise into its batch buffer ([`WriteLine`]): no
/// allocation and no `fmt` per result.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Firing {
    pub(in crate::cli) key: SmolStr,
    pub(in crate::cli) start: i64,
    pub(in crate::cli) end: i64,
    pub(in crate::cli) value: i64,
}

impl Firing {
    /// The window function of the jobs that hand on a `Firing` per result.
    pub(in crate::cli) fn push(key: &SmolStr, w: &TimeWindow, value: i64, out: &mut Vec<Firing>) {
        out.push(Firing {
            key: key.clone(),
            start: w.start,
            end: w.end,
            value,
        })
    }
}

/// Room for `,start,end,`: two `i64`s of up to 20 bytes and three commas.
const BOUNDS_ROOM: usize = 48;

/// Room a line needs beyond its key: the bounds' room (copied whole) and
/// a value's sign, digits and newline.
const LINE_ROOM: usize = BOUNDS_ROOM + 24;

/// The bounds of the window last written, with `,start,end,` formatted: a
/// window's results come one after another, so its bounds are formatted
/// once per window, not once per result.
#[derive(Clone, Debug)]
pub struct WindowBounds {
    start: i64,
    end: i64,
    /// `,start,end,` in `text[..len]`, the rest padding: copied whole.
    /// `len` is 0 before the first window.
    text: [u8; BOUNDS_ROOM],
    len: usize,
}

impl Default for WindowBounds {
    fn default() -> Self {
        WindowBounds {
            start: 0,
            end: 0,
            text: [0; BOUNDS_ROOM],
            len: 0,
        }
    }
}

impl WindowBounds {
    /// Formats `,start,end,` unless these are the bounds last formatted.
    #[inline(always)]
    fn set(&mut self, start: i64, end: i64) {
        if self.start != start || self.end != end || self.len == 0 {
            self.format(start, end);
        }
    }

    /// Formats `,start,end,`: once per window.
    #[cold]
    fn format(&mut self, start: i64, end: i64) {
        let text = &mut self.text;
        text[0] = b',';
        let at = put_int(text, 1, start);
        text[at] = b',';
        let at = put_int(text, at + 1, end);
        text[at] = b',';
        self.len = at + 1;
        (self.start, self.end) = (start, end);
    }
}

/// `00`, `01`, … `99`: two digits at a time.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `v` in decimal at `dst[at..]`, which has room for a sign and
/// 20 digits; returns where it ends. A value from 0 to 99,999,999, the
/// usual one, is written without a branch on its digits (which vary line
/// by line, so a branch on them is mispredicted): eight digits with their
/// leading zeros are built in a word, shifted past the zeros, and stored
/// whole; the bytes after the value are room that the rest of the line
/// writes over.
#[inline(always)]
fn put_int(dst: &mut [u8], at: usize, v: i64) -> usize {
    if (0..100_000_000).contains(&v) {
        let m = v as usize;
        let (high, low) = (m / 10_000, m % 10_000);
        let mut eight = [0u8; 8];
        for (i, pair) in [high / 100, high % 100, low / 100, low % 100]
            .into_iter()
            .enumerate()
        {
            eight[2 * i..2 * i + 2].copy_from_slice(&DIGIT_PAIRS[2 * pair..2 * pair + 2]);
        }
        let digits = 1 + [10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000]
            .iter()
            .map(|&p| usize::from(m >= p))
            .sum::<usize>();
        // Little-endian: the leading zeros are the low bytes.
        let shifted = u64::from_le_bytes(eight) >> (8 * (8 - digits));
        dst[at..at + 8].copy_from_slice(&shifted.to_le_bytes());
        return at + digits;
    }
    put_any_int(dst, at, v)
}

/// Writes any `v` as [`put_int`] does, two digits at a time from the last.
#[cold]
fn put_any_int(dst: &mut [u8], at: usize, v: i64) -> usize {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut m = v.unsigned_abs();
    while m >= 100 {
        let pair = (m % 100) as usize * 2;
        m /= 100;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if m >= 10 {
        let pair = m as usize * 2;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        digits[i] = b'0' + m as u8;
    }
    let at = if v < 0 {
        dst[at] = b'-';
        at + 1
    } else {
        at
    };
    let end = at + (digits.len() - i);
    dst[at..end].copy_from_slice(&digits[i..]);
    end
}

/// Copies `src` to the front of `dst`, writing nothing past `src.len()`:
/// up to 32 bytes with two moves of fixed size (which may overlap), longer
/// ones with a plain copy. Returns the length.
#[inline(always)]
fn put_small(dst: &mut [u8], src: &[u8]) -> usize {
    let n = src.len();
    match n {
        0 => {}
        1..=3 => {
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        4..=7 => {
            dst[..4].copy_from_slice(&src[..4]);
            dst[n - 4..n].copy_from_slice(&src[n - 4..]);
        }
        8..=15 => {
            dst[..8].copy_from_slice(&src[..8]);
            dst[n - 8..n].copy_from_slice(&src[n - 8..]);
        }
        16..=32 => {
            dst[..16].copy_from_slice(&src[..16]);
            dst[n - 16..n].copy_from_slice(&src[n - 16..]);
        }
        _ => dst[..n].copy_from_slice(src),
    }
    n
}

/// The longest key of a line written in a fixed-size slice.
const SHORT_KEY: usize = 32;

/// The most bytes a line with a short key takes.
const SHORT_LINE: usize = SHORT_KEY + LINE_ROOM;

/// Writes the line `key` + `bounds` + `value` + `\n` at `dst[at..]`, which
/// must hold `key.len() + LINE_ROOM` bytes; returns where the line ends. A
/// short key's line, the usual one, is written into a slice of fixed size
/// where there is room for one: its bounds are checked once, not field by
/// field.
#[inline(always)]
fn put_line(dst: &mut [u8], at: usize, key: &[u8], bounds: &WindowBounds, value: i64) -> usize {
    if key.len() <= SHORT_KEY
        && let Some(line) = dst.get_mut(at..at + SHORT_LINE)
        && let Ok(line) = <&mut [u8; SHORT_LINE]>::try_from(line)
    {
        return at + put_fields(line, key, bounds, value);
    }
    at + put_fields(&mut dst[at..], key, bounds, value)
}

/// The line's fields at the front of `line`; returns its length.
#[inline(always)]
fn put_fields(line: &mut [u8], key: &[u8], bounds: &WindowBounds, value: i64) -> usize {
    let at = put_small(line, key);
    line[at..at + BOUNDS_ROOM].copy_from_slice(&bounds.text);
    let at = put_int(line, at + bounds.len, value);
    line[at] = b'\n';
    at + 1
}

impl WriteLine for Firing {
    type Memo = WindowBounds;

    #[inline]
    fn write_line(&self, buf: &mut Vec<u8>, memo: &mut WindowBounds) {
        let at = buf.len();
        let key = self.key.as_bytes();
        buf.resize(at + key.len() + LINE_ROOM, 0);
        memo.set(self.start, self.end);
        let end = put_line(buf, at, key, memo, self.value);
        buf.truncate(end);
    }
}

/// The same line, for the outputs that format (transactional, Kafka,
/// PostgreSQL).
impl std::fmt::Display for Firing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{},{},{}", self.key, self.start, self.end, self.value)
    }
}

/// Bytes of lines a block holds before the next result starts another.
const BLOCK: usize = 64 * 1024;

/// Firings as lines, many to a record (see the module's documentation).
#[derive(Clone, Debug)]
pub struct FiringLines {
    /// The lines in `bytes[..len]`; the rest is room, written over.
    bytes: Vec<u8>,
    len: usize,
    lines: u64,
    bounds: WindowBounds,
}

impl FiringLines {
    fn new(bytes: Vec<u8>) -> FiringLines {
        FiringLines {
            bytes,
            len: 0,
            lines: 0,
            bounds: WindowBounds::default(),
        }
    }

    /// Appends the line `key,start,end,value`.
    #[inline]
    fn push(&mut self, key: &[u8], start: i64, end: i64, value: i64) {
        let room = self.len + key.len() + LINE_ROOM;
        if room > self.bytes.len() {
            // Only a key longer than the block's slack gets here.
            self.bytes.resize(room, 0);
        }
        self.bounds.set(start, end);
        self.len = put_line(&mut self.bytes, self.len, key, &self.bounds, value);
        self.lines += 1;
    }
}

impl WriteBlock for FiringLines {
    type Pool = BlockPool;

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn lines(&self) -> u64 {
        self.lines
    }

    fn recycle(self, pool: &BlockPool) {
        pool.give(self);
    }
}

/// Buffers of written blocks, handed back by the sink to the window
/// function: a lock per block of some 1,500 lines, none per line.
#[derive(Clone, Default)]
pub struct BlockPool(Arc<Mutex<Vec<Vec<u8>>>>);

/// Buffers a [`BlockPool`] keeps; more are freed.
const POOLED: usize = 16;

/// A block's buffer: [`BLOCK`] bytes of lines and room for one more
/// line with a key of up to 64 bytes.
const BLOCK_BYTES: usize = BLOCK + 64 + LINE_ROOM;

impl BlockPool {
    fn take(&self) -> Vec<u8> {
        let pooled = self.0.lock().ok().and_then(|mut p| p.pop());
        pooled.unwrap_or_else(|| vec![0; BLOCK_BYTES])
    }

    /// Keeps a written block's buffer for a later block.
    fn give(&self, block: FiringLines) {
        if let Ok(mut pool) = self.0.lock()
            && pool.len() < POOLED
        {
            pool.push(block.bytes);
        }
    }

    /// The window function: appends the line `key,start,end,value` to the
    /// last block of `out`, or to a new one when that one is full.
    #[inline]
    pub fn append(&self, key: &SmolStr, w: &TimeWindow, value: i64, out: &mut Vec<FiringLines>) {
        let block = match out.last_mut() {
            Some(b) if b.len < BLOCK => b,
            _ => self.start_block(out),
        };
        block.push(key.as_bytes(), w.start, w.end, value);
    }

    /// A new block at the end of `out`: once per block, kept out of the
    /// line's path.
    #[cold]
    #[inline(never)]
    fn start_block<'a>(&self, out: &'a mut Vec<FiringLines>) -> &'a mut FiringLines {
        out.push(FiringLines::new(self.take()));
        out.last_mut().expect("a block was just pushed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe::text::SplitMix;

    /// Keys of every length class [`put_small`] copies differently, ASCII
    /// and not.
    const KEYS: [&str; 9] = [
        "",
        "a",
        "k12",
        "k1234",
        "é,ü",
        "key-0123456",
        "a-key-of-twenty-bytes",
        "a-key-longer-than-thirty-two-bytes!",
        "a key of far more than sixty-four bytes, longer than a block's slack: ünïcödé",
    ];

    /// Random `i64`s: the extremes, every number of digits and the powers
    /// of ten on either side (where [`put_int`] changes its way), the usual
    /// sizes.
    fn number(rng: &mut SplitMix) -> i64 {
        let edges = [0, 1, -1, i64::MAX, i64::MIN, 1_699_999_999_000];
        match rng.next() % 4 {
            0 => edges[(rng.next() % edges.len() as u64) as usize],
            1 => {
                let power = 10i64.pow((rng.next() % 19) as u32);
                power + (rng.next() % 3) as i64 - 1
            }
            2 => (rng.next() % 10u64.pow((rng.next() % 10) as u32 + 1)) as i64 - 50_000,
            _ => rng.next() as i64,
        }
    }

    /// `(key, start, end, value)` in runs of one window, as firings come.
    fn results(seed: u64, n: usize) -> Vec<(&'static str, i64, i64, i64)> {
        let mut rng = SplitMix(seed);
        let mut bounds = (0, 0);
        (0..n)
            .map(|_| {
                if rng.next().is_multiple_of(8) {
                    bounds = (number(&mut rng), number(&mut rng));
                }
                let key = KEYS[(rng.next() % KEYS.len() as u64) as usize];
                (key, bounds.0, bounds.1, number(&mut rng))
            })
            .collect()
    }

    fn formatted(results: &[(&str, i64, i64, i64)]) -> String {
        results
            .iter()
            .map(|(k, s, e, v)| format!("{k},{s},{e},{v}\n"))
            .collect()
    }

    /// The bytes a firing writes are `format!`'s, whether its window is the
    /// last line's (bounds remembered) or another.
    #[test]
    fn a_firing_writes_the_formatted_line() {
        let results = results(7, 20_000);
        let mut buf = Vec::new();
        let mut memo = WindowBounds::default();
        for &(key, start, end, value) in &results {
            let f = Firing {
                key: SmolStr::new(key),
                start,
                end,
                value,
            };
            let before = buf.len();
            f.write_line(&mut buf, &mut memo);
            let want = format!("{f}\n");
            assert_eq!(String::from_utf8_lossy(&buf[before..]), want);
        }
        assert_eq!(String::from_utf8_lossy(&buf), formatted(&results));
    }

    /// Blocks hold the formatted lines in order, split only between lines,
    /// their line counts summing to the results; a buffer that comes back
    /// through the pool, with an earlier block's bytes in it, writes the
    /// same lines.
    #[test]
    fn blocks_hold_the_formatted_lines() {
        let pool = BlockPool::default();
        for round in 0..3u64 {
            let results = results(11 + round, 30_000);
            let mut out = Vec::new();
            for &(key, start, end, value) in &results {
                let w = TimeWindow::new(start, end);
                pool.append(&SmolStr::new(key), &w, value, &mut out);
            }
            assert!(out.len() > 2, "{} blocks", out.len());
            let mut text = String::new();
            for block in &out {
                let bytes = block.as_bytes();
                assert_eq!(bytes.last(), Some(&b'\n'));
                let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
                assert_eq!(lines, block.lines());
                text.push_str(std::str::from_utf8(bytes).expect("UTF-8 lines"));
            }
            assert_eq!(text, formatted(&results));
            for block in out {
                pool.give(block);
            }
        }
    }
}
