//! Broker registrations as the controller keeps them: who is registered,
//! with which incarnation and broker epoch, and who is fenced because its
//! heartbeats stopped. Pure state and decisions; the gRPC edge feeds it
//! requests and a clock.
//!
//! The rules (Kafka's KRaft registration, adapted):
//! - a node id registers with an incarnation id (new at every process
//!   start) and gets a broker epoch that only grows across the cluster;
//! - the same incarnation registering again is a retry: same epoch;
//! - a new incarnation of a node id is refused while the old one is live
//!   (two processes claiming one id is a configuration error that must not
//!   be papered over), and accepted once the old one is fenced (a restart),
//!   or at once when it proves it succeeds the live one: the same
//!   succession hash, which only a process holding the node's data
//!   directory can present (see `crate::data_dir`);
//! - a heartbeat must carry the current incarnation and epoch, else it is
//!   stale and the sender must register again;
//! - a broker whose last heartbeat is older than the session timeout is
//!   fenced: it leads nothing and is not in any ISR until it registers and
//!   heartbeats again.

use std::collections::BTreeMap;

use moldau_coordination::records::RegisteredBroker;
use uuid::Uuid;

/// What a broker sends to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub node_id: i32,
    pub incarnation: Uuid,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// SHA-256 of its data directory's succession token, when it sent one.
    pub succession_hash: Option<String>,
    /// Every advertised listener (`host`/`port` are the inter-broker
    /// one's); empty from an older broker.
    pub endpoints: Vec<crate::image::ListenerEndpoint>,
}

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub registration: Registration,
    pub broker_epoch: i64,
    pub last_heartbeat_ms: i64,
    pub fenced: bool,
    /// It shut down cleanly (Unregister): fenced for good, whatever its
    /// heartbeats say, until it registers again (a new incarnation).
    pub shut_down: bool,
}

/// Why a registration or heartbeat is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("node id {node_id} is held by a live broker (incarnation {live}); refusing incarnation {refused}")]
    DuplicateNodeId {
        node_id: i32,
        live: Uuid,
        refused: Uuid,
    },
    #[error("node id {0} must be between 0 and 2^31-1")]
    BadNodeId(i32),
    #[error(
        "heartbeat from node {node_id} carries a stale incarnation or broker epoch; register again"
    )]
    StaleBroker { node_id: i32 },
}

/// Every registration the controller knows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    brokers: BTreeMap<i32, Registered>,
    next_epoch: i64,
}

impl Registry {
    /// A registry that hands out broker epochs from `next_epoch` (a new
    /// controller resumes from the persisted value so epochs never repeat).
    pub fn resuming(next_epoch: i64) -> Self {
        Self {
            brokers: BTreeMap::new(),
            next_epoch,
        }
    }

    /// The registrations a new controller term finds persisted: each keeps
    /// its incarnation, epoch and fenced state, with its session restarted
    /// at `now_ms`, so brokers carry on heartbeating to the new controller
    /// without registering again, and one that is gone is fenced a session
    /// timeout later. Epochs resume above every persisted one.
    pub fn restore(persisted: &[RegisteredBroker], now_ms: i64) -> Self {
        let mut brokers = BTreeMap::new();
        let mut next_epoch = 0;
        for b in persisted {
            let Ok(incarnation) = Uuid::parse_str(&b.incarnation) else {
                continue;
            };
            next_epoch = next_epoch.max(b.broker_epoch + 1);
            brokers.insert(
                b.node_id,
                Registered {
                    registration: Registration {
                        node_id: b.node_id,
                        incarnation,
                        host: b.host.clone(),
                        port: b.port,
                        rack: b.rack.clone(),
                        succession_hash: b.succession_hash.clone(),
                        endpoints: b
                            .endpoints
                            .iter()
                            .map(|e| crate::image::ListenerEndpoint {
                                name: e.name.clone(),
                                host: e.host.clone(),
                                port: e.port,
                                security_protocol: e.security_protocol.clone(),
                            })
                            .collect(),
                    },
                    broker_epoch: b.broker_epoch,
                    last_heartbeat_ms: now_ms,
                    fenced: b.fenced,
                    shut_down: false,
                },
            );
        }
        Self {
            brokers,
            next_epoch,
        }
    }

