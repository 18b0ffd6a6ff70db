use super::ctdb::{ctdb_problems, parse_ctdb_status, HaCtdb};
use super::drain::{check_node, drain_done, render_drain, undrain_done, vips_on, HaDrain, HaMove};
use super::fence::{fence_next, pending_nodes, AppliedReport};
use super::status::{render, summarize};

const XML: &str = r#"<?xml version="1.0"?>
<pacemaker-result api-version="2.30" request="crm_mon --one-shot --output-as=xml">
  <summary>
<stack type="corosync"/>
<current_dc present="true" version="2.1.5" name="gw2" id="2" with_quorum="true"/>
<cluster_options stonith-enabled="true" symmetric-cluster="true" no-quorum-policy="stop"/>
  </summary>
  <nodes>
<node name="gw1" id="1" online="false" standby="false" unclean="true" type="member"/>
<node name="gw2" id="2" online="true" standby="true" unclean="false" type="member"/>
<node name="gw3" id="3" online="true" standby="false" unclean="false" type="member"/>
  </nodes>
  <resources>
<clone id="cairn-gw-clone" multi_state="false" unique="false">
  <resource id="cairn-gw" resource_agent="ocf:cairn:cairn-gateway" role="Started" active="true" nodes_running_on="1">
    <node name="gw3" id="3" cached="true"/>
  </resource>
  <resource id="cairn-gw" resource_agent="ocf:cairn:cairn-gateway" role="Stopped" active="false" nodes_running_on="0"/>
</clone>
<group id="vip1-grp" number_resources="2">
  <resource id="vip1-grace" resource_agent="ocf:cairn:cairn-nfs-grace" role="Started" nodes_running_on="1">
    <node name="gw3" id="3" cached="true"/>
  </resource>
  <resource id="vip1" resource_agent="ocf:heartbeat:IPaddr2" role="Started" nodes_running_on="1">
    <node name="gw3" id="3" cached="true"/>
  </resource>
</group>
<group id="vip2-grp" number_resources="1">
  <resource id="vip2" resource_agent="ocf:heartbeat:IPaddr2" role="Stopped" nodes_running_on="0"/>
</group>
  </resources>
  <failures>
<failure op_key="cairn-gw_monitor_3000" node="gw2" exitstatus="error" exitreason="Ganesha does not answer an NFSv4 NULL RPC on 127.0.0.1:2049 &amp; more" exitcode="1" call="42"/>
  </failures>
  <status code="0" message="OK"/>
</pacemaker-result>
"#;

#[test]
fn summarizes_crm_mon_xml() {
    let st = summarize(XML).unwrap();
    assert!(st.quorum && st.stonith_enabled);
    assert_eq!(st.dc.as_deref(), Some("gw2"));
    assert_eq!(st.nodes.len(), 3);
    assert!(st.nodes[0].unclean && !st.nodes[0].online);
    assert!(st.nodes[1].standby);
    assert_eq!(st.healthy, vec!["gw3".to_string()]);
    assert_eq!(st.vips.len(), 2);
    assert_eq!(st.vips[0].nodes, vec!["gw3".to_string()]);
    assert!(st.vips[1].nodes.is_empty());
    assert_eq!(st.failures.len(), 1);
    assert_eq!(
        st.failures[0].exit_reason,
        "Ganesha does not answer an NFSv4 NULL RPC on 127.0.0.1:2049 & more"
    );
    assert_eq!(
        st.problems,
        vec![
            "gateway gw1 is lost and not fenced yet".to_string(),
            "VIP vip2 runs nowhere".to_string()
        ]
    );
    let text = render(&st);
    assert!(text.contains("gw2              standby"), "{text}");
    assert!(text.contains("vip1             gw3"), "{text}");
}

#[test]
fn a_vip_on_two_gateways_is_a_problem() {
    let xml = XML.replace(
        r#"<node name="gw3" id="3" cached="true"/>
  </resource>
</group>"#,
        r#"<node name="gw3" id="3" cached="true"/>
    <node name="gw1" id="1" cached="true"/>
  </resource>
</group>"#,
    );
    let st = summarize(&xml).unwrap();
    assert!(
        st.problems.iter().any(|p| p == "VIP vip1 runs on 2 gateways: gw3, gw1"),
        "{:?}",
        st.problems
    );
}

