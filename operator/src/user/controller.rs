//! The Kubernetes edge of `KafkaUser`: a reconcile validates the spec,
//! then by type:
//! - SCRAM: chooses the password (the referenced Secret key, the one kept
//!   in the user's Secret, or a new random one), writes the user's Secret
//!   `<user>` (owned by the KafkaUser, Strimzi's keys `password` and
//!   `sasl.jaas.config`), then on a Ready broker of the cluster sets the
//!   SCRAM credential when it is missing or the password changed. The
//!   fingerprint of the applied password goes on the Secret (annotation)
//!   only after the broker accepted it, so a failed attempt is retried.
//! - tls: reads the cluster's clients CA and cluster CA certificate
//!   (`certs`), keeps or reissues the user's certificate (`plan`), writes
//!   the Secret only when its data changed (`ca.crt`, `user.crt`,
//!   `user.key`), and on the broker removes any SCRAM credential of the
//!   name (a switch of type).
//!
//! Either way the user's ACLs become exactly the spec's, under the
//! principal of its type, and the other type's principal loses its ACLs.
//! A finalizer removes the user's credentials and the ACLs of both
//! principals; it does not block deletion once the cluster is gone or
//! being deleted.
//!
//! The operator's admin connection is the plain listener it uses for
//! everything else (no SASL of its own yet): on a cluster with an
//! authorizer, the operator's principal (`User:ANONYMOUS` there) must be a
//! super user.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event as FinalizerEvent;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};

use crate::brokers::{admin_port, connect_admin, ready_brokers};
use crate::certs::inspect::cert_info;
use crate::certs::issue::issue_leaf;
use crate::certs::plan::{needs_write, CaPolicy, Decision};
use crate::certs::{clients_ca, clients_ca_name, cluster_ca_cert, CertError};
use crate::cluster::builders::selector_string;
use crate::context::{Context, FIELD_MANAGER};
use crate::crd::{
    format_time, merge_conditions, Condition, KafkaCluster, KafkaUser, KafkaUserStatus,
    UserAuthenticationType,
};
use crate::error::{Error, Result};
use crate::kafka::acl::AclBinding;
use crate::kafka::scram::ScramMechanism;
use crate::kafka::{AdminClient, KafkaError};
use crate::reconcile::{finalized, metered, namespaced_api, requeue_after_error};
use crate::topic::controller::referencing;

use super::plan::{
    acl_diff, certificate_decision, certificate_spec, choose_password, desired_acls, jaas_config,
    mechanism, password_from_random, plan_scram, principals, scram_removal, stored_certificate,
    tls_secret_data, username, PasswordChoice, JAAS_KEY, PASSWORD_KEY,
};

const KIND: &str = "KafkaUser";
/// Finalizer that removes the user's credentials and ACLs.
pub const FINALIZER: &str = "moldau.io/user-removal";
/// Label on every user Secret (its value: the KafkaUser's name); the
/// controller watches only Secrets that carry it.
pub const USER_LABEL: &str = "moldau.io/kafka-user";
/// Annotation of the user Secret: fingerprint of the password the broker
/// accepted last.
pub const FINGERPRINT_ANNOTATION: &str = "moldau.io/scram-password-fingerprint";
/// Bytes of a random salt (Kafka's admin client sends about 26).
const SALT_LEN: usize = 32;

/// What one application did on the broker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserSync {
    /// Whether a SCRAM credential was (re)set.
    pub credential_set: bool,
    /// Fingerprint of the password now on the broker.
    pub fingerprint: String,
    /// ACL bindings created.
    pub created: usize,
    /// ACL bindings deleted.
    pub deleted: usize,
    /// Bindings the broker refused, with its error.
    pub refused: Vec<String>,
}

fn random_bytes(n: usize) -> std::result::Result<Vec<u8>, KafkaError> {
    let mut b = vec![0u8; n];
    getrandom::getrandom(&mut b)
        .map_err(|e| KafkaError::Protocol(format!("no random bytes: {e}")))?;
    Ok(b)
}

/// A new random password.
pub fn generate_password() -> std::result::Result<String, KafkaError> {
    loop {
        // 64 bytes give 32 usable ones but with odds of ~1e-17
        if let Some(p) = password_from_random(&random_bytes(64)?) {
            return Ok(p);
        }
    }
}

