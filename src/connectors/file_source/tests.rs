//! The file source's unit tests: splits, long lines, pipes, watermarks and
//! restores, against the bytes of the files they read.

use super::*;
use floe_actors::ids::SubtaskIndex;
use std::collections::HashMap;

fn ctx(subtask: usize, parallelism: usize) -> SourceContext {
    SourceContext {
        subtask: SubtaskIndex(subtask as u32),
        parallelism,
        seed: 0,
    }
}

fn drain<D: LineDecoder>(reader: &mut FileSourceReader<D>, max: usize) -> Vec<D::Out> {
    let mut out = Vec::new();
    while reader.poll_batch(max, &mut out).expect("reads") == SourcePoll::Ready {}
    out.into_iter().map(|r| r.value).collect()
}

/// Subtasks read disjoint splits whose lines, put together, are the
/// file's; one subtask reads them in file order.
#[test]
fn subtasks_share_the_lines_and_one_reads_them_in_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("in.txt");
    let text: String = (0..500).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&path, &text).expect("write");
    let oracle: Vec<String> = text.lines().map(str::to_owned).collect();
    let source = FileSource::new(&path, Utf8Lines)
        .expect("opens")
        .split_size(97);
    assert_eq!(drain(&mut source.reader(&ctx(0, 1)), 7), oracle);
    for p in [2, 3, 5] {
        let mut all: Vec<String> = (0..p)
            .flat_map(|i| drain(&mut source.reader(&ctx(i, p)), 7))
            .collect();
        all.sort();
        let mut sorted = oracle.clone();
        sorted.sort();
        assert_eq!(all, sorted, "P={p}");
    }
}

/// Positions taken mid-read at one parallelism, dealt out over another:
/// the lines read before plus those read after are every line once.
#[test]
fn a_restore_at_another_parallelism_reads_every_line_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("in.txt");
    let text: String = (0..1000).map(|i| format!("{i}\n")).collect();
    std::fs::write(&path, &text).expect("write");
    let source = FileSource::new(&path, Utf8Lines)
        .expect("opens")
        .split_size(50);
    for (from, to) in [(2, 3), (3, 1), (4, 2), (1, 4)] {
        let mut seen = Vec::new();
        let mut entries = Vec::new();
        for i in 0..from {
            let mut reader = source.reader(&ctx(i, from));
            let mut out = Vec::new();
            for _ in 0..(3 + i) {
                reader.poll_batch(13, &mut out).expect("reads");
            }
            seen.extend(out.into_iter().map(|r| r.value));
            entries.extend(reader.snapshot_state().expect("snapshots"));
        }
        for j in 0..to {
            let mut reader = source.reader(&ctx(j, to));
            let share = entries.iter().skip(j).step_by(to).cloned().collect();
            reader.restore_state(share).expect("restores");
            seen.extend(drain(&mut reader, 11));
        }
        let mut got: Vec<u64> = seen.iter().map(|l| l.parse().expect("number")).collect();
        got.sort();
        assert_eq!(got, (0..1000).collect::<Vec<u64>>(), "{from} -> {to}");
    }
}

#[derive(Clone)]
struct Numbers;
impl LineDecoder for Numbers {
    type Out = i64;
    fn decode(&mut self, line: &[u8]) -> std::result::Result<i64, String> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not a number: {}", String::from_utf8_lossy(line)))
    }
    fn timestamp(&self, n: &i64) -> Option<i64> {
        Some(*n)
    }
}

#[test]
fn a_bad_line_is_named_by_its_number_or_skipped_and_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("in.txt");
    std::fs::write(&path, "1\n2\n\nx\n5\ny").expect("write");
    let source = FileSource::new(&path, Numbers)
        .expect("opens")
        .split_size(3);
    let mut reader = source.reader(&ctx(1, 2));
    let mut out = Vec::new();
    let err = loop {
        match reader.poll_batch(1, &mut out) {
            Ok(SourcePoll::Finished) => panic!("a bad line fails"),
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::BadRecord { line: 3, .. }), "{err}");
    let counter = Arc::new(AtomicU64::new(0));
    let source = source.skip_bad_lines(counter.clone());
    let mut all: Vec<i64> = (0..2)
        .flat_map(|i| drain(&mut source.reader(&ctx(i, 2)), 2))
        .collect();
    all.sort();
    assert_eq!(all, [1, 2, 5]);
    assert_eq!(counter.load(Ordering::Relaxed), 3);
}