#[test]
fn ctdb_status() {
    let x = "|Node|IP|Disconnected|Unknown|Banned|Disabled|Unhealthy|Stopped|Inactive|PartiallyOnline|ThisNode|
|0|10.78.0.21|1|0|0|0|1|0|1|0|N|
|1|10.78.0.22|0|0|0|0|0|0|0|0|N|
|2|10.78.0.23|0|0|0|0|1|0|0|0|Y|
";
    let nodes = parse_ctdb_status(x).unwrap();
    let states: Vec<&str> = nodes.iter().map(|n| n.state.as_str()).collect();
    assert_eq!(states, ["DISCONNECTED", "OK", "UNHEALTHY"]);
    assert!(nodes[2].this_node && !nodes[0].this_node);
    assert_eq!(nodes[1].address, "10.78.0.22");
    let c = HaCtdb { leader: Some(1), nodes };
    assert_eq!(
        ctdb_problems(&c),
        vec!["CTDB node 2 (10.78.0.23) is UNHEALTHY: its smbd cannot serve".to_string()]
    );
    let mut st = summarize(XML).unwrap();
    st.ctdb = Some(c);
    let text = render(&st);
    assert!(text.contains("CTDB (clustered Samba): leader pnn 1"), "{text}");
    assert!(text.contains("pnn 2   10.78.0.23       UNHEALTHY (this gateway)"), "{text}");
    assert!(parse_ctdb_status("connect() failed, errno=2").is_err());
}

