//! Property tests ("fuzzing") of the gateway specs: the parsers of user input never panic
//! and give a message, and every export or share that `validate()` accepts renders to
//! exactly the intended Ganesha EXPORT block / smb.conf section, whatever its names, paths,
//! clients and users hold (no config injection). The rendered text is read back with small
//! parsers that follow Ganesha's lexer (src/config_parsing/conf_lex.l) and Samba's ini
//! reader (lib/util/tini.c); `smb_conf_testparm` also asks the real `testparm` when it is
//! installed.
//!
//! Default: 2048 cases for each render property, 1024 for each parser (about 5 s in all in
//! a debug build on 2 cores).
//! Long runs: `PROPTEST_CASES=100000 cargo test -p cairn-gateway --test render_fuzz`.

use cairn_gateway::iscsi::{self, Acl, IscsiLun, IscsiTarget, TargetLun};
use cairn_gateway::nfs::{self, Access, NfsExport, Squash};
use cairn_gateway::smb::{self, SmbShare};
use proptest::prelude::*;

// --- input generators ---------------------------------------------------------------------

/// Characters that break config syntaxes, plus harmless ones, so that short strings mix both.
const NASTY: &[char] = &[
    '"', '\'', ';', '{', '}', '[', ']', '=', '#', ',', '\\', '%', '\n', '\r', '\t', '\0', ' ', ' ',
    '/', '/', '.', '@', '*', '?', ':', '$', '-', '_', '+', '&', '\u{85}', '\u{a0}', '\u{2028}',
    'é', '\u{feff}',
];

fn nasty_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => prop::sample::select(&b"abcxyzABZ0189"[..]).prop_map(char::from),
        2 => prop::sample::select(NASTY),
        1 => any::<char>(),
    ]
}

/// Mostly short strings of `nasty_char`s, sometimes long ones.
fn nasty() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::collection::vec(nasty_char(), 0..14).prop_map(String::from_iter),
        1 => prop::collection::vec(nasty_char(), 200..400).prop_map(String::from_iter),
    ]
}

/// Characters and pairs with a meaning in Ganesha's or smb.conf's syntax.
const SYNTAX: &[&str] = &[
    "\"", "\\", ";", "{", "}", "[", "]", "=", "#", ",", "%", " ", "  ", "\\ ", "\n", "\0", "/", "'",
];

/// A valid value, a nasty one, or a valid one with a syntax character before, after or
/// inside it (where `\\`, a space or a quote at the end of a value matters).
fn either(valid: &'static [&'static str]) -> impl Strategy<Value = String> {
    let ok = || prop::sample::select(valid).prop_map(String::from);
    let syn = || prop::sample::select(SYNTAX);
    prop_oneof![
        1 => ok(),
        2 => nasty(),
        2 => (ok(), syn()).prop_map(|(a, c)| format!("{a}{c}")),
        1 => (syn(), ok()).prop_map(|(c, a)| format!("{c}{a}")),
        1 => (ok(), syn(), ok()).prop_map(|(a, c, b)| format!("{a}{c}{b}")),
        1 => (ok(), nasty()).prop_map(|(a, b)| a + &b),
    ]
}

const VOLUMES: &[&str] = &["vol0", "v-1", "1vol", "-vol", "a_b"];
const SUBDIRS: &[&str] = &["/", "/a", "/projects/a", "/a b"];
const CLIENTS: &[&str] = &[
    "*",
    "10.0.0.0/24",
    "10.0.0.0/0",
    "fd00::/64",
    "fd00::/120",
    "::1",
    "host.lan",
    "1host.lan",
    "*.lan",
    "@ops",
    "@1x",
    "10.0.0.0/08",
    "10.0.0.*",
];
const SHARE_NAMES: &[&str] = &["projects", "Team Share", "a.b-c_d$"];
const USERS: &[&str] = &["alice", "@staff", "DOM\\bob", "+grp"];
const COMMENTS: &[&str] = &["", "Project files", "a = b"];

/// Absolute paths with odd bytes inside, or anything.
fn subdir() -> impl Strategy<Value = String> {
    prop_oneof![either(SUBDIRS), nasty().prop_map(|s| format!("/{s}"))]
}

