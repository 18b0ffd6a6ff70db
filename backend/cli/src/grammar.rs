//! Checks done before anything is sent: volume names, addresses, and the `volume create`
//! grammar (`NAME [replica N] HOST:/PATH... [force]`). Messages follow gluster's
//! `<command>: <name>: failed: <reason>` shape so scripts written for gluster read them.

use cairn_proto::mgmt::{MgmtRequest, VolumeCreate};
use cairn_proto::HostPort;

/// The usage line printed after grammar errors of `volume create`.
pub const CREATE_USAGE: &str = "Usage: cairn volume create NAME [replica N] HOST:/PATH... [force]";

/// Largest replica count accepted.
pub const MAX_REPLICA: u32 = 3;

/// A command line that is well-formed for clap but wrong for Cairn (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError {
    /// Full message, e.g. `volume create: vol0: failed: ...`.
    pub message: String,
    /// A usage line to print after the message, for grammar (not value) errors.
    pub usage: Option<&'static str>,
}

impl UsageError {
    pub fn new(command: &str, name: &str, reason: impl std::fmt::Display) -> UsageError {
        UsageError { message: failed_message(command, Some(name), reason), usage: None }
    }

    fn with_usage(mut self, usage: &'static str) -> UsageError {
        self.usage = Some(usage);
        self
    }
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(u) = self.usage {
            write!(f, "\n{u}")?;
        }
        Ok(())
    }
}

/// `<command>: <name>: failed: <reason>`, or `<command>: failed: <reason>` without a name.
pub fn failed_message(command: &str, name: Option<&str>, reason: impl std::fmt::Display) -> String {
    match name {
        Some(n) => format!("{command}: {n}: failed: {reason}"),
        None => format!("{command}: failed: {reason}"),
    }
}

/// Volume names: 1 to 64 of `[A-Za-z0-9_-]`, and not `all` (which means every volume).
pub fn check_volume_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!(
            "invalid volume name '{name}': must be 1 to 64 characters long (it is {})",
            name.chars().count()
        ));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(format!(
            "invalid volume name '{name}': character '{c}' not allowed (use A-Z a-z 0-9 _ -)"
        ));
    }
    if name.eq_ignore_ascii_case("all") {
        return Err("invalid volume name 'all': reserved (it means every volume)".to_string());
    }
    Ok(())
}

/// Turn `HOST[:PORT]` into `host:port` with the default port 7420 (IPv6 in brackets:
/// `[::1]`, `[::1]:7420`); see [`HostPort`].
pub fn with_default_port(s: &str) -> Result<String, String> {
    s.trim().parse::<HostPort>().map(|h| h.to_string()).map_err(|e| e.to_string())
}

/// One `HOST:/PATH` brick, normalised (no trailing or doubled slashes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brick {
    pub host: String,
    pub path: String,
}

impl std::fmt::Display for Brick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.path)
    }
}

impl Brick {
    fn same_host(&self, other: &Brick) -> bool {
        self.host.eq_ignore_ascii_case(&other.host)
    }

    /// True if `self` lies strictly inside `other` on the same host.
    fn inside(&self, other: &Brick) -> bool {
        self.same_host(other)
            && self.path.len() > other.path.len()
            && self.path.starts_with(&other.path)
            && self.path.as_bytes()[other.path.len()] == b'/'
    }
}

/// Parse one brick spec. The host is everything before the first `:/`.
pub fn parse_brick(spec: &str) -> Result<Brick, String> {
    let Some(pos) = spec.find(":/") else {
        return Err(if spec.contains(':') {
            format!("brick '{spec}': path must be absolute (HOST:/PATH)")
        } else {
            format!("brick '{spec}': expected HOST:/PATH")
        });
    };
    let (host, path) = (&spec[..pos], &spec[pos + 1..]);
    if host.is_empty() {
        return Err(format!("brick '{spec}': missing host (expected HOST:/PATH)"));
    }
    if host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(format!("brick '{spec}': invalid host '{host}'"));
    }
    if path.contains('\0') {
        return Err(format!("brick '{spec}': path contains NUL"));
    }
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    if comps.iter().any(|c| *c == "." || *c == "..") {
        return Err(format!("brick '{spec}': path must not contain '.' or '..' components"));
    }
    if comps.is_empty() {
        return Err(format!("brick '{spec}': the root directory cannot be a brick"));
    }
    Ok(Brick { host: host.to_string(), path: format!("/{}", comps.join("/")) })
}

