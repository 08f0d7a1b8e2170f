//! A pipe (a FIFO, `/dev/stdin` fed by a pipe) named as a file source's
//! input: read as a stream, by one subtask.
//!
//! A pipe has no length and no offsets: it cannot be cut into splits, and
//! what was read from it cannot be read again. So the file source reads it
//! as one split, owned by subtask 0, from its start to its writer's end. A
//! checkpoint records how far it got, but a restore of a pipe read part-way
//! fails, saying so (see [`FileSourceReader`](super::FileSourceReader)).
//!
//! Opening a FIFO waits for a writer and a read waits for data, so neither
//! happens on the subtask's arbiter: a thread of its own opens and reads
//! the pipe and hands over chunks of whole lines through a bounded channel,
//! waking the subtask, which parks while no chunk is there. The bound is
//! the backpressure: while the job is behind, the thread stops reading and
//! the writer blocks. The thread ends with the pipe or once the source is
//! dropped; one blocked on a writer that never comes (or never writes
//! again) ends with the process.

use crate::{Error, Result};
use floe_actors::wake::SubtaskWaker;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};

/// Bytes read from the pipe at a time.
const READ_SIZE: usize = 256 * 1024;

/// Chunks the reading thread may hold ready: at most about 1 MiB waits
/// for the job.
const CHUNKS: usize = 4;

/// The UTF-8 byte order mark, not part of the first line.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// What the pipe has next.
pub(crate) enum Next<'a> {
    /// A line (without its ending), with its 1-based number.
    Line(u64, &'a [u8]),
    /// No line now: the subtask is woken when one comes.
    Empty,
    /// The writer closed the pipe and every line was read.
    End,
}

/// The lines of a pipe, read by a thread of their own.
pub(crate) struct PipeReader {
    path: PathBuf,
    /// Started at the first read.
    chunks: Option<Receiver<std::io::Result<Vec<u8>>>>,
    wake: Option<Arc<SubtaskWaker>>,
    chunk: Vec<u8>,
    pos: usize,
    /// Bytes and lines handed out so far.
    offset: u64,
    lines: u64,
}

impl PipeReader {
    /// A reader of the pipe `path` for the subtask being built on this
    /// thread (it wakes that subtask); outside a subtask's build, reads
    /// wait for data instead.
    pub(crate) fn new(path: &Path) -> Self {
        PipeReader {
            path: path.to_path_buf(),
            chunks: None,
            wake: floe_actors::wake::current_waker(),
            chunk: Vec::new(),
            pos: 0,
            offset: 0,
            lines: 0,
        }
    }

    /// Bytes of the lines handed out so far.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// The next line, if one is there.
    pub(crate) fn next_line(&mut self) -> Result<Next<'_>> {
        loop {
            if self.pos < self.chunk.len() {
                let rest = &self.chunk[self.pos..];
                let (len, used) = match memchr::memchr(b'\n', rest) {
                    Some(i) => (i, i + 1),
                    None => (rest.len(), rest.len()),
                };
                let mut from = self.pos;
                let mut to = from + len;
                if to > from && self.chunk[to - 1] == b'\r' && used > len {
                    to -= 1;
                }
                if self.offset == 0 && self.chunk[from..to].starts_with(BOM) {
                    from += BOM.len();
                }
                self.pos += used;
                self.offset += used as u64;
                self.lines += 1;
                return Ok(Next::Line(self.lines, &self.chunk[from..to]));
            }
            let Some(chunks) = &self.chunks else {
                self.chunks = Some(spawn_reader(&self.path, self.wake.clone())?);
                continue;
            };
            let mut received = chunks.try_recv();
            if matches!(received, Err(TryRecvError::Empty)) {
                received = match &self.wake {
                    // A chunk sent after `rearm` wakes the subtask; one
                    // sent before it is seen by this second look.
                    Some(wake) => {
                        wake.rearm();
                        chunks.try_recv()
                    }
                    None => chunks.recv().map_err(|_| TryRecvError::Disconnected),
                };
            }
            match received {
                Ok(Ok(chunk)) => {
                    self.chunk = chunk;
                    self.pos = 0;
                }
                Ok(Err(e)) => return Err(Error::io("cannot read input pipe", &self.path, e)),
                Err(TryRecvError::Empty) => return Ok(Next::Empty),
                Err(TryRecvError::Disconnected) => return Ok(Next::End),
            }
        }
    }
}

/// Starts the thread that opens and reads the pipe `path`.
fn spawn_reader(
    path: &Path,
    wake: Option<Arc<SubtaskWaker>>,
) -> Result<Receiver<std::io::Result<Vec<u8>>>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(CHUNKS);
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("floe-pipe-reader".into())
        .spawn(move || {
            read_chunks(&path, &tx, wake.as_deref());
            // The end (or the error) is sent: the subtask looks again.
            drop(tx);
            if let Some(wake) = wake {
                wake.wake_subtask();
            }
        })
        .map_err(|e| Error::io("cannot start reading input pipe", "floe-pipe-reader", e))?;
    Ok(rx)
}

/// Sends the pipe's bytes in chunks that end on a line's end (the last one
/// may not), until its end, an error, or the receiver is gone.
fn read_chunks(
    path: &Path,
    tx: &SyncSender<std::io::Result<Vec<u8>>>,
    wake: Option<&SubtaskWaker>,
) {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            let _ = tx.send(Err(e));
            return;
        }
    };
    let mut buf: Vec<u8> = Vec::with_capacity(READ_SIZE);
    loop {
        if buf.capacity() - buf.len() < READ_SIZE / 2 {
            buf.reserve(READ_SIZE);
        }
        let len = buf.len();
        buf.resize(buf.capacity(), 0);
        let n = match file.read(&mut buf[len..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                buf.truncate(len);
                continue;
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        buf.truncate(len + n);
        if n == 0 {
            if !buf.is_empty() {
                let _ = tx.send(Ok(buf));
            }
            return;
        }
        // Whole lines go; a line still being written stays for the next
        // read (a long one grows the buffer).
        if let Some(last) = memchr::memrchr(b'\n', &buf[len..]) {
            let tail = buf.split_off(len + last + 1);
            let mut next = Vec::with_capacity(READ_SIZE.max(tail.len() + READ_SIZE / 2));
            next.extend_from_slice(&tail);
            if tx.send(Ok(std::mem::replace(&mut buf, next))).is_err() {
                return;
            }
            if let Some(wake) = wake {
                wake.wake_subtask();
            }
        }
    }
}