/// Exports with every field drawn from [`either`], or (most of the time) a valid export with
/// one field nasty, so that one bad field is not hidden behind another the checks refuse.
fn export() -> impl Strategy<Value = NfsExport> {
    let base = (
        any::<u16>(),
        prop::sample::select(VOLUMES),
        prop::sample::select(SUBDIRS),
        prop::collection::vec(prop::sample::select(CLIENTS), 1..3),
        prop::collection::vec(prop_oneof![Just(3u8), Just(4u8)], 1..3),
        (any::<bool>(), any::<u32>(), any::<u32>()),
    )
        .prop_map(|(id, volume, subdir, clients, protocols, (ro, uid, gid))| NfsExport {
            export_id: id,
            volume: volume.into(),
            subdir: subdir.into(),
            pseudo: "/proj".into(),
            clients: clients.into_iter().map(String::from).collect(),
            access: if ro { Access::Ro } else { Access::Rw },
            squash: Squash::RootSquash,
            anon_uid: uid,
            anon_gid: gid,
            protocols,
            delegations: Default::default(),
            pnfs: false,
            pnfs_layout: Default::default(),
            ds_addrs: vec![],
        });
    let one_bad =
        (base.clone(), 0..5usize, either(VOLUMES), either(CLIENTS), subdir(), any::<u8>())
            .prop_map(|(mut e, field, vol, bad, path, p)| {
                match field {
                    0 => e.volume = vol,
                    1 => e.subdir = path,
                    2 => e.pseudo = path,
                    3 => e.clients.push(bad),
                    _ => e.protocols.push(p),
                }
                e
            });
    let all_random = (
        base,
        either(VOLUMES),
        subdir(),
        subdir(),
        prop::collection::vec(either(CLIENTS), 0..4),
        prop::collection::vec(prop_oneof![Just(3u8), Just(4u8), any::<u8>()], 0..3),
    )
        .prop_map(|(mut e, volume, subdir, pseudo, clients, protocols)| {
            (e.volume, e.subdir, e.pseudo, e.clients, e.protocols) =
                (volume, subdir, pseudo, clients, protocols);
            e
        });
    prop_oneof![3 => one_bad, 1 => all_random]
}