pub const RESET_BRICK_USAGE: &str =
    "Usage: cairn volume reset-brick NAME HOST:/PATH start\n       \
cairn volume reset-brick NAME HOST:/PATH HOST:/PATH commit [force]";
pub const REPLACE_BRICK_USAGE: &str =
    "Usage: cairn volume replace-brick NAME OLD-HOST:/PATH NEW-HOST:/PATH commit force";

/// `reset-brick NAME SRC start` | `reset-brick NAME SRC DST commit [force]` (DST must be
/// SRC: the brick keeps its place, as gluster requires).
pub fn parse_reset_brick(
    name: &str,
    args: &[String],
) -> Result<cairn_proto::mgmt::MgmtRequest, UsageError> {
    const CMD: &str = "volume reset-brick";
    let err = |reason: String| UsageError::new(CMD, name, reason);
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let (src, commit, force) = match a.as_slice() {
        [src, "start"] => (*src, false, false),
        [src, dst, "commit"] | [src, dst, "commit", "force"] => {
            let (s, d) = (parse_brick(src).map_err(err)?, parse_brick(dst).map_err(err)?);
            if !s.same_host(&d) || s.path != d.path {
                return Err(err(format!(
                    "source brick {s} and destination brick {d} must be the same brick (use \
                     replace-brick to move a brick)"
                )));
            }
            (*src, true, a.len() == 4)
        }
        [_, _, "commit", w] => {
            return Err(err(format!("expected 'force' after 'commit', not '{w}'"))
                .with_usage(RESET_BRICK_USAGE))
        }
        _ => {
            return Err(err("expected 'HOST:/PATH start' or 'HOST:/PATH HOST:/PATH commit \
                            [force]'"
                .into())
            .with_usage(RESET_BRICK_USAGE))
        }
    };
    let b = parse_brick(src).map_err(err)?;
    Ok(cairn_proto::mgmt::MgmtRequest::ResetBrick {
        name: name.to_string(),
        brick: b.to_string(),
        commit,
        force,
    })
}

/// `replace-brick NAME OLD NEW commit force`.
pub fn parse_replace_brick(
    name: &str,
    old: &str,
    new: &str,
    commit: &str,
    force: &str,
) -> Result<cairn_proto::mgmt::MgmtRequest, UsageError> {
    const CMD: &str = "volume replace-brick";
    let err = |reason: String| UsageError::new(CMD, name, reason);
    if (commit, force) != ("commit", "force") {
        return Err(err("only 'commit force' is supported".into()).with_usage(REPLACE_BRICK_USAGE));
    }
    let (o, n) = (parse_brick(old).map_err(err)?, parse_brick(new).map_err(err)?);
    if o.same_host(&n) && o.path == n.path {
        return Err(err(format!(
            "old and new brick must differ (to rebuild {o} in place use reset-brick)"
        )));
    }
    Ok(cairn_proto::mgmt::MgmtRequest::ReplaceBrick {
        name: name.to_string(),
        old: o.to_string(),
        new: n.to_string(),
    })
}

pub const ADD_BRICK_USAGE: &str =
    "Usage: cairn volume add-brick NAME [replica N] HOST:/PATH... [force]";

