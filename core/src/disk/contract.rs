//! The disk contract as executable checks, shared by every [`Disk`] implementation's tests.
//!
//! `MemDisk` (here) and `FsDisk` (gregor-realnet) run the same functions, so the model that the
//! simulator's disk keeps and the behaviour production gets cannot drift apart unnoticed. Each
//! function panics with a message naming the broken rule; none returns an error.
//!
//! Scope: what a single process sees between crashes (the results of calls, rules 1, 2, 4 and 6
//! of the model in `disk.rs`). Crash outcomes (rule 3) and sync failures (rule 5) need fault
//! injection and are tested beside each implementation. The checks work under the prefix
//! `contract/` and assume nothing else lives there; a directory whose last file was removed may
//! or may not still be listed (rule 1), so no check depends on it.

use super::{Disk, DiskError};

/// Runs every check in this module on `disk`.
pub fn run_all<D: Disk>(disk: &mut D) {
    create_and_exists(disk);
    missing_files_are_not_found(disk);
    append_returns_positions(disk);
    read_at_bounds(disk);
    truncate_cuts_and_never_extends(disk);
    rename_replaces_target(disk);
    remove_deletes(disk);
    list_direct_children_sorted(disk);
    read_all_reads_everything(disk);
    write_file_atomic_replaces(disk);
}

fn must<T>(result: Result<T, DiskError>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("disk contract: {what} failed: {e}"),
    }
}

/// `create` makes an empty file (and its parents), `exists` sees it, a second `create` is
/// `AlreadyExists` and leaves the file alone.
pub fn create_and_exists<D: Disk>(disk: &mut D) {
    let path = "contract/create/deep/f";
    assert!(!disk.exists(path), "disk contract: {path} exists before create");
    must(disk.create(path), "create with implicit parent directories");
    assert!(disk.exists(path), "disk contract: {path} missing after create");
    assert_eq!(must(disk.len(path), "len"), 0, "a new file is not empty");
    must(disk.append(path, b"x"), "append");
    assert_eq!(
        disk.create(path),
        Err(DiskError::AlreadyExists(path.to_string())),
        "disk contract: create over an existing file must be AlreadyExists"
    );
    assert_eq!(
        must(disk.read_all(path), "read_all"),
        b"x",
        "disk contract: a failed create changed the existing file"
    );
    assert!(
        !disk.exists("contract/create/deep"),
        "disk contract: exists() must be true for files only, not directories"
    );
}

/// Every per-file operation on a missing file is `NotFound`.
pub fn missing_files_are_not_found<D: Disk>(disk: &mut D) {
    let path = "contract/missing/none";
    assert!(!disk.exists(path), "disk contract: a missing file exists");
    let mut buf = [0xAAu8; 1];
    let results = [
        ("len", disk.len(path).map(|_| ())),
        ("append", disk.append(path, b"x").map(|_| ())),
        ("read_at", disk.read_at(path, 0, &mut buf)),
        ("read_vec", disk.read_vec(path, 0, 1).map(|_| ())),
        ("sync", disk.sync(path)),
        ("truncate", disk.truncate(path, 0)),
        ("remove", disk.remove(path)),
        ("rename", disk.rename(path, "contract/missing/other")),
    ];
    for (op, result) in results {
        assert_eq!(
            result,
            Err(DiskError::NotFound(path.to_string())),
            "disk contract: {op} of a missing file must be NotFound"
        );
    }
    assert!(
        !disk.exists(path) && !disk.exists("contract/missing/other"),
        "disk contract: an operation on a missing file created a file"
    );
}

/// `append` writes at the end and returns where; `len` follows, volatile writes included.
pub fn append_returns_positions<D: Disk>(disk: &mut D) {
    let path = "contract/append/f";
    must(disk.create(path), "create");
    assert_eq!(must(disk.append(path, b"hello"), "append"), 0);
    assert_eq!(
        must(disk.append(path, b", "), "append"),
        5,
        "disk contract: append must return the old end of the file"
    );
    assert_eq!(
        must(disk.append(path, b""), "empty append"),
        7,
        "an empty append returns the end"
    );
    assert_eq!(must(disk.append(path, b"world"), "append"), 7);
    assert_eq!(must(disk.len(path), "len"), 12, "len must count unsynced appends");
    must(disk.sync(path), "sync");
    assert_eq!(must(disk.append(path, b"!"), "append after sync"), 12);
    assert_eq!(must(disk.read_all(path), "read_all"), b"hello, world!");
}

