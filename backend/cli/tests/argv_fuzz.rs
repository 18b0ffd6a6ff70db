//! Property tests ("fuzzing") of the `cairn` command line: any argv built from the
//! grammar's words, odd values and random text is either a command or a usage error with a
//! message and exit code 2 (0 for --help/--version), never a panic; and `cairn_cli::run`
//! on such an argv, against an address nobody listens on, ends with 0, 1, 2 or 3 and says
//! why on stderr.
//!
//! Default: 4096 cases for the parse, 256 for `run` (about 5 s in a debug build);
//! long runs: `PROPTEST_CASES=100000 cargo test -p cairn-cli --test argv_fuzz`.

use cairn_cli::args::{Cli, Command};
use cairn_cli::plan;
use clap::Parser;
use proptest::prelude::*;

const WORDS: &[&str] = &[
    // commands and sub-commands
    "peer",
    "probe",
    "detach",
    "status",
    "pool",
    "list",
    "volume",
    "create",
    "start",
    "stop",
    "delete",
    "info",
    "add-brick",
    "remove-brick",
    "replace-brick",
    "reset-brick",
    "rebalance",
    "heal",
    "statistics",
    "full",
    "profile",
    "top",
    "set",
    "reset",
    "commit",
    "force",
    "replica",
    "nfs",
    "export",
    "add",
    "remove",
    "show",
    "smb",
    "share",
    "iscsi",
    "lun",
    "target",
    "acl",
    "portal",
    "map",
    "unmap",
    "help",
    "all",
    // options
    "--json",
    "--mode",
    "--mode=script",
    "--yes",
    "-y",
    "--timeout",
    "--help",
    "-h",
    "--version",
    "--path",
    "--clients",
    "--access",
    "--squash",
    "--anon-uid",
    "--protocols",
    "--id",
    "--users",
    "--comment",
    "--read-only",
    "--hidden",
    "--volume",
    "--size",
    "--thin",
    "--portal",
    "--chap-user",
    "--chap-password",
    "--open",
    "--",
    "-",
    "-x",
    // values
    "vol0",
    "all",
    "2",
    "3",
    "0",
    "-1",
    "99999999999999999999",
    "n1:/b1",
    "n2:/b1",
    "h:/",
    ":/",
    "/b",
    "*",
    "10.0.0.0/24",
    "rw",
    "ro",
    "root_squash",
    "3,4",
    "1G",
    "iqn.2024-01.io.c:t",
    "performance.cache-timeout",
    "cluster.quorum-type",
    "[::1]",
    "::1",
    "a:b:c",
    "",
    " ",
    "é",
    "a\nb",
    "x=y",
];

/// Every command path, so that random arguments reach each command's own checks.
const COMMANDS: &[&str] = &[
    "",
    "peer probe",
    "peer detach",
    "peer status",
    "pool list",
    "volume create",
    "volume start",
    "volume stop",
    "volume delete",
    "volume info",
    "volume status",
    "volume list",
    "volume add-brick",
    "volume remove-brick",
    "volume replace-brick",
    "volume reset-brick",
    "volume rebalance",
    "volume heal",
    "volume profile",
    "volume top",
    "volume set",
    "volume reset",
    "nfs export add",
    "nfs export remove",
    "nfs export list",
    "nfs export show",
    "smb share add",
    "smb share remove",
    "smb share list",
    "smb share show",
    "iscsi lun create",
    "iscsi lun delete",
    "iscsi lun list",
    "iscsi lun show",
    "iscsi target create",
    "iscsi target delete",
    "iscsi target list",
    "iscsi target show",
    "iscsi target lun",
    "iscsi target acl",
    "iscsi target portal",
];

/// Valid command lines, one or more per command (words split on spaces).
const LINES: &[&str] = &[
    "peer probe node2",
    "peer detach node2 force",
    "peer status",
    "pool list",
    "volume create vol0 replica 2 n1:/b1 n2:/b1 force",
    "volume start vol0 force",
    "volume stop vol0",
    "volume delete vol0",
    "volume info all",
    "volume status vol0",
    "volume list",
    "volume add-brick vol0 n3:/b1 n4:/b1",
    "volume remove-brick vol0 n3:/b1 n4:/b1 start",
    "volume replace-brick vol0 n1:/b1 n5:/b1 commit force",
    "volume reset-brick vol0 n1:/b1 start",
    "volume rebalance vol0 start",
    "volume heal vol0 info",
    "volume set vol0 performance.cache-timeout 1",
    "volume reset vol0 all",
    "volume profile vol0 info",
    "volume top vol0 read",
    "nfs export add vol0/a --path /a --clients 10.0.0.0/24 --access ro",
    "nfs export remove /a",
    "nfs export show 7",
    "smb share add s1 --volume vol0/a --users alice,@staff --comment c",
    "smb share remove s1",
    "iscsi lun create db --volume vol0 --size 1G --thin",
    "iscsi lun delete db",
    "iscsi target create iqn.2024-01.io.cairn:t1 --portal 0.0.0.0:3260",
];

