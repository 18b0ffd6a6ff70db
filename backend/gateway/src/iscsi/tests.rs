use super::checks::{check_iqn, check_lun_name, check_path, format_size, parse_portal, parse_size};
use super::documents::{deletable, holders, Acl, GatewayRecord, IscsiLun, IscsiTarget, TargetLun};
use super::lio::{desired, parse_saveconfig, Lio};
use super::targetcli::{redact, Targetcli, TARGETCLI_PREFS};
use super::*;
use std::collections::BTreeSet;

fn lun(name: &str) -> IscsiLun {
    IscsiLun {
        name: name.into(),
        volume: "vol0".into(),
        path: format!("luns/{name}.img"),
        size: 10 << 30,
        thin: true,
        wwn: "0b7c4f3e-1d2a-4c5b-9e8f-7a6b5c4d3e2f".into(),
        deleting: false,
    }
}

fn gw(name: &str, luns: &[&str]) -> GatewayRecord {
    GatewayRecord { gateway: name.into(), luns: luns.iter().map(|s| s.to_string()).collect() }
}

#[test]
fn deleting_luns_leave_lio_and_go_when_no_gateway_holds_them() {
    let mut a = lun("a");
    let b = lun("b");
    a.deleting = true;
    // the document of a LUN that is not being deleted is unchanged (older readers)
    assert!(!serde_json::to_string(&b).unwrap().contains("deleting"));
    let back: IscsiLun = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
    assert!(back.deleting);
    // no gateway creates a LUN being deleted
    let want = desired(&[a.clone(), b.clone()], &[], &["h:7420".into()], 1).unwrap();
    assert_eq!(want.sos.keys().collect::<Vec<_>>(), vec!["b"]);
    // and a sync removes it from a LIO that has it
    let mut cur = want.clone();
    cur.sos.insert("a".into(), want.sos["b"].clone());
    assert_eq!(plan(&cur, &want, &BTreeSet::new()), vec!["/backstores/user:cairn delete a"]);
    let luns = [a.clone(), b.clone()];
    // held by two gateways: the file stays until the last one lets go
    let mut gws = vec![gw("gw1", &["a", "b"]), gw("gw2", &["a"])];
    assert_eq!(holders("a", &gws), vec!["gw1", "gw2"]);
    assert!(deletable(&luns, &gws).is_empty());
    gws[0] = gw("gw1", &["b"]);
    assert!(deletable(&luns, &gws).is_empty());
    gws[1] = gw("gw2", &[]);
    assert_eq!(deletable(&luns, &gws), vec![&a]);
    // no gateway at all: at once; a LUN not being deleted never
    assert_eq!(deletable(&luns, &[]), vec![&a]);
    assert!(deletable(std::slice::from_ref(&b), &[]).is_empty());
    // a target may not map a LUN being deleted
    let mut t = target();
    t.luns = vec![TargetLun { lun: 0, name: "a".into() }];
    let e = desired(&luns, &[t], &["h:7420".into()], 1).unwrap_err().to_string();
    assert!(e.contains("being deleted"), "{e}");
}

fn target() -> IscsiTarget {
    IscsiTarget {
        iqn: "iqn.2024-01.io.cairn:t1".into(),
        portals: vec!["0.0.0.0:3260".into()],
        luns: vec![TargetLun { lun: 0, name: "db".into() }],
        acls: vec![Acl {
            initiator: "iqn.1994-05.com.redhat:client1".into(),
            chap_user: Some("alice".into()),
            chap_password: Some("s3cret-pass12".into()),
        }],
        open: false,
    }
}

const SERVERS: &[&str] = &["10.0.0.1:7420", "10.0.0.2:7420"];

fn servers() -> Vec<String> {
    SERVERS.iter().map(|s| s.to_string()).collect()
}