#[test]
fn no_quorum_and_garbage() {
    let st = summarize(&XML.replace(r#"with_quorum="true""#, r#"with_quorum="false""#)).unwrap();
    assert!(st.problems[0].starts_with("no quorum"));
    assert!(summarize("Connection to cluster failed").is_err());
    let down = r#"<pacemaker-result api-version="2.25" request="crm_mon --one-shot --output-as=xml">
  <status code="102" message="Not connected">
<errors>
  <error>crm_mon: Connection to cluster failed: Connection refused</error>
</errors>
  </status>
</pacemaker-result>"#;
    let e = summarize(down).unwrap_err();
    assert!(e.contains("status 102, Not connected): crm_mon: Connection to cluster failed"), "{e}");
}

#[test]
fn drain_parsing_and_progress() {
    use crate::args::{Cli, Command as C, GatewayCmd, GatewayHaCmd};
    use clap::Parser;
    let cli = Cli::try_parse_from(["cairn", "--json", "gateway", "ha", "drain", "gw2"]).unwrap();
    assert!(cli.json);
    let C::Gateway(GatewayCmd::Ha(GatewayHaCmd::Drain(a))) = cli.command else {
        panic!("not drain: {:?}", cli.command)
    };
    assert_eq!((a.node.as_str(), a.timeout), ("gw2", 120));
    let cli = Cli::try_parse_from(["cairn", "gateway", "ha", "undrain", "gw1", "--timeout", "9"])
        .unwrap();
    assert!(matches!(
        cli.command,
        C::Gateway(GatewayCmd::Ha(GatewayHaCmd::Undrain(ref a))) if a.node == "gw1" && a.timeout == 9
    ));
    assert!(Cli::try_parse_from(["cairn", "gateway", "ha", "drain"]).is_err());
    assert!(
        Cli::try_parse_from(["cairn", "gateway", "ha", "drain", "gw1", "--timeout", "x"]).is_err()
    );

    let st = summarize(XML).unwrap();
    assert_eq!(check_node(&st, "gw3"), Ok(()));
    assert_eq!(
        check_node(&st, "gw9"),
        Err("'gw9' is not a gateway of this Pacemaker cluster (its gateways: gw1, gw2, gw3)"
            .to_string())
    );
    assert_eq!(vips_on(&st, "gw3"), vec!["vip1".to_string()]);
    // gw3 still holds vip1 and is not on standby
    assert_eq!(drain_done(&st, "gw3", &["vip1".into()]), Err("gw3 is not on standby yet".into()));
    let on_standby = XML.replace(
        r#"name="gw3" id="3" online="true" standby="false""#,
        r#"name="gw3" id="3" online="true" standby="true""#,
    );
    let st = summarize(&on_standby).unwrap();
    assert_eq!(drain_done(&st, "gw3", &["vip1".into()]), Err("vip1 still runs on gw3".into()));
    assert_eq!(drain_done(&st, "gw3", &["vip2".into()]), Err("vip2 runs nowhere".into()));
    let moved = on_standby.replace(
        r#"<resource id="vip1" resource_agent="ocf:heartbeat:IPaddr2" role="Started" nodes_running_on="1">
    <node name="gw3" id="3" cached="true"/>"#,
        r#"<resource id="vip1" resource_agent="ocf:heartbeat:IPaddr2" role="Started" nodes_running_on="1">
    <node name="gw2" id="2" cached="true"/>"#,
    );
    let st = summarize(&moved).unwrap();
    let m = drain_done(&st, "gw3", &["vip1".into()]).unwrap();
    assert_eq!(m, vec![HaMove { vip: "vip1".into(), from: "gw3".into(), to: "gw2".into() }]);
    let d = HaDrain { node: "gw3".into(), action: "drain".into(), vips: m, seconds: 2.5 };
    assert_eq!(
        render_drain(&d),
        "gw3 drained (standby) in 2.5s; its VIPs moved:\n  vip1: gw3 -> gw2\n"
    );

    // undrain: gw2 is on standby, gw3 healthy but vip2 runs nowhere
    let st = summarize(XML).unwrap();
    assert_eq!(undrain_done(&st, "gw2"), Err("gw2 is still on standby".into()));
    assert_eq!(undrain_done(&st, "gw1"), Err("gw1 is offline".into()));
    assert_eq!(undrain_done(&st, "gw3"), Err("vip2 runs on 0 gateways".into()));
}

#[test]
fn a_fence_raises_the_generation_and_an_unfence_keeps_it() {
    let f1 = fence_next("gw1", None, true, None, "pacemaker", 5).unwrap();
    assert_eq!((f1.fenced, f1.generation, f1.reason.as_str()), (true, 1, "pacemaker"));
    let u1 = fence_next("gw1", Some(&f1), false, Some(1), "", 6).unwrap();
    assert_eq!((u1.fenced, u1.generation), (false, 1));
    let f2 = fence_next("gw1", Some(&u1), true, None, "", 7).unwrap();
    assert_eq!((f2.fenced, f2.generation), (true, 2));
    // An unfence of generation 1 does not lift the fence of generation 2.
    let e = fence_next("gw1", Some(&f2), false, Some(1), "", 8).unwrap_err();
    assert!(e.contains("fenced again since generation 1 (now generation 2)"), "{e}");
    assert!(!fence_next("gw1", Some(&f2), false, None, "", 8).unwrap().fenced);
}

#[test]
fn lists_the_fence_history_oldest_first() {
    let xml = XML.replace(
        "  <status code=\"0\"",
        r#"  <fence_history status="0">
<fence_event action="off" target="gw1" client="pacemaker-controld.812" origin="gw2" status="success" delegate="gw3" completed="2026-11-27 20:31:07 +00:00"/>
<fence_event action="reboot" target="gw2" client="stonith_admin.77" origin="gw3" status="failed" delegate="gw1" extended-status="No fence device" exit-reason="gw2 &amp; co" completed="2026-11-27 20:01:02 +00:00"/>
<fence_event action="off" target="gw3" client="pacemaker-controld.812" origin="gw2" status="pending"/>
  </fence_history>
  <status code="0""#,
    );
    let st = summarize(&xml).unwrap();
    let got: Vec<_> = st
        .fences
        .iter()
        .map(|f| (f.target.as_str(), f.action.as_str(), f.status.as_str(), f.executed_by.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("gw2", "reboot", "failed", "gw1"),
            ("gw1", "off", "success", "gw3"),
            ("gw3", "off", "pending", "")
        ]
    );
    assert_eq!(st.fences[0].reason, "No fence device: gw2 & co");
    assert_eq!(st.fences[1].requested_by, "gw2");
    assert_eq!(st.fences[1].completed, "2026-11-27 20:31:07 +00:00");
    let text = render(&st);
    assert!(
        text.contains("gw1              off by gw3 for gw2: success at 2026-11-27 20:31:07 +00:00"),
        "{text}"
    );
    assert!(
        text.contains("gw2              reboot by gw1 for gw3: failed (No fence device: gw2 & co)"),
        "{text}"
    );
    assert!(text.contains("gw3              off by ? for gw2: pending\n"), "{text}");
    let json = serde_json::to_value(&st).unwrap();
    assert_eq!(json["fences"][1]["executed_by"], "gw3");
    // no history: an empty list, nothing printed
    let st = summarize(XML).unwrap();
    assert!(st.fences.is_empty() && !render(&st).contains("Fencing history"));
}

#[test]
fn a_fence_waits_for_every_live_node_that_has_not_applied_its_generation() {
    let rep = |node: &str, gens: &[(&str, u64)]| AppliedReport {
        node: node.into(),
        generations: gens.iter().map(|(g, n)| (g.to_string(), *n)).collect(),
        at: 1,
    };
    let live: Vec<String> = ["n1", "n2", "n3", "n4"].map(String::from).to_vec();
    let reports = [
        rep("n1", &[("gw1", 2)]),
        rep("n2", &[("gw1", 1), ("gw2", 7)]),
        rep("n3", &[("gw2", 7)]),
        rep("n5", &[]), // not live: its lease expired, it serves nothing
    ];
    let p = pending_nodes(&live, &reports, "gw1", 2);
    assert_eq!(
        p,
        vec![
            ("n2".to_string(), "generation 1".to_string()),
            ("n3".to_string(), "no record of gw1".to_string()),
            ("n4".to_string(), "no report".to_string()),
        ]
    );
    // a later generation (a fence, or its unfence) covers this one
    let reports = [rep("n1", &[("gw1", 3)]), rep("n2", &[("gw1", 2)])];
    assert!(pending_nodes(&live[..2], &reports, "gw1", 2).is_empty());
}
