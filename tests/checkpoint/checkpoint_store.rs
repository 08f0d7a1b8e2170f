//! The checkpoint store, savepoints and `load_snapshot`, checked against the
//! values the tests wrote: commit and list round trips, retention of
//! checkpoint directories and shared blobs (also over a seeded random
//! sequence of commits compared with a model), uncommitted and discarded
//! checkpoints, corruption of blobs and metadata, fallback past damaged
//! checkpoints (never past one with transactional sinks) and portable
//! savepoints.

use crate::cli_common;
use cli_common::SplitMix;
use floe::checkpoint::store::{DATABASE_FILE, METADATA_FILE};
use floe::checkpoint::{
    BlobRef, BlobSink, CHECKPOINT_FORMAT_VERSION, CheckpointError, CheckpointId,
    CheckpointMetadata, CheckpointStore, LoadedSnapshot, OperatorState, SavepointWriter,
    SnapshotKind, SubtaskOperatorState, SubtaskRuntimeState, load_latest, load_snapshot,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The bytes a test writes for blob `name` of snapshot `id`.
fn content(id: u64, name: &str) -> Vec<u8> {
    let n = 10 + (id as usize * 7 + name.len()) % 50;
    format!("{id}:{name};").into_bytes().repeat(n)
}

/// A checkpoint's metadata over the given blobs: two operators (one keyed
/// with two subtasks, one with list state) and channel state for one vertex
/// subtask; `keyed` blobs (e.g. shared ones) are prepended to the first
/// keyed chain.
fn metadata(
    id: u64,
    kind: SnapshotKind,
    own: &[BlobRef],
    keyed: &[BlobRef],
    sinks: &[&str],
) -> CheckpointMetadata {
    assert_eq!(own.len(), 4, "tests write four blobs per snapshot");
    let mut chain: Vec<BlobRef> = keyed.to_vec();
    chain.push(own[0].clone());
    CheckpointMetadata {
        version: CHECKPOINT_FORMAT_VERSION,
        id: CheckpointId(id),
        kind,
        trigger_ms: 1_700_000_000_000 + id as i64 * 1000,
        duration_ms: 10 + id,
        alignment_ms: id,
        sync_ms: 1,
        async_ms: 2,
        state_bytes: own.iter().map(|b| b.len).sum(),
        channel_state_bytes: own[3].len,
        unaligned: id.is_multiple_of(2),
        max_parallelism: 128,
        operators: vec![
            OperatorState {
                uid: "window".into(),
                name: "Window(sum)".into(),
                parallelism: 2,
                subtasks: vec![
                    SubtaskOperatorState {
                        subtask: 0,
                        keyed: chain,
                        ..Default::default()
                    },
                    SubtaskOperatorState {
                        subtask: 1,
                        keyed: vec![own[1].clone()],
                        ..Default::default()
                    },
                ],
            },
            OperatorState {
                uid: "source".into(),
                name: "Source: lines".into(),
                parallelism: 1,
                subtasks: vec![SubtaskOperatorState {
                    subtask: 0,
                    split_list: Some(own[2].clone()),
                    ..Default::default()
                }],
            },
        ],
        runtime: vec![SubtaskRuntimeState {
            head_uid: "window".into(),
            subtask: 0,
            parallelism: 2,
            watermark: 5_000,
            channel_watermarks: vec![5_000, 7_000],
            input_channel_state: Some(own[3].clone()),
            ..Default::default()
        }],
        transactional_sinks: sinks.iter().map(|s| s.to_string()).collect(),
    }
}

const BLOB_NAMES: [&str; 4] = [
    "window/0/keyed",
    "window/1/keyed",
    "source/0/list",
    "channels",
];

/// Writes the four blobs of checkpoint `id` and returns its metadata (not
/// committed) with the bytes of each blob by path.
fn write_checkpoint(
    store: &CheckpointStore,
    id: u64,
    shared: &[BlobRef],
    sinks: &[&str],
    written: &mut HashMap<String, Vec<u8>>,
) -> CheckpointMetadata {
    let own: Vec<BlobRef> = BLOB_NAMES
        .iter()
        .map(|name| {
            let bytes = content(id, name);
            let blob = store.write_blob(CheckpointId(id), name, &bytes).unwrap();
            assert_eq!(blob.path, format!("chk-{id}/{name}"));
            assert_eq!(blob.len, bytes.len() as u64);
            written.insert(blob.path.clone(), bytes);
            blob
        })
        .collect();
    metadata(id, SnapshotKind::Checkpoint, &own, shared, sinks)
}

fn shared_blob(
    store: &CheckpointStore,
    name: &str,
    written: &mut HashMap<String, Vec<u8>>,
) -> BlobRef {
    let bytes = content(0, name);
    let blob = store.write_shared_blob(name, &bytes).unwrap();
    assert_eq!(blob.path, format!("shared/{name}"));
    written.insert(blob.path.clone(), bytes);
    blob
}

fn ids(metas: &[CheckpointMetadata]) -> Vec<u64> {
    metas.iter().map(|m| m.id.0).collect()
}

/// The `chk-<id>` directories present.
fn chk_dirs(dir: &Path) -> BTreeSet<u64> {
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_prefix("chk-").map(|n| n.parse().unwrap())
        })
        .collect()
}

