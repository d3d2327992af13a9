//! Volumes of a pod, materialized as host directories.
//!
//! Processes run on the host, so a container's `volumeMounts` cannot be
//! mounted. Instead every volume gets a host directory and each mount's
//! `mountPath` is *rewritten*: wherever the mount path appears as a path
//! prefix in the container's command, args, env values or workingDir, it is
//! replaced by the host directory (`/data/x` -> `<state>/volumes/ns/claim/x`).
//! Each mount's host directory is also passed as
//! `MOLDAU_MOUNT_<MOUNT PATH, upper-cased, non-alphanumerics as _>`.
//!
//! Only the pod spec's own text is rewritten. Paths the runner supplies
//! (`KUBECONFIG`, `MOLDAU_POD_DIR`, `MOLDAU_MOUNT_*`, the host's `PATH`,
//! `HOME`, `TMPDIR`) are host paths already and are never mapped through a
//! mount, also when they reach a container through `$(VAR)`, and neither is
//! anything under the runner's state directory. Otherwise a state directory
//! under `/tmp` and a pod with an emptyDir at `/tmp` would send the pod's
//! `KUBECONFIG` into the emptyDir, where there is no kubeconfig.
//!
//! Directories:
//! - PersistentVolumeClaim: `<state>/volumes/<namespace>/<claimName>`, keyed by
//!   the claim so a recreated StatefulSet pod finds its data again;
//! - everything else: `<state>/pods/<ns>_<pod>_<uid>/volumes/<volume>`:
//!   emptyDir (and hostPath, which is *not* the host path), ConfigMap, Secret,
//!   downwardAPI and projected volumes written as files when the pod starts
//!   (later ConfigMap/Secret changes are not propagated); projected
//!   ServiceAccount tokens come from the TokenRequest API and are refreshed.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::envs;

/// Host directory of a PersistentVolumeClaim's data.
pub fn pvc_dir(state: &Path, namespace: &str, claim: &str) -> PathBuf {
    state.join("volumes").join(namespace).join(claim)
}

/// A projected ServiceAccount token kept fresh on disk.
#[derive(Debug, Clone)]
pub struct TokenFile {
    pub path: PathBuf,
    pub service_account: String,
    pub audience: Option<String>,
    pub expiration_seconds: i64,
    pub fetched: Instant,
}

/// Replaces container mount paths by host directories.
#[derive(Debug, Clone, Default)]
pub struct Rewriter {
    /// (mountPath, host dir), longest mount path first.
    mounts: Vec<(String, PathBuf)>,
    /// Host paths (the runner's state directory) left as they are even where
    /// a mount path is a prefix of them.
    keep: Vec<String>,
}

