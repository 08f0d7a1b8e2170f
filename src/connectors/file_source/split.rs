//! Cutting files into splits, and a split's checkpointed position.
//!
//! A split is a byte range `[start, end)` of one file. It owns the lines
//! that *start* inside its range: its reader skips the partial line at its
//! start (owned by the split before) and finishes the line crossing its end.
//! So the splits of a file read every line exactly once, whatever the split
//! size and however long the lines are.
//!
//! Splits are numbered in file order (files sorted by path, then by
//! offset); a source subtask reads split `id` when `id % parallelism` is its
//! index (round robin), so neighbouring splits, close in event time in a
//! time-ordered file, are read side by side.

use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// A byte range of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSplit {
    /// Position of the split in file order, from 0.
    pub id: u64,
    /// The file.
    pub path: PathBuf,
    /// First byte of the range.
    pub start: u64,
    /// One past the last byte of the range.
    pub end: u64,
}

/// How far a split has been read: its entry in the source's checkpoint
/// state, one per split assigned to a subtask (finished ones included, so
/// that a subtask whose splits are all read still restores as finished).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SplitState {
    /// [`FileSplit::id`].
    pub id: u64,
    /// The file, as a path string.
    pub path: String,
    /// [`FileSplit::start`].
    pub start: u64,
    /// [`FileSplit::end`].
    pub end: u64,
    /// Byte offset of the next unread line; `None` before the split's
    /// first line was found (its partial first line not yet skipped).
    pub next: Option<u64>,
    /// The split is read to its end.
    pub finished: bool,
    /// Largest event timestamp read from the split, for its watermark.
    pub max_timestamp: i64,
}

impl SplitState {
    /// The position of a split not read yet.
    pub fn unread(split: &FileSplit) -> Self {
        SplitState {
            id: split.id,
            path: split.path.to_string_lossy().into_owned(),
            start: split.start,
            end: split.end,
            next: None,
            finished: false,
            max_timestamp: i64::MIN,
        }
    }
}

/// The files `input` names: the file itself, the regular files directly in
/// a directory, or the files matching a glob pattern (`data/*.csv`), in
/// path order.
pub fn list_files(input: &Path) -> Result<Vec<PathBuf>> {
    match std::fs::metadata(input) {
        Ok(meta) if meta.is_dir() => {
            let entries = std::fs::read_dir(input)
                .map_err(|e| Error::io("cannot read input directory", input, e))?;
            let mut files = Vec::new();
            for entry in entries {
                let entry =
                    entry.map_err(|e| Error::io("cannot read input directory", input, e))?;
                let path = entry.path();
                let name = entry.file_name();
                // Hidden files (`.part` files being written, editors' swap
                // files) are not input, as in Flink's default file filter.
                if name.to_string_lossy().starts_with(['.', '_']) {
                    continue;
                }
                if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                    files.push(path);
                }
            }
            files.sort();
            Ok(files)
        }
        Ok(_) => Ok(vec![input.to_path_buf()]),
        Err(e) => {
            let pattern = input.to_string_lossy();
            if !pattern.contains(['*', '?', '[']) {
                return Err(Error::io("cannot open input file", input, e));
            }
            let bad = |reason: String| {
                Error::io(
                    "cannot read input pattern",
                    input,
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, reason),
                )
            };
            let paths = glob::glob(&pattern).map_err(|e| bad(e.to_string()))?;
            let mut files = Vec::new();
            for path in paths {
                let path = path.map_err(|e| bad(e.to_string()))?;
                if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                    files.push(path);
                }
            }
            if files.is_empty() {
                return Err(bad("no file matches".into()));
            }
            files.sort();
            Ok(files)
        }
    }
}

/// Cuts `files` (with their lengths) into splits of `split_size` bytes
/// (the last of a file shorter); an empty file has no split.
pub fn cut(files: &[(PathBuf, u64)], split_size: u64) -> Vec<FileSplit> {
    let size = split_size.max(1);
    let mut splits = Vec::new();
    for (path, len) in files {
        let mut start = 0;
        while start < *len {
            let end = start.saturating_add(size).min(*len);
            splits.push(FileSplit {
                id: splits.len() as u64,
                path: path.clone(),
                start,
                end,
            });
            start = end;
        }
    }
    splits
}

/// Whether subtask `subtask` of `parallelism` reads split `id` (round robin).
pub fn assigned(id: u64, subtask: usize, parallelism: usize) -> bool {
    id % parallelism.max(1) as u64 == subtask as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_each_file_once_in_order() {
        let files = vec![
            (PathBuf::from("a"), 10),
            (PathBuf::from("b"), 0),
            (PathBuf::from("c"), 4),
        ];
        let splits = cut(&files, 4);
        let ranges: Vec<_> = splits
            .iter()
            .map(|s| (s.path.to_string_lossy().into_owned(), s.start, s.end))
            .collect();
        let expected: Vec<(String, u64, u64)> = vec![
            ("a".into(), 0, 4),
            ("a".into(), 4, 8),
            ("a".into(), 8, 10),
            ("c".into(), 0, 4),
        ];
        assert_eq!(ranges, expected);
        assert!(splits.iter().enumerate().all(|(i, s)| s.id == i as u64));
    }

    #[test]
    fn round_robin_assigns_every_split_to_one_subtask() {
        for p in 1..5 {
            for id in 0..20 {
                let owners = (0..p).filter(|&s| assigned(id, s, p)).count();
                assert_eq!(owners, 1);
            }
        }
    }
}