/// `read_at` returns exactly the bytes asked for; any read reaching past the end is
/// `UnexpectedEof` and leaves the buffer untouched.
pub fn read_at_bounds<D: Disk>(disk: &mut D) {
    let path = "contract/read/f";
    must(disk.create(path), "create");
    must(disk.append(path, b"0123456789"), "append");
    let mut buf = [0u8; 4];
    must(disk.read_at(path, 3, &mut buf), "read_at inside the file");
    assert_eq!(&buf, b"3456", "read_at returned the wrong bytes");
    must(disk.read_at(path, 6, &mut buf), "read_at ending at the end");
    assert_eq!(&buf, b"6789");
    must(disk.read_at(path, 10, &mut []), "empty read_at at the end");
    assert_eq!(must(disk.read_vec(path, 3, 4), "read_vec inside the file"), b"3456");
    assert_eq!(
        must(disk.read_vec(path, 0, 10), "read_vec of the whole file"),
        b"0123456789"
    );
    assert_eq!(must(disk.read_vec(path, 10, 0), "empty read_vec at the end"), b"");

    for (pos, wanted) in [(7, 4), (10, 1), (11, 1), (u64::MAX, 1), (u64::MAX - 1, 4)] {
        let mut buf = vec![0xAAu8; wanted];
        match disk.read_at(path, pos, &mut buf) {
            Err(DiskError::UnexpectedEof { .. }) => {}
            other => panic!(
                "disk contract: read_at({pos}, {wanted} bytes) of a 10-byte file must be \
                 UnexpectedEof, got {other:?}"
            ),
        }
        assert!(
            buf.iter().all(|&b| b == 0xAA),
            "disk contract: a read_at past the end at {pos} filled the buffer"
        );
        match disk.read_vec(path, pos, wanted) {
            Err(DiskError::UnexpectedEof { .. }) => {}
            other => panic!(
                "disk contract: read_vec({pos}, {wanted} bytes) of a 10-byte file must be \
                 UnexpectedEof, got {other:?}"
            ),
        }
    }
}

/// `truncate` cuts to the given length, is a no-op when the file is already that short, and
/// later appends continue at the new end.
pub fn truncate_cuts_and_never_extends<D: Disk>(disk: &mut D) {
    let path = "contract/truncate/f";
    must(disk.create(path), "create");
    must(disk.append(path, b"0123456789"), "append");
    must(disk.sync(path), "sync");
    must(disk.truncate(path, 4), "truncate");
    assert_eq!(must(disk.len(path), "len"), 4, "truncate did not cut");
    must(disk.truncate(path, 100), "truncate past the end");
    assert_eq!(
        must(disk.len(path), "len"),
        4,
        "disk contract: truncate past the end must not extend the file"
    );
    assert_eq!(
        must(disk.append(path, b"ab"), "append after truncate"),
        4,
        "append after truncate must land at the new end"
    );
    assert_eq!(must(disk.read_all(path), "read_all"), b"0123ab");
    let mut buf = [0u8; 1];
    assert!(
        matches!(disk.read_at(path, 6, &mut buf), Err(DiskError::UnexpectedEof { .. })),
        "disk contract: bytes cut by truncate are still readable"
    );
    must(disk.truncate(path, 0), "truncate to empty");
    assert_eq!(must(disk.len(path), "len"), 0);
}

/// `rename` moves a file, replacing its target, into a directory that may not exist yet.
pub fn rename_replaces_target<D: Disk>(disk: &mut D) {
    let (from, to) = ("contract/rename/new", "contract/rename/current");
    must(disk.create(to), "create target");
    must(disk.append(to, b"old contents"), "append target");
    must(disk.create(from), "create source");
    must(disk.append(from, b"new"), "append source");
    // Reading the target last makes an implementation with a cache hold it open.
    assert_eq!(must(disk.read_all(to), "read_all target"), b"old contents");
    must(disk.rename(from, to), "rename over an existing file");
    assert!(!disk.exists(from), "disk contract: rename left its source");
    assert_eq!(
        must(disk.read_all(to), "read_all"),
        b"new",
        "disk contract: rename must replace the target's contents"
    );
    assert_eq!(
        must(disk.append(to, b"er"), "append to the renamed file"),
        3,
        "the renamed file keeps its length"
    );

    let moved = "contract/rename/elsewhere/moved";
    must(disk.rename(to, moved), "rename into a new directory");
    assert!(!disk.exists(to), "rename left its source");
    assert_eq!(must(disk.read_all(moved), "read_all"), b"newer");
    must(disk.create(to), "create again at a renamed-away name");
    assert_eq!(
        must(disk.len(to), "len"),
        0,
        "a file created at a renamed-away name must be new and empty"
    );
}

