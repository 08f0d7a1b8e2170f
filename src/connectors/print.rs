//! Prints records to stdout, one line each, as Flink's `print()` does: with a
//! `N> ` prefix (N = subtask + 1) when the sink runs in parallel.

use crate::operators::sink::{SinkContext, SinkFunction};
use crate::{Error, Result};
use floe_actors::element::{Batch, Timestamp};
use std::fmt::Display;
use std::io::Write;

/// The print sink.
#[derive(Clone, Debug, Default)]
pub struct PrintSink {
    prefix: String,
}

impl<T: Display + Send + 'static> SinkFunction<T> for PrintSink {
    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        if ctx.parallelism > 1 {
            self.prefix = format!("{}> ", ctx.subtask.0 + 1);
        }
        Ok(())
    }

    fn invoke(&mut self, value: T, ts: Option<Timestamp>) -> Result<()> {
        self.invoke_batch(vec![floe_actors::element::Record {
            value,
            timestamp: ts,
        }])
    }

    fn invoke_batch(&mut self, batch: Batch<T>) -> Result<()> {
        let stdout = std::io::stdout();
        let mut w = std::io::BufWriter::new(stdout.lock());
        for r in batch {
            writeln!(w, "{}{}", self.prefix, r.value)
                .map_err(|e| Error::io("cannot write", "stdout", e))?;
        }
        w.flush()
            .map_err(|e| Error::io("cannot write", "stdout", e))
    }
}
