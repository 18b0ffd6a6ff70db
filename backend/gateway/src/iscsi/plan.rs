//! The targetcli commands between two LIO states.

use super::lio::{Lio, Tgt};
use std::collections::{BTreeMap, BTreeSet};

/// The targetcli commands that take LIO from `cur` to `want`, in an order targetcli
/// accepts. Only Cairn's objects are touched: `user:cairn` storage objects, targets in
/// `want`, and targets that `managed` lists (applied earlier) or that map a Cairn LUN.
/// Expects targetcli preferences `auto_add_default_portal=false`,
/// `auto_add_mapped_luns=true`, `auto_enable_tpgt=true` ([`TARGETCLI_PREFS`]).
pub fn plan(cur: &Lio, want: &Lio, managed: &BTreeSet<String>) -> Vec<String> {
    let mut cmds = vec![];
    // Storage objects that must be (re)created: deleting one also unmaps it everywhere.
    let recreate: BTreeSet<&String> = want
        .sos
        .iter()
        .filter(|(n, so)| {
            cur.sos
                .get(*n)
                .map(|c| c.size != so.size || c.config != so.config || c.wwn != so.wwn)
                .unwrap_or(true)
        })
        .map(|(n, _)| n)
        .collect();
    let stale = |so: &str| {
        so.strip_prefix("user:cairn/").is_some_and(|n| recreate.contains(&n.to_string()))
    };

    // 1. targets that are ours and no longer wanted; unwanted parts of wanted ones
    for (iqn, t) in &cur.targets {
        if want.targets.contains_key(iqn) {
            continue;
        }
        let ours =
            managed.contains(iqn) || t.luns.values().any(|(so, _)| so.starts_with("user:cairn/"));
        if ours {
            cmds.push(format!("/iscsi delete {iqn}"));
        }
    }
    for (iqn, w) in &want.targets {
        let Some(c) = cur.targets.get(iqn) else { continue };
        let tpg = format!("/iscsi/{iqn}/tpg1");
        for (n, l) in &c.luns {
            if w.luns.get(n).map(|x| &x.0) != Some(&l.0) && !stale(&l.0) {
                cmds.push(format!("{tpg}/luns delete lun={n}"));
            }
        }
        for a in c.acls.keys() {
            if !w.acls.contains_key(a) {
                cmds.push(format!("{tpg}/acls delete {a}"));
            }
        }
        for (ip, port) in &c.portals {
            if !w.portals.contains(&(ip.clone(), *port)) {
                cmds.push(format!("{tpg}/portals delete {ip} {port}"));
            }
        }
    }
    // 2. storage objects
    for name in cur.sos.keys() {
        if !want.sos.contains_key(name) || recreate.contains(name) {
            cmds.push(format!("/backstores/user:cairn delete {name}"));
        }
    }
    for (name, so) in &want.sos {
        let fresh = recreate.contains(name);
        if fresh {
            cmds.push(format!(
                "/backstores/user:cairn create name={name} size={} cfgstring={} wwn={}",
                so.size,
                so.config.trim_start_matches("cairn/"),
                so.wwn
            ));
        }
        let have = if fresh { BTreeMap::new() } else { cur.sos[name].alua.clone() };
        for (g, tag) in &have {
            if so.alua.get(g) != Some(tag) {
                cmds.push(format!("/backstores/user:cairn/{name}/alua delete {g}"));
            }
        }
        for (g, tag) in &so.alua {
            if have.get(g) != Some(tag) {
                cmds.push(format!("/backstores/user:cairn/{name}/alua create name={g} tag={tag}"));
                cmds.push(format!(
                    "/backstores/user:cairn/{name}/alua/{g} set alua alua_access_type=1 \
                     alua_access_state=0"
                ));
            }
        }
    }
    // 3. targets: create, then portals, LUNs, ACLs (which map every LUN), attributes
    for (iqn, w) in &want.targets {
        let tpg = format!("/iscsi/{iqn}/tpg1");
        let empty = Tgt::default();
        let c = match cur.targets.get(iqn) {
            Some(c) => c,
            None => {
                cmds.push(format!("/iscsi create {iqn}"));
                &empty
            }
        };
        for (ip, port) in &w.portals {
            if !c.portals.contains(&(ip.clone(), *port)) {
                cmds.push(format!("{tpg}/portals create {ip} {port}"));
            }
        }
        let mut created = BTreeSet::new();
        for (n, (so, group)) in &w.luns {
            let have = c.luns.get(n).filter(|l| &l.0 == so && !stale(so));
            if have.is_none() {
                created.insert(*n);
                cmds.push(format!("{tpg}/luns create /backstores/{so} lun={n}"));
            }
            if have.map(|l| &l.1) != Some(group) {
                cmds.push(format!("{tpg}/luns/lun{n} set alua alua_tg_pt_gp_name={group}"));
            }
        }
        for (init, a) in &w.acls {
            let acl = format!("{tpg}/acls/{init}");
            // targetcli cannot clear CHAP credentials: an ACL losing them is made again
            let have = c.acls.get(init).filter(|h| h.userid.is_empty() || !a.userid.is_empty());
            match have {
                None => {
                    if c.acls.contains_key(init) {
                        cmds.push(format!("{tpg}/acls delete {init}"));
                    }
                    cmds.push(format!("{tpg}/acls create {init}"));
                }
                Some(h) => {
                    for n in a.mapped.difference(&h.mapped) {
                        if !created.contains(n) {
                            cmds.push(format!(
                                "{acl} create mapped_lun={n} tpg_lun_or_backstore={n}"
                            ));
                        }
                    }
                }
            }
            let (u, p) = have.map(|h| (h.userid.as_str(), h.password.as_str())).unwrap_or(("", ""));
            if !a.userid.is_empty() && (u, p) != (a.userid.as_str(), a.password.as_str()) {
                cmds.push(format!("{acl} set auth userid={} password={}", a.userid, a.password));
            }
        }
        let changed: Vec<String> = w
            .attrs
            .iter()
            .filter(|(k, v)| c.attrs.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !changed.is_empty() {
            cmds.push(format!("{tpg} set attribute {}", changed.join(" ")));
        }
        if cur.targets.contains_key(iqn) && !c.enabled {
            cmds.push(format!("{tpg} enable"));
        }
    }
    cmds
}
