//! Lines of a text file, read by one source subtask.
//!
//! The source tracks the byte offset of the next line, so that a later restore
//! can rewind to it. A line that is not valid UTF-8 fails the job with its line
//! number; `\n` and `\r\n` endings are stripped.

use super::{SourceFunction, SourcePoll};
use crate::{Error, Result};
use floe_actors::element::Record;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Lines at least this long are emitted in the read buffer itself, not
/// copied out of it (the next line gets a fresh buffer).
const LARGE_LINE: usize = 1 << 20;

/// Reads a file line by line.
pub struct TextFileSource {
    path: PathBuf,
    reader: BufReader<File>,
    offset: u64,
    line: u64,
    buf: Vec<u8>,
}

impl TextFileSource {
    /// Opens `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io("cannot open input file", path, e))?;
        if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
            return Err(Error::io(
                "cannot read input file",
                path,
                std::io::Error::other("is a directory"),
            ));
        }
        Ok(TextFileSource {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(256 * 1024, file),
            offset: 0,
            line: 0,
            buf: Vec::with_capacity(256),
        })
    }

    /// The byte offset of the next unread line.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl SourceFunction<String> for TextFileSource {
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<String>>) -> Result<SourcePoll> {
        for _ in 0..max {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| Error::io("cannot read input file", &self.path, e))?;
            if n == 0 {
                return Ok(SourcePoll::Finished);
            }
            self.offset += n as u64;
            self.line += 1;
            let mut end = self.buf.len();
            if self.buf[end - 1] == b'\n' {
                end -= 1;
                if end > 0 && self.buf[end - 1] == b'\r' {
                    end -= 1;
                }
            }
            let text = std::str::from_utf8(&self.buf[..end]).map_err(|_| {
                Error::io(
                    "input file is not valid UTF-8",
                    &self.path,
                    std::io::Error::other(format!("invalid UTF-8 at line {}", self.line)),
                )
            })?;
            let line = if end >= LARGE_LINE {
                // A huge line: hand the read buffer over instead of copying it.
                let mut bytes = std::mem::take(&mut self.buf);
                bytes.truncate(end);
                String::from_utf8(bytes).map_err(|e| Error::User(e.to_string()))?
            } else {
                text.to_owned()
            };
            out.push(Record::new(line));
        }
        Ok(SourcePoll::Ready)
    }

    fn snapshot_state(&mut self) -> Result<Vec<Vec<u8>>> {
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
            return Err(Error::User(format!(
                "cannot restore '{}': checkpointed offset {offset} is past its end ({len} bytes); the file changed",
                self.path.display()
            )));
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