/// Makes the broker's SCRAM credentials and ACLs of `user` match: only
/// `mechanism` with `password` (set when missing or when its fingerprint
/// differs from `applied`), and exactly the `desired` ACL bindings.
pub async fn sync_user(
    admin: &mut AdminClient,
    user: &str,
    mechanism: ScramMechanism,
    password: &str,
    applied: Option<&str>,
    desired: &[AclBinding],
) -> std::result::Result<UserSync, KafkaError> {
    let current = admin.describe_user_scram_credentials(user).await?;
    let plan = plan_scram(
        user,
        mechanism,
        password,
        applied,
        &current,
        &random_bytes(SALT_LEN)?,
    );
    admin
        .alter_user_scram_credentials(&plan.deletions, plan.upsertion.as_slice())
        .await?;
    let mut out = UserSync {
        credential_set: plan.upsertion.is_some(),
        fingerprint: plan.fingerprint,
        ..Default::default()
    };
    let [own, other] = principals(UserAuthenticationType::ScramSha512, user);
    sync_acls(admin, &own, &other, desired, &mut out).await?;
    Ok(out)
}

/// Makes the broker's view of the tls user `user` match: no SCRAM
/// credential of the name, and exactly the `desired` ACL bindings (of
/// `User:CN=<user>`).
pub async fn sync_tls_user(
    admin: &mut AdminClient,
    user: &str,
    desired: &[AclBinding],
) -> std::result::Result<UserSync, KafkaError> {
    let current = admin.describe_user_scram_credentials(user).await?;
    admin
        .alter_user_scram_credentials(&scram_removal(user, &current), &[])
        .await?;
    let mut out = UserSync::default();
    let [own, other] = principals(UserAuthenticationType::Tls, user);
    sync_acls(admin, &own, &other, desired, &mut out).await?;
    Ok(out)
}

/// Makes the ACL bindings of `own` exactly `desired` and removes every
/// binding of `other` (the principal of the type the user does not have).
async fn sync_acls(
    admin: &mut AdminClient,
    own: &str,
    other: &str,
    desired: &[AclBinding],
    out: &mut UserSync,
) -> std::result::Result<(), KafkaError> {
    let acls = admin.describe_acls(own).await?;
    let (create, mut delete) = acl_diff(own, desired, &acls);
    let stale = admin.describe_acls(other).await?;
    delete.extend(acl_diff(other, &[], &stale).1);
    for (binding, result) in admin
        .delete_acls(&delete)
        .await?
        .into_iter()
        .chain(admin.create_acls(&create).await?)
    {
        match result {
            Ok(()) if delete.contains(&binding) => out.deleted += 1,
            Ok(()) => out.created += 1,
            Err(e) => out.refused.push(format!("{binding}: {e}")),
        }
    }
    Ok(())
}

/// Removes every SCRAM credential of `user` and every ACL binding of both
/// its principals.
pub async fn remove_user(
    admin: &mut AdminClient,
    user: &str,
) -> std::result::Result<(), KafkaError> {
    let current = admin.describe_user_scram_credentials(user).await?;
    admin
        .alter_user_scram_credentials(&scram_removal(user, &current), &[])
        .await?;
    for p in principals(UserAuthenticationType::Tls, user) {
        let acls = admin.describe_acls(&p).await?;
        let (_, delete) = acl_diff(&p, &[], &acls);
        for (_, result) in admin.delete_acls(&delete).await? {
            result?;
        }
    }
    Ok(())
}

/// The status after a reconcile: `Ok(message)` is Ready, `Err((reason,
/// message))` not.
pub fn user_status(
    ku: &KafkaUser,
    outcome: std::result::Result<String, (&str, String)>,
    now: &str,
) -> KafkaUserStatus {
    let old = ku.status.clone().unwrap_or_default();
    let ready = match outcome {
        Ok(message) => Condition::new("Ready", true, "Applied", message),
        Err((reason, message)) => Condition::new("Ready", false, reason, message),
    };
    KafkaUserStatus {
        conditions: merge_conditions(&old.conditions, vec![ready], ku.metadata.generation, now),
        observed_generation: ku.metadata.generation,
        username: Some(username(ku.spec.authentication.type_, &ku.name_any())),
        secret: Some(ku.name_any()),
    }
}

