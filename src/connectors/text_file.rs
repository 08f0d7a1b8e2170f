//! Lines of a text file, read by one source subtask.
//!
//! The source tracks the byte offset of the next line, so that a later restore
//! can rewind to it. `\n` and `\r\n` endings are stripped, and so is a UTF-8
//! byte order mark at the start of the file. [`TextFileSource`] fails the job
//! on a line that is not valid UTF-8, naming its line number;
//! [`ByteLineSource`] emits the lines undecoded, for a job that decides
//! itself what an invalid line means (skip it, count it).

use super::{SourceFunction, SourcePoll};
use crate::{Error, Result};
use floe_actors::element::Record;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The UTF-8 encoding of U+FEFF, which some editors write at the start of a
/// text file; it is not part of the first line.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Lines at least this long are emitted in the read buffer itself, not
/// copied out of it (the next line gets a fresh buffer), so one huge line
/// costs its size once.
const LARGE_LINE: usize = 1 << 20;

/// Reads a file line by line, keeping the position of the next line.
struct LineReader {
    path: PathBuf,
    reader: BufReader<File>,
    offset: u64,
    line: u64,
    buf: Vec<u8>,
}

impl LineReader {
    fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io("cannot open input file", path, e))?;
        if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(Error::io(
                "cannot read input file",
                path,
                std::io::Error::other("is a directory"),
            ));
        }
        Ok(LineReader {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(256 * 1024, file),
            offset: 0,
            line: 0,
            buf: Vec::with_capacity(256),
        })
    }

    /// The next line without its ending (and, for the first, without a
    /// byte order mark); `None` at the end of the file.
    fn next_line(&mut self) -> Result<Option<&[u8]>> {
        self.buf.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| Error::io("cannot read input file", &self.path, e))?;
        if n == 0 {
            return Ok(None);
        }
        let start = if self.offset == 0 && self.buf.starts_with(BOM) {
            BOM.len()
        } else {
            0
        };
        self.offset += n as u64;
        self.line += 1;
        let mut end = self.buf.len();
        if self.buf[end - 1] == b'\n' {
            end -= 1;
            if end > start && self.buf[end - 1] == b'\r' {
                end -= 1;
            }
        }
        Ok(Some(&self.buf[start..end]))
    }

    /// The next line as owned bytes: copied out of the read buffer, or,
    /// for a line of at least [`LARGE_LINE`] bytes, the buffer itself.
    fn next_line_owned(&mut self) -> Result<Option<Vec<u8>>> {
        let (at, len) = match self.next_line()? {
            None => return Ok(None),
            Some(line) if line.len() < LARGE_LINE => return Ok(Some(line.to_vec())),
            Some(line) => (line.as_ptr() as usize, line.len()),
        };
        let start = at - self.buf.as_ptr() as usize;
        let end = start + len;
        let mut bytes = std::mem::take(&mut self.buf);
        bytes.truncate(end);
        bytes.drain(..start);
        Ok(Some(bytes))
    }

    fn snapshot_state(&self) -> Result<Vec<Vec<u8>>> {
        Ok(vec![super::encode_entry(&(self.offset, self.line))?])
    }

    fn restore_state(&mut self, entries: Vec<Vec<u8>>) -> Result<()> {
        let (offset, line) = match entries.first() {
            Some(e) => super::decode_entry::<(u64, u64)>(e)?,
            // The one reader's position went elsewhere: nothing to read here.
            None => (u64::MAX, 0),
        };
        let len = self
            .reader
            .get_ref()
            .metadata()
            .map_err(|e| Error::io("cannot read input file", &self.path, e))?
            .len();
        if offset != u64::MAX && offset > len {
            // Typed as invalid data: no restart can mend it.
            return Err(Error::io(
                "cannot restore input file",
                &self.path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "checkpointed offset {offset} is past its end ({len} bytes); the file changed"
                    ),
                ),
            ));
        }
        let offset = offset.min(len);
        self.reader
            .seek(SeekFrom::Start(offset))
            .map_err(|e| Error::io("cannot seek input file", &self.path, e))?;
        self.offset = offset;
        self.line = line;
        Ok(())
    }
}

