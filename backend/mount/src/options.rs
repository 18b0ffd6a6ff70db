//! Command line of `mount.cairn`, in the shape every mount helper has:
//! `mount.cairn HOST[:PORT]:/VOLUME[/SUBDIR] MOUNTPOINT [-o opt,opt] [-f] [-n] [-s] [-v]`.

use cairn_proto::HostPort;
use std::path::PathBuf;
use std::time::Duration;

/// Everything the command line says.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    /// The source as given (shown in `/proc/mounts`).
    pub source: String,
    /// `host:port` of the `cairnd`s to fetch the map from; the source's host first.
    pub servers: Vec<String>,
    pub volume: String,
    /// Sub-directory of the volume to mount (empty: the volume root).
    pub subdir: String,
    pub mountpoint: PathBuf,
    pub foreground: bool,
    pub read_only: bool,
    pub allow_other: bool,
    pub attr_timeout: Duration,
    pub entry_timeout: Duration,
    pub write_behind: bool,
    /// Let the kernel cache written pages and send them in large writes (FUSE writeback
    /// cache, `writeback_cache` / `wbcache`; on by default). The kernel then keeps its own
    /// mtime and size of cached files; `fs/` replaces stale inodes (see `fs::entries::entry_generation`).
    pub writeback_cache: bool,
    /// Quick-read: files up to this size come with their lookup (0: off).
    pub quick_read: u32,
    pub debug: bool,
    pub log_file: Option<PathBuf>,
    /// `credentials=FILE`: the TLS credentials to connect with (else CAIRN_CREDENTIALS or
    /// the default paths).
    pub credentials: Option<PathBuf>,
    /// `transport=plain`: no TLS (a cluster run with `cairnd --transport plain`).
    pub plain: bool,
    /// Generic mount flags passed on to the kernel (`nosuid`, `noatime`, ...).
    pub kernel_flags: Vec<String>,
    /// Worker threads of the runtime requests run on (`CAIRN_MOUNT_WORKERS`, see
    /// [`env_count`]).
    pub workers: usize,
    /// Threads reading FUSE requests (`CAIRN_MOUNT_FUSE_THREADS`).
    pub fuse_threads: usize,
}

/// Default `workers` and `fuse_threads`. On 2 CPUs, 1, 2 and 4 of either measured within
/// this machine's noise of each other for 4 KiB random reads at QD16, 4 with the highest
/// median (docs/benchmarks.md, "FUSE session threads" and the runtime-worker A/B).
pub const DEFAULT_THREADS: usize = 4;

/// The count in environment variable `name` (1-64), `default` when it is unset.
pub fn env_count(name: &str, default: usize) -> Result<usize, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=64).contains(n))
            .ok_or_else(|| format!("{name}={v:?}: expected a thread count from 1 to 64")),
    }
}

/// Default `quick_read`: files up to 64 KiB come with their lookup (Gluster's quick-read
/// default too).
pub const DEFAULT_QUICK_READ: u32 = 64 << 10;
/// Largest `quick_read` (the bricks cap it there too).
const MAX_QUICK_READ: u32 = 1 << 20;

/// Mount flags the kernel understands and we pass through unchanged.
const KERNEL_FLAGS: &[&str] = &[
    "rw", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "sync", "async",
    "dirsync",
];
/// fstab/mount(8) options that mean nothing to the helper.
const IGNORED: &[&str] =
    &["defaults", "auto", "noauto", "user", "nouser", "users", "_netdev", "nofail", "relatime"];

pub const USAGE: &str =
    "usage: mount.cairn HOST[:PORT]:/VOLUME[/SUBDIR] MOUNTPOINT [-o OPTIONS] [-f]

