//! `FsDisk`: the [`Disk`] of a node on the real file system, under one root data directory.
//!
//! It owns the node's data directory and a bounded cache of open files (with each file's length,
//! so appends need no `stat`). It is driven from one thread (the node's I/O thread): the cache
//! sits in a `RefCell` because `len`/`read_at` take `&self` but may open a file.
//!
//! # How it keeps the disk model (`gregor_core::disk`, rules 1–6)
//!
//! 1. **Paths**: every path is checked before it touches the file system: `/`-separated, relative,
//!    no empty, `.` or `..` component, no NUL byte, so no path can leave the root (`Io` error).
//!    Directories are implicit: `create` and `rename` create the missing parents of their target.
//!    `remove` of a directory's last file removes the directory too (the model allows either).
//!    Symlinks are never created by Gregor; one planted inside the root by someone else is
//!    followed (outside the fault model: the data directory belongs to the broker).
//! 2. **Data writes** go straight to the kernel with `pwrite` at the tracked end of the file
//!    (`append`) or `ftruncate` (`truncate`); they sit in the page cache, and every read
//!    (`pread`) sees them. `sync` is `fdatasync` (`File::sync_data`), which makes the file's data
//!    and its size durable (fdatasync(2) flushes `st_size`, so a truncation is covered too). An append that fails part-way is cut back
//!    to the old end, so a failed append leaves no volatile bytes behind.
//! 3. **At a crash** the kernel loses what was not written back; ext4/xfs keep the synced bytes
//!    and may keep any prefix of the rest (data=ordered may show a torn or zeroed tail): no
//!    stronger than the model's promise, which is why the log checks CRCs on recovery.
//! 4. **Metadata operations** are durable when they return `Ok`: after `create` (which also
//!    fsyncs the new, empty file), `rename` and `remove`, the parent directory of every name
//!    that changed, and of every directory created on the way, is fsynced. `rename` is
//!    `rename(2)`, which replaces its target atomically.
//! 5. **A failed sync** is sticky: after `fdatasync` fails on a file, Linux may drop the dirty
//!    pages and report the next `fdatasync` as `Ok` (fsyncgate). So every later `sync` of that
//!    path fails too, until the file is removed or replaced by `rename`/`create`. A file evicted
//!    from the open-file cache with unsynced writes is synced first, and a failure there is
//!    recorded the same way, so closing a descriptor never hides a write-back error.
//! 6. **Corruption** is not detected here (checksums above do that). A read past the end is
//!    `UnexpectedEof` and fills nothing; nothing here panics on any input.
//!
//! One process owns a data directory: the cached lengths assume no other writer. `FsDisk` itself
//! does not check it; the `gregor` binary holds [`crate::data_dir::DataDirLock`] (an `flock` on
//! `.lock`) for as long as it runs.
//!
//! # Errors
//!
//! `ENOSPC` (and `EDQUOT`) → `NoSpace`, `ENOENT` → `NotFound`, `EEXIST` → `AlreadyExists`,
//! anything else → `Io { path, detail }`.

use std::cell::{RefCell, RefMut};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use gregor_core::disk::{Disk, DiskError};

/// Open files kept by default: well under the common soft `RLIMIT_NOFILE` of 1024, leaving room
/// for sockets.
pub const OPEN_FILES_MAX_DEFAULT: usize = 512;

/// One open file and what `FsDisk` knows about it.
#[derive(Debug)]
struct OpenFile {
    file: File,
    /// Current length, volatile writes included (this process is the only writer).
    len: u64,
    /// Whether writes were made since the last successful `sync`.
    dirty: bool,
}

/// A node's data directory on the real file system. See the module docs for its contract.
#[derive(Debug)]
pub struct FsDisk {
    root: PathBuf,
    open: RefCell<HashMap<String, OpenFile>>,
    open_files_max: usize,
    /// Paths whose `fdatasync` failed: their durable content is unknown (rule 5).
    sync_failed: RefCell<HashSet<String>>,
}

