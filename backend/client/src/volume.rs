use crate::Result;
use bytes::Bytes;
use cairn_proto::map::VolumeMap;
use cairn_proto::*;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct MountOptions {
    /// `host:port` of one or more `cairnd`s to fetch the map from.
    pub servers: Vec<String>,
    pub volume: String,
    /// Label in the bricks' logs, e.g. `mount.cairn@host`.
    pub client_name: String,
    /// Coalesce small sequential writes (flushed on fsync, flush, release, or a
    /// conflicting access).
    pub write_behind: bool,
    /// Bytes buffered per file before a flush is forced.
    pub write_behind_bytes: usize,
    /// Longest time cached attributes and entries are trusted without a lease recall.
    pub cache_timeout: Duration,
    pub connect_timeout: Duration,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            servers: vec![format!("127.0.0.1:{}", cairn_proto::DEFAULT_PORT)],
            volume: String::new(),
            client_name: "libcairn".into(),
            write_behind: true,
            write_behind_bytes: 1 << 20,
            cache_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Counters of backend round trips, per operation kind (for benchmarks and `profile`).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Total requests sent to bricks.
    pub round_trips: u64,
    pub by_op: Vec<(&'static str, u64)>,
}

/// Called when a brick recalls a lease on `id` (`entries`: its directory entries too).
pub type InvalidateFn = Arc<dyn Fn(Id, bool) + Send + Sync>;

pub struct Volume {
    _todo: (),
}

#[allow(unused_variables)]
impl Volume {
    pub async fn mount(opts: MountOptions) -> Result<Arc<Volume>> {
        todo!()
    }
    /// Flush everything buffered and close all connections.
    pub async fn unmount(&self) -> Result<()> {
        todo!()
    }
    pub fn map(&self) -> Arc<VolumeMap> {
        todo!()
    }
    pub fn volume_id(&self) -> u128 {
        todo!()
    }
    pub fn stats(&self) -> Stats {
        todo!()
    }
    /// Register the upcall for lease recalls (Ganesha's and Samba's cache invalidation).
    pub fn on_invalidate(&self, f: InvalidateFn) {
        todo!()
    }

    pub async fn lookup(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<Attr> {
        todo!()
    }
    /// Resolve a `/`-separated path relative to the volume root (no symlinks followed):
    /// the directory chain on one brick, then the entry on its hashed set.
    pub async fn resolve(&self, c: &Creds, path: &[u8]) -> Result<Attr> {
        todo!()
    }
    pub async fn getattr(&self, c: &Creds, id: Id) -> Result<Attr> {
        todo!()
    }
    pub async fn setattr(&self, c: &Creds, id: Id, set: &SetAttr) -> Result<Attr> {
        todo!()
    }
    pub async fn create(&self, c: &Creds, dir: Id, name: &[u8], perm: u32, exclusive: bool) -> Result<Attr> {
        todo!()
    }
    pub async fn mknod(&self, c: &Creds, dir: Id, name: &[u8], kind: FileType, perm: u32, rdev: u64) -> Result<Attr> {
        todo!()
    }
    pub async fn mkdir(&self, c: &Creds, dir: Id, name: &[u8], perm: u32) -> Result<Attr> {
        todo!()
    }
    pub async fn symlink(&self, c: &Creds, dir: Id, name: &[u8], target: &[u8]) -> Result<Attr> {
        todo!()
    }
    pub async fn readlink(&self, c: &Creds, id: Id) -> Result<Vec<u8>> {
        todo!()
    }
    pub async fn link(&self, c: &Creds, id: Id, dir: Id, name: &[u8]) -> Result<Attr> {
        todo!()
    }
    pub async fn unlink(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<()> {
        todo!()
    }
    pub async fn rmdir(&self, c: &Creds, dir: Id, name: &[u8]) -> Result<()> {
        todo!()
    }
    pub async fn rename(&self, c: &Creds, src_dir: Id, src: &[u8], dst_dir: Id, dst: &[u8], flags: u32) -> Result<()> {
        todo!()
    }
    /// Note an open (keeps an unlinked file readable until `release`).
    pub async fn open(&self, c: &Creds, id: Id) -> Result<()> {
        todo!()
    }
    /// Flush write-behind for `id` and drop the open; returns any deferred write error.
    pub async fn release(&self, id: Id) -> Result<()> {
        todo!()
    }
    /// Read up to `len` bytes; the bool is true at end of file.
    pub async fn read(&self, c: &Creds, id: Id, offset: u64, len: u32) -> Result<(Bytes, bool)> {
        todo!()
    }
    /// Write; buffered by write-behind when enabled (an error surfaces on a later write,
    /// flush, fsync or release of the same file).
    pub async fn write(&self, c: &Creds, id: Id, offset: u64, data: Bytes) -> Result<u32> {
        todo!()
    }
    /// Write through to every live replica before returning (NFS FILE_SYNC, SCSI FUA
    /// also call `fsync`).
    pub async fn write_through(&self, c: &Creds, id: Id, offset: u64, data: Bytes) -> Result<u32> {
        todo!()
    }
    /// Send buffered writes of `id` to the bricks; returns any deferred error.
    pub async fn flush(&self, id: Id) -> Result<()> {
        todo!()
    }
    pub async fn fsync(&self, c: &Creds, id: Id, datasync: bool) -> Result<()> {
        todo!()
    }
    pub async fn fallocate(&self, c: &Creds, id: Id, mode: u32, offset: u64, len: u64) -> Result<()> {
        todo!()
    }
    pub async fn seek(&self, c: &Creds, id: Id, offset: u64, whence: SeekWhence) -> Result<u64> {
        todo!()
    }
    /// Atomically, on the brick: if the data at `offset` equals `cmp`, write `data`
    /// (same length). EILSEQ (`Errno::EMISCOMPARE`) when it differs.
    pub async fn compare_and_write(&self, c: &Creds, id: Id, offset: u64, cmp: Bytes, data: Bytes) -> Result<()> {
        todo!()
    }
    /// List a directory from `cookie` (0 = start). Cookies are stable across calls and
    /// changes; the bool is true at the end.
    pub async fn readdir(&self, c: &Creds, dir: Id, cookie: u64, max: u32, plus: bool) -> Result<(Vec<DirEntry>, bool)> {
        todo!()
    }
    pub async fn getxattr(&self, c: &Creds, id: Id, name: &[u8]) -> Result<Vec<u8>> {
        todo!()
    }
    pub async fn setxattr(&self, c: &Creds, id: Id, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        todo!()
    }
    pub async fn listxattr(&self, c: &Creds, id: Id) -> Result<Vec<Vec<u8>>> {
        todo!()
    }
    pub async fn removexattr(&self, c: &Creds, id: Id, name: &[u8]) -> Result<()> {
        todo!()
    }
    pub async fn statfs(&self, c: &Creds) -> Result<StatFs> {
        todo!()
    }
    /// Set or release a POSIX byte-range lock; `wait` blocks until granted.
    pub async fn setlock(&self, c: &Creds, id: Id, lock: Lock, wait: bool) -> Result<()> {
        todo!()
    }
    /// The first conflicting lock, if any.
    pub async fn getlock(&self, c: &Creds, id: Id, lock: Lock) -> Result<Option<Lock>> {
        todo!()
    }
}