/// Shares made as [`export`]s are.
fn share() -> impl Strategy<Value = SmbShare> {
    let base = (
        prop::sample::select(SHARE_NAMES),
        prop::sample::select(VOLUMES),
        prop::sample::select(SUBDIRS),
        prop::collection::vec(prop::sample::select(USERS), 0..3),
        prop::sample::select(COMMENTS),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(|(name, volume, subdir, users, comment, (ro, browse))| SmbShare {
            name: name.into(),
            volume: volume.into(),
            subdir: subdir.into(),
            read_only: ro,
            users: users.into_iter().map(String::from).collect(),
            comment: comment.into(),
            browseable: browse,
        });
    let one_bad = (
        base.clone(),
        0..5usize,
        (either(SHARE_NAMES), either(VOLUMES), subdir(), either(USERS), either(COMMENTS)),
    )
        .prop_map(|(mut s, field, (name, vol, path, user, comment))| {
            match field {
                0 => s.name = name,
                1 => s.volume = vol,
                2 => s.subdir = path,
                3 => s.users.push(user),
                _ => s.comment = comment,
            }
            s
        });
    let all_random = (
        base,
        either(SHARE_NAMES),
        either(VOLUMES),
        subdir(),
        prop::collection::vec(either(USERS), 0..3),
        either(COMMENTS),
    )
        .prop_map(|(mut s, name, volume, subdir, users, comment)| {
            (s.name, s.volume, s.subdir, s.users, s.comment) =
                (name, volume, subdir, users, comment);
            s
        });
    prop_oneof![3 => one_bad, 1 => all_random]
}

const LUN_NAMES: &[&str] = &["db", "lun-0", "A_1"];
const LUN_PATHS: &[&str] = &["luns/db.img", "a/b c", "x@y~z+w"];
const WWNS: &[&str] = &["0b7c4f3e-1d2a-4c5b-9e8f-7a6b5c4d3e2f", "abc"];
const IQNS: &[&str] = &["iqn.2024-01.io.cairn:t1", "iqn.1994-05.com.redhat:client1"];
const CHAPS: &[&str] = &["alice", "s3cret-pass12", "a:b@c"];

/// A valid LUN and target (one ACL with CHAP) with one field made nasty.
fn lun_and_target() -> impl Strategy<Value = (IscsiLun, IscsiTarget)> {
    (
        0..6usize,
        (either(LUN_NAMES), either(VOLUMES), either(LUN_PATHS), either(WWNS)),
        (either(IQNS), either(CHAPS)),
        (1u64..1 << 20).prop_map(|n| n << 20),
    )
        .prop_map(|(field, (name, vol, path, wwn), (iqn, chap), size)| {
            let mut l = IscsiLun {
                name: "db".into(),
                volume: "vol0".into(),
                path: "luns/db.img".into(),
                size,
                thin: false,
                wwn: WWNS[0].into(),
                deleting: false,
            };
            let mut acl = Acl {
                initiator: IQNS[1].into(),
                chap_user: Some("alice".into()),
                chap_password: Some("s3cret-pass12".into()),
            };
            match field {
                0 => l.name = name,
                1 => l.volume = vol,
                2 => l.path = path,
                3 => l.wwn = wwn,
                4 => acl.initiator = iqn,
                _ => acl.chap_password = Some(chap),
            }
            let t = IscsiTarget {
                iqn: IQNS[0].into(),
                portals: vec!["0.0.0.0:3260".into()],
                luns: vec![TargetLun { lun: 0, name: l.name.clone() }],
                acls: vec![acl],
                open: false,
            };
            (l, t)
        })
}

/// The handler's grammar for a config string (iscsi/cairn_cfg.h), in LIO's spelling.
fn handler_accepts(cfg: &str, l: &IscsiLun) -> Result<(), String> {
    let (vol, rest) = cfg.split_once('@').ok_or("no '@'")?;
    let (srv, path) = rest.split_once('/').ok_or("no '/'")?;
    let vol_ok = !vol.is_empty()
        && vol.len() <= 64
        && !vol.starts_with(['.', '-'])
        && vol.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !vol_ok || vol != l.volume {
        return Err(format!("volume {vol:?} (the handler takes [A-Za-z0-9._-], not first . or -)"));
    }
    if srv.contains([':', ',']) || path != l.path {
        return Err(format!("servers {srv:?} path {path:?}"));
    }
    Ok(())
}

/// Every targetcli command of the plan from an empty LIO, split as targetcli's shell splits
/// `key=value` parameters (on whitespace): the create command and the CHAP command have
/// exactly their parameters, with the record's values.
fn check_targetcli(l: &IscsiLun, t: &IscsiTarget) -> Result<(), String> {
    let want = iscsi::desired(std::slice::from_ref(l), std::slice::from_ref(t), &servers(), 1)
        .map_err(|e| e.to_string())?;
    let cmds = iscsi::plan(&iscsi::Lio::default(), &want, &Default::default());
    let cfg = l.cfgstring(&servers()).map_err(|e| e.to_string())?;
    handler_accepts(&cfg, l)?;
    let create = vec![
        "/backstores/user:cairn".to_string(),
        "create".into(),
        format!("name={}", l.name),
        format!("size={}", l.size),
        format!("cfgstring={cfg}"),
        format!("wwn={}", l.wwn),
    ];
    let a = &t.acls[0];
    let auth = vec![
        format!("/iscsi/{}/tpg1/acls/{}", t.iqn, a.initiator),
        "set".into(),
        "auth".into(),
        format!("userid={}", a.chap_user.as_deref().unwrap_or("")),
        format!("password={}", a.chap_password.as_deref().unwrap_or("")),
    ];
    let split: Vec<Vec<String>> =
        cmds.iter().map(|c| c.split_whitespace().map(String::from).collect()).collect();
    for (want, what) in [(create, "create"), (auth, "set auth")] {
        if split.iter().filter(|c| **c == want).count() != 1 {
            return Err(format!("no single {what} command {want:?} in {cmds:#?}"));
        }
    }
    if let Some(c) = cmds.iter().find(|c| c.contains(['\n', '\0', '"', '\''])) {
        return Err(format!("command {c:?} holds a newline, NUL or quote"));
    }
    Ok(())
}

fn servers() -> Vec<String> {
    vec!["10.0.0.1:7420".into(), "node2.lan:7420".into()]
}

// --- Ganesha: a reader after conf_lex.l / conf_yacc.y ----------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Punct(char),
    /// A double-quoted string, unescaped as Ganesha does (`\x` -> `x`).
    Quoted(String),
    /// A bare term: Ganesha's lexer types it (number, address, path, token, ...).
    Bare(String),
}