    /// Every registration, as the cluster record persists them.
    pub fn to_records(&self) -> Vec<RegisteredBroker> {
        self.brokers
            .values()
            .map(|b| RegisteredBroker {
                node_id: b.registration.node_id,
                host: b.registration.host.clone(),
                port: b.registration.port,
                rack: b.registration.rack.clone(),
                incarnation: b.registration.incarnation.to_string(),
                broker_epoch: b.broker_epoch,
                fenced: b.fenced,
                succession_hash: b.registration.succession_hash.clone(),
                endpoints: b
                    .registration
                    .endpoints
                    .iter()
                    .map(|e| moldau_coordination::records::ListenerEndpointRecord {
                        name: e.name.clone(),
                        host: e.host.clone(),
                        port: e.port,
                        security_protocol: e.security_protocol.clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Registers (or re-registers) a broker at `now_ms`; returns its
    /// broker epoch.
    pub fn register(
        &mut self,
        r: Registration,
        now_ms: i64,
        session_timeout_ms: i64,
    ) -> Result<i64, RegistryError> {
        if r.node_id < 0 {
            return Err(RegistryError::BadNodeId(r.node_id));
        }
        if let Some(current) = self.brokers.get_mut(&r.node_id) {
            if current.registration.incarnation == r.incarnation {
                // a retry of the same registration (address may be updated)
                current.registration = r;
                current.last_heartbeat_ms = now_ms;
                return Ok(current.broker_epoch);
            }
            let live = !current.fenced && !expired(current, now_ms, session_timeout_ms);
            if live && !succeeds(current, &r) {
                return Err(RegistryError::DuplicateNodeId {
                    node_id: r.node_id,
                    live: current.registration.incarnation,
                    refused: r.incarnation,
                });
            }
        }
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        self.brokers.insert(
            r.node_id,
            Registered {
                registration: r,
                broker_epoch: epoch,
                last_heartbeat_ms: now_ms,
                // registered, but not in service until its first heartbeat
                // after the controller has sent it the metadata
                fenced: true,
                shut_down: false,
            },
        );
        Ok(epoch)
    }

    /// Whether registering `r` takes the place of an incarnation that is
    /// still in service (a proven restart: see [`Registry::register`]);
    /// its leaderships must then move as if it had been fenced.
    pub fn replaces_live(&self, r: &Registration, now_ms: i64, session_timeout_ms: i64) -> bool {
        self.brokers.get(&r.node_id).is_some_and(|current| {
            current.registration.incarnation != r.incarnation
                && !current.fenced
                && !expired(current, now_ms, session_timeout_ms)
                && succeeds(current, r)
        })
    }

    /// A heartbeat. `ready` means the broker has caught up with the
    /// metadata and can lead partitions: it is then unfenced. Returns
    /// whether this heartbeat unfenced it.
    pub fn heartbeat(
        &mut self,
        node_id: i32,
        incarnation: Uuid,
        broker_epoch: i64,
        ready: bool,
        now_ms: i64,
    ) -> Result<bool, RegistryError> {
        let current = self
            .brokers
            .get_mut(&node_id)
            .filter(|c| c.registration.incarnation == incarnation && c.broker_epoch == broker_epoch)
            .ok_or(RegistryError::StaleBroker { node_id })?;
        current.last_heartbeat_ms = now_ms;
        // a heartbeat sent while it was shutting down never brings it back
        let unfenced = current.fenced && ready && !current.shut_down;
        if unfenced {
            current.fenced = false;
        }
        Ok(unfenced)
    }

    /// Fences every live broker whose heartbeats stopped; returns their ids.
    pub fn expire(&mut self, now_ms: i64, session_timeout_ms: i64) -> Vec<i32> {
        let mut fenced = Vec::new();
        for (id, b) in &mut self.brokers {
            if !b.fenced && expired(b, now_ms, session_timeout_ms) {
                b.fenced = true;
                fenced.push(*id);
            }
        }
        fenced
    }

    /// The controller itself was away for `gap_ms` (paused, or blocked
    /// behind a slow store write): heartbeats that arrived meanwhile are
    /// still queued, unread, so no broker can be blamed for that time.
    /// Every session is moved forward by the gap, as if the clock had
    /// stopped with the controller; a broker silent before the gap keeps
    /// what it had used of its session.
    /// A heartbeat already read after the gap is not moved past `now_ms`.
    pub fn excuse_gap(&mut self, gap_ms: i64, now_ms: i64) {
        if gap_ms <= 0 {
            return;
        }
        for b in self.brokers.values_mut() {
            let moved = b.last_heartbeat_ms.saturating_add(gap_ms);
            b.last_heartbeat_ms = b.last_heartbeat_ms.max(moved.min(now_ms));
        }
    }

    /// Moves `node_id`'s session back so that it ends `grace_ms` from
    /// `now_ms` unless it heartbeats before (a broker that is known to
    /// have been silent, such as the previous controller's at a take-over).
    pub fn shorten_session(
        &mut self,
        node_id: i32,
        now_ms: i64,
        grace_ms: i64,
        session_timeout_ms: i64,
    ) {
        if let Some(b) = self.brokers.get_mut(&node_id) {
            let ends = now_ms
                .saturating_add(grace_ms)
                .saturating_sub(session_timeout_ms);
            b.last_heartbeat_ms = b.last_heartbeat_ms.min(ends);
        }
    }

    /// Takes back a fencing that could not be persisted (decided again at
    /// the next expiry check).
    pub fn unexpire(&mut self, node_id: i32) {
        if let Some(b) = self.brokers.get_mut(&node_id) {
            b.fenced = false;
            b.shut_down = false;
        }
    }

    /// A clean shutdown (Unregister): fenced, and kept fenced by later
    /// heartbeats of the same incarnation (one may already be on its way).
    pub fn shut_down(&mut self, node_id: i32) {
        if let Some(b) = self.brokers.get_mut(&node_id) {
            b.fenced = true;
            b.shut_down = true;
        }
    }

    /// Takes a broker out of service again (its unfencing could not be
    /// persisted).
    pub fn fence(&mut self, node_id: i32) {
        if let Some(b) = self.brokers.get_mut(&node_id) {
            b.fenced = true;
        }
    }

    /// Brokers in service (registered and not fenced), by node id.
    pub fn live(&self) -> impl Iterator<Item = &Registered> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// Every registered broker, fenced ones too, by node id.
    pub fn all(&self) -> impl Iterator<Item = &Registered> {
        self.brokers.values()
    }

    pub fn is_live(&self, node_id: i32) -> bool {
        self.brokers.get(&node_id).is_some_and(|b| !b.fenced)
    }

    pub fn get(&self, node_id: i32) -> Option<&Registered> {
        self.brokers.get(&node_id)
    }

    /// The next broker epoch to hand out (to persist).
    pub fn next_epoch(&self) -> i64 {
        self.next_epoch
    }
}

/// Whether `r` proves it succeeds `current`: both carry the same
/// succession hash.
fn succeeds(current: &Registered, r: &Registration) -> bool {
    matches!(
        (&current.registration.succession_hash, &r.succession_hash),
        (Some(a), Some(b)) if a == b
    )
}

fn expired(b: &Registered, now_ms: i64, session_timeout_ms: i64) -> bool {
    now_ms.saturating_sub(b.last_heartbeat_ms) > session_timeout_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: i64 = 9_000;

    fn reg(node_id: i32, incarnation: Uuid) -> Registration {
        Registration {
            node_id,
            incarnation,
            host: format!("127.0.0.{}", node_id + 1),
            port: 9092,
            rack: None,
            succession_hash: None,
            endpoints: vec![],
        }
    }

    #[test]
    fn a_restart_proving_succession_replaces_a_live_incarnation_at_once() {
        let mut r = Registry::default();
        let old = Uuid::new_v4();
        let with = |inc, hash: Option<&str>| Registration {
            succession_hash: hash.map(str::to_string),
            ..reg(3, inc)
        };
        let e = r.register(with(old, Some("h")), 0, SESSION).unwrap();
        r.heartbeat(3, old, e, true, 0).unwrap();
        // a process from another directory: refused
        let impostor = with(Uuid::new_v4(), Some("other"));
        assert!(!r.replaces_live(&impostor, 1, SESSION));
        assert!(r.register(impostor, 1, SESSION).is_err());
        let tokenless = with(Uuid::new_v4(), None);
        assert!(r.register(tokenless, 1, SESSION).is_err());
        // the same directory after a restart: replaces it, fenced until ready
        let new = with(Uuid::new_v4(), Some("h"));
        assert!(r.replaces_live(&new, 2, SESSION));
        let e2 = r.register(new.clone(), 2, SESSION).unwrap();
        assert!(e2 > e);
        assert!(!r.is_live(3));
        assert_eq!(
            r.heartbeat(3, old, e, true, 3),
            Err(RegistryError::StaleBroker { node_id: 3 })
        );
        assert!(
            !r.replaces_live(&new, 3, SESSION),
            "a retry replaces nothing"
        );
        // persisted and restored with the hash
        let restored = Registry::restore(&r.to_records(), 10);
        assert_eq!(
            restored
                .get(3)
                .unwrap()
                .registration
                .succession_hash
                .as_deref(),
            Some("h")
        );
    }

    #[test]
    fn a_broker_that_shut_down_stays_fenced_until_it_registers_again() {
        let mut r = Registry::default();
        let inc = Uuid::new_v4();
        let e = r.register(reg(2, inc), 0, SESSION).unwrap();
        assert_eq!(r.heartbeat(2, inc, e, true, 1), Ok(true));
        r.shut_down(2);
        assert!(!r.is_live(2));
        // a heartbeat it sent while stopping arrives after the Unregister
        assert_eq!(r.heartbeat(2, inc, e, true, 2), Ok(false));
        assert!(!r.is_live(2), "a late heartbeat does not bring it back");
        // its restart is a new incarnation: in service once ready
        let again = Uuid::new_v4();
        let e2 = r.register(reg(2, again), 3, SESSION).unwrap();
        assert_eq!(r.heartbeat(2, again, e2, true, 4), Ok(true));
        assert!(r.is_live(2));
    }

    #[test]
    fn a_new_term_restores_registrations_so_heartbeats_carry_on() {
        let mut old = Registry::resuming(5);
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let ea = old.register(reg(0, a), 0, SESSION).unwrap();
        old.heartbeat(0, a, ea, true, 1).unwrap();
        let eb = old.register(reg(1, b), 0, SESSION).unwrap();
        let mut new = Registry::restore(&old.to_records(), 50_000);
        assert!(new.is_live(0));
        assert!(!new.is_live(1), "still fenced: it never caught up");
        // broker 0 heartbeats on with what it had
        assert_eq!(new.heartbeat(0, a, ea, true, 50_001), Ok(false));
        // epochs never repeat
        assert!(new.next_epoch() > eb);
        // a broker gone since is fenced one session later
        assert_eq!(new.expire(50_000 + SESSION + 1, SESSION), Vec::<i32>::new());
        assert_eq!(new.expire(50_001 + SESSION + 1, SESSION), vec![0]);
    }

    #[test]
    fn advertised_endpoints_survive_a_new_term_and_older_records_have_none() {
        let mut old = Registry::resuming(5);
        let inc = Uuid::new_v4();
        let endpoints = vec![crate::image::ListenerEndpoint {
            name: "EXTERNAL".into(),
            host: "127.0.0.1".into(),
            port: 9094,
            security_protocol: "SASL_PLAINTEXT".into(),
        }];
        let with = Registration {
            endpoints: endpoints.clone(),
            ..reg(0, inc)
        };
        old.register(with, 0, SESSION).unwrap();
        let records = old.to_records();
        assert_eq!(records[0].endpoints[0].port, 9094);
        let new = Registry::restore(&records, 1);
        assert_eq!(new.get(0).unwrap().registration.endpoints, endpoints);
        // a record persisted before endpoints existed
        let json = serde_json::json!({
            "nodeId": 1, "host": "127.0.0.2", "port": 9092,
            "incarnation": Uuid::new_v4().to_string(), "brokerEpoch": 3,
        });
        let older: RegisteredBroker = serde_json::from_value(json).unwrap();
        assert!(older.endpoints.is_empty());
        let restored = Registry::restore(&[older], 1);
        assert!(restored.get(1).unwrap().registration.endpoints.is_empty());
    }

    #[test]
    fn a_broker_serves_after_registering_and_a_ready_heartbeat() {
        let mut r = Registry::resuming(100);
        let inc = Uuid::new_v4();
        let epoch = r.register(reg(0, inc), 0, SESSION).unwrap();
        assert_eq!(epoch, 100);
        assert!(!r.is_live(0), "fenced until caught up");
        assert_eq!(r.heartbeat(0, inc, epoch, false, 10), Ok(false));
        assert!(!r.is_live(0));
        assert_eq!(r.heartbeat(0, inc, epoch, true, 20), Ok(true));
        assert!(r.is_live(0));
        assert_eq!(r.heartbeat(0, inc, epoch, true, 30), Ok(false));
        assert_eq!(r.next_epoch(), 101);
    }

    #[test]
    fn a_retry_keeps_the_epoch_and_a_second_process_with_the_same_id_is_refused() {
        let mut r = Registry::default();
        let first = Uuid::new_v4();
        let e = r.register(reg(1, first), 0, SESSION).unwrap();
        r.heartbeat(1, first, e, true, 1).unwrap();
        assert_eq!(r.register(reg(1, first), 5, SESSION), Ok(e));
        let second = Uuid::new_v4();
        assert_eq!(
            r.register(reg(1, second), 6, SESSION),
            Err(RegistryError::DuplicateNodeId {
                node_id: 1,
                live: first,
                refused: second
            })
        );
        assert!(r.is_live(1), "the live broker keeps its registration");
    }

    #[test]
    fn silence_fences_and_a_restart_rejoins_with_a_new_epoch() {
        let mut r = Registry::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let ea = r.register(reg(0, a), 0, SESSION).unwrap();
        let eb = r.register(reg(1, b), 0, SESSION).unwrap();
        r.heartbeat(0, a, ea, true, 1).unwrap();
        r.heartbeat(1, b, eb, true, 1).unwrap();
        r.heartbeat(1, b, eb, true, 8_000).unwrap();
        assert_eq!(r.expire(9_001, SESSION), Vec::<i32>::new());
        assert_eq!(r.expire(9_002, SESSION), vec![0]);
        assert_eq!(r.expire(9_003, SESSION), Vec::<i32>::new(), "fenced once");
        assert_eq!(
            r.live().map(|x| x.registration.node_id).collect::<Vec<_>>(),
            vec![1]
        );
        // the old incarnation's heartbeat is stale once replaced
        let restarted = Uuid::new_v4();
        let e2 = r.register(reg(0, restarted), 10_000, SESSION).unwrap();
        assert!(e2 > eb);
        assert_eq!(
            r.heartbeat(0, a, ea, true, 10_001),
            Err(RegistryError::StaleBroker { node_id: 0 })
        );
        assert_eq!(r.heartbeat(0, restarted, e2, true, 10_002), Ok(true));
        assert!(r.is_live(0));
    }

    #[test]
    fn the_controllers_own_pause_fences_nobody() {
        let mut r = Registry::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let ea = r.register(reg(0, a), 0, SESSION).unwrap();
        let eb = r.register(reg(1, b), 0, SESSION).unwrap();
        r.heartbeat(0, a, ea, true, 1_000).unwrap();
        r.heartbeat(1, b, eb, true, 1).unwrap();
        // the controller was stopped from 1_000 to 31_000
        r.excuse_gap(30_000, 31_000);
        assert_eq!(r.expire(31_000, SESSION), Vec::<i32>::new());
        // broker 1 had used 999 ms of its session before the gap
        assert_eq!(r.expire(30_002 + SESSION, SESSION), vec![1]);
        assert_eq!(r.expire(31_001 + SESSION, SESSION), vec![0]);
        // a heartbeat read just after the gap is not moved into the future
        let mut r2 = Registry::default();
        let e = r2.register(reg(2, a), 0, SESSION).unwrap();
        r2.heartbeat(2, a, e, true, 31_000).unwrap();
        r2.excuse_gap(30_000, 31_000);
        assert_eq!(r2.expire(31_001 + SESSION, SESSION), vec![2]);
    }

    #[test]
    fn a_shortened_session_ends_after_its_grace_unless_it_heartbeats() {
        let mut r = Registry::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let ea = r.register(reg(0, a), 0, SESSION).unwrap();
        let eb = r.register(reg(1, b), 0, SESSION).unwrap();
        r.heartbeat(0, a, ea, true, 0).unwrap();
        r.heartbeat(1, b, eb, true, 0).unwrap();
        let mut restored = Registry::restore(&r.to_records(), 20_000);
        restored.shorten_session(0, 20_000, 3_000, SESSION);
        restored.shorten_session(1, 20_000, 3_000, SESSION);
        assert_eq!(restored.expire(23_000, SESSION), Vec::<i32>::new());
        restored.heartbeat(1, b, eb, true, 22_000).unwrap();
        assert_eq!(restored.expire(23_001, SESSION), vec![0]);
        // never lengthens a session
        restored.shorten_session(1, 22_000, 60_000, SESSION);
        assert_eq!(restored.expire(22_000 + SESSION + 1, SESSION), vec![1]);
    }

    #[test]
    fn an_expired_but_not_yet_fenced_broker_can_be_replaced() {
        let mut r = Registry::default();
        let old = Uuid::new_v4();
        let e = r.register(reg(2, old), 0, SESSION).unwrap();
        r.heartbeat(2, old, e, true, 0).unwrap();
        // no expire() pass ran, but the session is over
        assert!(r
            .register(reg(2, Uuid::new_v4()), SESSION + 1, SESSION)
            .is_ok());
        assert_eq!(
            r.register(reg(-1, Uuid::new_v4()), 0, SESSION),
            Err(RegistryError::BadNodeId(-1))
        );
    }
}