options (comma separated after -o):
  ro                   mount read-only
  allow_other          let other users in (default when run as root)
  servers=H:P,H:P      more cairnd addresses to fetch the volume map from
  attr_timeout=S       seconds the kernel caches attributes (default 1)
  entry_timeout=S      seconds the kernel caches names (default 1)
  nowb                 no write-behind: every write goes to the bricks before it returns
                       (implies no_writeback_cache)
  writeback_cache      (default; also wbcache) kernel writeback cache: small writes are
                       merged in the page cache and sent as large writes; another client's
                       change to a file shows at the next lookup after a lease recall or
                       entry_timeout, but not while the file is open here
  no_writeback_cache   (also nowbcache) every write(2) reaches mount.cairn; size and mtime
                       come from the bricks at each attribute refresh
  quick_read=BYTES     (default 65536) a lookup of a regular file up to this size
                       brings its content, so opening and reading it costs no further
                       round trip; 0 (also noquickread) turns it off; at most 1048576
  log_file=PATH        where a background mount logs (default /var/log/cairn/mount-*.log)
  credentials=FILE     TLS credentials (certificate, cluster CA, key) to connect with
                       (default $CAIRN_CREDENTIALS, else /etc/cairn/credentials.pem,
                       /etc/cairn/admin.pem, /var/lib/cairn/admin.pem)
  transport=plain      no TLS: for a cluster run with `cairnd --transport plain` on an
                       isolated network (default transport=tls)
  debug                verbose logs on stderr, stay in the foreground
  -f                   stay in the foreground

environment (tuning):
  CAIRN_MOUNT_FUSE_THREADS=N  threads reading FUSE requests, each on its own clone of
                              /dev/fuse (1-64, default 4)
  CAIRN_MOUNT_WORKERS=N       worker threads the requests run on (1-64, default 4)
  CAIRN_LOG=FILTER            log filter (e.g. debug, cairn_client=trace)";

/// Parse the helper's argv (without argv[0]). `is_root` decides the `allow_other` default.
pub fn parse(argv: &[String], is_root: bool) -> Result<Args, String> {
    let mut positional = Vec::new();
    let mut opts: Vec<String> = Vec::new();
    let mut foreground = false;
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => {
                let v = it.next().ok_or("-o needs an argument")?;
                opts.push(v.clone());
            }
            "-f" => foreground = true,
            // mount(8) passes these to helpers: no mtab, sloppy, verbose.
            "-n" | "-s" | "-v" => {}
            "-h" | "--help" => return Err(USAGE.to_string()),
            s if s.starts_with("-o") && s.len() > 2 => opts.push(s[2..].to_string()),
            s if s.starts_with('-') && s.len() > 1 => return Err(format!("unknown flag {s}")),
            s => positional.push(s.to_string()),
        }
    }
    if positional.len() != 2 {
        return Err(format!(
            "expected SOURCE and MOUNTPOINT, got {} argument(s)",
            positional.len()
        ));
    }
    let source = positional[0].clone();
    let (server, volume, subdir) = parse_source(&source)?;
    let mut args = Args {
        source,
        servers: vec![server],
        volume,
        subdir,
        mountpoint: PathBuf::from(&positional[1]),
        foreground,
        read_only: false,
        allow_other: is_root,
        attr_timeout: Duration::from_secs(1),
        entry_timeout: Duration::from_secs(1),
        write_behind: true,
        writeback_cache: true,
        quick_read: DEFAULT_QUICK_READ,
        debug: false,
        log_file: None,
        credentials: None,
        plain: false,
        kernel_flags: Vec::new(),
        workers: DEFAULT_THREADS,
        fuse_threads: DEFAULT_THREADS,
    };
    let mut in_servers = false;
    for tok in opts.iter().flat_map(|o| o.split(',')).filter(|t| !t.is_empty()) {
        let (key, val) = match tok.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (tok, None),
        };
        // `servers=h1:p,h2:p`: the comma also separates options, so bare `host:port`
        // tokens right after `servers=` belong to it.
        if in_servers && val.is_none() && key.contains(':') {
            args.servers.push(check_server(key)?);
            continue;
        }
        in_servers = false;
        match (key, val) {
            ("ro", None) => args.read_only = true,
            ("rw", None) => args.read_only = false,
            ("allow_other", None) => args.allow_other = true,
            ("default_permissions", None) => {} // always on
            ("nowb", None) => {
                args.write_behind = false;
                args.writeback_cache = false;
            }
            ("writeback_cache" | "wbcache", None) => args.writeback_cache = true,
            ("no_writeback_cache" | "nowbcache", None) => args.writeback_cache = false,
            ("debug", None) => {
                args.debug = true;
                args.foreground = true;
            }
            ("servers", Some(v)) => {
                for s in v.split(['+', ',']).filter(|s| !s.is_empty()) {
                    args.servers.push(check_server(s)?);
                }
                in_servers = true;
            }
            ("attr_timeout", Some(v)) => args.attr_timeout = seconds(key, v)?,
            ("entry_timeout", Some(v)) => args.entry_timeout = seconds(key, v)?,
            ("quick_read", Some(v)) => {
                args.quick_read = match v.parse::<u32>() {
                    Ok(n) if n <= MAX_QUICK_READ => n,
                    _ => return Err(format!("{key}: '{v}' is not a size up to {MAX_QUICK_READ}")),
                }
            }
            ("noquickread", None) => args.quick_read = 0,
            ("log_file", Some(v)) => args.log_file = Some(PathBuf::from(v)),
            ("credentials", Some(v)) => args.credentials = Some(PathBuf::from(v)),
            ("transport", Some("plain")) => args.plain = true,
            ("transport", Some("tls")) => args.plain = false,
            (k, None) if KERNEL_FLAGS.contains(&k) => args.kernel_flags.push(k.to_string()),
            (k, None) if IGNORED.contains(&k) || k.starts_with("x-") => {}
            _ => return Err(format!("unknown mount option '{tok}'")),
        }
    }
    args.kernel_flags.retain(|f| f != "rw");
    // each address once, the source's first (Vec::dedup drops only adjacent repeats)
    let mut seen = std::collections::HashSet::new();
    args.servers.retain(|s| seen.insert(s.clone()));
    Ok(args)
}

