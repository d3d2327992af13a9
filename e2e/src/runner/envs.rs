//! Container environment: `env`, `envFrom`, the downward API (`fieldRef`,
//! `resourceFieldRef`), ConfigMap/Secret key references and kubelet's
//! `$(VAR)` expansion.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::{Api, Client};

use super::volumes::Rewriter;

/// Expands `$(NAME)` with values from `vars` (unknown names are left as
/// written) and `$$` to `$`, as kubelet does for env values, command and args.
pub fn expand(s: &str, vars: &dyn Fn(&str) -> Option<String>) -> String {
    expand_spans(s, vars).0
}

/// [`expand`], also returning the byte ranges of the result that are
/// substituted values (in order, not overlapping): the pod runner rewrites
/// mount paths in the spec's own text but not in values it substituted,
/// which are host paths already (see [`super::volumes::Rewriter::expand`]).
pub fn expand_spans(
    s: &str,
    vars: &dyn Fn(&str) -> Option<String>,
) -> (String, Vec<std::ops::Range<usize>>) {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut spans = vec![];
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            if b[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if b[i + 1] == b'(' {
                if let Some(end) = s[i + 2..].find(')') {
                    let name = &s[i + 2..i + 2 + end];
                    match vars(name) {
                        Some(v) => {
                            let at = out.len();
                            out.push_str(&v);
                            if !v.is_empty() {
                                spans.push(at..out.len());
                            }
                        }
                        None => out.push_str(&s[i..i + 3 + end]),
                    }
                    i += 3 + end;
                    continue;
                }
            }
        }
        let ch = s[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    (out, spans)
}

fn quoted_key(path: &str, prefix: &str) -> Option<String> {
    let rest = path.strip_prefix(prefix)?.strip_suffix("']")?;
    Some(rest.to_string())
}

fn fmt_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.map(|m| {
        m.iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect::<Vec<_>>()
            .join("\n")
    })
    .unwrap_or_default()
}

/// Resolves a downward-API field path of `pod`, whose IP is `pod_ip`.
pub fn field_ref(pod: &Pod, pod_ip: &str, path: &str) -> Result<String> {
    let md = &pod.metadata;
    let spec = pod.spec.as_ref();
    Ok(match path {
        "metadata.name" => md.name.clone().unwrap_or_default(),
        "metadata.namespace" => md.namespace.clone().unwrap_or_default(),
        "metadata.uid" => md.uid.clone().unwrap_or_default(),
        "metadata.labels" => fmt_map(md.labels.as_ref()),
        "metadata.annotations" => fmt_map(md.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => "127.0.0.1".to_string(),
        "status.podIP" | "status.podIPs" => pod_ip.to_string(),
        p => {
            if let Some(k) = quoted_key(p, "metadata.labels['") {
                md.labels
                    .as_ref()
                    .and_then(|l| l.get(&k).cloned())
                    .unwrap_or_default()
            } else if let Some(k) = quoted_key(p, "metadata.annotations['") {
                md.annotations
                    .as_ref()
                    .and_then(|l| l.get(&k).cloned())
                    .unwrap_or_default()
            } else {
                bail!("unsupported fieldRef fieldPath {p:?}")
            }
        }
    })
}

async fn config_map(client: &Client, ns: &str, name: &str) -> Result<Option<ConfigMap>> {
    Ok(Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?)
}

async fn secret(client: &Client, ns: &str, name: &str) -> Result<Option<Secret>> {
    Ok(Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?)
}

/// A ConfigMap's key, from `data` or `binaryData`.
pub fn cm_value(cm: &ConfigMap, key: &str) -> Option<Vec<u8>> {
    cm.data
        .as_ref()
        .and_then(|d| d.get(key).map(|v| v.as_bytes().to_vec()))
        .or_else(|| {
            cm.binary_data
                .as_ref()
                .and_then(|d| d.get(key).map(|v| v.0.clone()))
        })
}

/// All entries of a ConfigMap.
pub fn cm_entries(cm: &ConfigMap) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, s)| (k.clone(), s.as_bytes().to_vec()))
        .collect();
    v.extend(
        cm.binary_data
            .iter()
            .flatten()
            .map(|(k, b)| (k.clone(), b.0.clone())),
    );
    v
}

/// All entries of a Secret.
pub fn secret_entries(s: &Secret) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = s
        .data
        .iter()
        .flatten()
        .map(|(k, b)| (k.clone(), b.0.clone()))
        .collect();
    v.extend(
        s.string_data
            .iter()
            .flatten()
            .map(|(k, s)| (k.clone(), s.as_bytes().to_vec())),
    );
    v
}

pub async fn get_config_map(client: &Client, ns: &str, name: &str) -> Result<Option<ConfigMap>> {
    config_map(client, ns, name).await
}

pub async fn get_secret(client: &Client, ns: &str, name: &str) -> Result<Option<Secret>> {
    secret(client, ns, name).await
}

