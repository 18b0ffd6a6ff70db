//! Human output, in the layout of the matching gluster commands.

use cairn_proto::map::{BrickState, VolumeMap};
use cairn_proto::mgmt::{HealBrickInfo, HealBrickStats, JoinTokenInfo, PeerInfo, VolumeStatusInfo};
use std::fmt::Write;

/// What gluster prints when there is nothing to show.
pub const NO_VOLUMES: &str = "No volumes present\n";

/// A 128-bit volume id in UUID layout (8-4-4-4-12 lowercase hex).
pub fn volume_id(id: u128) -> String {
    let h = format!("{id:032x}");
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// Parse the layout of [`volume_id`] back.
pub fn parse_volume_id(s: &str) -> Option<u128> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || s.len() != 36 {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok()
}

fn brick_count(v: &VolumeMap) -> usize {
    v.sets.iter().map(|s| s.bricks.len()).sum()
}

/// gluster's volume type names.
pub fn volume_type(v: &VolumeMap) -> &'static str {
    match (v.replica > 1, v.sets.len() > 1) {
        (false, _) => "Distribute",
        (true, false) => "Replicate",
        (true, true) => "Distributed-Replicate",
    }
}

/// `Number of Bricks:` as gluster writes it: `2 x 3 = 6` for replicated volumes.
pub fn bricks_line(v: &VolumeMap) -> String {
    let n = brick_count(v);
    if v.replica > 1 {
        format!("{} x {} = {n}", v.sets.len(), v.replica)
    } else {
        n.to_string()
    }
}

pub fn brick_state(s: BrickState) -> &'static str {
    match s {
        BrickState::Up => "up",
        BrickState::Healing => "healing",
        BrickState::Down => "down",
    }
}

/// `cairn volume info`.
pub fn volume_info(vols: &[VolumeMap]) -> String {
    if vols.is_empty() {
        return NO_VOLUMES.to_string();
    }
    let mut o = String::new();
    for v in vols {
        let _ = writeln!(o);
        let _ = writeln!(o, "Volume Name: {}", v.name);
        let _ = writeln!(o, "Type: {}", volume_type(v));
        let _ = writeln!(o, "Volume ID: {}", volume_id(v.id));
        let _ = writeln!(o, "Status: {}", v.status);
        let _ = writeln!(o, "Number of Bricks: {}", bricks_line(v));
        let _ = writeln!(o, "Transport-type: tcp");
        if v.rebalancing {
            // No rebalance runs yet (docs/rebalance.md): the layout changed and files
            // whose names hash to another set are found there by looking everywhere.
            let _ = writeln!(o, "Rebalance: needed (layout epoch {})", v.layout_epoch);
        }
        let _ = writeln!(o, "Bricks:");
        for (i, b) in v.sets.iter().flat_map(|s| s.bricks.iter()).enumerate() {
            let _ = writeln!(o, "Brick{}: {}:{}", i + 1, b.node, b.path);
        }
        let _ = writeln!(o, "Options Reconfigured:");
        for (k, val) in &v.options {
            let _ = writeln!(o, "{k}: {val}");
        }
    }
    o
}

fn na_or<T: PartialEq + Default + ToString>(v: T) -> String {
    if v == T::default() {
        "N/A".to_string()
    } else {
        v.to_string()
    }
}

/// Left-aligned columns, two spaces apart, with a dashed rule under the header.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, c) in cells.enumerate() {
            if i + 1 == width.len() {
                s.push_str(c);
            } else {
                let _ = write!(s, "{c:<w$}  ", w = width[i]);
            }
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    let mut o = line(&mut header.iter().copied());
    let total = width.iter().sum::<usize>() + 2 * (width.len() - 1);
    o.push_str(&"-".repeat(total));
    o.push('\n');
    for r in rows {
        o.push_str(&line(&mut r.iter().map(|s| s.as_str())));
    }
    o
}