/// `HOST[:PORT]:/VOLUME[/SUBDIR]` → (`host:port`, volume, subdir). IPv6 hosts in brackets.
pub fn parse_source(src: &str) -> Result<(String, String, String), String> {
    let bad = || format!("bad source '{src}': expected HOST[:PORT]:/VOLUME");
    let (host, path) = src.split_once(":/").ok_or_else(bad)?;
    let path = path.trim_matches('/');
    let (volume, subdir) = match path.split_once('/') {
        Some((v, s)) => (v, s.trim_matches('/')),
        None => (path, ""),
    };
    if host.is_empty() || volume.is_empty() {
        return Err(bad());
    }
    let server =
        host.parse::<HostPort>().map_err(|e| format!("bad source '{src}': {e}"))?.to_string();
    Ok((server, volume.to_string(), subdir.to_string()))
}

/// A `servers=` entry: `HOST:PORT` ([`HostPort`], the port required), printed back as
/// `host:port`.
fn check_server(s: &str) -> Result<String, String> {
    match HostPort::parse(s, 0) {
        Ok(h) if h.port() == 0 => Err(format!("server '{s}' needs HOST:PORT")),
        Ok(h) => Ok(h.to_string()),
        Err(e) => Err(format!("server: {e}")),
    }
}

fn seconds(key: &str, v: &str) -> Result<Duration, String> {
    let f: f64 = v.parse().map_err(|_| format!("{key}={v}: not a number of seconds"))?;
    if !(0.0..=86400.0).contains(&f) {
        return Err(format!("{key}={v}: out of range (0..86400 s)"));
    }
    Ok(Duration::from_secs_f64(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str], root: bool) -> Result<Args, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>(), root)
    }

    #[test]
    fn source_forms() {
        assert_eq!(parse_source("srv:/vol").unwrap(), ("srv:7420".into(), "vol".into(), "".into()));
        assert_eq!(
            parse_source("10.0.0.1:9000:/vol/a/b/").unwrap(),
            ("10.0.0.1:9000".into(), "vol".into(), "a/b".into())
        );
        assert_eq!(
            parse_source("[::1]:9000:/v").unwrap(),
            ("[::1]:9000".into(), "v".into(), "".into())
        );
        assert_eq!(parse_source("[::1]:/v").unwrap().0, "[::1]:7420");
        assert!(parse_source("srv/vol").is_err());
        assert!(parse_source(":/vol").is_err());
        assert!(parse_source("srv:/").is_err());
        assert!(parse_source("srv:99999:/v").is_err());
    }

    #[test]
    fn servers_listed_once() {
        // found by the fuzz tests below: `servers=` repeating the source's address, or one
        // address twice apart, kept the repeat
        let a = p(&["a:1:/v", "/m", "-o", "servers=a:2,a:1,a:2,b:3"], false).unwrap();
        assert_eq!(a.servers, ["a:1", "a:2", "b:3"]);
    }

    #[test]
    fn options() {
        let a = p(
            &[
                "h:1:/v",
                "/mnt",
                "-o",
                "ro,servers=a:2,b:3,attr_timeout=0.5,nosuid",
                "-o",
                "nowb",
                "-n",
            ],
            false,
        )
        .unwrap();
        assert_eq!(a.servers, vec!["h:1", "a:2", "b:3"]);
        assert!(a.read_only && !a.write_behind && !a.allow_other && !a.foreground);
        assert!(!a.writeback_cache, "nowb implies nowbcache");
        assert_eq!(a.attr_timeout, Duration::from_millis(500));
        assert_eq!(a.entry_timeout, Duration::from_secs(1));
        assert_eq!(a.kernel_flags, vec!["nosuid"]);
        assert_eq!(a.mountpoint, PathBuf::from("/mnt"));
    }

    #[test]
    fn defaults_and_errors() {
        let a = p(&["h:/v", "/m"], true).unwrap();
        assert!(a.allow_other && a.write_behind && !a.read_only);
        assert!(a.writeback_cache, "the kernel writeback cache is on by default");
        assert_eq!(a.quick_read, DEFAULT_QUICK_READ);
        for (o, n) in [("quick_read=4096", 4096), ("noquickread", 0), ("quick_read=0", 0)] {
            assert_eq!(p(&["h:/v", "/m", "-o", o], true).unwrap().quick_read, n, "{o}");
        }
        assert!(p(&["h:/v", "/m", "-o", "quick_read=2000000"], true).is_err());
        assert!(p(&["h:/v", "/m", "-o", "quick_read=x"], true).is_err());
        for (o, on) in [
            ("no_writeback_cache", false),
            ("nowbcache", false),
            ("nowbcache,writeback_cache", true),
            ("no_writeback_cache,wbcache", true),
        ] {
            assert_eq!(p(&["h:/v", "/m", "-o", o], true).unwrap().writeback_cache, on, "{o}");
        }
        let a = p(&["h:/v", "/m", "-odebug,_netdev"], false).unwrap();
        assert!(a.debug && a.foreground);
        assert!(p(&["h:/v"], true).is_err());
        assert!(p(&["h:/v", "/m", "-o", "bogus"], true).unwrap_err().contains("bogus"));
        assert!(p(&["h:/v", "/m", "-o", "attr_timeout=x"], true).is_err());
        assert!(p(&["h:/v", "/m", "-o", "servers=nohost"], true).is_err());
        assert!(p(&["h:/v", "/m", "-x"], true).is_err());
    }

    #[test]
    fn thread_counts_from_the_environment() {
        // A name no other test reads, so setting it cannot race with them.
        let name = "CAIRN_MOUNT_TEST_THREAD_COUNT";
        std::env::remove_var(name);
        assert_eq!(env_count(name, 4), Ok(4));
        for (v, want) in
            [("1", Some(1)), (" 64 ", Some(64)), ("0", None), ("65", None), ("x", None)]
        {
            std::env::set_var(name, v);
            match want {
                Some(n) => assert_eq!(env_count(name, 4), Ok(n), "{v:?}"),
                None => {
                    let e = env_count(name, 4).unwrap_err();
                    assert!(e.contains(name) && e.contains("1 to 64"), "{e}");
                }
            }
        }
        std::env::remove_var(name);
    }
}