/// `remove` deletes a file: it is gone, and its name can be created afresh.
pub fn remove_deletes<D: Disk>(disk: &mut D) {
    let path = "contract/remove/f";
    must(disk.create(path), "create");
    must(disk.append(path, b"data"), "append");
    must(disk.remove(path), "remove");
    assert!(!disk.exists(path), "disk contract: removed file exists");
    assert_eq!(
        disk.len(path),
        Err(DiskError::NotFound(path.to_string())),
        "disk contract: a removed file must be NotFound"
    );
    must(disk.create(path), "create after remove");
    assert_eq!(
        must(disk.len(path), "len"),
        0,
        "disk contract: a file re-created after remove kept old bytes"
    );
    must(disk.remove(path), "remove");
}

/// `list` names the direct children of a directory (files and directories, once each),
/// sorted; `""` is the data directory; a missing directory is empty.
pub fn list_direct_children_sorted<D: Disk>(disk: &mut D) {
    for path in [
        "contract/list/t-1/b.log",
        "contract/list/t-1/a.log",
        "contract/list/t-0/00.log",
        "contract/list/top",
        "contract/list/b",
        "contract/list/a",
    ] {
        must(disk.create(path), "create");
    }
    assert_eq!(
        must(disk.list("contract/list"), "list"),
        vec!["a", "b", "t-0", "t-1", "top"],
        "disk contract: list must give direct children once each, sorted"
    );
    assert_eq!(must(disk.list("contract/list/t-1"), "list"), vec!["a.log", "b.log"]);
    assert!(
        must(disk.list("contract/list/none"), "list of a missing directory").is_empty(),
        "disk contract: a missing directory must list as empty"
    );
    let top = must(disk.list(""), "list of the data directory");
    assert!(
        top.iter().any(|name| name == "contract"),
        "disk contract: list(\"\") must show top-level directories, got {top:?}"
    );
    assert!(
        top.windows(2).all(|w| w[0] < w[1]),
        "disk contract: list(\"\") must be sorted and without duplicates, got {top:?}"
    );
}

/// `read_all` returns the whole file, volatile writes included; empty files read as empty.
pub fn read_all_reads_everything<D: Disk>(disk: &mut D) {
    let path = "contract/read_all/f";
    must(disk.create(path), "create");
    assert!(must(disk.read_all(path), "read_all of an empty file").is_empty());
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    for chunk in data.chunks(4096) {
        must(disk.append(path, chunk), "append");
    }
    assert!(
        must(disk.read_all(path), "read_all") == data,
        "disk contract: read_all did not return the appended bytes"
    );
}

/// `write_file_atomic` creates or replaces a file's whole content and leaves no temporary.
pub fn write_file_atomic_replaces<D: Disk>(disk: &mut D) {
    let path = "contract/atomic/checkpoint";
    must(disk.write_file_atomic(path, b"first"), "write_file_atomic");
    assert_eq!(must(disk.read_all(path), "read_all"), b"first");
    must(
        disk.write_file_atomic(path, b"2nd"),
        "write_file_atomic over an existing file",
    );
    assert_eq!(
        must(disk.read_all(path), "read_all"),
        b"2nd",
        "disk contract: write_file_atomic must replace the content"
    );
    // A temporary left by a crash mid-write must not block the next write.
    must(disk.create(&format!("{path}.tmp")), "create stale temporary");
    must(disk.append(&format!("{path}.tmp"), b"stale"), "append");
    must(
        disk.write_file_atomic(path, b"third"),
        "write_file_atomic over a stale temporary",
    );
    assert_eq!(must(disk.read_all(path), "read_all"), b"third");
    assert_eq!(
        must(disk.list("contract/atomic"), "list"),
        vec!["checkpoint"],
        "disk contract: write_file_atomic left a temporary behind"
    );
}