impl Rewriter {
    pub fn new(mut mounts: Vec<(String, PathBuf)>) -> Self {
        for m in &mut mounts {
            let t = m.0.trim_end_matches('/');
            m.0 = if t.is_empty() {
                "/".into()
            } else {
                t.to_string()
            };
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.0.len()));
        Rewriter {
            mounts,
            keep: vec![],
        }
    }

    /// Never rewrites `host_dir` or a path under it: the runner's state
    /// directory, which holds every host directory the runner hands out.
    pub fn keep(mut self, host_dir: &Path) -> Self {
        let t = host_dir.to_string_lossy();
        let t = t.trim_end_matches('/');
        if !t.is_empty() {
            self.keep.push(t.to_string());
            self.keep.sort_by_key(|k| std::cmp::Reverse(k.len()));
        }
        self
    }

    pub fn mounts(&self) -> &[(String, PathBuf)] {
        &self.mounts
    }

    /// Rewrites every occurrence of a mount path that starts a path (at the
    /// start of the string or after a non-path character such as `=`, `:`
    /// or a space) and ends at a path boundary.
    pub fn rewrite(&self, s: &str) -> String {
        self.rewrite_except(s, &[])
    }

    /// `$(VAR)`-expands a string of the pod spec (see [`envs::expand`]) and
    /// rewrites the spec's text, not the values put in for `$(VAR)`: those
    /// are the container's env as the runner passes it, host paths already.
    pub fn expand(&self, s: &str, vars: &dyn Fn(&str) -> Option<String>) -> String {
        let (s, substituted) = envs::expand_spans(s, vars);
        self.rewrite_except(&s, &substituted)
    }

    /// [`Self::rewrite`], copying the byte ranges `verbatim` (in order, not
    /// overlapping) as they are.
    fn rewrite_except(&self, s: &str, verbatim: &[std::ops::Range<usize>]) -> String {
        if self.mounts.is_empty() {
            return s.to_string();
        }
        let is_path_char = |c: char| c.is_ascii_alphanumeric() || "/._-~+@".contains(c);
        let at_boundary = |after: &str| {
            after.is_empty()
                || after.starts_with('/')
                || !is_path_char(after.chars().next().expect("non-empty"))
        };
        let mut verbatim = verbatim.iter().peekable();
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        'outer: while i < s.len() {
            while verbatim.peek().is_some_and(|r| r.end <= i) {
                verbatim.next();
            }
            // where the spec's own text ends (the next substituted value)
            let mut literal_end = s.len();
            if let Some(r) = verbatim.peek() {
                if r.start <= i {
                    out.push_str(&s[i..r.end]);
                    i = r.end;
                    continue;
                }
                literal_end = r.start;
            }
            let prev_ok = i == 0 || !is_path_char(s[..i].chars().next_back().expect("i > 0"));
            if prev_ok && s[i..].starts_with('/') {
                for k in &self.keep {
                    if s[i..].starts_with(k.as_str()) && at_boundary(&s[i + k.len()..]) {
                        out.push_str(k);
                        i += k.len();
                        continue 'outer;
                    }
                }
                for (mp, host) in &self.mounts {
                    if mp == "/" || i + mp.len() > literal_end {
                        continue;
                    }
                    if s[i..].starts_with(mp.as_str()) {
                        let boundary = at_boundary(&s[i + mp.len()..]);
                        if boundary {
                            out.push_str(&host.to_string_lossy());
                            i += mp.len();
                            continue 'outer;
                        }
                    }
                }
            }
            let ch = s[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
        out
    }
}

/// The env var naming a mount's host directory: `/var/lib/data` ->
/// `MOLDAU_MOUNT_VAR_LIB_DATA`.
pub fn mount_env_name(mount_path: &str) -> String {
    let body: String = mount_path
        .trim_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("MOLDAU_MOUNT_{body}")
}

/// Result of materializing a pod's volumes.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Volume name -> host directory.
    pub dirs: HashMap<String, PathBuf>,
    pub tokens: Vec<TokenFile>,
}

fn write_file(dir: &Path, rel: &str, data: &[u8], mode: i32) -> Result<()> {
    if rel.split('/').any(|c| c == "..") || rel.starts_with('/') {
        bail!("invalid file path {rel:?} in volume");
    }
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("moldau-tmp");
    std::fs::write(&tmp, data)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode as u32 & 0o777))?;
    std::fs::rename(&tmp, &path)?;
    Ok(())
}

fn write_entries(
    dir: &Path,
    entries: Vec<(String, Vec<u8>)>,
    items: Option<&Vec<KeyToPath>>,
    mode: i32,
    what: &str,
) -> Result<()> {
    match items {
        Some(items) => {
            for it in items {
                let Some((_, v)) = entries.iter().find(|(k, _)| *k == it.key) else {
                    bail!("key {:?} not found in {what}", it.key);
                };
                write_file(dir, &it.path, v, it.mode.unwrap_or(mode))?;
            }
        }
        None => {
            for (k, v) in &entries {
                write_file(dir, k, v, mode)?;
            }
        }
    }
    Ok(())
}

fn write_downward(
    dir: &Path,
    pod: &Pod,
    pod_ip: &str,
    items: &[DownwardAPIVolumeFile],
    mode: i32,
) -> Result<()> {
    for it in items {
        let value = if let Some(f) = &it.field_ref {
            envs::field_ref(pod, pod_ip, &f.field_path)?
        } else if let Some(r) = &it.resource_field_ref {
            bail!(
                "downwardAPI resourceFieldRef {:?} is not supported",
                r.resource
            )
        } else {
            String::new()
        };
        write_file(dir, &it.path, value.as_bytes(), it.mode.unwrap_or(mode))?;
    }
    Ok(())
}

