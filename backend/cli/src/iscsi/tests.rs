use super::lun::new_wwn;
use super::read_secret;

#[test]
fn wwns_are_uuids() {
    let a = new_wwn();
    assert_eq!(a.len(), 36);
    assert_eq!(&a[14..15], "4");
    assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
    assert_ne!(a, new_wwn());
}

#[test]
fn chap_secrets_come_from_a_file_not_argv() {
    use crate::args::{Cli, Command, IscsiAclCmd, IscsiCmd, IscsiTargetCmd};
    use clap::Parser;
    let dir = std::env::temp_dir().join(format!("cairn-chap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("secret");
    std::fs::write(&f, "S3cret-pass.12\nignored\n").unwrap();
    assert_eq!(read_secret(&f).unwrap(), "S3cret-pass.12");
    std::fs::write(&f, "\n").unwrap();
    assert!(read_secret(&f).unwrap_err().contains("no CHAP secret"));
    assert!(read_secret(&dir.join("missing")).unwrap_err().contains("cannot read"));
    let _ = std::fs::remove_dir_all(&dir);

    let base = [
        "cairn",
        "iscsi",
        "target",
        "acl",
        "add",
        "iqn.2024-01.com.example:t",
        "iqn.1994-05.com.redhat:h",
    ];
    let parse = |extra: &[&str]| Cli::try_parse_from(base.iter().chain(extra));
    let cli = parse(&["--chap-user", "h", "--chap-password-file", "-"]).unwrap();
    let Command::Iscsi(a) = cli.command else { panic!() };
    let IscsiCmd::Target(IscsiTargetCmd::Acl(IscsiAclCmd::Add { chap_password_file, .. })) =
        a.command
    else {
        panic!()
    };
    assert_eq!(chap_password_file.as_deref(), Some(std::path::Path::new("-")));
    // A user needs a secret; one secret only.
    assert!(parse(&["--chap-user", "h"]).is_err());
    assert!(
        parse(&["--chap-user", "h", "--chap-password", "x", "--chap-password-file", "f"]).is_err()
    );
    assert!(parse(&["--chap-password-file", "f"]).is_err());
}