impl FsDisk {
    /// Opens (creating it if needed) the data directory `root`.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, DiskError> {
        Self::with_open_files_max(root, OPEN_FILES_MAX_DEFAULT)
    }

    /// Like [`FsDisk::open`], keeping at most `open_files_max` (at least 1) files open.
    pub fn with_open_files_max(root: impl AsRef<Path>, open_files_max: usize) -> Result<Self, DiskError> {
        let root = root.as_ref().to_path_buf();
        let shown = root.display().to_string();
        if !root.exists() {
            fs::create_dir_all(&root).map_err(|e| map_err(&shown, e))?;
            // A new data directory must not vanish at a crash after files were made durable in
            // it (rule 4); its own parent holds its entry.
            if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dirs([&parent.to_path_buf()])?;
            }
        }
        let meta = fs::metadata(&root).map_err(|e| map_err(&shown, e))?;
        if !meta.is_dir() {
            return Err(DiskError::Io {
                path: shown,
                detail: "data directory is not a directory".to_string(),
            });
        }
        Ok(FsDisk {
            root,
            open: RefCell::new(HashMap::new()),
            open_files_max: open_files_max.max(1),
            sync_failed: RefCell::new(HashSet::new()),
        })
    }

    /// The data directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The real path of a checked relative path.
    fn resolve(&self, path: &str) -> Result<PathBuf, DiskError> {
        check_path(path)?;
        Ok(self.root.join(path))
    }

    fn cache(&self) -> Result<RefMut<'_, HashMap<String, OpenFile>>, DiskError> {
        self.open.try_borrow_mut().map_err(|_| DiskError::Io {
            path: String::new(),
            detail: "open-file cache re-entered (FsDisk is single-threaded)".to_string(),
        })
    }

    fn sync_failed(&self) -> Result<RefMut<'_, HashSet<String>>, DiskError> {
        self.sync_failed.try_borrow_mut().map_err(|_| DiskError::Io {
            path: String::new(),
            detail: "sync-failure set re-entered (FsDisk is single-threaded)".to_string(),
        })
    }

    /// Runs `f` on the open file `path`, opening (and caching) it first if needed. A cached
    /// path was checked when it was opened, so the hot path (append, read) does no path work.
    fn with_file<R>(&self, path: &str, f: impl FnOnce(&mut OpenFile) -> Result<R, DiskError>) -> Result<R, DiskError> {
        let mut cache = self.cache()?;
        if let Some(open) = cache.get_mut(path) {
            return f(open);
        }
        let real = self.resolve(path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&real)
            .map_err(|e| map_err(path, e))?;
        let meta = file.metadata().map_err(|e| map_err(path, e))?;
        if !meta.is_file() {
            return Err(DiskError::Io {
                path: path.to_string(),
                detail: "not a regular file".to_string(),
            });
        }
        self.make_room(&mut cache)?;
        let open = cache.entry(path.to_string()).or_insert(OpenFile {
            file,
            len: meta.len(),
            dirty: false,
        });
        f(open)
    }

    /// A second descriptor of `path` (a `dup`) whose `len` bytes from `pos` exist now: what a
    /// zero-copy send reads from. It stays valid if the file is later removed or the cache
    /// closes its own descriptor; bytes truncated away meanwhile are simply not there.
    pub fn region_file(&self, path: &str, pos: u64, len: u64) -> Result<File, DiskError> {
        self.with_file(path, |open| {
            match pos.checked_add(len) {
                Some(end) if end <= open.len => {}
                _ => {
                    return Err(DiskError::UnexpectedEof {
                        path: path.to_string(),
                        pos,
                        wanted: usize::try_from(len).unwrap_or(usize::MAX),
                        len: open.len,
                    })
                }
            }
            open.file.try_clone().map_err(|e| map_err(path, e))
        })
    }

    /// Closes one cached file if the cache is full: a clean one if any, else a dirty one after
    /// syncing it (a failure there is remembered for that path's next `sync`, rule 5).
    fn make_room(&self, cache: &mut HashMap<String, OpenFile>) -> Result<(), DiskError> {
        if cache.len() < self.open_files_max {
            return Ok(());
        }
        let victim = cache
            .iter()
            .find(|(_, open)| !open.dirty)
            .or_else(|| cache.iter().next())
            .map(|(path, _)| path.clone());
        if let Some(victim) = victim {
            if let Some(open) = cache.remove(&victim) {
                if open.dirty && open.file.sync_data().is_err() {
                    self.sync_failed()?.insert(victim);
                }
            }
        }
        Ok(())
    }

    /// Forgets everything cached about `path` (its file was removed or replaced).
    fn forget(&self, path: &str) -> Result<(), DiskError> {
        self.cache()?.remove(path);
        self.sync_failed()?.remove(path);
        Ok(())
    }

    /// Creates the missing directories above `path`; returns the directories whose entries
    /// changed and must be fsynced for that to be durable (rule 4).
    fn make_parents(&self, path: &str) -> Result<BTreeSet<PathBuf>, DiskError> {
        let mut changed = BTreeSet::new();
        let mut dir = self.root.clone();
        let mut shown = String::new();
        let components: Vec<&str> = path.split('/').collect();
        let parents = components.len().saturating_sub(1);
        for component in &components[..parents] {
            let parent = dir.clone();
            dir.push(component);
            if !shown.is_empty() {
                shown.push('/');
            }
            shown.push_str(component);
            match fs::create_dir(&dir) {
                Ok(()) => {
                    changed.insert(parent);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    if !dir.is_dir() {
                        return Err(DiskError::Io {
                            path: shown,
                            detail: "a file is in the way of a directory".to_string(),
                        });
                    }
                }
                Err(e) => return Err(map_err(&shown, e)),
            }
        }
        Ok(changed)
    }

    /// The real directory holding `path` (which is checked already).
    fn parent_of(&self, path: &str) -> PathBuf {
        match path.rsplit_once('/') {
            Some((dir, _)) => self.root.join(dir),
            None => self.root.clone(),
        }
    }
}

