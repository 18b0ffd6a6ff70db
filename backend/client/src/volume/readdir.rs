//! Directory listing over every replica set, with cookies that name the set.

use super::{unexpected, Target, Volume};
use crate::Result;
use bytes::Bytes;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Creds, DirEntry, Errno, FileType, Id};

impl Volume {
    /// List a directory from `cookie` (0 = start). Cookies are stable across calls and
    /// changes; the bool is true at the end.
    pub async fn readdir(
        &self,
        c: &Creds,
        dir: Id,
        cookie: u64,
        max: u32,
        plus: bool,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let i = &self.inner;
        let sets = i.set_ids();
        let (mut idx, mut sub) = if cookie == 0 {
            (0usize, 0u64)
        } else {
            (((cookie >> 56) as usize).saturating_sub(1), cookie & ((1 << 56) - 1))
        };
        if idx >= sets.len() {
            return Ok((vec![], true));
        }
        let max = max.clamp(1, 4096);
        let mut out = vec![];
        while idx < sets.len() && out.len() < max as usize {
            let want = max - out.len() as u32;
            let op = Op::ReadDir { dir, cookie: sub, max: want, plus };
            let found = i.begin_tokens();
            let r = i.call(Target { set: sets[idx], key: dir }, c, op, Bytes::new()).await;
            let (entries, eof) = match r {
                Ok((Reply::Dir { entries, eof }, _)) => (entries, eof),
                // A set added to the volume that does not have this directory yet (add-brick
                // makes every directory on it; one made meanwhile may be late): it holds no
                // entry of it. The first set always has it.
                Err(e) if idx != 0 && e.errno == Errno::ESTALE && grown(&i.map(), sets[idx]) => {
                    (vec![], true)
                }
                Err(e) => return Err(e),
                Ok((other, _)) => return Err(unexpected("readdir", &other)),
            };
            let last_cookie = entries.last().map(|e| e.cookie);
            for mut e in entries {
                // Directories exist on every set: list them from the first one only.
                if e.kind == FileType::Directory && idx != 0 {
                    continue;
                }
                if let Some(a) = &e.attr {
                    i.remember_found(found, sets[idx], dir, &e.name, a);
                }
                e.cookie = ((idx as u64 + 1) << 56) | (e.cookie & ((1 << 56) - 1));
                out.push(e);
            }
            if eof {
                idx += 1;
                sub = 0;
            } else if let Some(lc) = last_cookie {
                sub = lc & ((1 << 56) - 1);
                if out.is_empty() {
                    continue;
                }
                break;
            }
        }
        Ok((out, idx >= sets.len()))
    }
}

/// Whether set `set` may lack a directory: the volume's layout changed (`rebalancing`), or
/// the set is not in the layout yet (add-brick is making its directories).
fn grown(map: &cairn_proto::map::VolumeMap, set: u32) -> bool {
    map.rebalancing || (!map.layout.is_empty() && !map.layout.contains(&set))
}