/// The files under `shared/`, as store-relative paths.
fn shared_files(dir: &Path) -> BTreeSet<String> {
    match fs::read_dir(dir.join("shared")) {
        Ok(entries) => entries
            .map(|e| format!("shared/{}", e.unwrap().file_name().into_string().unwrap()))
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

fn assert_corrupt(err: CheckpointError, id: &str, file: &Path) -> String {
    match err {
        CheckpointError::Corrupt {
            checkpoint,
            file: f,
            reason,
        } => {
            assert_eq!(checkpoint, id);
            assert_eq!(f, file);
            reason
        }
        other => panic!(
            "expected Corrupt of checkpoint {id} '{}', got {other:?}",
            file.display()
        ),
    }
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x40;
    fs::write(path, bytes).unwrap();
}

fn truncate(path: &Path, by: u64) {
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - by).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Every blob of `meta` reads back as written, through `read`.
fn assert_blobs(
    meta: &CheckpointMetadata,
    written: &HashMap<String, Vec<u8>>,
    read: impl Fn(&BlobRef) -> Result<Vec<u8>, CheckpointError>,
) {
    let blobs = meta.blobs();
    assert!(!blobs.is_empty());
    for blob in blobs {
        assert_eq!(&read(blob).unwrap(), &written[&blob.path], "{}", blob.path);
    }
}

#[test]
fn commit_list_load_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpts");
    let store = CheckpointStore::open(&dir).unwrap();
    assert_eq!(store.root(), dir);
    assert!(dir.join(DATABASE_FILE).is_file());
    assert_eq!(store.max_id().unwrap(), CheckpointId(0));
    assert!(store.list().unwrap().is_empty());

    let mut written = HashMap::new();
    let mut committed = Vec::new();
    for id in 1..=3 {
        let meta = write_checkpoint(&store, id, &[], &[], &mut written);
        store.commit(&meta, 10).unwrap();
        committed.push(meta);
    }
    assert_eq!(store.list().unwrap(), committed);
    assert_eq!(store.max_id().unwrap(), CheckpointId(3));
    for meta in &committed {
        store.verify(meta.id).unwrap();
        assert_blobs(meta, &written, |b| store.read_blob(meta.id, b));
        assert!(
            dir.join(format!("chk-{}", meta.id.0))
                .join(METADATA_FILE)
                .is_file()
        );
    }
    // A committed id is refused a second time.
    assert!(matches!(
        store.commit(&committed[1], 10),
        Err(CheckpointError::Failed {
            checkpoint: CheckpointId(2),
            ..
        })
    ));
    drop(store);

    // Reopened: the same checkpoints, and numbering continues after 3.
    let store = CheckpointStore::open(&dir).unwrap();
    assert_eq!(store.list().unwrap(), committed);
    assert_eq!(store.max_id().unwrap(), CheckpointId(3));
    drop(store);

    let loaded = load_snapshot(&dir).unwrap();
    assert_eq!(loaded.meta, committed[2]);
    assert_eq!(loaded.root, dir);
    assert_eq!(loaded.source, dir.join("chk-3"));
    assert!(loaded.skipped.is_empty());
    assert_blobs(&loaded.meta, &written, |b| loaded.read_blob(b));

    for path in [dir.join("chk-2"), dir.join("chk-2").join(METADATA_FILE)] {
        let loaded = load_snapshot(&path).unwrap();
        assert_eq!(loaded.meta, committed[1]);
        assert_eq!(loaded.root, dir);
        assert_blobs(&loaded.meta, &written, |b| loaded.read_blob(b));
    }

    assert!(matches!(
        load_snapshot(&tmp.path().join("nothing-here")),
        Err(CheckpointError::NotFound { .. })
    ));
    assert!(matches!(
        load_snapshot(tmp.path()),
        Err(CheckpointError::NotFound { .. })
    ));
}

#[test]
fn the_store_and_writers_are_shareable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CheckpointStore>();
    assert_send_sync::<SavepointWriter>();
}