/// `cairn volume status`: one table per volume.
pub fn volume_status(vols: &[VolumeStatusInfo]) -> String {
    if vols.is_empty() {
        return NO_VOLUMES.to_string();
    }
    let mut o = String::new();
    for (i, v) in vols.iter().enumerate() {
        if i > 0 {
            o.push('\n');
        }
        let _ = writeln!(o, "Status of volume: {} ({})", v.name, v.status);
        let rows: Vec<Vec<String>> = v
            .bricks
            .iter()
            .map(|b| {
                vec![
                    format!("Brick {}:{}", b.node, b.path),
                    na_or(b.port),
                    if b.online { "Y" } else { "N" }.to_string(),
                    na_or(b.pid),
                    b.pending_heal.to_string(),
                    b.state.clone(),
                ]
            })
            .collect();
        o.push_str(&table(&["Brick", "Port", "Online", "Pid", "Heal", "State"], &rows));
    }
    o
}

fn peer_state(p: &PeerInfo) -> &'static str {
    if p.connected {
        "Connected"
    } else {
        "Disconnected"
    }
}

/// `cairn peer status`: the other nodes (the answering node is left out, as in gluster).
pub fn peer_status(peers: &[PeerInfo]) -> String {
    let others: Vec<&PeerInfo> = peers.iter().filter(|p| !p.local).collect();
    let mut o = format!("Number of Peers: {}\n", others.len());
    for p in others {
        let _ = writeln!(o);
        let _ = writeln!(o, "Hostname: {}", p.name);
        let _ = writeln!(o, "Address: {}", p.addr);
        let _ = writeln!(o, "Uuid: {}", p.uuid);
        let _ = writeln!(o, "State: Peer in Cluster ({})", peer_state(p));
    }
    o
}

/// `cairn pool list`: every node, the answering one shown as `localhost` like gluster.
pub fn pool_list(peers: &[PeerInfo]) -> String {
    let rows: Vec<Vec<String>> = peers
        .iter()
        .map(|p| {
            let host = if p.local { format!("{} (localhost)", p.name) } else { p.name.clone() };
            vec![p.uuid.clone(), host, p.addr.clone(), peer_state(p).to_string()]
        })
        .collect();
    table(&["UUID", "Hostname", "Address", "State"], &rows)
}

/// `cairn volume list`.
pub fn volume_list(names: &[String]) -> String {
    if names.is_empty() {
        return "No volumes present in cluster\n".to_string();
    }
    names.iter().map(|n| format!("{n}\n")).collect()
}

