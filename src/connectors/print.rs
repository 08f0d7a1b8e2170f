//! Prints records to stdout, one line each, as Flink's `print()` does: with a
//! `N> ` prefix (N = subtask + 1) when the sink runs in parallel.
//!
//! A batch is formatted into a buffer the sink keeps (no allocation per
//! record or per batch) and written to stdout with one write under its lock,
//! so parallel subtasks interleave batches, never lines.

use crate::operators::sink::{SinkContext, SinkFunction};
use crate::{Error, Result};
use floe_actors::element::Batch;
use std::fmt::Display;
use std::io::Write;

/// The print sink.
#[derive(Clone, Debug, Default)]
pub struct PrintSink {
    prefix: String,
    /// The lines of the batch being written (reused).
    buf: Vec<u8>,
}

impl<T: Display + Send + 'static> SinkFunction<T> for PrintSink {
    async fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        if ctx.parallelism > 1 {
            self.prefix = format!("{}> ", ctx.subtask.0 + 1);
        }
        Ok(())
    }

    async fn write(&mut self, batch: Batch<T>) -> Result<()> {
        self.buf.clear();
        for r in batch {
            // Writing to a Vec cannot fail.
            let _ = writeln!(self.buf, "{}{}", self.prefix, r.value);
        }
        let mut out = std::io::stdout().lock();
        out.write_all(&self.buf)
            .and_then(|_| out.flush())
            .map_err(|e| Error::io("cannot write", "stdout", e))
    }
}