/// Rejects any path that is not relative, `/`-separated and made of real names (rule 1).
fn check_path(path: &str) -> Result<(), DiskError> {
    let bad = |why: &str| {
        Err(DiskError::Io {
            path: path.to_string(),
            detail: format!("invalid path: {why}"),
        })
    };
    if path.is_empty() {
        return bad("empty");
    }
    if path.starts_with('/') {
        return bad("absolute paths are not allowed");
    }
    if path.contains('\0') {
        return bad("contains a NUL byte");
    }
    for component in path.split('/') {
        match component {
            "" => return bad("empty component"),
            "." | ".." => return bad("`.` and `..` are not allowed"),
            _ => {}
        }
    }
    Ok(())
}

/// Maps an OS error on `path` to the disk model's operating errors.
fn map_err(path: &str, e: io::Error) -> DiskError {
    match e.kind() {
        ErrorKind::NotFound => DiskError::NotFound(path.to_string()),
        ErrorKind::AlreadyExists => DiskError::AlreadyExists(path.to_string()),
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => DiskError::NoSpace,
        _ => DiskError::Io {
            path: path.to_string(),
            detail: e.to_string(),
        },
    }
}

/// fsyncs directories so that the entries changed in them are durable (rule 4).
fn sync_dirs<'a>(dirs: impl IntoIterator<Item = &'a PathBuf>) -> Result<(), DiskError> {
    for dir in dirs {
        let shown = dir.display().to_string();
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| map_err(&shown, e))?;
    }
    Ok(())
}

impl Disk for FsDisk {
    fn create(&mut self, path: &str) -> Result<(), DiskError> {
        let real = self.resolve(path)?;
        let mut dirs = self.make_parents(path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&real)
            .map_err(|e| map_err(path, e))?;
        self.forget(path)?;
        // The new inode itself, then the entry naming it.
        file.sync_all().map_err(|e| map_err(path, e))?;
        dirs.insert(self.parent_of(path));
        {
            let mut cache = self.cache()?;
            self.make_room(&mut cache)?;
            let entry = OpenFile {
                file,
                len: 0,
                dirty: false,
            };
            cache.insert(path.to_string(), entry);
        }
        sync_dirs(dirs.iter().rev())
    }

    fn len(&self, path: &str) -> Result<u64, DiskError> {
        self.with_file(path, |open| Ok(open.len))
    }

    fn append(&mut self, path: &str, data: &[u8]) -> Result<u64, DiskError> {
        self.with_file(path, |open| {
            let pos = open.len;
            let end = pos.checked_add(data.len() as u64).ok_or_else(|| DiskError::Io {
                path: path.to_string(),
                detail: "file length would overflow u64".to_string(),
            })?;
            open.dirty = true;
            if let Err(e) = open.file.write_all_at(data, pos) {
                // Cut a partial append back so a failed append leaves nothing behind; if even
                // that fails, re-read the length so the tracked end stays true.
                if open.file.set_len(pos).is_err() {
                    if let Ok(meta) = open.file.metadata() {
                        open.len = meta.len();
                    }
                }
                return Err(map_err(path, e));
            }
            open.len = end;
            Ok(pos)
        })
    }

