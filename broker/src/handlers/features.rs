//! UpdateFeatures (KIP-584, `kafka-features upgrade|downgrade|disable`):
//! Moldau's finalized feature levels cannot be changed at run time, so
//! this handler only validates, with the checks of Kafka's
//! `FeatureControlManager.updateFeature` in Kafka's order and with its
//! error (`INVALID_UPDATE_VERSION`, "Invalid update version N for feature
//! F. …"), and then accepts only what changes nothing: a feature set to
//! the level it already has.
//!
//! - `metadata.version` has one supported level, `group.version` levels
//!   0-1 with 1 finalized (see [`super::api_versions::SUPPORTED_FEATURES`]);
//!   a level outside the range is refused as on a Kafka controller that
//!   does not support it, one inside it but not finalized as a change.
//! - `transaction.version` is finalized from the broker config of the same
//!   name; a different level is refused with a message that says so.
//! - An unknown feature is refused as Kafka refuses it.
//!
//! Kafka applies a request's updates all or nothing and answers every
//! feature with the first failure (`UpdateFeaturesResponse.createWithErrors`):
//! so does this. `validate_only` answers the same, as nothing is ever
//! applied. It owns no state and touches nothing but the response.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{UpdateFeaturesRequest, UpdateFeaturesResponse};

use super::access::Access;
use super::api_versions::{finalized_level, SUPPORTED_FEATURES};
use super::str_bytes;
use crate::broker::Broker;
use crate::security::acl::AclOperation;

/// How Kafka's controller begins the message of a refused request.
const ALL_FAILED: &str =
    "The update failed for all features since the following feature had an error: ";

/// Kafka's `FeatureUpdate.UpgradeType`, as the request carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpgradeType {
    Upgrade,
    SafeDowngrade,
    UnsafeDowngrade,
    Unknown,
}

impl UpgradeType {
    /// v0 has only `AllowDowngrade` (a safe downgrade when set); v1+ a code.
    pub fn of(version: i16, allow_downgrade: bool, code: i8) -> Self {
        if version == 0 {
            return if allow_downgrade {
                Self::SafeDowngrade
            } else {
                Self::Upgrade
            };
        }
        match code {
            1 => Self::Upgrade,
            2 => Self::SafeDowngrade,
            3 => Self::UnsafeDowngrade,
            _ => Self::Unknown,
        }
    }
}

/// Why one update cannot be made (Kafka's `INVALID_UPDATE_VERSION`), or
/// `None` when it changes nothing and is accepted. `current` is the
/// finalized level (0 when not finalized), `supported` the range Moldau
/// supports (None: an unknown feature).
pub fn refusal(
    feature: &str,
    level: i16,
    upgrade: UpgradeType,
    current: i16,
    supported: Option<(i16, i16)>,
    node_id: i32,
) -> Option<String> {
    let invalid =
        |why: &str| format!("Invalid update version {level} for feature {feature}. {why}");
    if upgrade == UpgradeType::Unknown {
        return Some(invalid(
            "The controller does not support the given upgrade type.",
        ));
    }
    if level < 0 {
        return Some(invalid("A feature version cannot be less than 0."));
    }
    // Kafka's QuorumFeatures.reasonNotSupported: an unknown feature is
    // supported at level 0 only
    let (min, max) = supported.unwrap_or((0, 0));
    if !(min..=max).contains(&level) {
        let why = if max == 0 {
            format!("Moldau broker {node_id} does not support this feature.")
        } else {
            format!("Moldau broker {node_id} only supports versions {min}-{max}")
        };
        return Some(invalid(&why));
    }
    if level < current && upgrade == UpgradeType::Upgrade {
        return Some(invalid(
            "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade.",
        ));
    }
    if level > current && upgrade != UpgradeType::Upgrade {
        return Some(invalid("Can't downgrade to a newer version."));
    }
    if supported.is_none() {
        // level 0 of an unknown feature: Kafka fails to find it by name
        return Some(invalid(&format!("No feature with name {feature}.")));
    }
    if level != current {
        let why = if feature == "transaction.version" {
            "Moldau finalizes transaction.version from the broker config of the same name (`--set transaction.version=N`, then a restart of every broker); it cannot be changed at run time.".to_string()
        } else {
            format!("Moldau cannot change {feature} at run time.")
        };
        return Some(invalid(&why));
    }
    None
}

/// The first refused update of a request (Kafka applies all or none).
pub fn first_refusal(
    updates: &[(String, i16, UpgradeType)],
    transaction_version: i16,
    node_id: i32,
) -> Option<String> {
    updates.iter().find_map(|(feature, level, upgrade)| {
        let supported = SUPPORTED_FEATURES
            .iter()
            .find(|(name, _, _)| name == feature)
            .map(|(_, min, max)| (*min, *max));
        let current = finalized_level(feature, transaction_version);
        refusal(feature, *level, *upgrade, current, supported, node_id)
    })
}