#[test]
fn empty_store_has_nothing_to_load() {
    let tmp = tempfile::tempdir().unwrap();
    drop(CheckpointStore::open(tmp.path()).unwrap());
    assert!(matches!(
        load_snapshot(tmp.path()),
        Err(CheckpointError::NotFound { .. })
    ));
}

#[test]
fn retention_keeps_the_newest_and_their_shared_blobs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = CheckpointStore::open(dir).unwrap();
    let mut written = HashMap::new();

    let only_1 = shared_blob(&store, "only-1", &mut written);
    let meta1 = write_checkpoint(&store, 1, std::slice::from_ref(&only_1), &[], &mut written);
    store.commit(&meta1, 2).unwrap();
    let meta2 = write_checkpoint(&store, 2, &[], &[], &mut written);
    store.commit(&meta2, 2).unwrap();
    // Written before checkpoint 3 commits, referenced by checkpoint 4 only.
    let for_4 = shared_blob(&store, "for-4", &mut written);
    let meta3 = write_checkpoint(&store, 3, &[], &[], &mut written);
    store.commit(&meta3, 2).unwrap();
    assert_eq!(ids(&store.list().unwrap()), [2, 3]);
    assert!(
        dir.join(&for_4.path).is_file(),
        "in-flight shared blob deleted"
    );
    assert!(!dir.join(&only_1.path).exists());
    let meta4 = write_checkpoint(&store, 4, std::slice::from_ref(&for_4), &[], &mut written);
    store.commit(&meta4, 2).unwrap();
    let meta5 = write_checkpoint(&store, 5, &[], &[], &mut written);
    store.commit(&meta5, 2).unwrap();

    assert_eq!(store.list().unwrap(), [meta4.clone(), meta5.clone()]);
    assert_eq!(chk_dirs(dir), BTreeSet::from([4, 5]));
    assert_eq!(shared_files(dir), BTreeSet::from([for_4.path.clone()]));
    assert_eq!(store.max_id().unwrap(), CheckpointId(5));
    store.verify(CheckpointId(4)).unwrap();
    assert!(matches!(
        store.verify(CheckpointId(3)),
        Err(CheckpointError::NotFound { .. })
    ));

    // Once no retained checkpoint references it, the shared blob goes too.
    let meta6 = write_checkpoint(&store, 6, &[], &[], &mut written);
    store.commit(&meta6, 1).unwrap();
    assert_eq!(ids(&store.list().unwrap()), [6]);
    assert_eq!(chk_dirs(dir), BTreeSet::from([6]));
    assert!(shared_files(dir).is_empty());
}