fn ganesha_lex(text: &str) -> Result<Vec<Tok>, String> {
    let mut out = vec![];
    let mut it = text.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            c if c.is_ascii_whitespace() => {}
            '#' => {
                for c in it.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '{' | '}' | ';' | '=' | ',' => out.push(Tok::Punct(c)),
            '"' => {
                // DQUOTE  \"(\\.|[^\"])*\"   (`.` is any character but a newline)
                let mut s = String::new();
                loop {
                    match it.next() {
                        None => return Err("unterminated string".into()),
                        Some('"') => break,
                        Some('\\') => match it.next() {
                            Some('\n') | None => return Err("backslash-newline in string".into()),
                            Some(e) => s.push(e),
                        },
                        Some(c) => s.push(c),
                    }
                }
                out.push(Tok::Quoted(s));
            }
            '\'' => return Err("single-quoted string".into()),
            c => {
                let mut s = String::from(c);
                while let Some(&n) = it.peek() {
                    if n.is_ascii_whitespace() || "{};=,\"'#".contains(n) {
                        break;
                    }
                    s.push(n);
                    it.next();
                }
                out.push(Tok::Bare(s));
            }
        }
    }
    Ok(out)
}

/// A parsed block: `NAME { key = v, v; ... SUB { ... } }`.
#[derive(Debug, Default, PartialEq)]
struct Block {
    name: String,
    keys: Vec<(String, Vec<Tok>)>,
    blocks: Vec<Block>,
}

fn ganesha_blocks(toks: &[Tok]) -> Result<Vec<Block>, String> {
    fn block(t: &[Tok], i: &mut usize, name: String) -> Result<Block, String> {
        let mut b = Block { name, ..Default::default() };
        loop {
            match t.get(*i) {
                Some(Tok::Punct('}')) => {
                    *i += 1;
                    return Ok(b);
                }
                Some(Tok::Bare(k)) => {
                    *i += 1;
                    match t.get(*i) {
                        Some(Tok::Punct('{')) => {
                            *i += 1;
                            b.blocks.push(block(t, i, k.clone())?);
                        }
                        Some(Tok::Punct('=')) => {
                            *i += 1;
                            let mut vals = vec![];
                            loop {
                                match t.get(*i) {
                                    Some(v @ (Tok::Bare(_) | Tok::Quoted(_))) => {
                                        vals.push(v.clone())
                                    }
                                    other => return Err(format!("value expected, got {other:?}")),
                                }
                                *i += 1;
                                match t.get(*i) {
                                    Some(Tok::Punct(',')) => *i += 1,
                                    Some(Tok::Punct(';')) => {
                                        *i += 1;
                                        break;
                                    }
                                    other => {
                                        return Err(format!("',' or ';' expected, got {other:?}"))
                                    }
                                }
                            }
                            b.keys.push((k.clone(), vals));
                        }
                        other => {
                            return Err(format!("'{{' or '=' expected after {k}, got {other:?}"))
                        }
                    }
                }
                other => return Err(format!("key or '}}' expected, got {other:?}")),
            }
        }
    }
    let mut i = 0;
    let mut out = vec![];
    while i < toks.len() {
        match (&toks[i], toks.get(i + 1)) {
            (Tok::Bare(name), Some(Tok::Punct('{'))) => {
                i += 2;
                out.push(block(toks, &mut i, name.clone())?);
            }
            other => return Err(format!("block expected at top level, got {other:?}")),
        }
    }
    Ok(out)
}

fn is_ipv4_octets(s: &str) -> bool {
    s.parse::<std::net::Ipv4Addr>().is_ok()
}

