//! Loopback ports for the processes tests start (brokers, operators).

use std::collections::BTreeSet;
use std::sync::Mutex;

/// A free port on 127.0.0.1 that no earlier call of this process returned.
/// The kernel picks it (bind to port 0) and it is released for the caller's
/// process to bind; because a released port is soon handed out again, two
/// calls in a row (a broker's Kafka and HTTP listeners) could otherwise get
/// the same one.
pub fn unused_loopback_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind a loopback port")
            .port();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn never_the_same_port_twice() {
        let ports: Vec<u16> = (0..200).map(|_| super::unused_loopback_port()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
    }
}
