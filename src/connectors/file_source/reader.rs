//! Reads the lines of one split out of a reusable buffer.
//!
//! No allocation per line: a line is a slice of the read buffer, valid until
//! the next call. The buffer grows only for a line longer than itself. A
//! split's first line is the first one that starts at or after its `start`:
//! the reader seeks to `start - 1` and skips through the next `\n` (a `\n`
//! right at `start - 1` means a line starts at `start`). It stops before the
//! first line that starts at or after `end`.

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
}

impl SplitReader {
    /// A reader of the lines of `path` that start in `[start, end)`,
    /// beginning at `next` (a line start) when it is known.
    pub(crate) fn open(path: &Path, start: u64, end: u64, next: Option<u64>) -> Result<Self> {
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
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| Error::io("cannot seek input file", path, e))?;
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
        })
    }

    /// The file offset of the next line (once the partial first line is
    /// skipped).
    pub(crate) fn next_offset(&self) -> Option<u64> {
        (!self.skip_partial).then_some(self.offset)
    }

    /// The next line, without its `\n` or `\r\n` (and, at offset 0, without
    /// a byte order mark), with its offset; `None` at the split's end.
    pub(crate) fn next_line(&mut self) -> Result<Option<(u64, &[u8])>> {
        if self.skip_partial {
            self.skip_partial = false;
            if self.raw_line()?.is_none() {
                return Ok(None);
            }
        }
        if self.offset >= self.end {
            return Ok(None);
        }
        let at = self.offset;
        let Some((from, to, newline)) = self.raw_line()? else {
            return Ok(None);
        };
        let mut line = &self.buf[from..to];
        if newline && line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        if at == 0 && line.starts_with(BOM) {
            line = &line[BOM.len()..];
        }
        Ok(Some((at, line)))
    }

    /// Consumes the next line; its bytes are `buf[from..to]` (ending
    /// excluded) and `newline` tells whether a `\n` ended it.
    fn raw_line(&mut self) -> Result<Option<(usize, usize, bool)>> {
        let mut searched = 0;
        loop {
            let unread = &self.buf[self.pos + searched..self.len];
            if let Some(i) = memchr::memchr(b'\n', unread) {
                let (from, to) = (self.pos, self.pos + searched + i);
                self.pos = to + 1;
                self.offset += (to + 1 - from) as u64;
                return Ok(Some((from, to, true)));
            }
            searched = self.len - self.pos;
            if self.eof {
                if searched == 0 {
                    return Ok(None);
                }
                let (from, to) = (self.pos, self.len);
                self.pos = self.len;
                self.offset += (to - from) as u64;
                return Ok(Some((from, to, false)));
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

    /// Every line of the file, read split by split.
    fn read_split_by_split(path: &Path, split_size: u64) -> Vec<(u64, Vec<u8>)> {
        let len = std::fs::metadata(path).expect("input").len();
        let mut lines = Vec::new();
        let mut start = 0;
        while start < len {
            let end = (start + split_size).min(len);
            let mut reader = SplitReader::open(path, start, end, None).expect("opens");
            while let Some((at, line)) = reader.next_line().expect("reads") {
                lines.push((at, line.to_vec()));
            }
            start = end;
        }
        lines
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
}