/// Whether Ganesha's lexer reads `t` as one client term (conf_lex.l: `*`, IPV4ADDR{CIDR}?,
/// IPV6ADDR{CIDR}? with CIDR `/[1-9][0-9]?`, `@`NETGROUP_CHARS, TOKEN_CHARS, WILDCARD),
/// and not as one of its keywords (booleans).
fn ganesha_client_term(t: &str) -> bool {
    let cidr_ok = |len: &str| {
        let b = len.as_bytes();
        (1..=2).contains(&b.len())
            && (b'1'..=b'9').contains(&b[0])
            && b.iter().all(u8::is_ascii_digit)
    };
    if t == "*" {
        return true;
    }
    let (addr, len) = match t.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (t, None),
    };
    if is_ipv4_octets(addr) || addr.parse::<std::net::Ipv6Addr>().is_ok() {
        return len.is_none_or(cidr_ok);
    }
    if len.is_some() {
        return false;
    }
    if let Some(g) = t.strip_prefix('@') {
        return g.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && g.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    }
    let wc = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if ["yes", "true", "on", "no", "false", "off"].iter().any(|k| k.eq_ignore_ascii_case(t)) {
        return false;
    }
    let token = t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '?')
        && t.chars().skip(1).all(wc);
    let wildcard = t.contains(['*', '?']) && t.chars().all(|c| wc(c) || c == '*' || c == '?');
    token || wildcard
}

/// What every rendered block or section must point at: a volume by its name, and a
/// directory in it by its absolute, normal path.
fn check_target(volume: &str, subdir: &str) -> Result<(), String> {
    match cairn_gateway::split_volume_path(&format!("{volume}{subdir}")) {
        Ok((v, d)) if v == volume && d == subdir => Ok(()),
        other => Err(format!("renders volume {volume:?} subdir {subdir:?} (read as {other:?})")),
    }
}

fn check_ganesha(e: &NfsExport, text: &str) -> Result<(), String> {
    check_target(&e.volume, &e.subdir)?;
    let toks = ganesha_lex(text)?;
    let blocks = ganesha_blocks(&toks)?;
    let [b] = &blocks[..] else { return Err(format!("{} top-level blocks", blocks.len())) };
    let q = |s: &str| vec![Tok::Quoted(s.to_string())];
    let bare = |s: &str| vec![Tok::Bare(s.to_string())];
    let want_keys: Vec<(String, Vec<Tok>)> = vec![
        ("Export_Id".into(), bare(&e.export_id.to_string())),
        ("Path".into(), q(&e.subdir)),
        ("Pseudo".into(), q(&e.pseudo)),
        ("Protocols".into(), e.protocols.iter().map(|p| Tok::Bare(p.to_string())).collect()),
        ("Transports".into(), bare("TCP")),
        ("MaxOffsetRead".into(), bare("18446744073709551615")),
        ("SecType".into(), bare("sys")),
        ("Squash".into(), bare(e.squash.as_str())),
        ("Anonymous_Uid".into(), bare(&e.anon_uid.to_string())),
        ("Anonymous_Gid".into(), bare(&e.anon_gid.to_string())),
        ("Access_Type".into(), bare("None")),
        ("Delegations".into(), bare(e.delegations.as_str())),
    ];
    if b.name != "EXPORT" || b.keys != want_keys {
        return Err(format!("EXPORT keys differ: {:?}", b.keys));
    }
    let [client, fsal] = &b.blocks[..] else { return Err("EXPORT sub-blocks differ".into()) };
    let access = if e.access == Access::Ro { "RO" } else { "RW" };
    let want_client = vec![
        ("Clients".to_string(), e.clients.iter().map(|c| Tok::Bare(c.clone())).collect()),
        ("Access_Type".to_string(), bare(access)),
    ];
    if client.name != "CLIENT" || client.keys != want_client || !client.blocks.is_empty() {
        return Err(format!("CLIENT block differs: {client:?}"));
    }
    if let Some(c) = e.clients.iter().find(|c| !ganesha_client_term(c)) {
        return Err(format!("client {c:?} is not one term to Ganesha's lexer"));
    }
    // The volume quoted, or bare if Ganesha's lexer reads it as one token (TOKEN_CHARS).
    let volume = match fsal.keys.get(1) {
        Some((_, v)) if *v == bare(&e.volume) => {
            let token = e.volume.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && e.volume.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
            if !token {
                return Err(format!("volume {:?} is not one token to Ganesha's lexer", e.volume));
            }
            bare(&e.volume)
        }
        _ => q(&e.volume),
    };
    let want_fsal = vec![
        ("Name".to_string(), bare("CAIRN")),
        ("Volume".to_string(), volume),
        ("Servers".to_string(), q(&servers().join(","))),
    ];
    if fsal.name != "FSAL" || fsal.keys != want_fsal || !fsal.blocks.is_empty() {
        return Err(format!("FSAL block differs: {fsal:?}"));
    }
    Ok(())
}