/// The user's Secret holding `data`, owned by the KafkaUser.
fn owned_secret(ku: &KafkaUser, data: BTreeMap<String, String>) -> Secret {
    let name = ku.name_any();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: ku.namespace(),
            labels: Some(BTreeMap::from([
                (USER_LABEL.to_string(), name),
                ("moldau.io/cluster".to_string(), ku.spec.cluster_ref.clone()),
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    FIELD_MANAGER.to_string(),
                ),
            ])),
            owner_references: ku.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// The user's Secret: password and JAAS config, owned by the KafkaUser.
pub fn user_secret(ku: &KafkaUser, password: &str, fingerprint: Option<&str>) -> Secret {
    let name = ku.name_any();
    let mut s = owned_secret(
        ku,
        BTreeMap::from([
            (PASSWORD_KEY.to_string(), password.to_string()),
            (JAAS_KEY.to_string(), jaas_config(&name, password)),
        ]),
    );
    s.metadata.annotations =
        fingerprint.map(|f| BTreeMap::from([(FINGERPRINT_ANNOTATION.to_string(), f.to_string())]));
    s
}

/// A tls user's Secret: `ca.crt` (the cluster CA), `user.crt`, `user.key`.
pub fn tls_user_secret(ku: &KafkaUser, data: BTreeMap<String, String>) -> Secret {
    owned_secret(ku, data)
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// Whether `s` is the user Secret of `ku` (controlled by it).
fn owned_by(s: &Secret, ku: &KafkaUser) -> bool {
    let uid = ku.uid();
    s.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
}

async fn write_status(ctx: &Context, ku: &KafkaUser, status: KafkaUserStatus) -> Result<()> {
    if ku.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let ns = ku
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<KafkaUser> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = serde_json::json!({ "status": status });
    match api
        .patch_status(
            &ku.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The Ready brokers of a user's cluster (and the cluster, which says how
/// to dial them).
type ClusterBrokers = (Vec<(i32, std::net::SocketAddr)>, KafkaCluster);

/// Problems of the cluster that keep anything from being applied, and
/// the Ready brokers otherwise.
async fn cluster_brokers(
    ctx: &Context,
    ns: &str,
    cluster: &str,
) -> Result<std::result::Result<ClusterBrokers, (&'static str, String)>> {
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), ns);
    let kc = match clusters.get_opt(cluster).await? {
        None => {
            return Ok(Err((
                "ClusterNotFound",
                format!("KafkaCluster {ns}/{cluster} does not exist"),
            )))
        }
        Some(kc) if kc.metadata.deletion_timestamp.is_some() => {
            return Ok(Err((
                "ClusterDeleting",
                format!("KafkaCluster {ns}/{cluster} is being deleted"),
            )))
        }
        Some(kc) => kc,
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(&selector_string(cluster)))
        .await?;
    let brokers = ready_brokers(&list.items, admin_port(&kc));
    if brokers.is_empty() {
        return Ok(Err((
            "NoBrokerReady",
            format!("no Ready broker pod with an IP in KafkaCluster {ns}/{cluster}"),
        )));
    }
    Ok(Ok((brokers, kc)))
}

async fn apply_secret(ctx: &Context, ns: &str, secret: &Secret) -> Result<()> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    api.patch(
        secret.metadata.name.as_deref().unwrap_or_default(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(secret),
    )
    .await?;
    Ok(())
}

/// One application; `Ok(Err(..))` is a condition to report, `Err` a
/// Kubernetes failure to retry.
async fn apply_user(
    ctx: &Context,
    ku: &KafkaUser,
) -> Result<std::result::Result<String, (&'static str, String)>> {
    let ns = ku
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let user = ku.name_any();
    let desired = match desired_acls(ku, &user) {
        Ok(d) => d,
        Err(e) => return Ok(Err(("InvalidSpec", e))),
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let own = secrets.get_opt(&user).await?;
    if let Some(s) = &own {
        if !owned_by(s, ku) {
            return Ok(Err((
                "SecretConflict",
                format!("Secret {ns}/{user} exists and is not this KafkaUser's"),
            )));
        }
    }
    let Some(mech) = mechanism(ku.spec.authentication.type_) else {
        return apply_tls_user(ctx, ku, &ns, own.as_ref(), &desired).await;
    };
    let referenced = match &ku.spec.authentication.password {
        Some(src) => secrets
            .get_opt(&src.value_from.secret_key_ref.name)
            .await?
            .map(|s| secret_data(&s)),
        None => None,
    };
    let own_data = own.as_ref().map(secret_data);
    let password = match choose_password(ku, referenced.as_ref(), own_data.as_ref()) {
        Ok(PasswordChoice::Known(p)) => p,
        Ok(PasswordChoice::Generate) => generate_password()?,
        Err(problem) => return Ok(Err(problem)),
    };
    let applied = own
        .as_ref()
        .and_then(|s| s.annotations().get(FINGERPRINT_ANNOTATION).cloned());
    // the password is kept before it is applied: a generated one must
    // survive a failure between the two
    apply_secret(ctx, &ns, &user_secret(ku, &password, applied.as_deref())).await?;
    let (brokers, kc) = match cluster_brokers(ctx, &ns, &ku.spec.cluster_ref).await? {
        Ok(b) => b,
        Err(problem) => return Ok(Err(problem)),
    };
    let outcome = async {
        let (mut admin, _) = connect_admin(ctx, &kc, &brokers).await?;
        sync_user(
            &mut admin,
            &user,
            mech,
            &password,
            applied.as_deref(),
            &desired,
        )
        .await
    }
    .await;
    let sync = match outcome {
        Ok(s) => s,
        Err(e) => return Ok(Err(("KafkaError", e.to_string()))),
    };
    if applied.as_deref() != Some(sync.fingerprint.as_str()) {
        apply_secret(
            ctx,
            &ns,
            &user_secret(ku, &password, Some(&sync.fingerprint)),
        )
        .await?;
    }
    if let Some(problem) = refused(&sync) {
        return Ok(Err(problem));
    }
    Ok(Ok(format!(
        "{} credential and {} ACL bindings of User:{user} applied",
        mech.name(),
        desired.len()
    )))
}

/// The condition of ACL changes the broker refused, if any.
fn refused(sync: &UserSync) -> Option<(&'static str, String)> {
    (!sync.refused.is_empty()).then(|| {
        (
            "AclRefused",
            format!(
                "{} ACL changes refused: {}",
                sync.refused.len(),
                sync.refused.join("; ")
            ),
        )
    })
}

/// How a problem with the cluster's CAs shows: a Kubernetes failure is
/// retried as one, anything else is a condition.
fn ca_problem(e: CertError) -> Result<(&'static str, String)> {
    match e {
        CertError::Kube(e) => Err(e.into()),
        e @ CertError::MissingSecret(_) => Ok((
            "CertificateAuthorityNotReady",
            format!("{e} (the cluster's CAs exist only for a cluster with a TLS listener)"),
        )),
        e => Ok(("CertificateAuthorityUnreadable", e.to_string())),
    }
}

/// One application for a tls user: its certificate, then the broker.
async fn apply_tls_user(
    ctx: &Context,
    ku: &KafkaUser,
    ns: &str,
    own: Option<&Secret>,
    desired: &[AclBinding],
) -> Result<std::result::Result<String, (&'static str, String)>> {
    let user = ku.name_any();
    let cluster = &ku.spec.cluster_ref;
    let ca = match clients_ca(&ctx.client, ns, cluster).await {
        Ok(ca) => ca,
        Err(e) => return Ok(Err(ca_problem(e)?)),
    };
    let trust = match cluster_ca_cert(&ctx.client, ns, cluster).await {
        Ok(c) => c,
        Err(e) => return Ok(Err(ca_problem(e)?)),
    };
    let ca_end = match cert_info(&ca.cert) {
        Ok(i) => i.not_after,
        Err(e) => {
            return Ok(Err((
                "CertificateAuthorityUnreadable",
                format!("the clients CA certificate of {ns}/{cluster}: {e}"),
            )))
        }
    };
    // a user certificate's validity: the cluster's `spec.clientsCa` (by
    // default 365 days, renewed 30 before the end), never past the clients
    // CA's own end
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), ns);
    let policy = CaPolicy::of(
        clusters
            .get_opt(cluster)
            .await?
            .as_ref()
            .and_then(|kc| kc.spec.clients_ca.as_ref()),
    );
    let now = SystemTime::now();
    let own_data = own.map(secret_data);
    let current = stored_certificate(own_data.as_ref());
    let cert = match (
        certificate_decision(&user, current.as_ref(), &ca.cert, now, policy),
        current,
    ) {
        (Decision::Keep, Some(c)) => c,
        (decision, _) => {
            tracing::info!(user = %format!("{ns}/{user}"), ?decision, "issuing a user certificate");
            let spec = certificate_spec(&user, now, policy, ca_end);
            match issue_leaf(&clients_ca_name(cluster), &ca.key, &spec, now) {
                Ok(c) => c,
                Err(e) => return Ok(Err(("CertificateNotIssued", e.to_string()))),
            }
        }
    };
    let data = tls_secret_data(&trust, &cert);
    if needs_write(own_data.as_ref(), &data) {
        apply_secret(ctx, ns, &tls_user_secret(ku, data)).await?;
    }
    let brokers = match cluster_brokers(ctx, ns, cluster).await? {
        Ok(b) => b,
        Err(problem) => return Ok(Err(problem)),
    };
    let outcome = async {
        let (brokers, kc) = &brokers;
        let (mut admin, _) = connect_admin(ctx, kc, brokers).await?;
        sync_tls_user(&mut admin, &user, desired).await
    }
    .await;
    let sync = match outcome {
        Ok(s) => s,
        Err(e) => return Ok(Err(("KafkaError", e.to_string()))),
    };
    if let Some(problem) = refused(&sync) {
        return Ok(Err(problem));
    }
    Ok(Ok(format!(
        "certificate of CN={user} and {} ACL bindings of User:CN={user} applied",
        desired.len()
    )))
}