async fn cm_or_missing(
    client: &Client,
    ns: &str,
    name: &str,
    optional: Option<bool>,
) -> Result<Option<ConfigMap>> {
    match envs::get_config_map(client, ns, name).await? {
        Some(cm) => Ok(Some(cm)),
        None if optional == Some(true) => Ok(None),
        None => bail!("configmap {name:?} not found"),
    }
}

async fn secret_or_missing(
    client: &Client,
    ns: &str,
    name: &str,
    optional: Option<bool>,
) -> Result<Option<Secret>> {
    match envs::get_secret(client, ns, name).await? {
        Some(s) => Ok(Some(s)),
        None if optional == Some(true) => Ok(None),
        None => bail!("secret {name:?} not found"),
    }
}

/// Requests a token for the pod's ServiceAccount, bound to the pod, and
/// writes it to `tf.path`.
pub async fn refresh_token(client: &Client, pod: &Pod, tf: &mut TokenFile) -> Result<()> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: tf.audience.iter().cloned().collect(),
            expiration_seconds: Some(tf.expiration_seconds.max(600)),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..Default::default()
    };
    let resp = api
        .create_token_request(&tf.service_account, &PostParams::default(), &req)
        .await
        .with_context(|| {
            format!(
                "TokenRequest for serviceaccount {ns}/{}",
                tf.service_account
            )
        })?;
    let token = resp.status.map(|s| s.token).unwrap_or_default();
    let dir = tf.path.parent().expect("token path has a parent");
    let name = tf
        .path
        .file_name()
        .expect("token path has a name")
        .to_string_lossy()
        .into_owned();
    write_file(dir, &name, token.as_bytes(), 0o600)?;
    tf.fetched = Instant::now();
    Ok(())
}