#[test]
fn names_sizes_portals() {
    for ok in [
        "iqn.2024-01.io.cairn:t1",
        "iqn.2003-01.org.linux-iscsi.host.x8664:sn.1",
        "eui.02004567a425678d",
        "naa.52004567ba64678d",
    ] {
        assert!(check_iqn(ok, "target IQN").is_ok(), "{ok}");
    }
    for (bad, why) in [
        ("iqn.2024-13.io.cairn:t", "date '2024-13'"),
        ("iqn.24-01.io.cairn", "date '24-01'"),
        ("iqn.2024-01", "no naming authority"),
        ("iqn.2024-01.IO.cairn", "'I' is not allowed"),
        ("iqn.2024-01.io.cairn:a b", "' ' is not allowed"),
        ("target1", "must start with iqn."),
        ("eui.123", "16 hex digits"),
    ] {
        let e = check_iqn(bad, "target IQN").unwrap_err().to_string();
        assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
    }
    assert_eq!(parse_size("10G").unwrap(), 10 << 30);
    assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
    assert_eq!(parse_size("1t").unwrap(), 1 << 40);
    assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
    for (bad, why) in [
        ("10X", "suffix"),
        ("", "empty"),
        ("1K", "at least 1M"),
        ("1048577", "multiple of 512"),
        ("-1G", "number"),
        ("99999999999P", "too large"),
    ] {
        let e = parse_size(bad).unwrap_err().to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
    assert_eq!(format_size(10 << 30), "10G");
    assert_eq!(format_size(1536 << 20), "1536M");
    assert_eq!(parse_portal("10.0.0.5").unwrap(), ("10.0.0.5".into(), 3260));
    assert_eq!(parse_portal("[::1]:3261").unwrap(), ("::1".into(), 3261));
    for bad in ["host.example:3260", "10.0.0.5:0", "::1", "1.2.3.4:x"] {
        assert!(parse_portal(bad).is_err(), "{bad}");
    }
    for bad in ["", "a/b", "-x", "a.b", &"n".repeat(65)] {
        assert!(check_lun_name(bad).is_err(), "{bad}");
    }
    assert_eq!(check_path("/luns/a.img").unwrap(), "luns/a.img");
    for bad in ["luns/", "a/../b", "a,b", "a b", "a:b", "/"] {
        assert!(check_path(bad).is_err(), "{bad}");
    }
}

#[test]
fn validation() {
    assert!(lun("db").validate().is_ok());
    assert!(target().validate().is_ok());
    // a cluster volume may start with '-', the handler's config string may not (found
    // by the render fuzz tests)
    let mut l = lun("db");
    l.volume = "-vol".into();
    assert!(l.validate().unwrap_err().to_string().contains("starting with '-'"));
    let mut t = target();
    t.acls.push(Acl {
        initiator: "iqn.2024-01.io.cairn:c2".into(),
        chap_user: None,
        chap_password: None,
    });
    assert!(t.validate().unwrap_err().to_string().contains("every ACL has CHAP"));
    let mut t = target();
    t.acls[0].chap_password = None;
    assert!(t.validate().unwrap_err().to_string().contains("both a user and a password"));
    let mut t = target();
    t.luns.push(TargetLun { lun: 0, name: "other".into() });
    assert!(t.validate().unwrap_err().to_string().contains("LUN number 0 is used twice"));
    let mut t = target();
    t.acls[0].chap_user = Some("a b".into());
    assert!(t.validate().unwrap_err().to_string().contains("CHAP user"));
}

#[test]
fn cfgstring_is_lio_safe() {
    assert_eq!(
        lun("db").cfgstring(&servers()).unwrap(),
        "vol0@10.0.0.1~7420+10.0.0.2~7420/luns/db.img"
    );
    assert!(lun("db").cfgstring(&["[::1]:7420".into()]).unwrap_err().to_string().contains("IPv6"));
}

fn want() -> Lio {
    desired(&[lun("db"), lun("spare")], &[target()], &servers(), 2).unwrap()
}

#[test]
fn plan_from_nothing() {
    let cmds = plan(&Lio::default(), &want(), &BTreeSet::new());
    let expect = [
        "/backstores/user:cairn create name=db size=10737418240 cfgstring=vol0@10.0.0.1~7420+10.0.0.2~7420/luns/db.img wwn=0b7c4f3e-1d2a-4c5b-9e8f-7a6b5c4d3e2f",
        "/backstores/user:cairn/db/alua create name=gw2 tag=2",
        "/backstores/user:cairn/db/alua/gw2 set alua alua_access_type=1 alua_access_state=0",
        "/backstores/user:cairn create name=spare size=10737418240 cfgstring=vol0@10.0.0.1~7420+10.0.0.2~7420/luns/spare.img wwn=0b7c4f3e-1d2a-4c5b-9e8f-7a6b5c4d3e2f",
        "/backstores/user:cairn/spare/alua create name=gw2 tag=2",
        "/backstores/user:cairn/spare/alua/gw2 set alua alua_access_type=1 alua_access_state=0",
        "/iscsi create iqn.2024-01.io.cairn:t1",
        "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/portals create 0.0.0.0 3260",
        "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/luns create /backstores/user:cairn/db lun=0",
        "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/luns/lun0 set alua alua_tg_pt_gp_name=gw2",
        "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/acls create iqn.1994-05.com.redhat:client1",
        "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/acls/iqn.1994-05.com.redhat:client1 set auth userid=alice password=s3cret-pass12",
        "/iscsi/iqn.2024-01.io.cairn:t1/tpg1 set attribute authentication=1 cache_dynamic_acls=0 demo_mode_write_protect=0 generate_node_acls=0",
    ];
    assert_eq!(cmds, expect);
    assert_eq!(
        redact(&cmds[11]),
        "/iscsi/iqn.2024-01.io.cairn:t1/tpg1/acls/iqn.1994-05.com.redhat:client1 set auth userid=alice password=********"
    );
}

/// rtslib's dump of the state `want()` describes, plus a foreign fileio target and a
/// stale Cairn target.
fn saveconfig(extra_portal: bool) -> String {
    let portals = if extra_portal {
        r#"[{"ip_address": "0.0.0.0", "port": 3260, "iser": false}, {"ip_address": "10.9.9.9", "port": 3260, "iser": false}]"#
    } else {
        r#"[{"ip_address": "0.0.0.0", "port": 3260, "iser": false}]"#
    };
    let so = |name: &str| {
        format!(
            r#"{{"plugin": "user", "name": "{name}", "size": 10737418240,
            "config": "cairn/vol0@10.0.0.1~7420+10.0.0.2~7420/luns/{name}.img",
            "wwn": "0b7c4f3e-1d2a-4c5b-9e8f-7a6b5c4d3e2f", "attributes": {{}},
            "alua_tpgs": [{{"name": "default_tg_pt_gp", "tg_pt_gp_id": 0}},
                          {{"name": "gw2", "tg_pt_gp_id": 2, "alua_access_state": 0}}]}}"#
        )
    };
    format!(
        r#"{{"fabric_modules": [], "storage_objects": [{}, {},
          {{"plugin": "fileio", "name": "flun0", "dev": "/var/tmp/f.img", "size": 1048576}},
          {{"plugin": "user", "name": "old", "size": 1048576, "config": "cairn/vol0@h~1/luns/old.img", "wwn": "x"}}],
         "targets": [
          {{"fabric": "iscsi", "wwn": "iqn.2024-01.io.cairn:t1", "tpgs": [{{"tag": 1, "enable": true,
            "attributes": {{"authentication": 1, "generate_node_acls": 0, "demo_mode_write_protect": 0, "cache_dynamic_acls": 0}},
            "portals": {portals},
            "luns": [{{"index": 0, "storage_object": "/backstores/user/db", "alua_tg_pt_gp_name": "gw2"}}],
            "node_acls": [{{"node_wwn": "iqn.1994-05.com.redhat:client1", "chap_userid": "alice", "chap_password": "s3cret-pass12",
               "mapped_luns": [{{"index": 0, "tpg_lun": 0, "write_protect": false}}]}}]}}]}},
          {{"fabric": "iscsi", "wwn": "iqn.2024-01.io.cairn:fileio", "tpgs": [{{"tag": 1, "enable": true,
            "luns": [{{"index": 0, "storage_object": "/backstores/fileio/flun0"}}]}}]}},
          {{"fabric": "iscsi", "wwn": "iqn.2024-01.io.cairn:gone", "tpgs": [{{"tag": 1, "enable": true,
            "luns": [{{"index": 0, "storage_object": "/backstores/user/old"}}]}}]}}]}}"#,
        so("db"),
        so("spare")
    )
}