/// Removes what the user has on the broker; Ok(false) when it must be
/// retried (no broker reachable while the cluster still exists).
async fn cleanup_user(ctx: &Context, ku: &KafkaUser) -> Result<()> {
    let ns = ku
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let (brokers, kc) = match cluster_brokers(ctx, &ns, &ku.spec.cluster_ref).await? {
        Ok(b) => b,
        // nothing left to remove from
        Err(("ClusterNotFound" | "ClusterDeleting", _)) => return Ok(()),
        Err((_, message)) => return Err(Error::Finalizer(message)),
    };
    let (mut admin, _) = connect_admin(ctx, &kc, &brokers).await?;
    remove_user(&mut admin, &ku.name_any()).await?;
    Ok(())
}

/// Reconciles one KafkaUser (through the finalizer helper).
pub async fn reconcile(ku: Arc<KafkaUser>, ctx: Arc<Context>) -> Result<Action> {
    metered(&ctx, KIND, async {
        let api = namespaced_api(&ctx, ku.as_ref())?;
        let c = ctx.clone();
        finalized(&api, FINALIZER, ku, |event| async move {
            match event {
                FinalizerEvent::Apply(ku) => {
                    let outcome = apply_user(&c, &ku).await?;
                    let ready = outcome.is_ok();
                    let now = format_time(k8s_openapi::jiff::Timestamp::now());
                    write_status(&c, &ku, user_status(&ku, outcome, &now)).await?;
                    Ok(if ready {
                        Action::requeue(c.tunables.topic_resync)
                    } else {
                        Action::requeue(c.tunables.retry)
                    })
                }
                FinalizerEvent::Cleanup(ku) => {
                    cleanup_user(&c, &ku).await?;
                    Ok::<_, Error>(Action::await_change())
                }
            }
        })
        .await
    })
    .await
}