/// Property tests ("fuzzing") of the command line: any argv gives `Args` or a message,
/// never a panic; an argv made from chosen options parses back to them. Default 1024
/// cases each (under a second); `PROPTEST_CASES=100000 cargo test -p cairn-mount fuzz` for
/// long runs.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn config() -> ProptestConfig {
        let mut c = ProptestConfig { failure_persistence: None, ..ProptestConfig::default() };
        if std::env::var_os("PROPTEST_CASES").is_none() {
            c.cases = 1024;
        }
        c
    }

    /// Words of the grammar, odd bytes, and random text, glued by `,` `=` `:` `/`.
    fn token() -> impl Strategy<Value = String> {
        let word = prop::sample::select(
            &[
                "-o",
                "-f",
                "-n",
                "-s",
                "-v",
                "-h",
                "-",
                "--",
                "-x",
                "ro",
                "rw",
                "servers",
                "=",
                ",",
                ":",
                ":/",
                "/",
                "[",
                "]",
                "::1",
                "h",
                "7420",
                "99999",
                "0",
                "-1",
                "NaN",
                "inf",
                "1e400",
                "attr_timeout",
                "entry_timeout",
                "quick_read",
                "log_file",
                "nowb",
                "debug",
                "x-systemd",
                "\0",
                "é",
                "\n",
                " ",
            ][..],
        );
        prop::collection::vec(prop_oneof![4 => word.prop_map(String::from), 1 => ".{0,8}"], 1..5)
            .prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_argv_parses_or_says_why(argv in prop::collection::vec(token(), 0..6), root in any::<bool>()) {
            match parse(&argv, root) {
                Ok(a) => {
                    let mut seen = std::collections::BTreeSet::new();
                    prop_assert!(a.servers.iter().all(|s| seen.insert(s)), "servers repeat: {:?}", a.servers);
                    prop_assert!(!a.volume.is_empty());
                }
                Err(m) => prop_assert!(!m.trim().is_empty()),
            }
        }

        #[test]
        fn source_round_trips(src in token()) {
            match parse_source(&src) {
                Ok((server, vol, sub)) => {
                    let again = format!("{server}:/{vol}/{sub}");
                    prop_assert_eq!(parse_source(&again), Ok((server, vol, sub)));
                }
                Err(m) => prop_assert!(m.contains(&src) || m.contains("server")),
            }
        }

        #[test]
        fn chosen_options_parse_back(
            host in "[a-c]|[a-z][a-z0-9.-]{0,10}|\\[::1\\]|10\\.0\\.0\\.[0-9]{1,2}",
            port in prop_oneof![1u16..4, 1u16..],
            vol in "[a-zA-Z0-9_-]{1,12}",
            sub in prop::collection::vec("[a-z0-9 ._-]{1,6}", 0..3),
            more in prop::collection::vec(("[a-c]", 1u16..4), 0..4),
            (ro, nowb, wbc, dbg) in (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
            attr_ms in 0u64..86_400_000,
            quick in 0u32..=(1 << 20),
        ) {
            let sub = sub.into_iter().filter(|c| c.trim_matches('/') == c && c != "." && c != "..").collect::<Vec<_>>().join("/");
            let src = format!("{host}:{port}:/{vol}/{sub}");
            let mut opts = vec![format!("attr_timeout={}", attr_ms as f64 / 1000.0), format!("quick_read={quick}")];
            if !more.is_empty() {
                opts.push(format!("servers={}", more.iter().map(|(h, p)| format!("{h}:{p}")).collect::<Vec<_>>().join(",")));
            }
            for (on, o) in [(ro, "ro"), (nowb, "nowb"), (wbc, "no_writeback_cache"), (dbg, "debug")] {
                if on {
                    opts.push(o.into());
                }
            }
            let argv = vec![src.clone(), "/mnt/x".into(), "-o".into(), opts.join(",")];
            let a = parse(&argv, false).map_err(TestCaseError::fail)?;
            prop_assert_eq!(&a.source, &src);
            prop_assert_eq!(&a.volume, &vol);
            prop_assert_eq!(&a.subdir, &sub);
            prop_assert_eq!(&a.servers[0], &format!("{host}:{port}"));
            let mut seen = std::collections::BTreeSet::new();
            prop_assert!(a.servers.iter().all(|s| seen.insert(s)), "servers repeat: {:?}", a.servers);
            for (h, p) in &more {
                let want = format!("{h}:{p}");
                prop_assert!(a.servers.contains(&want), "{:?} lacks {}", a.servers, want);
            }
            prop_assert_eq!(a.read_only, ro);
            prop_assert_eq!(a.write_behind, !nowb);
            prop_assert_eq!(a.writeback_cache, !nowb && !wbc);
            prop_assert_eq!(a.debug, dbg);
            prop_assert_eq!(a.quick_read, quick);
            prop_assert!((a.attr_timeout.as_secs_f64() - attr_ms as f64 / 1000.0).abs() < 1e-6);
        }

        #[test]
        fn env_count_is_1_to_64_or_an_error(v in prop_oneof![".{0,6}", (0usize..100).prop_map(|n| n.to_string())]) {
            // this test's own variable: no other test reads or writes it
            let name = "CAIRN_MOUNT_FUZZ_ENV_COUNT";
            if v.contains('\0') {
                return Ok(());
            }
            std::env::set_var(name, &v);
            match env_count(name, 4) {
                Ok(n) => prop_assert_eq!(v.trim().parse::<usize>().ok(), Some(n)),
                Err(m) => {
                    prop_assert!(m.contains(name));
                    prop_assert!(!matches!(v.trim().parse::<usize>(), Ok(1..=64)));
                }
            }
            std::env::remove_var(name);
            prop_assert_eq!(env_count(name, 4), Ok(4));
        }
    }
}