fn resource_field(container: &Container, resource: &str) -> String {
    let res = container.resources.as_ref();
    let (kind, name) = resource.split_once('.').unwrap_or(("limits", resource));
    let map = match kind {
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => res.and_then(|r| r.limits.as_ref()),
    };
    match map.and_then(|m| m.get(name)) {
        Some(q) => q.0.clone(),
        // Unset limits resolve to the node's allocatable, as in kubelet.
        None => match name {
            "cpu" => "64".into(),
            "memory" => "274877906944".into(),
            _ => "0".into(),
        },
    }
}

/// Builds a container's environment in kubelet's order: `envFrom`, then
/// `env`, each `$(VAR)`-expanded against what was defined before it.
///
/// `base` is what the runner itself supplies (`KUBECONFIG`, `PATH`,
/// `MOLDAU_MOUNT_*`, ...): host values, kept as they are. What the pod spec
/// supplies is in the container's terms and goes through `rw`, which maps
/// mount paths onto their host directories; a `$(VAR)` reference is replaced
/// by the variable's value as it stands (a host value already), so nothing is
/// mapped twice.
pub async fn container_env(
    client: &Client,
    pod: &Pod,
    container: &Container,
    pod_ip: &str,
    base: &[(String, String)],
    rw: &Rewriter,
) -> Result<Vec<(String, String)>> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut env: Vec<(String, String)> = base.to_vec();
    fn set(env: &mut Vec<(String, String)>, k: String, v: String) {
        if let Some(e) = env.iter_mut().find(|(n, _)| *n == k) {
            e.1 = v;
        } else {
            env.push((k, v));
        }
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match config_map(client, &ns, &r.name).await? {
                Some(cm) => {
                    for (k, v) in cm_entries(&cm) {
                        set(
                            &mut env,
                            format!("{prefix}{k}"),
                            rw.rewrite(&String::from_utf8_lossy(&v)),
                        );
                    }
                }
                None if r.optional == Some(true) => {}
                None => bail!("configmap {:?} not found", r.name),
            }
        }
        if let Some(r) = &from.secret_ref {
            match secret(client, &ns, &r.name).await? {
                Some(s) => {
                    for (k, v) in secret_entries(&s) {
                        set(
                            &mut env,
                            format!("{prefix}{k}"),
                            rw.rewrite(&String::from_utf8_lossy(&v)),
                        );
                    }
                }
                None if r.optional == Some(true) => {}
                None => bail!("secret {:?} not found", r.name),
            }
        }
    }
    for e in container.env.iter().flatten() {
        let value = if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                Some(field_ref(pod, pod_ip, &f.field_path)?)
            } else if let Some(r) = &from.resource_field_ref {
                Some(resource_field(container, &r.resource))
            } else if let Some(r) = &from.config_map_key_ref {
                match config_map(client, &ns, &r.name).await? {
                    Some(cm) => match cm_value(&cm, &r.key) {
                        Some(v) => Some(String::from_utf8_lossy(&v).into_owned()),
                        None if r.optional == Some(true) => None,
                        None => bail!("key {:?} not in configmap {:?}", r.key, r.name),
                    },
                    None if r.optional == Some(true) => None,
                    None => bail!("configmap {:?} not found", r.name),
                }
            } else if let Some(r) = &from.secret_key_ref {
                match secret(client, &ns, &r.name).await? {
                    Some(s) => match secret_entries(&s).into_iter().find(|(k, _)| *k == r.key) {
                        Some((_, v)) => Some(String::from_utf8_lossy(&v).into_owned()),
                        None if r.optional == Some(true) => None,
                        None => bail!("key {:?} not in secret {:?}", r.key, r.name),
                    },
                    None if r.optional == Some(true) => None,
                    None => bail!("secret {:?} not found", r.name),
                }
            } else {
                return Err(anyhow!("env {:?}: unsupported valueFrom", e.name));
            }
        } else {
            let snapshot = env.clone();
            let lookup = move |n: &str| {
                snapshot
                    .iter()
                    .find(|(k, _)| k == n)
                    .map(|(_, v)| v.clone())
            };
            Some(rw.expand(e.value.as_deref().unwrap_or(""), &lookup))
        };
        if let Some(v) = value {
            // a literal value is rewritten (and expanded) above; a value from
            // elsewhere in the spec is in the container's terms as a whole
            let v = if e.value_from.is_some() {
                rw.rewrite(&v)
            } else {
                v
            };
            set(&mut env, e.name.clone(), v);
        }
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion() {
        let f = |n: &str| (n == "A").then(|| "x".to_string());
        assert_eq!(expand("$(A)/$(B)/$$(A)/$", &f), "x/$(B)/$(A)/$");
        assert_eq!(expand("é$(A", &f), "é$(A");
    }
}