/// Values at the edges of every kind.
const EDGES: &[&str] = &["", " ", "-", "a\nb", "é\u{0}", "--"];

/// A valid command line with one word replaced, inserted or dropped, or a command path and
/// then random words.
fn words() -> impl Strategy<Value = Vec<String>> {
    let edge_or_word =
        || prop_oneof![2 => prop::sample::select(EDGES).prop_map(String::from), 1 => word()];
    let mutated = (prop::sample::select(LINES), 0..4u8, any::<usize>(), edge_or_word()).prop_map(
        |(line, op, at, w)| {
            let mut v: Vec<String> = line.split(' ').map(String::from).collect();
            let at = at % v.len();
            match op {
                0 | 1 => v[at] = w,
                2 => v.insert(at, w),
                _ => drop(v.remove(at)),
            }
            v
        },
    );
    let random = (prop::sample::select(COMMANDS), prop::collection::vec(word(), 0..6))
        .prop_map(|(c, rest)| c.split_whitespace().map(String::from).chain(rest).collect());
    prop_oneof![3 => mutated, 1 => random]
}

/// Values a command takes, and the edges of each kind.
const VALUES: &[&str] = &[
    "vol0",
    "n1:/b1",
    "",
    " ",
    "0",
    "2",
    "-1",
    "all",
    "x:/",
    "[::1]:7420",
    "a.b",
    "1G",
    "é",
    "a\nb",
    "/",
    "*",
    "info",
    "force",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(VALUES).prop_map(String::from),
        3 => prop::sample::select(WORDS).prop_map(String::from),
        1 => ".{0,10}",
        1 => (prop::sample::select(WORDS), prop::sample::select(WORDS)).prop_map(|(a, b)| format!("{a}{b}")),
    ]
}

/// `cases` unless `PROPTEST_CASES` says otherwise; no regression files in the tree.
fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig { failure_persistence: None, ..ProptestConfig::default() };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

fn argv(words: &[String]) -> Vec<String> {
    std::iter::once("cairn".to_string()).chain(words.iter().cloned()).collect()
}

proptest! {
    #![proptest_config(config(4096))]

    #[test]
    fn any_argv_is_a_command_or_a_usage_error(words in words()) {
        match Cli::try_parse_from(argv(&words)) {
            Err(e) => {
                let text = e.render().to_string();
                prop_assert!(!text.trim().is_empty());
                match e.exit_code() {
                    0 => prop_assert!(!e.use_stderr(), "exit 0 but to stderr: {text}"),
                    2 => prop_assert!(e.use_stderr(), "usage error on stdout: {text}"),
                    c => prop_assert!(false, "clap exit code {c}: {text}"),
                }
            }
            Ok(cli) => {
                if let Err(u) = plan::settings(&cli) {
                    prop_assert!(!u.to_string().trim().is_empty());
                    return Ok(());
                }
                if matches!(cli.command, Command::Nfs(_) | Command::Smb(_) | Command::Iscsi(_)) {
                    return Ok(()); // checked in `run` below
                }
                if let Err(u) = plan::plan(&cli.command) {
                    prop_assert!(!u.to_string().trim().is_empty());
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn run_ends_with_a_known_code_and_says_why(words in words()) {
        // nothing that would wait (sync --watch) or act on this machine's servers (sync)
        prop_assume!(!words.iter().any(|w| w.contains("sync") || w.contains("watch")));
        let mut args = argv(&words);
        // an address nobody listens on: commands that get past the checks fail fast (3)
        args.splice(1..1, ["--host".to_string(), "127.0.0.1:1".into(), "--timeout".into(), "2".into()]);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = cairn_cli::run(args.clone(), &mut out, &mut err, &mut std::io::empty(), false);
        let (out, err) = (String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
        prop_assert!((0..=3).contains(&code), "exit {code} for {args:?}");
        if code == 0 {
            prop_assert!(!out.trim().is_empty(), "exit 0 and nothing printed for {args:?}");
        } else {
            prop_assert!(!err.trim().is_empty(), "exit {code} and nothing on stderr for {args:?}");
        }
    }
}