// --- smb.conf: a reader after Samba's lib/util/tini.c -----------------------------------------

/// A section's name and its `(name, value)` parameters, in order.
type Section = (String, Vec<(String, String)>);

/// Sections and their `(name, value)` parameters, as Samba's ini reader sees them (lines
/// joined at a trailing `\` or `\ `, runs of whitespace made one space, one space trimmed
/// around names and values; `#` or `;` first on a line is a comment).
fn smb_parse(text: &str) -> Result<Vec<Section>, String> {
    let mut lines = vec![];
    let mut cur = String::new();
    let mut started = false;
    for raw in text.split('\n') {
        let l =
            if started { raw } else { raw.trim_start_matches(|c: char| c.is_ascii_whitespace()) };
        if !started && (l.is_empty() || l.starts_with(['#', ';'])) {
            continue;
        }
        for c in l.chars() {
            if c.is_ascii_whitespace() && cur.ends_with(|p: char| p.is_ascii_whitespace()) {
                continue;
            }
            cur.push(c);
        }
        if let Some(s) = cur.strip_suffix('\\') {
            cur = s.to_string();
            started = true;
            continue;
        }
        if cur.ends_with(|c: char| c.is_ascii_whitespace()) && cur[..cur.len() - 1].ends_with('\\')
        {
            cur.truncate(cur.len() - 2);
            started = true;
            continue;
        }
        started = false;
        lines.push(std::mem::take(&mut cur));
    }
    if started {
        lines.push(cur);
    }
    let trim1 = |s: &str| {
        let s = s.strip_prefix(|c: char| c.is_ascii_whitespace()).unwrap_or(s);
        s.strip_suffix(|c: char| c.is_ascii_whitespace()).unwrap_or(s).to_string()
    };
    let mut out: Vec<Section> = vec![];
    for l in lines {
        if let Some(rest) = l.strip_prefix('[') {
            let name = rest.split_once(']').ok_or_else(|| format!("no ']' in {l:?}"))?.0;
            out.push((name.to_string(), vec![]));
        } else if let Some((k, v)) = l.split_once('=') {
            let sec = out.last_mut().ok_or("parameter before any section")?;
            sec.1.push((trim1(k), trim1(v)));
        } else if !l.is_empty() {
            return Err(format!("line without '=': {l:?}"));
        }
    }
    Ok(out)
}

fn want_section(s: &SmbShare) -> Section {
    let yn = |b: bool| if b { "yes" } else { "no" }.to_string();
    let mut keys = vec![];
    if !s.comment.is_empty() {
        // free text: Samba makes runs of spaces one and trims it, which is harmless
        let c = s.comment.split(|c: char| c.is_ascii_whitespace()).filter(|w| !w.is_empty());
        keys.push(("comment".to_string(), c.collect::<Vec<_>>().join(" ")));
    }
    keys.push(("path".into(), s.subdir.clone()));
    keys.push(("read only".into(), yn(s.read_only)));
    keys.push(("browseable".into(), yn(s.browseable)));
    if !s.users.is_empty() {
        keys.push(("valid users".into(), s.users.join(", ")));
    }
    keys.push(("vfs objects".into(), format!("acl_xattr streams_xattr {}", smb::vfs_name())));
    keys.push(("acl_xattr:ignore system acls".into(), "yes".into()));
    keys.push(("kernel share modes".into(), "no".into()));
    keys.push(("kernel oplocks".into(), "no".into()));
    keys.push(("cairn:volume".into(), s.volume.clone()));
    keys.push(("cairn:servers".into(), servers().join(",")));
    (s.name.clone(), keys)
}