/// `cairn volume heal NAME info`, per brick as gluster prints it.
pub fn heal_info(bricks: &[HealBrickInfo]) -> String {
    let mut o = String::new();
    for (i, b) in bricks.iter().enumerate() {
        if i > 0 {
            o.push('\n');
        }
        let _ = writeln!(o, "Brick {}:{}", b.node, b.path);
        for id in &b.pending {
            let _ = writeln!(o, "<id:{id}>");
        }
        let status = if b.online { "Connected" } else { "Transport endpoint is not connected" };
        let _ = writeln!(o, "Status: {status}");
        if b.online {
            let _ = writeln!(o, "Number of entries: {}", b.pending.len());
        } else {
            let _ = writeln!(o, "Number of entries: -");
        }
    }
    o
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC` (past the year 9999: the seconds as they are).
pub fn utc(secs: u64) -> String {
    let fmt =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(fmt).ok())
        .unwrap_or_else(|| format!("{secs} s after 1970-01-01 UTC"))
}

/// `cairn peer token list`: never the secret.
pub fn join_tokens(tokens: &[JoinTokenInfo]) -> String {
    if tokens.is_empty() {
        return "No join tokens\n".into();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let state = match (t.revoked_at, t.used_at) {
                (Some(at), _) => format!("revoked {}", utc(at)),
                (None, Some(at)) => {
                    format!("used {} by {}", utc(at), t.used_by.as_deref().unwrap_or("?"))
                }
                (None, None) if t.expires <= now => "expired".into(),
                (None, None) => "valid".into(),
            };
            vec![t.id.clone(), utc(t.created), utc(t.expires), state]
        })
        .collect();
    table(&["ID", "Created", "Expires", "State"], &rows)
}

/// `cairn client certificate list`.
pub fn certs(certs: &[cairn_proto::mgmt::CertInfo]) -> String {
    if certs.is_empty() {
        return "No certificates recorded\n".into();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let rows: Vec<Vec<String>> = certs
        .iter()
        .map(|c| {
            let mut limits = c.volumes.as_ref().map(|v| v.join(",")).unwrap_or_else(|| "-".into());
            if c.read_only {
                limits.push_str(" ro");
            }
            let state = match (&c.revoked_at, &c.revoked_by) {
                (Some(at), by) => {
                    format!("revoked {} by {}", utc(*at), by.as_deref().unwrap_or("?"))
                }
                (None, _) if c.expires <= now => "expired".into(),
                (None, _) => "valid".into(),
            };
            let name = if c.name.is_empty() { "?".into() } else { c.name.clone() };
            let role = if c.role.is_empty() { "?".into() } else { c.role.clone() };
            vec![c.serial.clone(), name, role, limits, utc(c.expires), state]
        })
        .collect();
    table(&["Serial", "Name", "Role", "Volumes", "Expires", "State"], &rows)
}

/// `cairn audit log`: one line per record: time, who, what and arguments, result.
pub fn audit(lines: &[String]) -> String {
    let mut o = String::new();
    for l in lines {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else {
            let _ = writeln!(o, "{l}");
            continue;
        };
        let s = |v: &serde_json::Value| v.as_str().unwrap_or("?").to_string();
        let who = &v["who"];
        let who = match who.get("principal").and_then(|p| p.as_str()) {
            Some(p) => p.to_string(),
            None => format!("{} ({})", s(&who["addr"]), s(&who["client"])),
        };
        let result = if v["result"]["ok"].as_bool() == Some(true) {
            "ok".to_string()
        } else {
            format!("{}: {}", s(&v["result"]["errno"]), s(&v["result"]["message"]))
        };
        let _ = writeln!(o, "{} {who} {} {} -> {result}", s(&v["time"]), s(&v["what"]), v["args"]);
    }
    o
}

/// `cairn volume heal NAME statistics`, in the layout of gluster's.
pub fn heal_statistics(volume: &str, bricks: &[HealBrickStats]) -> String {
    let mut o = format!("Gathering crawl statistics on volume {volume} has been successful\n");
    o.push_str("------------------------------------------------\n");
    for b in bricks {
        let _ = writeln!(o);
        let _ = writeln!(o, "Crawl statistics for brick no {}", b.index);
        let _ = writeln!(o, "Hostname of brick {}", b.node);
        let _ = writeln!(o, "Brick path {}", b.path);
        if !b.online {
            let _ = writeln!(o, "Status: Transport endpoint is not connected");
            continue;
        }
        let _ = writeln!(o, "Status: Connected");
        let _ = writeln!(o, "State: {}", b.state);
        if b.in_progress {
            let _ = writeln!(o, "Crawl is in progress");
        }
        if b.full_pending {
            let _ = writeln!(o, "Full crawl: pending");
        }
        let _ = writeln!(o, "Number of entries pending for other bricks: {}", b.pending);
        if b.crawls.is_empty() {
            let _ = writeln!(o, "No crawl since the brick was opened");
        }
        for c in &b.crawls {
            let _ = writeln!(o);
            let _ = writeln!(o, "Starting time of crawl: {}", utc(c.started));
            match c.ended {
                Some(e) => {
                    let _ = writeln!(o, "Ending time of crawl: {}", utc(e));
                }
                None => {
                    let _ = writeln!(o, "Ending time of crawl: In progress");
                }
            }
            let _ = writeln!(o, "Type of crawl: {}", c.kind.to_uppercase());
            let _ = writeln!(o, "No. of entries scanned: {}", c.scanned);
            let _ = writeln!(o, "No. of entries healed: {}", c.healed);
            let _ = writeln!(o, "No. of heal failed entries: {}", c.failed);
            let _ = writeln!(o, "Data copied: {} bytes", c.bytes);
            if c.bandwidth > 0 {
                let _ = writeln!(
                    o,
                    "Bandwidth limit (cluster.heal-bandwidth): {} bytes/s, waited {}.{:03} s",
                    c.bandwidth,
                    c.throttled_ms / 1000,
                    c.throttled_ms % 1000
                );
            }
            if c.kind == "full" {
                let _ = writeln!(o, "Directories crawled: {}, left: {}", c.dirs_done, c.dirs_left);
            }
            if c.resumed_after > 0 {
                let _ = writeln!(
                    o,
                    "Resumed from its saved position after {} directories",
                    c.resumed_after
                );
            }
        }
    }
    o
}

#[cfg(test)]
pub(crate) mod fixtures {
    use cairn_proto::map::{BrickInfo, BrickState, ReplicaSet, VolumeMap, VolumeStatus};
    use cairn_proto::mgmt::{
        BrickStatus, CrawlInfo, HealBrickInfo, HealBrickStats, PeerInfo, VolumeStatusInfo,
    };

    fn brick(index: u32, node: &str, path: &str, state: BrickState) -> BrickInfo {
        BrickInfo {
            index,
            node: node.into(),
            addr: format!("{node}:7420"),
            path: path.into(),
            state,
        }
    }

    /// A started 2 x 2 volume with two options.
    pub fn dist_rep() -> VolumeMap {
        VolumeMap {
            name: "vol0".into(),
            id: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            epoch: 7,
            layout_epoch: 1,
            rebalancing: false,
            layout: vec![],
            status: VolumeStatus::Started,
            replica: 2,
            sets: vec![
                ReplicaSet {
                    id: 1,
                    bricks: vec![
                        brick(0, "node1", "/bricks/b1", BrickState::Up),
                        brick(1, "node2", "/bricks/b1", BrickState::Healing),
                    ],
                },
                ReplicaSet {
                    id: 2,
                    bricks: vec![
                        brick(2, "node1", "/bricks/b2", BrickState::Up),
                        brick(3, "node2", "/bricks/b2", BrickState::Down),
                    ],
                },
            ],
            options: [
                ("network.ping-timeout".to_string(), "10".to_string()),
                ("performance.cache-size".to_string(), "256MB".to_string()),
            ]
            .into_iter()
            .collect(),
        }
    }

    /// A created, single-brick volume without options.
    pub fn single() -> VolumeMap {
        VolumeMap {
            name: "scratch".into(),
            id: 42,
            epoch: 1,
            layout_epoch: 0,
            layout: vec![],
            rebalancing: false,
            status: VolumeStatus::Created,
            replica: 1,
            sets: vec![ReplicaSet {
                id: 1,
                bricks: vec![brick(0, "node3", "/srv/scratch", BrickState::Down)],
            }],
            options: Default::default(),
        }
    }

    fn bs(index: u32, node: &str, path: &str, online: bool, state: &str) -> BrickStatus {
        BrickStatus {
            index,
            node: node.into(),
            path: path.into(),
            online,
            state: state.into(),
            port: if online { 7420 } else { 0 },
            pid: if online { 3100 + index } else { 0 },
            pending_heal: if index == 0 { 12 } else { 0 },
            total_bytes: 100 << 30,
            free_bytes: 60 << 30,
        }
    }

    pub fn status() -> Vec<VolumeStatusInfo> {
        vec![
            VolumeStatusInfo {
                name: "vol0".into(),
                status: "Started".into(),
                bricks: vec![
                    bs(0, "node1", "/bricks/b1", true, "up"),
                    bs(1, "node2", "/bricks/b1", true, "healing"),
                    bs(2, "node1", "/bricks/b2", true, "up"),
                    bs(3, "node2", "/bricks/b2", false, "down"),
                ],
            },
            VolumeStatusInfo {
                name: "scratch".into(),
                status: "Created".into(),
                bricks: vec![bs(1, "node3", "/srv/scratch", false, "down")],
            },
        ]
    }

    pub fn peers() -> Vec<PeerInfo> {
        vec![
            PeerInfo {
                name: "node1".into(),
                addr: "10.0.0.1:7420".into(),
                uuid: "6f1c7f4e-0b3c-4d51-9a7e-1d2f3a4b5c6d".into(),
                connected: true,
                local: true,
            },
            PeerInfo {
                name: "node2".into(),
                addr: "10.0.0.2:7420".into(),
                uuid: "a2b3c4d5-e6f7-4890-a1b2-c3d4e5f60718".into(),
                connected: true,
                local: false,
            },
            PeerInfo {
                name: "node3".into(),
                addr: "10.0.0.3:7420".into(),
                uuid: "0e0e0e0e-1111-4222-8333-444455556666".into(),
                connected: false,
                local: false,
            },
        ]
    }

    pub fn heal_stats() -> Vec<HealBrickStats> {
        vec![
            HealBrickStats {
                index: 0,
                node: "node1".into(),
                path: "/bricks/b1".into(),
                online: true,
                state: "healing".into(),
                in_progress: true,
                full_pending: true,
                pending: 0,
                crawls: vec![
                    CrawlInfo {
                        kind: "full".into(),
                        started: 1_700_000_000,
                        ended: None,
                        scanned: 120,
                        healed: 100,
                        failed: 0,
                        bytes: 1 << 20,
                        bandwidth: 512 << 10,
                        throttled_ms: 1500,
                        dirs_done: 7,
                        dirs_left: 3,
                        resumed_after: 4,
                    },
                    CrawlInfo {
                        kind: "index".into(),
                        started: 1_699_999_990,
                        ended: Some(1_699_999_991),
                        scanned: 3,
                        healed: 2,
                        failed: 1,
                        ..Default::default()
                    },
                ],
            },
            HealBrickStats {
                index: 1,
                node: "node2".into(),
                path: "/bricks/b1".into(),
                online: false,
                state: "down".into(),
                in_progress: false,
                full_pending: false,
                pending: 0,
                crawls: vec![],
            },
        ]
    }

    pub fn heal() -> Vec<HealBrickInfo> {
        vec![
            HealBrickInfo {
                index: 0,
                node: "node1".into(),
                path: "/bricks/b1".into(),
                online: true,
                pending: vec![
                    "00000001000000000000000000000abc".into(),
                    "00000001000000000000000000000def".into(),
                ],
            },
            HealBrickInfo {
                index: 1,
                node: "node2".into(),
                path: "/bricks/b1".into(),
                online: false,
                pending: vec![],
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn volume_id_layout() {
        let id = 0x0123_4567_89ab_cdef_0011_2233_4455_6677u128;
        assert_eq!(volume_id(id), "01234567-89ab-cdef-0011-223344556677");
        assert_eq!(parse_volume_id(&volume_id(id)), Some(id));
        assert_eq!(parse_volume_id(&volume_id(42)), Some(42));
        assert_eq!(parse_volume_id("0123456789abcdef0011223344556677"), None);
        assert_eq!(parse_volume_id("zz"), None);
    }

    #[test]
    fn info_golden() {
        let expected = "
Volume Name: vol0
Type: Distributed-Replicate
Volume ID: 01234567-89ab-cdef-0011-223344556677
Status: Started
Number of Bricks: 2 x 2 = 4
Transport-type: tcp
Bricks:
Brick1: node1:/bricks/b1
Brick2: node2:/bricks/b1
Brick3: node1:/bricks/b2
Brick4: node2:/bricks/b2
Options Reconfigured:
network.ping-timeout: 10
performance.cache-size: 256MB

Volume Name: scratch
Type: Distribute
Volume ID: 00000000-0000-0000-0000-00000000002a
Status: Created
Number of Bricks: 1
Transport-type: tcp
Bricks:
Brick1: node3:/srv/scratch
Options Reconfigured:
";
        assert_eq!(volume_info(&[dist_rep(), single()]), expected);
        assert_eq!(volume_info(&[]), "No volumes present\n");
        let mut grown = single();
        grown.layout_epoch = 2;
        grown.rebalancing = true;
        assert!(volume_info(&[grown])
            .contains("Transport-type: tcp\nRebalance: needed (layout epoch 2)\nBricks:\n"));
    }

    #[test]
    fn volume_types() {
        let mut v = dist_rep();
        assert_eq!(volume_type(&v), "Distributed-Replicate");
        v.sets.truncate(1);
        assert_eq!(volume_type(&v), "Replicate");
        assert_eq!(bricks_line(&v), "1 x 2 = 2");
        assert_eq!(volume_type(&single()), "Distribute");
        assert_eq!(bricks_line(&single()), "1");
    }

    #[test]
    fn status_golden() {
        let expected = "\
Status of volume: vol0 (Started)
Brick                   Port  Online  Pid   Heal  State
---------------------------------------------------------
Brick node1:/bricks/b1  7420  Y       3100  12    up
Brick node2:/bricks/b1  7420  Y       3101  0     healing
Brick node1:/bricks/b2  7420  Y       3102  0     up
Brick node2:/bricks/b2  N/A   N       N/A   0     down

Status of volume: scratch (Created)
Brick                     Port  Online  Pid  Heal  State
--------------------------------------------------------
Brick node3:/srv/scratch  N/A   N       N/A  0     down
";
        assert_eq!(volume_status(&status()), expected);
        assert_eq!(volume_status(&[]), "No volumes present\n");
    }

    #[test]
    fn peer_status_golden() {
        let expected = "\
Number of Peers: 2

Hostname: node2
Address: 10.0.0.2:7420
Uuid: a2b3c4d5-e6f7-4890-a1b2-c3d4e5f60718
State: Peer in Cluster (Connected)

Hostname: node3
Address: 10.0.0.3:7420
Uuid: 0e0e0e0e-1111-4222-8333-444455556666
State: Peer in Cluster (Disconnected)
";
        assert_eq!(peer_status(&peers()), expected);
        assert_eq!(peer_status(&peers()[..1]), "Number of Peers: 0\n");
    }

    #[test]
    fn pool_list_golden() {
        let expected = "\
UUID                                  Hostname           Address        State
------------------------------------------------------------------------------------
6f1c7f4e-0b3c-4d51-9a7e-1d2f3a4b5c6d  node1 (localhost)  10.0.0.1:7420  Connected
a2b3c4d5-e6f7-4890-a1b2-c3d4e5f60718  node2              10.0.0.2:7420  Connected
0e0e0e0e-1111-4222-8333-444455556666  node3              10.0.0.3:7420  Disconnected
";
        assert_eq!(pool_list(&peers()), expected);
    }

    #[test]
    fn heal_statistics_golden() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(u64::MAX), "18446744073709551615 s after 1970-01-01 UTC");
        let expected = "\
Gathering crawl statistics on volume vol0 has been successful
------------------------------------------------

Crawl statistics for brick no 0
Hostname of brick node1
Brick path /bricks/b1
Status: Connected
State: healing
Crawl is in progress
Full crawl: pending
Number of entries pending for other bricks: 0

Starting time of crawl: 2023-11-14 22:13:20 UTC
Ending time of crawl: In progress
Type of crawl: FULL
No. of entries scanned: 120
No. of entries healed: 100
No. of heal failed entries: 0
Data copied: 1048576 bytes
Bandwidth limit (cluster.heal-bandwidth): 524288 bytes/s, waited 1.500 s
Directories crawled: 7, left: 3
Resumed from its saved position after 4 directories

Starting time of crawl: 2023-11-14 22:13:10 UTC
Ending time of crawl: 2023-11-14 22:13:11 UTC
Type of crawl: INDEX
No. of entries scanned: 3
No. of entries healed: 2
No. of heal failed entries: 1
Data copied: 0 bytes

Crawl statistics for brick no 1
Hostname of brick node2
Brick path /bricks/b1
Status: Transport endpoint is not connected
";
        assert_eq!(heal_statistics("vol0", &heal_stats()), expected);
    }

    #[test]
    fn list_and_heal_golden() {
        assert_eq!(volume_list(&["a".into(), "b".into()]), "a\nb\n");
        assert_eq!(volume_list(&[]), "No volumes present in cluster\n");
        let expected = "\
Brick node1:/bricks/b1
<id:00000001000000000000000000000abc>
<id:00000001000000000000000000000def>
Status: Connected
Number of entries: 2

Brick node2:/bricks/b1
Status: Transport endpoint is not connected
Number of entries: -
";
        assert_eq!(heal_info(&heal()), expected);
    }
}
