//! Writes one line per record (`Display`) to a file.
//!
//! With parallelism 1 the path is the file; with more, the path is a directory
//! holding one file per subtask (`part-0`, `part-1`, ...), as Flink's
//! `writeAsText` does.
//!
//! A regular target file is claimed ([`OutputLock`]) before it is
//! truncated, so a job in another process writing it refuses this one.
//!
//! Batches are formatted into one buffer the sink keeps (no allocation per
//! record) and written to the file with one write once it holds 256 KiB or
//! more, and at the end: a write per batch at most, none per record.

use super::transactional_file::OutputLock;
use crate::operators::sink::{SinkContext, SinkFunction};
use crate::{Error, Result};
use floe_actors::element::Batch;
use std::fmt::Display;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

/// Bytes of formatted lines held before they are written.
const FLUSH_AT: usize = 256 * 1024;

/// The text file sink.
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    target: PathBuf,
    file: Option<File>,
    /// Formatted lines not written yet (reused).
    buf: Vec<u8>,
    /// The claim on a regular target file (see [`OutputLock`]).
    lock: Option<OutputLock>,
}

impl Clone for FileSink {
    fn clone(&self) -> Self {
        FileSink::new(self.path.clone())
    }
}

impl FileSink {
    /// A sink writing to `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        FileSink {
            target: path.clone(),
            path,
            file: None,
            buf: Vec::new(),
            lock: None,
        }
    }

    /// Writes the buffered lines to the file with one write.
    fn write_buf(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| Error::User("file sink used before open".into()))?;
        let result = file.write_all(&self.buf);
        self.buf.clear();
        result.map_err(|e| Error::io("cannot write", &self.target, e))
    }
}

impl<T: Display + Send + 'static> SinkFunction<T> for FileSink {
    async fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        self.target = if ctx.parallelism > 1 {
            std::fs::create_dir_all(&self.path)
                .map_err(|e| Error::io("cannot create output directory", &self.path, e))?;
            self.path.join(format!("part-{}", ctx.subtask.0))
        } else {
            self.path.clone()
        };
        // Claimed before it is truncated: another process's job writing
        // it refuses this one.
        let regular = std::fs::metadata(&self.target)
            .map(|m| m.is_file())
            .unwrap_or(true);
        if regular && self.lock.is_none() {
            self.lock = Some(OutputLock::claim(&self.target)?);
        }
        let f = File::create(&self.target)
            .map_err(|e| Error::io("cannot create output file", &self.target, e))?;
        self.file = Some(f);
        self.buf.reserve(FLUSH_AT);
        Ok(())
    }

    async fn write(&mut self, batch: Batch<T>) -> Result<()> {
        for r in batch {
            // Writing to a Vec cannot fail.
            let _ = writeln!(self.buf, "{}", r.value);
            // A huge batch goes in chunks, so the buffer stays bounded.
            if self.buf.len() >= FLUSH_AT {
                self.write_buf()?;
            }
        }
        Ok(())
    }

    async fn finish(&mut self) -> Result<()> {
        self.write_buf()
    }
}