#[test]
fn uncommitted_checkpoints_are_invisible_and_cleaned_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = Arc::new(CheckpointStore::open(dir).unwrap());
    let mut written = HashMap::new();

    let meta1 = write_checkpoint(&store, 1, &[], &[], &mut written);
    store.commit(&meta1, 5).unwrap();
    // Checkpoint 2 is written but never committed (its commit was lost).
    let _meta2 = write_checkpoint(&store, 2, &[], &[], &mut written);
    assert_eq!(ids(&store.list().unwrap()), [1]);
    assert!(matches!(
        store.verify(CheckpointId(2)),
        Err(CheckpointError::NotFound { .. })
    ));
    assert_eq!(store.max_id().unwrap(), CheckpointId(1));

    // Checkpoint 5 is in flight while 3 commits: it must survive.
    let sink: Arc<dyn BlobSink> = store.clone();
    let in_flight = sink
        .put(CheckpointId(5), "window/0/keyed", b"in flight")
        .unwrap();
    assert_eq!(in_flight.path, "chk-5/window/0/keyed");
    assert_eq!(in_flight.checksum, crc32fast::hash(b"in flight"));
    let meta3 = write_checkpoint(&store, 3, &[], &[], &mut written);
    store.commit(&meta3, 5).unwrap();
    assert_eq!(ids(&store.list().unwrap()), [1, 3]);
    assert_eq!(chk_dirs(dir), BTreeSet::from([1, 3, 5]));

    // Aborted: discard removes its files, and ignores missing ones.
    store.discard(CheckpointId(5));
    store.discard(CheckpointId(5));
    store.discard(CheckpointId(99));
    assert_eq!(chk_dirs(dir), BTreeSet::from([1, 3]));
    // Discarding a committed checkpoint does nothing.
    store.discard(CheckpointId(3));
    store.verify(CheckpointId(3)).unwrap();

    // An uncommitted checkpoint cannot be restored from its directory.
    let meta4 = write_checkpoint(&store, 4, &[], &[], &mut written);
    fs::write(
        dir.join("chk-4").join(METADATA_FILE),
        floe::checkpoint::store::encode_metadata(&meta4),
    )
    .unwrap();
    drop(sink);
    let store = Arc::try_unwrap(store).expect("the only reference");
    drop(store);
    let err = load_snapshot(&dir.join("chk-4")).unwrap_err();
    assert_corrupt(err, "4", &dir.join("chk-4").join(METADATA_FILE));
    assert_eq!(load_snapshot(dir).unwrap().meta.id, CheckpointId(3));
}

#[test]
fn a_damaged_blob_or_metadata_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = CheckpointStore::open(dir).unwrap();
    let mut written = HashMap::new();
    for id in 1..=4 {
        let meta = write_checkpoint(&store, id, &[], &[], &mut written);
        store.commit(&meta, 10).unwrap();
    }

    // A flipped byte.
    let blob = dir.join("chk-1").join(BLOB_NAMES[1]);
    flip_byte(&blob, 3);
    let reason = assert_corrupt(store.verify(CheckpointId(1)).unwrap_err(), "1", &blob);
    assert!(reason.contains("checksum"), "{reason}");
    let meta1 = &store.list().unwrap()[0];
    let blob_ref = meta1.operators[0].subtasks[1].keyed[0].clone();
    assert_corrupt(
        store.read_blob(CheckpointId(1), &blob_ref).unwrap_err(),
        "1",
        &blob,
    );

    // A truncated blob.
    let blob = dir.join("chk-2").join(BLOB_NAMES[3]);
    truncate(&blob, 1);
    let reason = assert_corrupt(store.verify(CheckpointId(2)).unwrap_err(), "2", &blob);
    assert!(reason.contains("length"), "{reason}");

    // A missing blob.
    let blob = dir.join("chk-2").join(BLOB_NAMES[0]);
    fs::remove_file(&blob).unwrap();
    assert_corrupt(store.verify(CheckpointId(2)).unwrap_err(), "2", &blob);

    // A truncated `_metadata`: in the body, then in the header.
    let file = dir.join("chk-3").join(METADATA_FILE);
    let original = fs::read(&file).unwrap();
    truncate(&file, 5);
    let reason = assert_corrupt(store.verify(CheckpointId(3)).unwrap_err(), "3", &file);
    assert!(reason.contains("truncated"), "{reason}");
    fs::write(&file, &original[..12]).unwrap();
    assert_corrupt(store.verify(CheckpointId(3)).unwrap_err(), "3", &file);
    // A flipped byte in the body, and garbage.
    fs::write(&file, &original).unwrap();
    store.verify(CheckpointId(3)).unwrap();
    flip_byte(&file, original.len() - 2);
    let reason = assert_corrupt(store.verify(CheckpointId(3)).unwrap_err(), "3", &file);
    assert!(reason.contains("checksum"), "{reason}");
    fs::write(&file, b"not a checkpoint").unwrap();
    assert_corrupt(store.verify(CheckpointId(3)).unwrap_err(), "3", &file);

    // Another format version.
    let file = dir.join("chk-4").join(METADATA_FILE);
    let mut bytes = fs::read(&file).unwrap();
    bytes[8..12].copy_from_slice(&(CHECKPOINT_FORMAT_VERSION + 1).to_le_bytes());
    fs::write(&file, bytes).unwrap();
    match store.verify(CheckpointId(4)).unwrap_err() {
        CheckpointError::Version {
            checkpoint,
            found,
            expected,
        } => {
            assert_eq!(checkpoint, "4");
            assert_eq!(found, CHECKPOINT_FORMAT_VERSION + 1);
            assert_eq!(expected, CHECKPOINT_FORMAT_VERSION);
        }
        other => panic!("expected Version, got {other:?}"),
    }

    // All four are damaged: the error of the newest.
    drop(store);
    assert!(matches!(
        load_snapshot(dir),
        Err(CheckpointError::Version { checkpoint, .. }) if checkpoint == "4"
    ));
    assert!(matches!(
        load_snapshot(&dir.join("chk-1")),
        Err(CheckpointError::Corrupt { checkpoint, .. }) if checkpoint == "1"
    ));
}