/// Parse `volume add-brick NAME [replica N] BRICK... [force]` (gluster's grammar). The
/// brick count against the volume's replica count, the hosts and the paths are checked
/// by cairnd, which knows the volume.
pub fn parse_add_brick(name: &str, args: &[String]) -> Result<MgmtRequest, UsageError> {
    const CMD: &str = "volume add-brick";
    let err = |reason: String| UsageError::new(CMD, name, reason);
    check_volume_name(name).map_err(err)?;
    let mut rest: &[String] = args;
    let mut replica = None;
    if rest.first().map(|s| s == "replica").unwrap_or(false) {
        let Some(n) = rest.get(1) else {
            return Err(err("'replica' needs a count".into()).with_usage(ADD_BRICK_USAGE));
        };
        let n: u32 = n.parse().map_err(|_| {
            err(format!("replica count '{n}' is not a number")).with_usage(ADD_BRICK_USAGE)
        })?;
        if !(1..=MAX_REPLICA).contains(&n) {
            return Err(err(format!("replica count ({n}) must be between 1 and {MAX_REPLICA}")));
        }
        replica = Some(n);
        rest = &rest[2..];
    }
    let force = rest.last().map(|s| s == "force").unwrap_or(false);
    if force {
        rest = &rest[..rest.len() - 1];
    }
    if rest.is_empty() {
        return Err(err("no bricks given".into()).with_usage(ADD_BRICK_USAGE));
    }
    let mut bricks: Vec<Brick> = Vec::with_capacity(rest.len());
    for spec in rest {
        if spec == "force" {
            return Err(err("'force' must come last".into()).with_usage(ADD_BRICK_USAGE));
        }
        if spec == "replica" {
            return Err(
                err("'replica N' must come before the bricks".into()).with_usage(ADD_BRICK_USAGE)
            );
        }
        let b = parse_brick(spec).map_err(err)?;
        if let Some(prev) = bricks.iter().find(|p| p.same_host(&b) && p.path == b.path) {
            return Err(err(format!("brick {prev} is given more than once")));
        }
        bricks.push(b);
    }
    if let Some(r) = replica {
        if !bricks.len().is_multiple_of(r as usize) {
            return Err(err(format!(
                "number of bricks ({}) is not a multiple of replica count ({r})",
                bricks.len()
            )));
        }
    }
    Ok(MgmtRequest::VolumeAddBrick {
        name: name.to_string(),
        replica,
        bricks: bricks.iter().map(|b| b.to_string()).collect(),
        force,
    })
}

pub const REMOVE_BRICK_USAGE: &str =
    "Usage: cairn volume remove-brick NAME HOST:/PATH... start|status|stop|commit [force]";

/// Parse `volume remove-brick NAME BRICK... start|status|stop|commit [force]` (gluster's
/// grammar; `force` only after `commit`). Whether the bricks make whole replica sets is
/// checked by cairnd, which knows the sets.
pub fn parse_remove_brick(name: &str, args: &[String]) -> Result<MgmtRequest, UsageError> {
    const CMD: &str = "volume remove-brick";
    let err = |reason: String| UsageError::new(CMD, name, reason).with_usage(REMOVE_BRICK_USAGE);
    check_volume_name(name).map_err(|e| UsageError::new(CMD, name, e))?;
    let mut rest: &[String] = args;
    let force = rest.last().is_some_and(|s| s == "force");
    if force {
        rest = &rest[..rest.len() - 1];
    }
    let Some((action, bricks)) = rest.split_last() else {
        return Err(err("no action given".into()));
    };
    if !["start", "status", "stop", "commit"].contains(&action.as_str()) {
        return Err(err(format!("'{action}' is not an action: start, status, stop or commit")));
    }
    if force && action != "commit" {
        return Err(err(format!("'force' goes with commit only, not {action}")));
    }
    if bricks.is_empty() {
        return Err(err("no bricks given".into()));
    }
    let mut parsed: Vec<Brick> = vec![];
    for spec in bricks {
        if spec == "replica" {
            return Err(err(
                "changing the replica count is not supported: remove whole replica sets".into(),
            ));
        }
        let b = parse_brick(spec).map_err(|e| UsageError::new(CMD, name, e))?;
        if parsed.iter().any(|p| p.same_host(&b) && p.path == b.path) {
            return Err(UsageError::new(CMD, name, format!("brick {b} is given more than once")));
        }
        parsed.push(b);
    }
    Ok(MgmtRequest::VolumeRemoveBrick {
        name: name.to_string(),
        bricks: parsed.iter().map(|b| b.to_string()).collect(),
        action: action.clone(),
        force,
    })
}

