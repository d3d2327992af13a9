//! The `KafkaUser` reconciler: `plan` is pure (spec → ACL bindings, the
//! exact ACL diff against the broker's, the SCRAM credential to set and the
//! Secret's content); `controller` is the Kubernetes edge (the user's
//! Secret, the broker calls, status and the removal finalizer).

pub mod controller;
pub mod plan;