    fn read_at(&self, path: &str, pos: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.with_file(path, |open| {
            let (wanted, len) = (buf.len(), open.len);
            let eof = || DiskError::UnexpectedEof {
                path: path.to_string(),
                pos,
                wanted,
                len,
            };
            match pos.checked_add(wanted as u64) {
                Some(end) if end <= len => {}
                _ => return Err(eof()),
            }
            open.file.read_exact_at(buf, pos).map_err(|e| {
                if e.kind() == ErrorKind::UnexpectedEof {
                    eof()
                } else {
                    map_err(path, e)
                }
            })
        })
    }

    fn sync(&mut self, path: &str) -> Result<(), DiskError> {
        if self.sync_failed()?.contains(path) {
            return Err(DiskError::Io {
                path: path.to_string(),
                detail: "an earlier fdatasync of this file failed; its unsynced writes may be lost".to_string(),
            });
        }
        self.with_file(path, |open| {
            if let Err(e) = open.file.sync_data() {
                self.sync_failed()?.insert(path.to_string());
                return Err(map_err(path, e));
            }
            open.dirty = false;
            Ok(())
        })
    }

    fn truncate(&mut self, path: &str, len: u64) -> Result<(), DiskError> {
        self.with_file(path, |open| {
            if len >= open.len {
                return Ok(());
            }
            open.dirty = true;
            open.file.set_len(len).map_err(|e| map_err(path, e))?;
            open.len = len;
            Ok(())
        })
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), DiskError> {
        let real_from = self.resolve(from)?;
        let real_to = self.resolve(to)?;
        if from == to {
            // rename(2) of a name onto itself does nothing; so does this (and keeps the cache).
            return if self.exists(from) {
                Ok(())
            } else {
                Err(DiskError::NotFound(from.to_string()))
            };
        }
        if !real_from.is_file() {
            // Checked first so a missing source creates no directories for the target.
            return match fs::symlink_metadata(&real_from) {
                Err(e) => Err(map_err(from, e)),
                Ok(_) => Err(DiskError::Io {
                    path: from.to_string(),
                    detail: "not a regular file".to_string(),
                }),
            };
        }
        let mut dirs = self.make_parents(to)?;
        fs::rename(&real_from, &real_to).map_err(|e| map_err(from, e))?;
        // The open descriptor follows the inode to its new name; the replaced file is gone.
        self.forget(to)?;
        let mut cache = self.cache()?;
        if let Some(open) = cache.remove(from) {
            cache.insert(to.to_string(), open);
        }
        drop(cache);
        let mut sync_failed = self.sync_failed()?;
        if sync_failed.remove(from) {
            sync_failed.insert(to.to_string());
        }
        drop(sync_failed);
        dirs.insert(self.parent_of(from));
        dirs.insert(self.parent_of(to));
        sync_dirs(dirs.iter().rev())
    }