/// Keywords of gluster's `volume create` that Cairn does not implement.
const UNSUPPORTED: &[&str] =
    &["stripe", "arbiter", "disperse", "disperse-data", "redundancy", "replica-count"];

/// Parse and check `volume create NAME ARGS...` into the request to send.
pub fn parse_create(name: &str, args: &[String]) -> Result<VolumeCreate, UsageError> {
    const CMD: &str = "volume create";
    let err = |reason: String| UsageError::new(CMD, name, reason);
    check_volume_name(name).map_err(err)?;

    let mut rest: &[String] = args;
    let mut replica: Option<u32> = None;
    loop {
        match rest.first().map(|s| s.as_str()) {
            Some("replica") => {
                if replica.is_some() {
                    return Err(err("'replica' given twice".into()).with_usage(CREATE_USAGE));
                }
                let Some(n) = rest.get(1) else {
                    return Err(err("'replica' needs a count".into()).with_usage(CREATE_USAGE));
                };
                let n: u32 = n.parse().map_err(|_| {
                    err(format!("replica count '{n}' is not a number")).with_usage(CREATE_USAGE)
                })?;
                if !(1..=MAX_REPLICA).contains(&n) {
                    return Err(err(format!(
                        "replica count ({n}) must be between 1 and {MAX_REPLICA}"
                    )));
                }
                replica = Some(n);
                rest = &rest[2..];
            }
            Some("transport") => match rest.get(1).map(|s| s.as_str()) {
                Some("tcp") => rest = &rest[2..],
                Some(t) => return Err(err(format!("transport '{t}' is not supported (only tcp)"))),
                None => {
                    return Err(err("'transport' needs a value".into()).with_usage(CREATE_USAGE))
                }
            },
            Some(k) if UNSUPPORTED.contains(&k) => {
                return Err(err(format!("'{k}' volumes are not supported by cairn")));
            }
            _ => break,
        }
    }
    let replica = replica.unwrap_or(1);
    let force = rest.last().map(|s| s == "force").unwrap_or(false);
    if force {
        rest = &rest[..rest.len() - 1];
    }
    if rest.is_empty() {
        return Err(err("no bricks given".into()).with_usage(CREATE_USAGE));
    }

    let mut bricks: Vec<Brick> = Vec::with_capacity(rest.len());
    for spec in rest {
        if spec == "force" {
            return Err(err("'force' must come last".into()).with_usage(CREATE_USAGE));
        }
        if spec == "replica" {
            return Err(
                err("'replica N' must come before the bricks".into()).with_usage(CREATE_USAGE)
            );
        }
        let b = parse_brick(spec).map_err(err)?;
        if let Some(prev) = bricks.iter().find(|p| p.same_host(&b) && p.path == b.path) {
            return Err(err(format!("brick {prev} is given more than once")));
        }
        if let Some(outer) = bricks.iter().find(|p| b.inside(p)) {
            return Err(err(format!("brick {b} is inside brick {outer}")));
        }
        if let Some(inner) = bricks.iter().find(|p| p.inside(&b)) {
            return Err(err(format!("brick {inner} is inside brick {b}")));
        }
        bricks.push(b);
    }
    if !bricks.len().is_multiple_of(replica as usize) {
        return Err(err(format!(
            "number of bricks ({}) is not a multiple of replica count ({replica})",
            bricks.len()
        )));
    }
    if replica > 1 && !force {
        for set in bricks.chunks(replica as usize) {
            for (i, a) in set.iter().enumerate() {
                if let Some(b) = set[i + 1..].iter().find(|b| a.same_host(b)) {
                    return Err(err(format!(
                        "bricks {a} and {b} of one replica set are on the same host. This \
                         setup is not optimal: bricks of a replica set should be on different \
                         nodes for fault tolerance. Use 'force' at the end of the command if \
                         you want to override this behavior."
                    )));
                }
            }
        }
    }
    Ok(VolumeCreate {
        name: name.to_string(),
        replica,
        bricks: bricks.iter().map(|b| b.to_string()).collect(),
        force,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn create(name: &str, s: &str) -> Result<VolumeCreate, UsageError> {
        parse_create(name, &args(s))
    }

    fn create_err(name: &str, s: &str) -> String {
        create(name, s).expect_err("must be refused").message
    }

    #[test]
    fn plain_distribute() {
        let v = create("vol0", "n1:/b/1 n2:/b/1").unwrap();
        assert_eq!(
            v,
            VolumeCreate {
                name: "vol0".into(),
                replica: 1,
                bricks: vec!["n1:/b/1".into(), "n2:/b/1".into()],
                force: false
            }
        );
    }

    #[test]
    fn replica_and_force() {
        let v = create("v", "replica 2 n1:/b n2:/b n1:/c n2:/c force").unwrap();
        assert_eq!(v.replica, 2);
        assert!(v.force);
        assert_eq!(v.bricks, ["n1:/b", "n2:/b", "n1:/c", "n2:/c"]);
        let v = create("v", "transport tcp replica 3 a:/x b:/x c:/x").unwrap();
        assert_eq!(v.replica, 3);
        assert!(!v.force);
    }

    #[test]
    fn brick_count_not_multiple_of_replica() {
        assert_eq!(
            create_err("vol0", "replica 2 n1:/b n2:/b n3:/b"),
            "volume create: vol0: failed: number of bricks (3) is not a multiple of replica \
             count (2)"
        );
    }

    #[test]
    fn replica_range() {
        assert_eq!(
            create_err("vol0", "replica 4 a:/b b:/b c:/b d:/b"),
            "volume create: vol0: failed: replica count (4) must be between 1 and 3"
        );
        assert!(create_err("vol0", "replica 0 a:/b").contains("replica count (0)"));
        let e = create("vol0", "replica two a:/b").unwrap_err();
        assert!(e.message.contains("'two' is not a number"), "{e}");
        assert_eq!(e.usage, Some(CREATE_USAGE));
        assert!(create_err("vol0", "replica").contains("needs a count"));
        assert!(create_err("vol0", "replica 2 replica 2 a:/b b:/b").contains("twice"));
    }

    #[test]
    fn bricks_must_be_absolute_and_sane() {
        assert!(create_err("v", "n1:b1").contains("path must be absolute"));
        assert!(create_err("v", "n1").contains("expected HOST:/PATH"));
        assert!(create_err("v", ":/b").contains("missing host"));
        assert!(create_err("v", "n1:/").contains("root directory"));
        assert!(create_err("v", "n1:/a/../b").contains("'..'"));
        // Normalised: doubled and trailing slashes go.
        assert_eq!(create("v", "n1://a//b/").unwrap().bricks, ["n1:/a/b"]);
    }

    #[test]
    fn duplicate_and_nested_bricks() {
        assert_eq!(
            create_err("v", "n1:/b n1:/b/"),
            "volume create: v: failed: brick n1:/b is given more than once"
        );
        assert!(create_err("v", "N1:/b n1:/b").contains("more than once"));
        assert!(create_err("v", "n1:/b n1:/b/c").contains("n1:/b/c is inside brick n1:/b"));
        assert!(create_err("v", "n1:/b/c n1:/b").contains("n1:/b/c is inside brick n1:/b"));
        // Same path on different hosts, and sibling paths, are fine.
        create("v", "n1:/b n2:/b n1:/bc").unwrap();
    }

    #[test]
    fn add_brick_grammar() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            parse_add_brick("v", &args("replica 2 n1:/b/3 n2:/b/3 force")).unwrap(),
            MgmtRequest::VolumeAddBrick {
                name: "v".into(),
                replica: Some(2),
                bricks: vec!["n1:/b/3".into(), "n2:/b/3".into()],
                force: true,
            }
        );
        let r = parse_add_brick("v", &args("n1:/b/3")).unwrap();
        assert!(matches!(r, MgmtRequest::VolumeAddBrick { replica: None, force: false, .. }));
        let e = |s: &str| parse_add_brick("v", &args(s)).unwrap_err().to_string();
        assert!(e("replica 2 n1:/b/3").contains("not a multiple of replica count (2)"));
        assert!(e("replica 4 n1:/a n2:/a n3:/a n4:/a").contains("between 1 and"));
        assert!(e("force").contains("no bricks"));
        assert!(e("n1:/a force n2:/a").contains("'force' must come last"));
        assert!(e("n1:/a n1:/a").contains("more than once"));
        assert!(e("n1:relative").contains("n1:relative"));
    }

    #[test]
    fn remove_brick_grammar() {
        let r = parse_remove_brick("v", &args("n1:/b/2 n2:/b/2 commit force")).unwrap();
        assert_eq!(
            r,
            MgmtRequest::VolumeRemoveBrick {
                name: "v".into(),
                bricks: vec!["n1:/b/2".into(), "n2:/b/2".into()],
                action: "commit".into(),
                force: true,
            }
        );
        let r = parse_remove_brick("v", &args("n1:/b/2 status")).unwrap();
        assert!(matches!(r, MgmtRequest::VolumeRemoveBrick { force: false, .. }));
        for (bad, why) in [
            ("n1:/b/2", "not an action"),
            ("start", "no bricks"),
            ("n1:/b/2 start force", "commit only"),
            ("n1:/b/2 n1:/b/2 start", "more than once"),
            ("n1:/b/2 bogus", "not an action"),
            ("replica 1 n1:/b/2 start", "replica count"),
        ] {
            let e = parse_remove_brick("v", &args(bad)).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn same_host_in_a_set_needs_force() {
        let e = create_err("v", "replica 2 n1:/a n1:/b");
        assert!(e.starts_with("volume create: v: failed: bricks n1:/a and n1:/b"), "{e}");
        assert!(e.contains("Use 'force'"), "{e}");
        assert!(create("v", "replica 2 n1:/a n1:/b force").unwrap().force);
        // Same host in different sets is fine.
        create("v", "replica 2 n1:/a n2:/a n1:/b n2:/b").unwrap();
    }

    #[test]
    fn keyword_placement() {
        assert!(create_err("v", "n1:/a force n2:/a").contains("'force' must come last"));
        assert!(create_err("v", "n1:/a replica 2").contains("before the bricks"));
        assert!(create_err("v", "force").contains("no bricks"));
        assert!(create_err("v", "stripe 2 a:/b b:/b").contains("not supported"));
        assert!(create_err("v", "transport rdma a:/b").contains("only tcp"));
    }

    #[test]
    fn volume_names() {
        check_volume_name("vol_0-A").unwrap();
        check_volume_name(&"x".repeat(64)).unwrap();
        assert!(check_volume_name(&"x".repeat(65)).unwrap_err().contains("1 to 64"));
        assert!(check_volume_name("").is_err());
        assert!(check_volume_name("a.b").unwrap_err().contains("'.'"));
        assert!(check_volume_name("a/b").is_err());
        assert!(check_volume_name("all").unwrap_err().contains("reserved"));
        assert_eq!(
            create_err("bad name", "n1:/b"),
            "volume create: bad name: failed: invalid volume name 'bad name': character ' ' \
             not allowed (use A-Z a-z 0-9 _ -)"
        );
    }

    #[test]
    fn addresses() {
        assert_eq!(with_default_port("node1").unwrap(), "node1:7420");
        assert_eq!(with_default_port("node1:9000").unwrap(), "node1:9000");
        assert_eq!(with_default_port("10.0.0.1").unwrap(), "10.0.0.1:7420");
        assert!(with_default_port("::1").is_err(), "a bare IPv6 literal is ambiguous");
        assert_eq!(with_default_port("[::1]").unwrap(), "[::1]:7420");
        assert_eq!(with_default_port("[::1]:99").unwrap(), "[::1]:99");
        assert!(with_default_port("node1:0").is_err());
        assert!(with_default_port("node1:x").is_err());
        assert!(with_default_port(":7420").is_err());
        assert!(with_default_port("").is_err());
        assert!(with_default_port("a b").is_err());
        assert!(with_default_port("[::1").is_err());
    }
}