#[test]
fn restore_falls_back_past_damage_but_not_past_committed_sinks() {
    for sinks in [&[][..], &["kafka-sink"][..]] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let store = CheckpointStore::open(dir).unwrap();
        let mut written = HashMap::new();
        let mut committed = Vec::new();
        for id in 1..=3 {
            // Only the newest has the sinks under test; older ones have one
            // too, which does not matter: they are intact.
            let s: &[&str] = if id == 3 { sinks } else { &["kafka-sink"] };
            let meta = write_checkpoint(&store, id, &[], s, &mut written);
            store.commit(&meta, 10).unwrap();
            committed.push(meta);
        }
        let blob = dir.join("chk-3").join(BLOB_NAMES[2]);
        flip_byte(&blob, 0);
        // In the process holding the store, the same as from its directory.
        let summary = |r: Result<LoadedSnapshot, CheckpointError>| {
            r.map(|l| (l.meta, l.skipped.len()))
                .map_err(|e| e.to_string())
        };
        let in_process = summary(load_latest(&store));
        drop(store);
        assert_eq!(in_process, summary(load_snapshot(dir)));

        let result = load_snapshot(dir);
        if sinks.is_empty() {
            let loaded = result.unwrap();
            assert_eq!(loaded.meta, committed[1]);
            assert_eq!(loaded.source, dir.join("chk-2"));
            assert_eq!(loaded.skipped.len(), 1);
            assert_eq!(loaded.skipped[0].0, CheckpointId(3));
            assert_corrupt(loaded.skipped[0].1.clone(), "3", &blob);
            assert_blobs(&loaded.meta, &written, |b| loaded.read_blob(b));
        } else {
            assert_corrupt(result.unwrap_err(), "3", &blob);
        }
    }
}