/// Requeue policy after a failed reconcile: retry soon, never crash.
pub fn error_policy(ku: Arc<KafkaUser>, err: &Error, ctx: Arc<Context>) -> Action {
    requeue_after_error(KIND, ku.as_ref(), err, &ctx)
}

/// The KafkaUsers that reference cluster `kc`.
pub fn users_of(users: &[Arc<KafkaUser>], kc: &KafkaCluster) -> Vec<ObjectRef<KafkaUser>> {
    referencing(users, kc, |u| &u.spec.cluster_ref)
}

/// Runs the KafkaUser controller until the stream ends. It watches its
/// own Secrets (a deleted or edited one is rewritten) and the clusters; a
/// changed password Secret named by `secretKeyRef` is picked up at the
/// periodic resync.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<KafkaUser> = ctx.watched_api(&namespace);
    let clusters: Api<KafkaCluster> = ctx.watched_api(&namespace);
    let secrets: Api<Secret> = ctx.watched_api(&namespace);
    let controller = Controller::new(api, watcher::Config::default());
    let users = controller.store();
    controller
        .owns(secrets, watcher::Config::default().labels(USER_LABEL))
        .watches(clusters, watcher::Config::default(), move |kc| {
            users_of(&users.state(), &kc)
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                let reconciler =
                    matches!(e, kube::runtime::controller::Error::ReconcilerFailed(..));
                crate::context::log_controller_error(KIND, &e, reconciler);
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ku() -> KafkaUser {
        let mut u = KafkaUser::new(
            "alice",
            serde_json::from_value(serde_json::json!({
                "clusterRef": "c", "authentication": {"type": "scram-sha-512"}
            }))
            .unwrap(),
        );
        u.metadata.namespace = Some("ns".into());
        u.metadata.uid = Some("u-1".into());
        u.metadata.generation = Some(2);
        u
    }

    #[test]
    fn status_names_user_and_secret() {
        let s = user_status(&ku(), Ok("fine".into()), "t");
        assert!(s.conditions[0].is_true());
        assert_eq!(s.conditions[0].reason, "Applied");
        assert_eq!(s.username.as_deref(), Some("alice"));
        assert_eq!(s.secret.as_deref(), Some("alice"));
        assert_eq!(s.observed_generation, Some(2));
        let s = user_status(&ku(), Err(("InvalidSpec", "acls[0]: bad".into())), "t");
        assert!(!s.conditions[0].is_true());
        assert_eq!(s.conditions[0].reason, "InvalidSpec");
    }

    #[test]
    fn secret_has_strimzis_keys_and_is_owned() {
        let u = ku();
        let s = user_secret(&u, "pw", Some("fp"));
        let data = secret_data(&s);
        assert_eq!(data[PASSWORD_KEY], b"pw");
        assert_eq!(
            String::from_utf8(data[JAAS_KEY].clone()).unwrap(),
            jaas_config("alice", "pw")
        );
        assert_eq!(s.annotations()[FINGERPRINT_ANNOTATION], "fp");
        assert_eq!(s.labels()[USER_LABEL], "alice");
        assert!(owned_by(&s, &u));
        let mut other = u.clone();
        other.metadata.uid = Some("u-2".into());
        assert!(!owned_by(&s, &other));
        assert!(user_secret(&u, "pw", None).metadata.annotations.is_none());
    }

    #[test]
    fn a_tls_user_is_named_by_its_certificate_subject() {
        let mut u = ku();
        u.spec.authentication.type_ = UserAuthenticationType::Tls;
        let s = user_status(&u, Ok("fine".into()), "t");
        assert_eq!(s.username.as_deref(), Some("CN=alice"));
        assert_eq!(s.secret.as_deref(), Some("alice"));
        let secret = tls_user_secret(
            &u,
            BTreeMap::from([("user.crt".to_string(), "c".to_string())]),
        );
        assert_eq!(secret_data(&secret)["user.crt"], b"c");
        assert!(owned_by(&secret, &u));
        assert!(secret.metadata.annotations.is_none());
        assert_eq!(secret.labels()[USER_LABEL], "alice");
    }

    #[test]
    fn only_a_missing_ca_secret_is_a_not_ready_ca() {
        let (reason, message) = ca_problem(CertError::MissingSecret("ns/c-clients-ca".into()))
            .ok()
            .unwrap();
        assert_eq!(reason, "CertificateAuthorityNotReady");
        assert!(message.contains("ns/c-clients-ca"), "{message}");
        let (reason, _) = ca_problem(CertError::Cluster("x".into())).ok().unwrap();
        assert_eq!(reason, "CertificateAuthorityUnreadable");
    }

    #[test]
    fn generated_passwords_differ() {
        let a = generate_password().unwrap();
        assert_eq!(a.len(), 32);
        assert_ne!(a, generate_password().unwrap());
    }
}