#[test]
fn plan_only_changes_what_differs() {
    let cur = parse_saveconfig(&saveconfig(false)).unwrap();
    assert_eq!(cur.sos.len(), 3, "user:cairn objects only: {cur:?}");
    assert_eq!(cur.targets.len(), 3);
    // Same state except the stale Cairn target and storage object; the foreign fileio
    // target stays.
    assert_eq!(
        plan(&cur, &want(), &BTreeSet::new()),
        ["/iscsi delete iqn.2024-01.io.cairn:gone", "/backstores/user:cairn delete old"]
    );
    let mut exact = cur.clone();
    exact.sos.remove("old");
    exact.targets.remove("iqn.2024-01.io.cairn:gone");
    assert!(plan(&exact, &want(), &BTreeSet::new()).is_empty());
    // An extra portal goes; a changed password is set; a new LUN is mapped and the
    // existing ACL gets it automatically (auto_add_mapped_luns).
    let cur = parse_saveconfig(&saveconfig(true)).unwrap();
    let mut t = target();
    t.acls[0].chap_password = Some("an0ther-pass12".into());
    t.luns.push(TargetLun { lun: 1, name: "spare".into() });
    let w = desired(&[lun("db"), lun("spare")], &[t], &servers(), 2).unwrap();
    let tpg = "/iscsi/iqn.2024-01.io.cairn:t1/tpg1";
    assert_eq!(
        plan(&cur, &w, &BTreeSet::new()),
        [
            "/iscsi delete iqn.2024-01.io.cairn:gone".to_string(),
            format!("{tpg}/portals delete 10.9.9.9 3260"),
            "/backstores/user:cairn delete old".into(),
            format!("{tpg}/luns create /backstores/user:cairn/spare lun=1"),
            format!("{tpg}/luns/lun1 set alua alua_tg_pt_gp_name=gw2"),
            format!("{tpg}/acls/iqn.1994-05.com.redhat:client1 set auth userid=alice password=an0ther-pass12"),
        ]
    );
    // A resized LUN is recreated and mapped again; the foreign target is never touched.
    let mut big = lun("db");
    big.size = 20 << 30;
    let w = desired(&[big, lun("spare")], &[target()], &servers(), 2).unwrap();
    let p = plan(&cur, &w, &BTreeSet::new());
    assert!(p.contains(&"/backstores/user:cairn delete db".to_string()), "{p:#?}");
    assert!(p.contains(&format!("{tpg}/luns create /backstores/user:cairn/db lun=0")), "{p:#?}");
    assert!(!p.iter().any(|c| c.contains("fileio")), "{p:#?}");
    // Open target: no ACLs, demo mode.
    let mut t = target();
    t.open = true;
    let w = desired(&[lun("db"), lun("spare")], &[t], &servers(), 2).unwrap();
    let p = plan(&cur, &w, &BTreeSet::new());
    assert!(p.contains(&format!("{tpg}/acls delete iqn.1994-05.com.redhat:client1")), "{p:#?}");
    assert!(
        p.contains(&format!(
            "{tpg} set attribute authentication=0 cache_dynamic_acls=1 generate_node_acls=1"
        )),
        "{p:#?}"
    );
}