/// A subtask's watermark is the minimum over its started, unfinished
/// splits: here two restored splits, the slower one holding it back.
#[test]
fn the_watermark_is_the_minimum_over_unfinished_splits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("in.txt");
    let text: String = (0..100).map(|i| format!("{:04}\n", i * 10)).collect();
    std::fs::write(&path, &text).expect("write");
    let source = FileSource::new(&path, Numbers)
        .expect("opens")
        .split_size(250)
        .with_watermarks(5)
        .watermark_interval(std::time::Duration::ZERO);
    let mut reader = source.reader(&ctx(0, 1));
    assert_eq!(reader.watermark(), None);
    let mut out = Vec::new();
    reader.poll_batch(3, &mut out).expect("reads");
    assert_eq!(reader.watermark(), Some(20 - 5 - 1));
    assert_eq!(out[2].timestamp, Some(20));
    let mut state: Vec<SplitState> = reader
        .snapshot_state()
        .expect("snapshots")
        .iter()
        .map(|e| super::super::decode_entry(e).expect("decodes"))
        .collect();
    // The second split started further on.
    state[1].next = Some(state[1].start + 5);
    state[1].max_timestamp = 600;
    let mut restored = source.reader(&ctx(0, 1));
    let entries = state
        .iter()
        .map(|s| super::super::encode_entry(s).expect("encodes"))
        .collect();
    restored.restore_state(entries).expect("restores");
    assert_eq!(restored.watermark(), Some(20 - 5 - 1));
    drain(&mut restored, 1000);
    assert_eq!(restored.watermark(), None);
}

/// A pipe is one split, subtask 0's; a restore of it read part-way is
/// refused (it cannot be read again), one read to its end restores as
/// finished, and neither opens the pipe (which would wait for a writer).
#[cfg(unix)]
#[test]
fn a_pipe_is_one_split_and_restores_only_when_finished() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("fifo");
    let c = std::ffi::CString::new(path.to_str().expect("UTF-8")).expect("no NUL");
    // SAFETY: `c` is a NUL-terminated path that lives for the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let source = FileSource::new(&path, Utf8Lines)
        .expect("a pipe is an input")
        .split_size(7);
    assert!(source.is_pipe());
    assert_eq!(source.splits().len(), 1);
    assert!(source.reader(&ctx(1, 2)).splits().is_empty());
    let mut state = SplitState::unread(&source.splits()[0]);
    state.next = Some(12);
    let entry = |s: &SplitState| vec![super::super::encode_entry(s).expect("encodes")];
    let e = source
        .reader(&ctx(0, 2))
        .restore_state(entry(&state))
        .expect_err("a pipe read part-way cannot be restored")
        .to_string();
    assert!(e.contains("cannot be read again"), "{e}");
    state.finished = true;
    let mut reader = source.reader(&ctx(0, 2));
    reader.restore_state(entry(&state)).expect("restores");
    assert_eq!(
        reader.poll_batch(8, &mut Vec::new()).expect("polls"),
        SourcePoll::Finished
    );
}

/// One 3 MB line of words (with short lines around it) read in pieces
/// by 1 to 3 subtasks, each stopped mid-line and restored at another
/// parallelism: every batch holds at most [`BATCH_BYTES`] and a piece,
/// every record at most a piece (plus a word), and the words counted
/// are the line's, as a HashMap counts them.
#[test]
fn a_long_line_comes_in_bounded_pieces_that_keep_its_words() {
    const PIECE: usize = 4096;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("in.txt");
    let mut rng = crate::text::SplitMix(0xb16);
    let mut text = String::from("first line\n");
    while text.len() < 3 << 20 {
        let len = 1 + rng.below(9) as usize;
        text.extend((0..len).map(|_| (b'a' + rng.below(5) as u8) as char));
        text.push_str(if rng.below(7) == 0 { ", " } else { " " });
    }
    text.push_str("\nlast line\n");
    std::fs::write(&path, &text).expect("write");
    let mut oracle: HashMap<String, u64> = HashMap::new();
    for w in crate::tokenize(&text) {
        *oracle.entry(w).or_default() += 1;
    }
    let source = FileSource::new(&path, Utf8Lines)
        .expect("opens")
        .split_size(300_000)
        .long_lines(LongLines::Pieces(PIECE));
    for (from, to) in [(1, 1), (1, 3), (3, 2), (2, 1)] {
        let what = format!("{from} -> {to}");
        let mut words: HashMap<String, u64> = HashMap::new();
        let mut count = |batch: &mut Vec<Record<String>>| {
            let bytes: usize = batch.iter().map(|r| r.value.len()).sum();
            assert!(
                bytes <= BATCH_BYTES + PIECE + 16,
                "{what}: a batch of {bytes} bytes"
            );
            for r in batch.drain(..) {
                assert!(
                    r.value.len() <= PIECE + 16,
                    "{what}: a record of {} bytes",
                    r.value.len()
                );
                for w in crate::tokenize(&r.value) {
                    *words.entry(w).or_default() += 1;
                }
            }
        };
        let mut entries = Vec::new();
        for i in 0..from {
            let mut reader = source.reader(&ctx(i, from));
            let mut batch = Vec::new();
            for _ in 0..(2 + i) {
                reader.poll_batch(1024, &mut batch).expect("reads");
                count(&mut batch);
            }
            entries.extend(reader.snapshot_state().expect("snapshots"));
        }
        for j in 0..to {
            let mut reader = source.reader(&ctx(j, to));
            let share = entries.iter().skip(j).step_by(to).cloned().collect();
            reader.restore_state(share).expect("restores");
            let mut batch = Vec::new();
            while reader.poll_batch(1024, &mut batch).expect("reads") == SourcePoll::Ready {
                count(&mut batch);
            }
            count(&mut batch);
        }
        assert_eq!(words, oracle, "{what}");
    }
}