#[test]
fn savepoints_are_self_contained() {
    let tmp = tempfile::tempdir().unwrap();
    let savepoints = tmp.path().join("savepoints");
    let writer = SavepointWriter::new(&savepoints, CheckpointId(7)).unwrap();
    assert_eq!(writer.dir(), savepoints.join("savepoint-7"));
    let mut written = HashMap::new();
    let own: Vec<BlobRef> = BLOB_NAMES
        .iter()
        .map(|name| {
            let bytes = content(7, name);
            let blob = writer.write_blob(name, &bytes).unwrap();
            assert_eq!(blob.path, *name);
            written.insert(blob.path.clone(), bytes);
            blob
        })
        .collect();
    let meta = metadata(7, SnapshotKind::Savepoint, &own, &[], &["kafka-sink"]);

    // Not this savepoint's metadata.
    let wrong = CheckpointMetadata {
        kind: SnapshotKind::Checkpoint,
        ..meta.clone()
    };
    let writer = match writer.finish(&wrong) {
        Err(CheckpointError::Failed {
            checkpoint: CheckpointId(7),
            ..
        }) => SavepointWriter::new(&savepoints, CheckpointId(7))
            .expect("a failed finish removes the directory"),
        other => panic!("expected Failed, got {other:?}"),
    };
    for name in BLOB_NAMES {
        writer.put(CheckpointId(7), name, &written[name]).unwrap();
    }
    let path = writer.finish(&meta).unwrap();
    assert_eq!(path, savepoints.join("savepoint-7"));

    for at in [path.clone(), path.join(METADATA_FILE)] {
        let loaded = load_snapshot(&at).unwrap();
        assert_eq!(loaded.meta, meta);
        assert_eq!(loaded.root, path);
        assert_blobs(&loaded.meta, &written, |b| loaded.read_blob(b));
    }

    // Moved elsewhere, it still loads.
    let moved = tempfile::tempdir().unwrap();
    let copy = moved.path().join("my-savepoint");
    copy_dir(&path, &copy);
    fs::remove_dir_all(&savepoints).unwrap();
    let loaded = load_snapshot(&copy).unwrap();
    assert_eq!(loaded.meta, meta);
    assert_blobs(&loaded.meta, &written, |b| loaded.read_blob(b));

    // A damaged copy is refused, naming the file.
    let blob = copy.join(BLOB_NAMES[0]);
    truncate(&blob, 2);
    assert_corrupt(load_snapshot(&copy).unwrap_err(), "7", &blob);
}

#[test]
fn an_unfinished_savepoint_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let writer: Arc<SavepointWriter> =
        Arc::new(SavepointWriter::new(tmp.path(), CheckpointId(3)).unwrap());
    let sink: Arc<dyn BlobSink> = writer.clone();
    sink.put(CheckpointId(3), "a", b"bytes").unwrap();
    // A savepoint holds its own blobs only.
    assert!(matches!(
        sink.put(CheckpointId(4), "b", b"bytes"),
        Err(CheckpointError::Failed {
            checkpoint: CheckpointId(4),
            ..
        })
    ));
    let dir = writer.dir().to_path_buf();
    assert!(dir.join("a").is_file());
    assert!(matches!(
        load_snapshot(&dir),
        Err(CheckpointError::NotFound { .. })
    ));
    drop(sink);
    drop(writer);
    assert!(!dir.exists());
    assert!(writer_refuses_bad_names(tmp.path()));
}

fn writer_refuses_bad_names(dir: &Path) -> bool {
    let writer = SavepointWriter::new(dir, CheckpointId(4)).unwrap();
    ["", "../x", "/abs", ".tmp", METADATA_FILE, "a//b"]
        .iter()
        .all(|name| writer.write_blob(name, b"x").is_err())
}

#[test]
fn remove_all_removes_only_floe_files() {
    let tmp = tempfile::tempdir().unwrap();
    let mut written = HashMap::new();
    for foreign in [false, true] {
        let dir = tmp.path().join(format!("ckpts-{foreign}"));
        let store = CheckpointStore::open(&dir).unwrap();
        let shared = shared_blob(&store, "s", &mut written);
        for id in 1..=2 {
            let meta =
                write_checkpoint(&store, id, std::slice::from_ref(&shared), &[], &mut written);
            store.commit(&meta, 5).unwrap();
        }
        let _uncommitted = write_checkpoint(&store, 3, &[], &[], &mut written);
        if foreign {
            fs::write(dir.join("notes.txt"), b"mine").unwrap();
        }
        store.remove_all().unwrap();
        if foreign {
            let left: Vec<PathBuf> = fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            assert_eq!(left, [dir.join("notes.txt")]);
        } else {
            assert!(!dir.exists());
        }
    }
}