fn check_smb(s: &SmbShare, text: &str) -> Result<(), String> {
    check_target(&s.volume, &s.subdir)?;
    let got = smb_parse(text)?;
    let want = vec![want_section(s)];
    if got != want {
        return Err(format!("smb.conf reads back as {got:?}\nwanted {want:?}"));
    }
    if s.subdir.contains('%') {
        return Err("'%' in path is expanded by smbd (%U, %m, ...)".into());
    }
    Ok(())
}

// --- properties ------------------------------------------------------------------------------

/// `cases` per property unless `PROPTEST_CASES` says otherwise. No regression files in the
/// tree: a failure prints its minimal case, which then goes into the crate's unit tests.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig { failure_persistence: None, ..ProptestConfig::default() };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

// Rendering is cheap (~0.1 ms a case in a debug build): many cases by default, so that a
// one-character hole in a check is found on every run.
proptest! {
    #![proptest_config(config(2048))]

    #[test]
    fn nfs_export_renders_exactly_its_block(e in export()) {
        if let Err(msg) = e.validate() {
            prop_assert!(!msg.to_string().trim().is_empty());
            return Ok(());
        }
        let text = e.render(&servers());
        if let Err(why) = check_ganesha(&e, &text) {
            return Err(TestCaseError::fail(format!("{why}\nexport {e:?}\nrendered:\n{text}")));
        }
    }

    #[test]
    fn smb_share_renders_exactly_its_section(s in share()) {
        if let Err(msg) = s.validate() {
            prop_assert!(!msg.to_string().trim().is_empty());
            return Ok(());
        }
        let text = s.render(&servers());
        if let Err(why) = check_smb(&s, &text) {
            return Err(TestCaseError::fail(format!("{why}\nshare {s:?}\nrendered:\n{text}")));
        }
    }


    #[test]
    fn iscsi_lun_and_target_render_exactly_their_commands((l, t) in lun_and_target()) {
        if let Err(msg) = l.validate().and_then(|_| t.validate()) {
            prop_assert!(!msg.to_string().trim().is_empty());
            return Ok(());
        }
        if let Err(why) = check_targetcli(&l, &t) {
            return Err(TestCaseError::fail(format!("{why}\nlun {l:?}\ntarget {t:?}")));
        }
    }
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn nfs_parsers_never_panic(s in nasty()) {
        for r in [nfs::check_client(&s).map(drop), nfs::parse_clients(&s).map(drop), Squash::parse(&s).map(drop)] {
            if let Err(m) = r {
                prop_assert!(!m.to_string().trim().is_empty());
            }
        }
        if let Ok(q) = Squash::parse(&s) {
            prop_assert_eq!(Squash::parse(q.as_str()).ok(), Some(q));
        }
        if let Ok(cs) = nfs::parse_clients(&s) {
            prop_assert_eq!(nfs::parse_clients(&cs.join(",")).ok(), Some(cs));
        }
        let _ = nfs::parse_show_exports(&s);
    }

    #[test]
    fn smb_parsers_never_panic(s in nasty()) {
        for r in [smb::check_name(&s), smb::check_user(&s), smb::parse_users(&s).map(drop)] {
            if let Err(m) = r {
                prop_assert!(!m.to_string().trim().is_empty());
            }
        }
        if let Ok(us) = smb::parse_users(&s) {
            prop_assert_eq!(smb::parse_users(&us.join(", ")).ok(), Some(us));
        }
    }

    #[test]
    fn iscsi_parsers_never_panic_and_round_trip(s in nasty(), n in any::<u64>()) {
        for r in [
            iscsi::check_lun_name(&s).map(drop),
            iscsi::check_iqn(&s, "target IQN").map(drop),
            iscsi::parse_size(&s).map(drop),
            iscsi::check_path(&s).map(drop),
            iscsi::parse_portal(&s).map(drop),
            iscsi::check_chap("secret", &s).map(drop),
            iscsi::parse_saveconfig(&s).map(drop),
            cairn_gateway::split_volume_path(&s).map(drop),
        ] {
            if let Err(m) = r {
                prop_assert!(!m.to_string().trim().is_empty());
            }
        }
        if let Ok(b) = iscsi::parse_size(&s) {
            prop_assert_eq!(iscsi::parse_size(&iscsi::format_size(b)).ok(), Some(b));
        }
        let size = n & !511;
        if let Ok(b) = iscsi::parse_size(&size.to_string()) {
            prop_assert_eq!(b, size);
            prop_assert_eq!(iscsi::parse_size(&iscsi::format_size(b)).ok(), Some(b));
        }
        if let Ok((ip, port)) = iscsi::parse_portal(&s) {
            prop_assert_eq!(iscsi::parse_portal(&iscsi::portal_string(&ip, port)).ok(), Some((ip, port)));
        }
        if let Ok(p) = iscsi::check_path(&s) {
            prop_assert_eq!(iscsi::check_path(&p).ok(), Some(p));
        }
        if let Ok((v, d)) = cairn_gateway::split_volume_path(&s) {
            prop_assert_eq!(cairn_gateway::split_volume_path(&format!("{v}{d}")).ok(), Some((v, d)));
        }
    }
}

