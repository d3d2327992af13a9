//! `KafkaRetentionPolicy`: `resolve` is the pure policy resolution (matching,
//! precedence, default vs enforce, bounds, restoring a topic's own settings
//! when a policy goes, conformance). The Kubernetes/Kafka edge that applies
//! it is not written yet; see `resolve`'s module docs for the ownership
//! rule it is meant to follow.

pub mod resolve;
