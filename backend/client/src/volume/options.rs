//! Mount options: what the caller asks for, and the volume options that narrow them.

use super::Inner;
use cairn_proto::map::VolumeMap;
use std::sync::atomic::Ordering;
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
    /// Quick-read: lookups ask the bricks for the content of regular files up to this
    /// size, and reads of it are answered from memory while the file's attributes are
    /// cached unchanged (0: off). Each lookup of such a file then reads it on the brick.
    pub quick_read: u32,
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
            quick_read: 0,
        }
    }
}

impl Inner {
    pub(super) fn apply_options(&self, m: &VolumeMap) {
        let mut ttl = self.opts.cache_timeout;
        if let Some(t) = m.option("performance.cache-timeout").and_then(|v| v.parse::<u64>().ok()) {
            ttl = ttl.min(Duration::from_secs(t));
        }
        self.attrs.set_ttl(ttl);
        self.xattrs.set_ttl(ttl);
        self.entries.set_ttl(ttl);
        self.complete.set_ttl(ttl);
        self.data.set_ttl(ttl);
        self.lockstate.set_ttl(ttl);
        self.searchers.set_ttl(ttl);
        let on = self.opts.write_behind && m.option("performance.write-behind") != Some("off");
        self.wb_on.store(on, Ordering::Release);
        if let Some(n) =
            m.option("performance.write-behind-window-size").and_then(|v| v.parse::<usize>().ok())
        {
            self.wb.set_limit(n.min(self.opts.write_behind_bytes.max(4096)));
        }
    }
}