/// UpdateFeatures; it needs ALTER on the cluster (else every feature is
/// answered CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
pub fn update_features(
    broker: &Broker,
    request: UpdateFeaturesRequest,
    version: i16,
    access: &Access,
) -> UpdateFeaturesResponse {
    let updates: Vec<(String, i16, UpgradeType)> = request
        .feature_updates
        .iter()
        .map(|u| {
            (
                u.feature.to_string(),
                u.max_version_level,
                UpgradeType::of(version, u.allow_downgrade, u.upgrade_type),
            )
        })
        .collect();
    let level = broker.topics.static_broker_config().transaction_version;
    let refused = first_refusal(&updates, level, broker.node_id);
    // as Kafka's QuorumController: the reason at the top, prefixed; each
    // feature (v0–1 only) with the error's generic message
    let denied = !access.allows_cluster(AclOperation::Alter);
    let (code, message, each) = match &refused {
        _ if denied => (
            ResponseError::ClusterAuthorizationFailed.code(),
            Some(str_bytes("no ALTER on the cluster")),
            Some(str_bytes("no ALTER on the cluster")),
        ),
        Some(why) => (
            ResponseError::InvalidUpdateVersion.code(),
            Some(str_bytes(&format!("{ALL_FAILED}{why}"))),
            Some(str_bytes("The given update version was invalid.")),
        ),
        None => (0, None, None),
    };
    let results = if version < 2 {
        updates
            .iter()
            .map(|(feature, _, _)| {
                UpdatableFeatureResult::default()
                    .with_feature(str_bytes(feature))
                    .with_error_code(code)
                    .with_error_message(each.clone())
            })
            .collect()
    } else {
        Vec::new()
    };
    UpdateFeaturesResponse::default()
        .with_error_code(code)
        .with_error_message(message)
        .with_results(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MV: i16 = super::super::api_versions::METADATA_VERSION;

    fn one(feature: &str, level: i16, upgrade: UpgradeType) -> Option<String> {
        first_refusal(&[(feature.to_string(), level, upgrade)], 2, 0)
    }

    #[test]
    fn the_current_levels_are_accepted_and_change_nothing() {
        assert_eq!(one("metadata.version", MV, UpgradeType::Upgrade), None);
        assert_eq!(one("transaction.version", 2, UpgradeType::Upgrade), None);
        assert_eq!(one("group.version", 1, UpgradeType::Upgrade), None);
        assert!(one("group.version", 0, UpgradeType::SafeDowngrade)
            .unwrap()
            .contains("cannot change group.version"));
    }

    #[test]
    fn metadata_version_outside_its_one_level_is_refused_as_unsupported() {
        let up = one("metadata.version", MV + 1, UpgradeType::Upgrade).unwrap();
        assert_eq!(
            up,
            format!(
                "Invalid update version {} for feature metadata.version. Moldau broker 0 only supports versions {MV}-{MV}",
                MV + 1
            )
        );
        let down = one("metadata.version", MV - 1, UpgradeType::SafeDowngrade).unwrap();
        assert!(down.contains("only supports versions"), "{down}");
    }

    #[test]
    fn kafka_order_of_checks() {
        let r = one("transaction.version", 1, UpgradeType::Upgrade).unwrap();
        assert!(
            r.ends_with("without setting the upgrade type to either safe or unsafe downgrade."),
            "{r}"
        );
        let r = one("transaction.version", 3, UpgradeType::Upgrade).unwrap();
        assert!(r.contains("only supports versions 0-2"), "{r}");
        let r = one("transaction.version", -1, UpgradeType::Upgrade).unwrap();
        assert!(
            r.ends_with("A feature version cannot be less than 0."),
            "{r}"
        );
        let r = one("transaction.version", 1, UpgradeType::Unknown).unwrap();
        assert!(r.ends_with("The controller does not support the given upgrade type."));
        let r = first_refusal(
            &[("transaction.version".into(), 2, UpgradeType::SafeDowngrade)],
            1,
            0,
        )
        .unwrap();
        assert!(r.ends_with("Can't downgrade to a newer version."), "{r}");
    }

    #[test]
    fn transaction_version_names_the_broker_config() {
        let r = one("transaction.version", 1, UpgradeType::SafeDowngrade).unwrap();
        assert!(r.starts_with("Invalid update version 1 for feature transaction.version."));
        assert!(r.contains("broker config"), "{r}");
    }

    #[test]
    fn unknown_features_are_refused() {
        let r = one("no.such.feature", 1, UpgradeType::Upgrade).unwrap();
        assert_eq!(
            r,
            "Invalid update version 1 for feature no.such.feature. Moldau broker 0 does not support this feature."
        );
        assert!(one("no.such.feature", 0, UpgradeType::SafeDowngrade).is_some());
    }

    #[test]
    fn one_refusal_refuses_the_whole_request() {
        let updates = [
            ("metadata.version".to_string(), MV, UpgradeType::Upgrade),
            ("group.version".to_string(), 2, UpgradeType::Upgrade),
        ];
        assert!(first_refusal(&updates, 2, 0)
            .unwrap()
            .contains("group.version"));
        assert_eq!(UpgradeType::of(0, true, 1), UpgradeType::SafeDowngrade);
        assert_eq!(UpgradeType::of(1, true, 1), UpgradeType::Upgrade);
        assert_eq!(UpgradeType::of(1, false, 9), UpgradeType::Unknown);
    }
}