/// Creates the host directories (and files) of all of a pod's volumes.
pub async fn prepare(
    client: &Client,
    state: &Path,
    pod: &Pod,
    pod_dir: &Path,
    pod_ip: &str,
) -> Result<Prepared> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.as_ref().context("pod has no spec")?;
    let sa = spec
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".into());
    let mut prepared = Prepared::default();
    for v in spec.volumes.iter().flatten() {
        let dir = if let Some(pvc) = &v.persistent_volume_claim {
            pvc_dir(state, &ns, &pvc.claim_name)
        } else if v.ephemeral.is_some() {
            pvc_dir(state, &ns, &format!("{pod_name}-{}", v.name))
        } else {
            pod_dir.join("volumes").join(&v.name)
        };
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        if let Some(cm) = &v.config_map {
            let mode = cm.default_mode.unwrap_or(0o644);
            if let Some(obj) = cm_or_missing(client, &ns, &cm.name, cm.optional).await? {
                write_entries(
                    &dir,
                    envs::cm_entries(&obj),
                    cm.items.as_ref(),
                    mode,
                    "configmap",
                )?;
            }
        } else if let Some(s) = &v.secret {
            let mode = s.default_mode.unwrap_or(0o644);
            let name = s.secret_name.clone().unwrap_or_default();
            if let Some(obj) = secret_or_missing(client, &ns, &name, s.optional).await? {
                write_entries(
                    &dir,
                    envs::secret_entries(&obj),
                    s.items.as_ref(),
                    mode,
                    "secret",
                )?;
            }
        } else if let Some(d) = &v.downward_api {
            let mode = d.default_mode.unwrap_or(0o644);
            write_downward(
                &dir,
                pod,
                pod_ip,
                d.items.as_deref().unwrap_or_default(),
                mode,
            )?;
        } else if let Some(p) = &v.projected {
            let mode = p.default_mode.unwrap_or(0o644);
            for src in p.sources.iter().flatten() {
                if let Some(cm) = &src.config_map {
                    if let Some(obj) = cm_or_missing(client, &ns, &cm.name, cm.optional).await? {
                        write_entries(
                            &dir,
                            envs::cm_entries(&obj),
                            cm.items.as_ref(),
                            mode,
                            "configmap",
                        )?;
                    }
                }
                if let Some(s) = &src.secret {
                    if let Some(obj) = secret_or_missing(client, &ns, &s.name, s.optional).await? {
                        write_entries(
                            &dir,
                            envs::secret_entries(&obj),
                            s.items.as_ref(),
                            mode,
                            "secret",
                        )?;
                    }
                }
                if let Some(d) = &src.downward_api {
                    write_downward(
                        &dir,
                        pod,
                        pod_ip,
                        d.items.as_deref().unwrap_or_default(),
                        mode,
                    )?;
                }
                if let Some(t) = &src.service_account_token {
                    let mut tf = TokenFile {
                        path: dir.join(&t.path),
                        service_account: sa.clone(),
                        audience: t.audience.clone().filter(|a| !a.is_empty()),
                        expiration_seconds: t.expiration_seconds.unwrap_or(3607),
                        fetched: Instant::now(),
                    };
                    refresh_token(client, pod, &mut tf).await?;
                    prepared.tokens.push(tf);
                }
                if src.cluster_trust_bundle.is_some() || src.pod_certificate.is_some() {
                    bail!("projected volume {:?}: unsupported source", v.name);
                }
            }
        } else if v.persistent_volume_claim.is_some()
            || v.ephemeral.is_some()
            || v.empty_dir.is_some()
            || v.host_path.is_some()
        {
            // Plain directories.
        } else {
            bail!("volume {:?}: unsupported volume type", v.name);
        }
        prepared.dirs.insert(v.name.clone(), dir);
    }
    Ok(prepared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrite_paths() {
        let r = Rewriter::new(vec![
            ("/data".into(), PathBuf::from("/h/d")),
            ("/data/logs/".into(), PathBuf::from("/h/l")),
            ("/etc/cfg".into(), PathBuf::from("/h/c")),
        ]);
        assert_eq!(r.rewrite("/data"), "/h/d");
        assert_eq!(r.rewrite("--dir=/data/x"), "--dir=/h/d/x");
        assert_eq!(r.rewrite("/data/logs/a"), "/h/l/a");
        assert_eq!(r.rewrite("/database"), "/database");
        assert_eq!(r.rewrite("/x/data"), "/x/data");
        assert_eq!(r.rewrite("a:/etc/cfg,b:/data"), "a:/h/c,b:/h/d");
        assert_eq!(r.rewrite("http://h/data"), "http://h/data");
        assert_eq!(
            mount_env_name("/var/lib/data/"),
            "MOLDAU_MOUNT_VAR_LIB_DATA"
        );
    }

    #[test]
    fn kept_dirs_and_substituted_values_are_not_rewritten() {
        let state = "/tmp/clone/e2e/.state";
        let vol = format!("{state}/pods/p/volumes/tmp");
        let r = Rewriter::new(vec![("/tmp".into(), PathBuf::from(&vol))]).keep(Path::new(state));
        assert_eq!(r.rewrite("/tmp/a"), format!("{vol}/a"));
        assert_eq!(r.rewrite(&format!("{state}/kc")), format!("{state}/kc"));
        assert_eq!(r.rewrite(state), state);
        assert_eq!(
            r.rewrite(&format!("a={state}/kc:/tmp/b")),
            format!("a={state}/kc:{vol}/b")
        );
        // a sibling of the state directory is the spec's /tmp
        assert_eq!(
            r.rewrite("/tmp/clone/e2e/.stateX"),
            format!("{vol}/clone/e2e/.stateX")
        );
        // `$(VAR)` values are host values: only the spec's text is mapped
        let vars = |n: &str| match n {
            "H" => Some("/tmp/host".to_string()),
            "E" => Some(String::new()),
            _ => None,
        };
        assert_eq!(
            r.expand("--a=$(H)/x --b=/tmp/y$(E) $(N)/tmp", &vars),
            format!("--a=/tmp/host/x --b={vol}/y $(N){vol}")
        );
        // without a keep, a value under a mount path still is not mapped twice
        let r = Rewriter::new(vec![("/tmp".into(), PathBuf::from("/tmp/v"))]);
        assert_eq!(r.expand("$(H):/tmp", &vars), "/tmp/host:/tmp/v");
    }
}
