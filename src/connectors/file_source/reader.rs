//! Reads the lines of one split out of a reusable buffer.
//!
//! No allocation per line: a line is a slice of the read buffer, valid until
//! the next call. The buffer grows only for a line longer than itself. A
//! split's first line is the first one that starts at or after its `start`:
//! the reader seeks to `start - 1` and skips through the next `\n` (a `\n`
//! right at `start - 1` means a line starts at `start`). It stops before the
//! first line that starts at or after `end`.
//!
//! [`LongLines`] bounds what a long line costs: read in pieces cut at word
//! boundaries, or refused as a bad line and read past. Skipping the end of
//! the previous split's last line never holds it either: its bytes are
//! dropped as they are read, so the buffer stays at its size whatever the
//! line's length.

use super::LongLines;
use crate::{Error, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The UTF-8 encoding of U+FEFF, which some editors write at the start of a
/// text file; it is not part of the first line.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Bytes read at a time.
const READ_SIZE: usize = 256 * 1024;

/// The lines of one split, in order.
pub(crate) struct SplitReader {
    path: PathBuf,
    file: File,
    buf: Vec<u8>,
    /// The unread bytes are `buf[pos..len]`.
    pos: usize,
    len: usize,
    /// File offset of `buf[pos]`.
    offset: u64,
    /// Lines starting at or after this offset belong to the next split.
    end: u64,
    eof: bool,
    /// The bytes up to the first `\n` are the end of the previous split's
    /// last line.
    skip_partial: bool,
    /// The last [`Line::Text`] was a piece: the next one continues its
    /// line, even past `end`.
    mid_line: bool,
    long: LongLines,
}

/// What [`SplitReader::next_line`] read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// A line without its ending, or ([`LongLines::Pieces`]) a piece of one.
    Text(&'a [u8]),
    /// A line of this many bytes, more than [`LongLines::Refuse`] allows:
    /// read past, never held whole.
    TooLong(u64),
}

/// A line found in the buffer by [`SplitReader::raw_line`].
enum Raw {
    /// `buf[from..to]`, ending excluded; `newline` tells whether a `\n`
    /// ended it, `piece` whether it is a piece of a longer line.
    Bytes {
        from: usize,
        to: usize,
        newline: bool,
        piece: bool,
    },
    TooLong(u64),
}

/// Where a piece of `line` (longer than `max`) ends: after its last ASCII
/// byte that is neither letter nor digit within the first `max` bytes, or
/// failing that the first one after; `None` if it has none.
fn piece_end(line: &[u8], max: usize) -> Option<usize> {
    let separator = |b: &u8| b.is_ascii() && !b.is_ascii_alphanumeric();
    let head = &line[..max.min(line.len())];
    if let Some(i) = head.iter().rposition(separator) {
        return Some(i + 1);
    }
    line[head.len()..]
        .iter()
        .position(separator)
        .map(|i| head.len() + i + 1)
}

impl SplitReader {
    /// A reader of the lines of `path` that start in `[start, end)`,
    /// beginning at `next` (a line start) when it is known.
    pub(crate) fn open(
        path: &Path,
        start: u64,
        end: u64,
        next: Option<u64>,
        long: LongLines,
    ) -> Result<Self> {
        let mut file =
            File::open(path).map_err(|e| Error::io("cannot open input file", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("cannot read input file", path, e))?
            .len();
        // Typed as invalid data: no restart can mend it.
        let changed = |context: &'static str, message: String| {
            Error::io(
                context,
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, message),
            )
        };
        match next {
            Some(at) if at > len => {
                return Err(changed(
                    "cannot restore input file",
                    format!(
                        "checkpointed offset {at} is past its end ({len} bytes); the file changed"
                    ),
                ));
            }
            // A split not begun: the file was longer when the job cut it
            // into splits (in this run, or the run that took the
            // checkpoint).
            None if end > len => {
                return Err(changed(
                    "input file shrank while the job read it",
                    format!(
                        "it is {len} bytes now; its split of bytes {start}..{end} was cut when it was longer"
                    ),
                ));
            }
            _ => {}
        }
        let (offset, skip_partial) = match next {
            Some(at) => (at, false),
            None if start == 0 => (0, false),
            None => (start - 1, true),
        };
        let seek = |file: &mut File, at: u64| {
            file.seek(SeekFrom::Start(at))
                .map_err(|e| Error::io("cannot seek input file", path, e))
        };
        // A position saved between two pieces of a line follows a byte
        // other than `\n`: the line goes on whatever the split's end.
        let mut mid_line = false;
        if let Some(at @ 1..) = next {
            seek(&mut file, at - 1)?;
            let mut before = [0u8];
            file.read_exact(&mut before)
                .map_err(|e| Error::io("cannot read input file", path, e))?;
            mid_line = before[0] != b'\n';
        }
        seek(&mut file, offset)?;
        Ok(SplitReader {
            path: path.to_path_buf(),
            file,
            buf: vec![0; READ_SIZE],
            pos: 0,
            len: 0,
            offset,
            end,
            eof: false,
            skip_partial,
            mid_line,
            long,
        })
    }

    /// The file offset of the next line (once the partial first line is
    /// skipped).
    pub(crate) fn next_offset(&self) -> Option<u64> {
        (!self.skip_partial).then_some(self.offset)
    }

    /// The next line, without its `\n` or `\r\n` (and, at offset 0, without
    /// a byte order mark), with its offset; `None` at the split's end.
    pub(crate) fn next_line(&mut self) -> Result<Option<(u64, Line<'_>)>> {
        if self.skip_partial {
            self.skip_partial = false;
            if self.discard_line()?.is_none() {
                return Ok(None);
            }
        }
        if !self.mid_line && self.offset >= self.end {
            return Ok(None);
        }
        let at = self.offset;
        let (from, to, newline) = match self.raw_line()? {
            None => return Ok(None),
            Some(Raw::TooLong(bytes)) => return Ok(Some((at, Line::TooLong(bytes)))),
            Some(Raw::Bytes {
                from,
                to,
                newline,
                piece,
            }) => {
                self.mid_line = piece;
                (from, to, newline)
            }
        };
        let mut line = &self.buf[from..to];
        if newline && line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        if at == 0 && line.starts_with(BOM) {
            line = &line[BOM.len()..];
        }
        Ok(Some((at, Line::Text(line))))
    }

    /// Consumes the next line (or piece), or refuses it as too long.
    fn raw_line(&mut self) -> Result<Option<Raw>> {
        let mut searched = 0;
        loop {
            let newline = memchr::memchr(b'\n', &self.buf[self.pos + searched..self.len])
                .map(|i| self.pos + searched + i);
            let from = self.pos;
            let held = newline.unwrap_or(self.len) - from;
            match self.long {
                LongLines::Refuse(max) if held > max => return self.refuse(newline).map(Some),
                LongLines::Pieces(max) if held > max => {
                    let end = newline.unwrap_or(self.len);
                    if let Some(cut) = piece_end(&self.buf[from..end], max) {
                        self.pos = from + cut;
                        self.offset += cut as u64;
                        return Ok(Some(Raw::Bytes {
                            from,
                            to: from + cut,
                            newline: false,
                            piece: true,
                        }));
                    }
                }
                _ => {}
            }
            if let Some(to) = newline {
                self.pos = to + 1;
                self.offset += (to + 1 - from) as u64;
                return Ok(Some(Raw::Bytes {
                    from,
                    to,
                    newline: true,
                    piece: false,
                }));
            }
            searched = held;
            if self.eof {
                if held == 0 {
                    return Ok(None);
                }
                self.pos = self.len;
                self.offset += held as u64;
                return Ok(Some(Raw::Bytes {
                    from,
                    to: self.len,
                    newline: false,
                    piece: false,
                }));
            }
            self.fill()?;
        }
    }

    /// Consumes the line at `pos`, too long to hold; `newline` is its `\n`
    /// if the buffer holds it.
    fn refuse(&mut self, newline: Option<usize>) -> Result<Raw> {
        let from = self.pos;
        if let Some(to) = newline {
            self.pos = to + 1;
            self.offset += (to + 1 - from) as u64;
            return Ok(Raw::TooLong((to - from) as u64));
        }
        let held = (self.len - from) as u64;
        self.pos = self.len;
        self.offset += held;
        Ok(Raw::TooLong(held + self.discard_line()?.unwrap_or(0)))
    }

    /// Consumes the rest of the line at `pos`, dropping its bytes as they
    /// are read (the buffer never grows): how many bytes it had before its
    /// `\n`, or `None` at the end of the file with none.
    fn discard_line(&mut self) -> Result<Option<u64>> {
        let mut bytes = 0u64;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.pos..self.len]) {
                self.pos += i + 1;
                self.offset += i as u64 + 1;
                return Ok(Some(bytes + i as u64));
            }
            let n = (self.len - self.pos) as u64;
            bytes += n;
            self.offset += n;
            self.pos = self.len;
            if self.eof {
                return Ok((bytes > 0).then_some(bytes));
            }
            self.fill()?;
        }
    }

    /// Reads more bytes after the unread ones, moving those to the front
    /// and growing the buffer when they fill it (a long line).
    fn fill(&mut self) -> Result<()> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.len, 0);
            self.len -= self.pos;
            self.pos = 0;
        }
        if self.len == self.buf.len() {
            let grown = self.buf.len() * 2;
            self.buf.resize(grown, 0);
        }
        let n = loop {
            match self.file.read(&mut self.buf[self.len..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("cannot read input file", &self.path, e)),
            }
        };
        if n == 0 {
            self.eof = true;
        }
        self.len += n;
        Ok(())
    }
}