/// Reads a file line by line; a line that is not valid UTF-8 fails the job.
pub struct TextFileSource {
    lines: LineReader,
}

impl TextFileSource {
    /// Opens `path`.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(TextFileSource {
            lines: LineReader::open(path)?,
        })
    }

    /// The byte offset of the next unread line.
    pub fn offset(&self) -> u64 {
        self.lines.offset
    }
}

impl SourceFunction<String> for TextFileSource {
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<String>>) -> Result<SourcePoll> {
        for _ in 0..max {
            let Some(bytes) = self.lines.next_line_owned()? else {
                return Ok(SourcePoll::Finished);
            };
            match String::from_utf8(bytes) {
                Ok(text) => out.push(Record::new(text)),
                Err(_) => {
                    return Err(Error::io(
                        "input file is not valid UTF-8",
                        &self.lines.path,
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("invalid UTF-8 at line {}", self.lines.line),
                        ),
                    ));
                }
            }
        }
        Ok(SourcePoll::Ready)
    }

    fn snapshot_state(&mut self) -> Result<Vec<Vec<u8>>> {
        self.lines.snapshot_state()
    }

    fn restore_state(&mut self, entries: Vec<Vec<u8>>) -> Result<()> {
        self.lines.restore_state(entries)
    }
}

/// Reads a file line by line, emitting each line's bytes undecoded.
///
/// Its position (checkpoint state) is the same as [`TextFileSource`]'s.
pub struct ByteLineSource {
    lines: LineReader,
}

impl ByteLineSource {
    /// Opens `path`.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(ByteLineSource {
            lines: LineReader::open(path)?,
        })
    }
}

impl SourceFunction<Vec<u8>> for ByteLineSource {
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<Vec<u8>>>) -> Result<SourcePoll> {
        for _ in 0..max {
            let Some(bytes) = self.lines.next_line_owned()? else {
                return Ok(SourcePoll::Finished);
            };
            out.push(Record::new(bytes));
        }
        Ok(SourcePoll::Ready)
    }

    fn snapshot_state(&mut self) -> Result<Vec<Vec<u8>>> {
        self.lines.snapshot_state()
    }

    fn restore_state(&mut self, entries: Vec<Vec<u8>>) -> Result<()> {
        self.lines.restore_state(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all<S: SourceFunction<T>, T>(source: &mut S) -> Vec<T> {
        let mut out = Vec::new();
        while source.poll_batch(2, &mut out).expect("reads") == SourcePoll::Ready {}
        out.into_iter().map(|r| r.value).collect()
    }

    fn file(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.txt");
        std::fs::write(&path, bytes).expect("write input");
        (dir, path)
    }

    #[test]
    fn a_byte_order_mark_is_stripped_from_the_first_line_only() {
        let (_dir, path) = file(b"\xEF\xBB\xBFa,1\r\n\xEF\xBB\xBFb\nc");
        let mut text = TextFileSource::open(&path).expect("opens");
        assert_eq!(read_all(&mut text), ["a,1", "\u{feff}b", "c"]);
        let mut bytes = ByteLineSource::open(&path).expect("opens");
        assert_eq!(
            read_all(&mut bytes),
            [b"a,1".to_vec(), b"\xEF\xBB\xBFb".to_vec(), b"c".to_vec()]
        );
    }

    #[test]
    fn byte_lines_keep_invalid_utf8_and_restore_to_the_same_position() {
        let (_dir, path) = file(b"\xEF\xBB\xBFok\ncaf\xe9\nlast\n");
        let mut text = TextFileSource::open(&path).expect("opens");
        let mut out = Vec::new();
        let err = text
            .poll_batch(10, &mut out)
            .expect_err("line 2 is not UTF-8");
        assert!(err.to_string().contains("line 2"), "{err}");

        let mut first = ByteLineSource::open(&path).expect("opens");
        let mut out = Vec::new();
        first.poll_batch(1, &mut out).expect("reads");
        let position = first.snapshot_state().expect("snapshots");
        let mut restored = ByteLineSource::open(&path).expect("opens");
        restored.restore_state(position).expect("restores");
        assert_eq!(
            read_all(&mut restored),
            [b"caf\xe9".to_vec(), b"last".to_vec()]
        );
    }
}