#[test]
fn clear_keeps_the_store_usable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = Arc::new(CheckpointStore::open(dir).unwrap());
    let mut written = HashMap::new();
    let shared = shared_blob(&store, "s", &mut written);
    for id in 1..=2 {
        let meta = write_checkpoint(&store, id, std::slice::from_ref(&shared), &[], &mut written);
        store.commit(&meta, 5).unwrap();
    }
    store.clear().unwrap();
    assert!(store.list().unwrap().is_empty());
    assert!(chk_dirs(dir).is_empty());
    assert!(!dir.join("shared").exists());
    assert_eq!(store.max_id().unwrap(), CheckpointId(2));
    let meta = write_checkpoint(&store, 3, &[], &[], &mut written);
    store.commit(&meta, 5).unwrap();
    assert_eq!(store.list().unwrap(), [meta]);
}

#[test]
fn commit_refuses_missing_blobs_and_savepoints() {
    let tmp = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(tmp.path()).unwrap();
    let mut written = HashMap::new();
    let meta = write_checkpoint(&store, 1, &[], &[], &mut written);
    fs::remove_file(tmp.path().join("chk-1").join(BLOB_NAMES[2])).unwrap();
    assert!(store.commit(&meta, 1).is_err());
    let meta = write_checkpoint(&store, 2, &[], &[], &mut written);
    let savepoint = CheckpointMetadata {
        kind: SnapshotKind::Savepoint,
        ..meta
    };
    assert!(store.commit(&savepoint, 1).is_err());
    assert!(store.list().unwrap().is_empty());
    assert_eq!(store.max_id().unwrap(), CheckpointId(0));
}

/// A seeded random sequence of shared-blob writes, checkpoints written,
/// committed or abandoned, with random retention, compared after every step
/// with a model of what must be listed and what must be on disk.
#[test]
fn retention_matches_a_model() {
    for seed in 0..8 {
        let mut rng = SplitMix(seed);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let store = CheckpointStore::open(dir).unwrap();
        let mut written = HashMap::new();
        // Model: committed id -> its shared blob paths.
        let mut committed: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        let mut metas: BTreeMap<u64, CheckpointMetadata> = BTreeMap::new();
        let mut shared: Vec<BlobRef> = Vec::new();
        let mut pending: BTreeSet<String> = BTreeSet::new();

        for id in 1..=25u64 {
            if rng.below(3) == 0 {
                let blob = shared_blob(&store, &format!("s{id}"), &mut written);
                pending.insert(blob.path.clone());
                shared.push(blob);
            }
            // Reference some still-present shared blobs.
            let present = shared_files(dir);
            let refs: Vec<BlobRef> = shared
                .iter()
                .filter(|b| present.contains(&b.path) && rng.below(2) == 0)
                .cloned()
                .collect();
            let meta = write_checkpoint(&store, id, &refs, &[], &mut written);
            if rng.below(4) == 0 {
                continue;
            }
            let retain = 1 + rng.below(3) as usize;
            store.commit(&meta, retain).unwrap();
            for b in &refs {
                pending.remove(&b.path);
            }
            committed.insert(id, refs.iter().map(|b| b.path.clone()).collect());
            metas.insert(id, meta);
            while committed.len() > retain {
                let oldest = *committed.keys().next().unwrap();
                committed.remove(&oldest);
                metas.remove(&oldest);
            }

            let listed = store.list().unwrap();
            assert_eq!(listed, metas.values().cloned().collect::<Vec<_>>());
            let expected_dirs: BTreeSet<u64> = committed.keys().copied().collect();
            assert_eq!(chk_dirs(dir), expected_dirs, "seed {seed} id {id}");
            let mut expected_shared: BTreeSet<String> =
                committed.values().flatten().cloned().collect();
            expected_shared.extend(pending.iter().cloned());
            assert_eq!(shared_files(dir), expected_shared, "seed {seed} id {id}");
            for meta in &listed {
                store.verify(meta.id).unwrap();
                assert_blobs(meta, &written, |b| store.read_blob(meta.id, b));
            }
            assert_eq!(store.max_id().unwrap(), CheckpointId(id));
        }
    }
}
