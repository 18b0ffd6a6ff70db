use super::*;
use crate::principal::{Principal, Role};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

#[test]
fn issued_credentials_round_trip_with_their_principal() {
    let ca = Ca::create("t").unwrap();
    let p = Principal {
        name: "c1".into(),
        role: Role::Client,
        volumes: Some(vec!["a".into(), "b".into()]),
        read_only: true,
    };
    let c = ca.issue(&p, 3).unwrap();
    assert_eq!(c.principal, p);
    let back = Credentials::from_pem(c.to_pem()).unwrap();
    assert_eq!(back.principal, p);
    Transport::tls(&back).unwrap();
    // The CA survives a round trip through its files' text.
    let ca2 = Ca::from_pem(&ca.cert_pem(), &ca.key_pem()).unwrap();
    ca2.issue(&p, 1).unwrap();
    let other = Ca::create("u").unwrap();
    assert!(Ca::from_pem(&ca.cert_pem(), &other.key_pem()).is_err());
}

#[test]
fn ca_hash_format() {
    let ca = Ca::create("t").unwrap();
    let h = ca_cert_hash(&ca.cert_pem()).unwrap();
    assert!(h.starts_with("sha256:") && h.len() == 7 + 64, "{h}");
    assert_eq!(parse_ca_cert_hash(&h.to_uppercase().replace("SHA256:", "sha256:")).unwrap(), h);
    let c = ca.issue(&Principal::new("n", Role::Node), 1).unwrap();
    assert_eq!(c.ca_cert_hash(), h);
    for (bad, why) in [
        ("abc", "does not start with sha256:"),
        ("sha256:12", "found 2 characters"),
        (&format!("sha1:{}", &h[7..]), "does not start with sha256:"),
        (&format!("sha256:{}", "g".repeat(64)), "64 hex digits"),
    ] {
        let e = parse_ca_cert_hash(bad).unwrap_err().to_string();
        assert!(e.contains(why), "{bad}: {e}");
        assert!(!e.contains("  "), "{bad}: {e}");
    }
}

#[test]
fn a_node_request_becomes_credentials_only_from_the_pinned_ca() {
    let ca = Ca::create("t").unwrap();
    let pin = ca_cert_hash(&ca.cert_pem()).unwrap();
    let r = NodeRequest::new("n2").unwrap();
    let (name, asked) = csr_subject(&r.csr_pem).unwrap();
    assert_eq!(name, "n2");
    assert_eq!(asked, Some(Principal::new("n2", Role::Node)));
    let cert = issue_node_cert(&ca, "n2", &r.csr_pem).unwrap();
    let c = r.credentials(&cert, &ca.cert_pem(), &pin).unwrap();
    assert_eq!(c.principal, Principal::new("n2", Role::Node));
    Transport::tls(&c).unwrap();
    // Another CA (the pin says which one is right).
    let other = Ca::create("u").unwrap();
    let e = r.credentials(&cert, &other.cert_pem(), &pin).err().unwrap().to_string();
    assert!(e.contains("not the pinned"), "{e}");
    let cert_other = issue_node_cert(&other, "n2", &r.csr_pem).unwrap();
    let e = r.credentials(&cert_other, &ca.cert_pem(), &pin).err().unwrap().to_string();
    assert!(e.contains("not signed by the pinned CA"), "{e}");
    // A certificate for another key, or another name.
    let r2 = NodeRequest::new("n2").unwrap();
    let e = r2.credentials(&cert, &ca.cert_pem(), &pin).err().unwrap().to_string();
    assert!(e.contains("not for this node's key"), "{e}");
    let cert3 = issue_node_cert(&ca, "n3", &r.csr_pem).unwrap();
    let e = r.credentials(&cert3, &ca.cert_pem(), &pin).err().unwrap().to_string();
    assert!(e.contains("not node n2"), "{e}");
    // A request asking for the admin role says so.
    let adm = NodeRequest::for_principal(&Principal::new("x", Role::Admin)).unwrap();
    assert_eq!(csr_subject(&adm.csr_pem).unwrap().1.unwrap().role, Role::Admin);
    assert!(csr_subject(
        "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"
    )
    .is_err());
}

#[test]
fn node_certificates_from_a_request() {
    let ca = Ca::create("t").unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = rcgen::CertificateParams::default().serialize_request(&key).unwrap();
    let pem = issue_node_cert(&ca, "n2", &csr.pem().unwrap()).unwrap();
    let cert = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    assert_eq!(principal_of(&cert).unwrap(), Principal::new("n2", Role::Node));
}
