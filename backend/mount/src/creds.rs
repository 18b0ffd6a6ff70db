//! Caller credentials of a FUSE request.
//!
//! The kernel tells us uid, gid and pid; supplementary groups come from
//! `/proc/<pid>/task/<pid>/status` ("Groups:"), cached per pid for a short time because a
//! busy process sends many requests and its groups rarely change.

use cairn_proto::Creds;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(1);
const MAX_ENTRIES: usize = 4096;

#[derive(Default)]
pub struct GroupCache {
    map: Mutex<HashMap<u32, (Instant, Vec<u32>)>>,
}

impl GroupCache {
    pub fn creds(&self, uid: u32, gid: u32, pid: u32) -> Creds {
        Creds { uid, gid, groups: self.groups(pid) }
    }

    fn groups(&self, pid: u32) -> Vec<u32> {
        // pid 0: a request the kernel makes on its own behalf (writeback, release).
        if pid == 0 {
            return Vec::new();
        }
        let now = Instant::now();
        if let Some((t, g)) = self.map.lock().get(&pid) {
            if now.duration_since(*t) < TTL {
                return g.clone();
            }
        }
        let groups = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status"))
            .map(|s| parse_groups(&s))
            .unwrap_or_default();
        let mut m = self.map.lock();
        if m.len() >= MAX_ENTRIES {
            m.retain(|_, (t, _)| now.duration_since(*t) < TTL);
        }
        m.insert(pid, (now, groups.clone()));
        groups
    }
}

/// The numbers on the `Groups:` line of a `/proc/PID/status` file.
pub fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|rest| rest.split_whitespace().filter_map(|g| g.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups_line() {
        let s = "Name:\tbash\nUid:\t0\t0\t0\t0\nGroups:\t4 24 27 1000 \nNgid:\t0\n";
        assert_eq!(parse_groups(s), vec![4, 24, 27, 1000]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("Name: x\n"), Vec::<u32>::new());
    }

    #[test]
    fn reads_own_groups() {
        let pid = std::process::id();
        let want = parse_groups(
            &std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status")).unwrap(),
        );
        let c = GroupCache::default().creds(5, 6, pid);
        assert_eq!((c.uid, c.gid), (5, 6));
        assert_eq!(c.groups, want);
        assert!(GroupCache::default().creds(1, 1, 0).groups.is_empty());
    }
}