/// The batch one `Targetcli::run` feeds targetcli: preferences, the commands, the
/// system `saveconfig`, then the saveconfig [`Targetcli::read_saved`] reads back (a fake
/// targetcli that records its stdin and writes the file the last line names).
#[test]
fn run_saves_the_state_it_leaves() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("gateway-test-targetcli.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("fake-targetcli");
    let dump = saveconfig(false).replace('\'', "");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ncat >\"$TARGETCLI_HOME/stdin\"\n\
             f=$(sed -n 's/^\\/ saveconfig savefile=//p' \"$TARGETCLI_HOME/stdin\")\n\
             [ -n \"$f\" ] && printf '%s' '{dump}' >\"$f\"\necho Created\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t = Targetcli { program: fake, conf_dir: dir.clone() };
    let log = t.run(&["/iscsi create iqn.2024-01.io.cairn:t1".into()]).unwrap();
    let stdin = std::fs::read_to_string(dir.join("targetcli/stdin")).unwrap();
    let running = dir.join("running.json");
    assert_eq!(
        stdin.lines().collect::<Vec<_>>(),
        [
            TARGETCLI_PREFS,
            "/iscsi create iqn.2024-01.io.cairn:t1",
            "/ saveconfig",
            &format!("/ saveconfig savefile={}", running.display()),
            "exit"
        ]
    );
    assert_eq!(t.read_saved(&log).unwrap(), parse_saveconfig(&saveconfig(false)).unwrap());
    std::fs::remove_file(&running).unwrap();
    assert!(t.read_saved("boom").unwrap_err().to_string().contains("boom"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn desired_needs_mapped_luns() {
    let e = desired(&[], &[target()], &servers(), 1).unwrap_err().to_string();
    assert!(e.contains("maps LUN db, which does not exist"), "{e}");
}