    fn remove(&mut self, path: &str) -> Result<(), DiskError> {
        let real = self.resolve(path)?;
        fs::remove_file(&real).map_err(|e| map_err(path, e))?;
        self.forget(path)?;
        let parent = self.parent_of(path);
        sync_dirs([&parent])?;
        // A directory whose last file is gone goes too, so a deleted partition leaves nothing
        // behind. Directories are implicit: the next `create` or `rename` under it makes it
        // again. Not empty (or any other failure): it stays, which the model allows.
        if parent != self.root && fs::remove_dir(&parent).is_ok() {
            if let Some(grandparent) = parent.parent() {
                sync_dirs([&grandparent.to_path_buf()])?;
            }
        }
        Ok(())
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, DiskError> {
        let real = if dir.is_empty() {
            self.root.clone()
        } else {
            self.resolve(dir)?
        };
        let entries = match fs::read_dir(&real) {
            Ok(entries) => entries,
            // A missing directory (or a file, which has no children) lists as empty.
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Ok(Vec::new());
            }
            Err(e) => return Err(map_err(dir, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| map_err(dir, e))?;
            // A name that is not UTF-8 cannot be addressed through `Disk` and was not written by
            // Gregor: it is skipped rather than mangled into a name that opens nothing.
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn exists(&self, path: &str) -> bool {
        match self.cache() {
            Ok(cache) if cache.contains_key(path) => return true,
            _ => {}
        }
        self.resolve(path).map(|p| p.is_file()).unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gregor_core::disk::contract;

    fn fresh() -> (tempfile::TempDir, FsDisk) {
        let dir = tempfile::tempdir().expect("temp dir");
        let disk = FsDisk::open(dir.path().join("data")).expect("open data dir");
        (dir, disk)
    }

    #[test]
    fn keeps_the_disk_contract() {
        let (_dir, mut disk) = fresh();
        contract::run_all(&mut disk);
    }

    #[test]
    fn keeps_the_disk_contract_with_one_open_file() {
        // Every operation evicts: the contract must not depend on what is cached.
        let dir = tempfile::tempdir().expect("temp dir");
        let mut disk = FsDisk::with_open_files_max(dir.path(), 1).expect("open");
        contract::run_all(&mut disk);
    }

    #[test]
    fn data_survives_drop_and_reopen() {
        let (dir, mut disk) = fresh();
        disk.create("t-0/00000000000000000000.log").expect("create");
        disk.append("t-0/00000000000000000000.log", b"synced").expect("append");
        disk.sync("t-0/00000000000000000000.log").expect("sync");
        disk.append("t-0/00000000000000000000.log", b"+cached").expect("append");
        disk.write_file_atomic("t-0/leader-epoch-checkpoint", b"0 0\n")
            .expect("write checkpoint");
        disk.create("t-0/gone").expect("create");
        disk.remove("t-0/gone").expect("remove");
        drop(disk);

        let disk = FsDisk::open(dir.path().join("data")).expect("reopen");
        assert_eq!(
            disk.read_all("t-0/00000000000000000000.log").expect("read"),
            b"synced+cached"
        );
        assert_eq!(disk.len("t-0/00000000000000000000.log").expect("len"), 13);
        assert_eq!(disk.read_all("t-0/leader-epoch-checkpoint").expect("read"), b"0 0\n");
        assert_eq!(
            disk.list("t-0").expect("list"),
            vec!["00000000000000000000.log", "leader-epoch-checkpoint"]
        );
    }

    #[test]
    fn paths_that_could_escape_the_root_are_rejected() {
        let outer = tempfile::tempdir().expect("temp dir");
        std::fs::write(outer.path().join("outside"), b"secret").expect("write outside file");
        let mut disk = FsDisk::open(outer.path().join("data")).expect("open");
        let bad = [
            "",
            "/",
            "/etc/passwd",
            "..",
            "../outside",
            "a/../../outside",
            "./a",
            "a/.",
            "a//b",
            "a/",
            "/a",
            "a\0b",
        ];
        for path in bad {
            let is_invalid = |r: Result<(), DiskError>| matches!(r, Err(DiskError::Io { ref detail, .. }) if detail.starts_with("invalid path"));
            assert!(is_invalid(disk.create(path)), "create({path:?})");
            assert!(is_invalid(disk.len(path).map(|_| ())), "len({path:?})");
            assert!(is_invalid(disk.append(path, b"x").map(|_| ())), "append({path:?})");
            assert!(is_invalid(disk.read_at(path, 0, &mut [0u8; 1])), "read_at({path:?})");
            assert!(is_invalid(disk.sync(path)), "sync({path:?})");
            assert!(is_invalid(disk.truncate(path, 0)), "truncate({path:?})");
            assert!(is_invalid(disk.remove(path)), "remove({path:?})");
            assert!(is_invalid(disk.rename(path, "ok")), "rename from {path:?}");
            assert!(!disk.exists(path), "exists({path:?})");
            if !path.is_empty() {
                assert!(is_invalid(disk.list(path).map(|_| ())), "list({path:?})");
            }
        }
        disk.create("ok").expect("create");
        for path in bad {
            assert!(
                matches!(disk.rename("ok", path), Err(DiskError::Io { .. })),
                "rename to {path:?}"
            );
        }
        assert_eq!(
            std::fs::read(outer.path().join("outside")).expect("read outside file"),
            b"secret"
        );
        let mut outer_names: Vec<_> = std::fs::read_dir(outer.path())
            .expect("read outer dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        outer_names.sort();
        assert_eq!(outer_names, ["data", "outside"], "something escaped the root");
        assert_eq!(disk.list("").expect("list"), vec!["ok"]);
    }

    #[test]
    fn removing_a_directorys_last_file_removes_the_directory_and_create_makes_it_again() {
        let (dir, mut disk) = fresh();
        disk.create("t-0/a").expect("create a");
        disk.create("t-0/b").expect("create b");
        disk.remove("t-0/a").expect("remove a");
        assert!(dir.path().join("data/t-0").is_dir(), "b is still in it");
        disk.remove("t-0/b").expect("remove b");
        assert!(!dir.path().join("data/t-0").exists(), "empty directory left behind");
        assert!(dir.path().join("data").is_dir(), "the root stays");
        disk.create("t-0/c").expect("create under the removed directory");
        assert_eq!(disk.list("t-0").expect("list"), vec!["c"]);
        disk.remove("t-0/c").expect("remove c");
        disk.create("top").expect("a file in the root");
        disk.remove("top").expect("remove it");
        assert!(dir.path().join("data").is_dir(), "the root is never removed");
    }

    #[test]
    fn files_written_outside_are_seen_with_their_length() {
        let (dir, disk) = fresh();
        std::fs::create_dir_all(dir.path().join("data/t-0")).expect("mkdir");
        std::fs::write(dir.path().join("data/t-0/f"), b"abc").expect("write");
        assert!(disk.exists("t-0/f"));
        assert!(!disk.exists("t-0"), "a directory is not a file");
        assert_eq!(disk.len("t-0/f").expect("len"), 3);
        assert!(matches!(disk.len("t-0"), Err(DiskError::Io { .. })));
    }

    #[test]
    fn directory_in_the_way_is_an_error_not_a_panic() {
        let (_dir, mut disk) = fresh();
        disk.create("a").expect("create");
        assert!(matches!(disk.create("a/b"), Err(DiskError::Io { .. })));
        disk.create("d/f").expect("create");
        assert!(matches!(disk.rename("a", "d"), Err(DiskError::Io { .. })));
        assert_eq!(disk.read_all("a").expect("a kept"), b"");
    }

    #[test]
    fn a_failed_sync_stays_failed_until_the_file_is_replaced() {
        let (_dir, mut disk) = fresh();
        disk.create("f").expect("create");
        disk.append("f", b"data").expect("append");
        // What `sync` records when fdatasync fails (no way to make the kernel fail it here).
        disk.sync_failed.borrow_mut().insert("f".to_string());
        assert!(matches!(disk.sync("f"), Err(DiskError::Io { .. })));
        assert!(
            matches!(disk.sync("f"), Err(DiskError::Io { .. })),
            "a retried sync must not report Ok (fsyncgate)"
        );
        disk.rename("f", "g").expect("rename");
        assert!(
            matches!(disk.sync("g"), Err(DiskError::Io { .. })),
            "the failure follows the file to its new name"
        );
        disk.create("f").expect("create a new f");
        disk.sync("f").expect("a new file at the old name is fine");
        disk.remove("g").expect("remove");
        disk.create("g").expect("create a new g");
        disk.sync("g").expect("a file created after remove is fine");
    }

    #[derive(Clone, Debug)]
    enum Op {
        Create(usize),
        Append(usize, Vec<u8>),
        ReadAt(usize, u64, usize),
        Sync(usize),
        Truncate(usize, u64),
        Rename(usize, usize),
        Remove(usize),
        Len(usize),
        List(usize),
        WriteAtomic(usize, Vec<u8>),
    }

    /// Leaf files only: the model has no file/directory clashes, a real file system does.
    const FILES: [&str; 5] = ["a", "b", "d/x", "d/y", "d/e/z"];
    const DIRS: [&str; 4] = ["", "d", "d/e", "none"];

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let file = 0..FILES.len();
        let bytes = proptest::collection::vec(any::<u8>(), 0..64);
        prop_oneof![
            file.clone().prop_map(Op::Create),
            (file.clone(), bytes.clone()).prop_map(|(f, b)| Op::Append(f, b)),
            (file.clone(), 0..80u64, 0..40usize).prop_map(|(f, p, n)| Op::ReadAt(f, p, n)),
            file.clone().prop_map(Op::Sync),
            (file.clone(), 0..80u64).prop_map(|(f, n)| Op::Truncate(f, n)),
            (file.clone(), file.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
            file.clone().prop_map(Op::Remove),
            file.clone().prop_map(Op::Len),
            (0..DIRS.len()).prop_map(Op::List),
            (file, bytes).prop_map(|(f, b)| Op::WriteAtomic(f, b)),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Every call returns what MemDisk (the model) returns, with a small open-file cache so
        /// eviction and reopening are exercised too.
        #[test]
        fn behaves_like_mem_disk(ops in proptest::collection::vec(op(), 1..40)) {
            use gregor_core::disk::mem::MemDisk;
            let dir = tempfile::tempdir().expect("temp dir");
            let mut fs = FsDisk::with_open_files_max(dir.path(), 2).expect("open");
            let mut mem = MemDisk::new();
            for (step, op) in ops.iter().enumerate() {
                let (got, want): (Result<Vec<u8>, DiskError>, Result<Vec<u8>, DiskError>) =
                    match op {
                        Op::Create(f) => (
                            fs.create(FILES[*f]).map(|_| vec![]),
                            mem.create(FILES[*f]).map(|_| vec![]),
                        ),
                        Op::Append(f, b) => (
                            fs.append(FILES[*f], b).map(|p| p.to_be_bytes().to_vec()),
                            mem.append(FILES[*f], b).map(|p| p.to_be_bytes().to_vec()),
                        ),
                        Op::ReadAt(f, pos, n) => {
                            let (mut x, mut y) = (vec![7u8; *n], vec![7u8; *n]);
                            let got = fs.read_at(FILES[*f], *pos, &mut x).map(|_| x);
                            let want = mem.read_at(FILES[*f], *pos, &mut y).map(|_| y);
                            (got, want)
                        }
                        Op::Sync(f) => (
                            fs.sync(FILES[*f]).map(|_| vec![]),
                            mem.sync(FILES[*f]).map(|_| vec![]),
                        ),
                        Op::Truncate(f, n) => (
                            fs.truncate(FILES[*f], *n).map(|_| vec![]),
                            mem.truncate(FILES[*f], *n).map(|_| vec![]),
                        ),
                        Op::Rename(a, b) => (
                            fs.rename(FILES[*a], FILES[*b]).map(|_| vec![]),
                            mem.rename(FILES[*a], FILES[*b]).map(|_| vec![]),
                        ),
                        Op::Remove(f) => (
                            fs.remove(FILES[*f]).map(|_| vec![]),
                            mem.remove(FILES[*f]).map(|_| vec![]),
                        ),
                        Op::Len(f) => (
                            fs.len(FILES[*f]).map(|n| n.to_be_bytes().to_vec()),
                            mem.len(FILES[*f]).map(|n| n.to_be_bytes().to_vec()),
                        ),
                        Op::List(d) => {
                            let got = fs.list(DIRS[*d]).expect("fs list");
                            let want = mem.list(DIRS[*d]).expect("mem list");
                            // Rule 1: an emptied directory may stay; anything else must match.
                            let extra: Vec<&String> =
                                got.iter().filter(|n| !want.contains(n)).collect();
                            for name in &extra {
                                let path = match DIRS[*d] {
                                    "" => name.to_string(),
                                    d => format!("{d}/{name}"),
                                };
                                proptest::prop_assert!(
                                    mem.list(&path).expect("mem list").is_empty()
                                        && !mem.exists(&path),
                                    "step {step}: list({:?}) shows {name:?}", DIRS[*d]
                                );
                            }
                            let got: Vec<String> =
                                got.into_iter().filter(|n| want.contains(n)).collect();
                            (Ok(got.join("/").into_bytes()), Ok(want.join("/").into_bytes()))
                        }
                        Op::WriteAtomic(f, b) => (
                            fs.write_file_atomic(FILES[*f], b).map(|_| vec![]),
                            mem.write_file_atomic(FILES[*f], b).map(|_| vec![]),
                        ),
                    };
                proptest::prop_assert_eq!(got, want, "step {}: {:?}", step, op);
                for file in FILES {
                    proptest::prop_assert_eq!(fs.exists(file), mem.exists(file), "{}", file);
                }
            }
            for file in FILES {
                if mem.exists(file) {
                    proptest::prop_assert_eq!(
                        fs.read_all(file).expect("fs read"),
                        mem.read_all(file).expect("mem read")
                    );
                }
            }
        }
    }

    #[test]
    fn os_errors_map_to_the_model() {
        let e = |code| map_err("p", io::Error::from_raw_os_error(code));
        assert_eq!(e(28), DiskError::NoSpace, "ENOSPC");
        assert_eq!(e(2), DiskError::NotFound("p".into()), "ENOENT");
        assert_eq!(e(17), DiskError::AlreadyExists("p".into()), "EEXIST");
        assert!(matches!(e(5), DiskError::Io { .. }), "EIO");
    }
}