/// The shares Samba's own parser reads back: every share the generator makes that
/// `validate()` accepts, rendered together, checked with `testparm -s` (skipped where Samba
/// is not installed). Deterministic cases, so it runs once per test run.
#[test]
fn smb_conf_testparm() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let Ok(out) = std::process::Command::new("testparm").arg("--version").output() else {
        // A missing package may not turn the run green in CI (tests/support/skips.sh).
        let env = |k| std::env::var(k).unwrap_or_default();
        let (ci, strict) = (env("CI"), env("CAIRN_STRICT"));
        let strict = strict == "1"
            || (strict.is_empty() && !matches!(ci.to_lowercase().as_str(), "" | "0" | "false"));
        assert!(
            !strict,
            "testparm is not installed (samba-common-bin): no skip under CI/CAIRN_STRICT"
        );
        eprintln!("skip: testparm not installed");
        return;
    };
    assert!(out.status.success());
    let mut runner = TestRunner::deterministic();
    let mut shares: Vec<SmbShare> = vec![];
    let mut names = std::collections::BTreeSet::new();
    while shares.len() < 40 {
        let s = share().new_tree(&mut runner).unwrap().current();
        if s.validate().is_ok() && names.insert(s.name.to_lowercase()) {
            shares.push(s);
        }
    }
    let d = tempfile::tempdir().unwrap();
    let conf = d.path().join("smb.conf");
    let inc = d.path().join("shares.conf");
    std::fs::write(&inc, smb::render_all(&shares, &servers())).unwrap();
    std::fs::write(
        &conf,
        format!(
            "[global]\n    lock directory = {0}\n    state directory = {0}\n    cache directory = {0}\n    \
             private dir = {0}\n    include = {1}\n",
            d.path().display(),
            inc.display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new("testparm")
        .args(["-s", "--suppress-prompt"])
        .arg(&conf)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "testparm failed: {}", String::from_utf8_lossy(&out.stderr));
    let got = smb_parse(&stdout).unwrap();
    // testparm writes booleans as Yes/No, lists without commas, and leaves out values that
    // are Samba's defaults: every key it prints must be one the share wants, with its value,
    // and the ones that decide what is served must all be there.
    let norm = |s: &str| {
        s.to_lowercase().replace(',', " ").split_whitespace().collect::<Vec<_>>().join(" ")
    };
    for s in &shares {
        let (name, want) = want_section(s);
        let Some((_, keys)) = got.iter().find(|(n, _)| *n == name) else {
            panic!("testparm lost share {name:?}:\n{stdout}");
        };
        for (k, v) in keys {
            let w = want.iter().find(|(wk, _)| wk == k);
            assert!(
                w.is_some_and(|(_, wv)| norm(wv) == norm(v)),
                "share {name:?}: testparm has {k} = {v:?}, wanted {w:?}:\n{stdout}"
            );
        }
        let mut must = vec!["path", "vfs objects", "cairn:volume", "cairn:servers"];
        if !s.users.is_empty() {
            must.push("valid users");
        }
        for k in must {
            assert!(keys.iter().any(|(gk, _)| gk == k), "share {name:?} lost {k:?}:\n{stdout}");
        }
    }
    assert_eq!(got.len(), shares.len() + 1, "sections:\n{stdout}");
}