/// The 1-based number of the line starting at byte `offset` of `path`:
/// counted only when a line must be named (an error), so reading never
/// counts lines.
pub(crate) fn line_number(path: &Path, offset: u64) -> Result<u64> {
    let file = File::open(path).map_err(|e| Error::io("cannot open input file", path, e))?;
    let mut reader = file.take(offset);
    let mut buf = vec![0u8; READ_SIZE];
    let mut newlines = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("cannot read input file", path, e)),
        };
        newlines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
    }
    Ok(newlines + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Every line of the file, read split by split.
    fn read_split_by_split(path: &Path, split_size: u64) -> Vec<(u64, Vec<u8>)> {
        read_with(path, split_size, LongLines::Whole)
            .into_iter()
            .map(|(at, line)| (at, line.expect("no line is refused")))
            .collect()
    }

    /// Every line, piece or refused line (`None`) of the file, read split
    /// by split as `long` says.
    fn read_with(path: &Path, split_size: u64, long: LongLines) -> Vec<(u64, Option<Vec<u8>>)> {
        let len = std::fs::metadata(path).expect("input").len();
        let mut lines = Vec::new();
        let mut start = 0;
        while start < len {
            let end = (start + split_size).min(len);
            let mut reader = SplitReader::open(path, start, end, None, long).expect("opens");
            while let Some((at, line)) = reader.next_line().expect("reads") {
                lines.push((
                    at,
                    match line {
                        Line::Text(line) => Some(line.to_vec()),
                        Line::TooLong(_) => None,
                    },
                ));
            }
            assert!(
                reader.buf.len() <= READ_SIZE.max(2 * long_bound(long)),
                "the buffer grew to {} bytes",
                reader.buf.len()
            );
            start = end;
        }
        lines
    }

    /// The bound of `long`, 0 for whole lines (whose buffer may grow).
    fn long_bound(long: LongLines) -> usize {
        match long {
            LongLines::Whole => usize::MAX / 2,
            LongLines::Pieces(max) | LongLines::Refuse(max) => max,
        }
    }

    /// The lines as `str::lines` sees them (which strips `\r\n` and `\n`),
    /// with their offsets, the byte order mark taken off the first.
    fn oracle(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0usize;
        for piece in bytes.split_inclusive(|&b| b == b'\n') {
            let mut line = piece;
            if let Some(l) = line.strip_suffix(b"\n") {
                line = l.strip_suffix(b"\r").unwrap_or(l);
            }
            if at == 0 {
                line = line.strip_prefix(BOM).unwrap_or(line);
            }
            out.push((at as u64, line.to_vec()));
            at += piece.len();
        }
        out
    }

    /// Random files (short and very long lines, empty lines, CRLF, with and
    /// without a last newline, empty) read split by split at random split
    /// sizes: every line exactly once, in order, as `split` reads it.
    #[test]
    fn every_line_is_read_exactly_once_whatever_the_split_size() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        let mut rng = crate::text::SplitMix(0x5eed);
        for case in 0..300 {
            let mut bytes = Vec::new();
            if case % 7 == 0 {
                bytes.extend_from_slice(BOM);
            }
            let lines = if case % 11 == 0 { 0 } else { rng.below(40) };
            for _ in 0..lines {
                let len = match rng.below(10) {
                    0 => 0,
                    1 => 300 + rng.below(700),
                    _ => rng.below(12),
                };
                bytes.extend((0..len).map(|_| b'a' + rng.below(26) as u8));
                match rng.below(4) {
                    0 => bytes.extend_from_slice(b"\r\n"),
                    _ => bytes.push(b'\n'),
                }
            }
            if case % 3 == 0 {
                bytes.extend_from_slice(b"no newline at the end");
            }
            std::fs::write(&path, &bytes).expect("write");
            let split_size = 1 + rng.below(64);
            assert_eq!(
                read_split_by_split(&path, split_size),
                oracle(&bytes),
                "case {case}, split size {split_size}, {:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    #[test]
    fn a_line_longer_than_the_read_buffer_is_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        let long = vec![b'x'; READ_SIZE * 2 + 17];
        let mut bytes = b"a\n".to_vec();
        bytes.extend_from_slice(&long);
        bytes.extend_from_slice(b"\nb");
        std::fs::write(&path, &bytes).expect("write");
        // Each split skips through the long line it starts in: few splits.
        for split in [100_000, READ_SIZE as u64, u64::MAX / 2] {
            let lines: Vec<_> = read_split_by_split(&path, split)
                .into_iter()
                .map(|(_, l)| l)
                .collect();
            assert_eq!(lines, [b"a".to_vec(), long.clone(), b"b".to_vec()]);
        }
    }

    #[test]
    fn line_numbers_are_counted_from_offsets() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        let bytes = b"a\r\n\nccc\nd";
        std::fs::write(&path, bytes).expect("write");
        for (i, (at, _)) in oracle(bytes).into_iter().enumerate() {
            assert_eq!(line_number(&path, at).expect("counts"), i as u64 + 1);
        }
    }

    /// A split that starts inside a long line skips its end without holding
    /// it: the buffer keeps its size. (It used to read the end whole, so
    /// each split of a one-line 48 MB file grew a buffer to the line's
    /// size.)
    #[test]
    fn skipping_the_end_of_a_long_line_keeps_the_buffer_small() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        let mut bytes = b"a\n".to_vec();
        bytes.extend(std::iter::repeat_n(b'x', READ_SIZE * 4));
        bytes.extend_from_slice(b"\nb\n");
        std::fs::write(&path, &bytes).expect("write");
        let len = bytes.len() as u64;
        let mut reader = SplitReader::open(&path, 10, len, None, LongLines::Whole).expect("opens");
        let Some((at, Line::Text(line))) = reader.next_line().expect("reads") else {
            panic!("the line after the long one");
        };
        assert_eq!((at, line), (len - 2, &b"b"[..]));
        assert_eq!(reader.buf.len(), READ_SIZE);
    }

    /// Random files of words and separators with long lines, read in pieces
    /// at random bounds and split sizes: the pieces are the file's bytes at
    /// their offsets, each at most the bound unless no separator let it be
    /// cut, cut only after a separator, and together they hold the lines'
    /// words; no buffer grows past the read size.
    #[test]
    fn pieces_cut_long_lines_at_word_boundaries_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        let mut rng = crate::text::SplitMix(0x71ece);
        for case in 0..200 {
            let mut text = String::new();
            for _ in 0..rng.below(8) {
                let words = if rng.below(3) == 0 { 400 } else { 6 };
                for _ in 0..rng.below(words) {
                    let word_len = if rng.below(50) == 0 {
                        30
                    } else {
                        1 + rng.below(6)
                    };
                    text.extend((0..word_len).map(|_| (b'a' + rng.below(3) as u8) as char));
                    text.push_str([" ", ",", ", ", "\u{e9}\u{2014}", " "][rng.below(5) as usize]);
                }
                text.push_str(if rng.below(4) == 0 { "\r\n" } else { "\n" });
            }
            std::fs::write(&path, &text).expect("write");
            let max = 1 + rng.below(40) as usize;
            let split_size = 1 + rng.below(300);
            let what = format!("case {case}, pieces of {max}, splits of {split_size}");
            let mut words: HashMap<String, u64> = HashMap::new();
            for (at, piece) in read_with(&path, split_size, LongLines::Pieces(max)) {
                let piece = piece.expect("no piece is refused");
                let at = at as usize;
                assert_eq!(&text.as_bytes()[at..at + piece.len()], &piece[..], "{what}");
                let next = text.as_bytes().get(at + piece.len());
                let cut = !matches!(next, None | Some(b'\n' | b'\r'));
                if cut {
                    let last = *piece.last().expect("a cut piece is not empty");
                    assert!(last.is_ascii() && !last.is_ascii_alphanumeric(), "{what}");
                    let first_cut = piece
                        .iter()
                        .position(|b| b.is_ascii() && !b.is_ascii_alphanumeric());
                    assert!(
                        piece.len() <= max || first_cut == Some(piece.len() - 1),
                        "{what}"
                    );
                }
                for w in crate::tokenize(std::str::from_utf8(&piece).expect("UTF-8 pieces")) {
                    *words.entry(w).or_default() += 1;
                }
            }
            let mut oracle: HashMap<String, u64> = HashMap::new();
            for w in crate::tokenize(&text) {
                *oracle.entry(w).or_default() += 1;
            }
            assert_eq!(words, oracle, "{what}");
        }
    }

    /// Lines longer than the bound are refused with their length, read past
    /// with the buffer at its size; the others are read whole.
    #[test]
    fn refused_lines_are_read_past_without_being_held() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        let long = READ_SIZE * 3 + 5;
        let mut bytes = b"a\n".to_vec();
        bytes.extend(std::iter::repeat_n(b'x', long));
        bytes.extend_from_slice(b"\nbbbb\nccccc\n");
        bytes.extend(std::iter::repeat_n(b'y', long));
        std::fs::write(&path, &bytes).expect("write");
        let mut reader =
            SplitReader::open(&path, 0, bytes.len() as u64, None, LongLines::Refuse(4))
                .expect("opens");
        let mut got = Vec::new();
        while let Some((at, line)) = reader.next_line().expect("reads") {
            got.push((
                at,
                match line {
                    Line::Text(l) => format!("{:?}", String::from_utf8_lossy(l)),
                    Line::TooLong(n) => format!("too long: {n}"),
                },
            ));
        }
        let l = long as u64;
        assert_eq!(
            got,
            [
                (0, "\"a\"".to_string()),
                (2, format!("too long: {l}")),
                (l + 3, "\"bbbb\"".to_string()),
                (l + 8, "too long: 5".to_string()),
                (l + 14, format!("too long: {l}")),
            ]
        );
        assert_eq!(reader.buf.len(), READ_SIZE);
    }
}
