use super::*;
use crate::principal::{Principal, Role};
use std::sync::OnceLock;

pub fn ca() -> &'static Ca {
    static CA: OnceLock<Ca> = OnceLock::new();
    CA.get_or_init(|| Ca::create("test").expect("test CA"))
}

pub fn credentials(p: &Principal) -> Credentials {
    ca().issue(p, 1).expect("test credentials")
}

pub fn transport(p: &Principal) -> Transport {
    Transport::tls(&credentials(p)).expect("test transport")
}

/// Make TLS with a node certificate this process's default transport (both ends of
/// the tests' connections).
pub fn use_for_process() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| set_default(transport(&Principal::new("test-node", Role::Node))));
}
