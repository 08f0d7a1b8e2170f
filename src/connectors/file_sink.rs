//! Writes one line per record (`Display`) to a file.
//!
//! With parallelism 1 the path is the file; with more, the path is a directory
//! holding one file per subtask (`part-0`, `part-1`, ...), as Flink's
//! `writeAsText` does.

use crate::operators::sink::{SinkContext, SinkFunction};
use crate::{Error, Result};
use floe_actors::element::{Batch, Timestamp};
use std::fmt::Display;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

/// The text file sink.
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    target: PathBuf,
    writer: Option<BufWriter<File>>,
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
            writer: None,
        }
    }

    fn writer(&mut self) -> Result<&mut BufWriter<File>> {
        self.writer
            .as_mut()
            .ok_or_else(|| Error::User("file sink used before open".into()))
    }
}

impl<T: Display + Send + 'static> SinkFunction<T> for FileSink {
    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        self.target = if ctx.parallelism > 1 {
            std::fs::create_dir_all(&self.path)
                .map_err(|e| Error::io("cannot create output directory", &self.path, e))?;
            self.path.join(format!("part-{}", ctx.subtask.0))
        } else {
            self.path.clone()
        };
        let f = File::create(&self.target)
            .map_err(|e| Error::io("cannot create output file", &self.target, e))?;
        self.writer = Some(BufWriter::with_capacity(256 * 1024, f));
        Ok(())
    }

    fn invoke(&mut self, value: T, _: Option<Timestamp>) -> Result<()> {
        let target = self.target.clone();
        writeln!(self.writer()?, "{value}").map_err(|e| Error::io("cannot write", target, e))
    }

    fn invoke_batch(&mut self, batch: Batch<T>) -> Result<()> {
        let target = self.target.clone();
        let w = self.writer()?;
        for r in batch {
            writeln!(w, "{}", r.value).map_err(|e| Error::io("cannot write", &target, e))?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        let target = self.target.clone();
        if let Some(w) = self.writer.as_mut() {
            w.flush()
                .map_err(|e| Error::io("cannot write", target, e))?;
        }
        Ok(())
    }
}
