//! The `node-access` step: nodes running as the node role may join the cluster, through an
//! `EC2_LINUX` access entry when the cluster's authentication mode reads access entries, else a
//! `mapRoles` entry in `kube-system/aws-auth`, as upstream's getting-started decides.

use super::{Ctx, aws_error, code};
use crate::setup::{SetupError, Status, Step};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;

/// How nodes running as the node role are let into the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeAccess {
    /// An EKS access entry of type `EC2_LINUX` for the node role (the cluster reads access entries).
    AccessEntry,
    /// A `mapRoles` entry in `kube-system/aws-auth` (the cluster reads only the ConfigMap).
    AwsAuthConfigMap,
}

impl NodeAccess {
    /// As upstream's getting-started decides: access entries when the cluster's authentication
    /// mode includes the API, else the aws-auth ConfigMap (also when the mode is not reported).
    pub(crate) fn for_mode(authentication_mode: Option<&str>) -> Self {
        match authentication_mode {
            Some("API" | "API_AND_CONFIG_MAP") => Self::AccessEntry,
            _ => Self::AwsAuthConfigMap,
        }
    }
}

/// Where EKS reads IAM-to-Kubernetes mappings when access entries are off.
pub(crate) const AWS_AUTH_NAMESPACE: &str = "kube-system";
/// The ConfigMap of those mappings.
pub(crate) const AWS_AUTH_NAME: &str = "aws-auth";
/// The Kubernetes groups a node's role maps to (what EKS gives an `EC2_LINUX` access entry).
pub const NODE_GROUPS: [&str; 2] = ["system:bootstrappers", "system:nodes"];
/// The user name a node's role maps to (EKS fills in the instance's private DNS name).
pub(crate) const NODE_USERNAME: &str = "system:node:{{EC2PrivateDNSName}}";

/// Why `mapRoles` could not be edited.
#[derive(Debug, thiserror::Error)]
#[error("data.mapRoles of ConfigMap kube-system/aws-auth is not a YAML list of role mappings: {0}")]
pub struct MapRolesError(String);

/// `mapRoles` with the node role mapped as a node; `None` when it already is.
///
/// Every existing entry is kept. A block-style list gets the new entry appended as text, so the
/// existing entries (and comments) stay byte for byte; an entry for the role with groups missing
/// gets them added, and then the list is written out again.
pub fn map_node_role(map_roles: &str, role_arn: &str) -> Result<Option<String>, MapRolesError> {
    let mut entries: Vec<Value> = if map_roles.trim().is_empty() {
        Vec::new()
    } else {
        serde_saphyr::from_str::<Option<Vec<Value>>>(map_roles)
            .map_err(|e| MapRolesError(e.to_string()))?
            .unwrap_or_default()
    };
    let has_groups = |entry: &Value| {
        let groups: Vec<&str> = entry["groups"]
            .as_array()
            .map(|g| g.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        NODE_GROUPS.iter().all(|g| groups.contains(g))
    };
    match entries
        .iter_mut()
        .find(|e| e["rolearn"].as_str() == Some(role_arn))
    {
        Some(entry) if has_groups(entry) => Ok(None),
        Some(entry) => {
            let mut groups: Vec<Value> = entry["groups"].as_array().cloned().unwrap_or_default();
            for g in NODE_GROUPS {
                if !groups.iter().any(|have| have.as_str() == Some(g)) {
                    groups.push(json!(g));
                }
            }
            entry["groups"] = Value::Array(groups);
            serde_saphyr::to_string(&entries)
                .map(Some)
                .map_err(|e| MapRolesError(e.to_string()))
        }
        None => {
            let entry =
                json!({"rolearn": role_arn, "username": NODE_USERNAME, "groups": NODE_GROUPS});
            let mut wanted = entries;
            wanted.push(entry.clone());
            if let Some(text) = appended(map_roles, &entry, &wanted) {
                return Ok(Some(text));
            }
            serde_saphyr::to_string(&wanted)
                .map(Some)
                .map_err(|e| MapRolesError(e.to_string()))
        }
    }
}

/// `map_roles` with `entry` appended as text at the list's own indentation, when the list is
/// block style and the result reads back as exactly `wanted`; `None` otherwise (the caller
/// then writes the whole list out again).
///
/// The indentation matters: `mapRoles` written as `  - rolearn: ...` (eksctl and Terraform
/// modules indent it) with an entry appended at column 0 is no longer one YAML list, and a
/// broken aws-auth locks every node, and IAM user, out of the cluster.
fn appended(map_roles: &str, entry: &Value, wanted: &[Value]) -> Option<String> {
    // The first line that is not blank or a comment says whether the list is block style.
    let first = map_roles
        .lines()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let indent = match first {
        None => "",
        Some(line) => {
            let item = line.trim_start();
            if !item.starts_with("- ") {
                return None;
            }
            &line[..line.len() - item.len()]
        }
    };
    let block = serde_saphyr::to_string(&[entry]).ok()?;
    let mut text = map_roles.to_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    for line in block.lines() {
        text.push_str(indent);
        text.push_str(line);
        text.push('\n');
    }
    let reread = serde_saphyr::from_str::<Option<Vec<Value>>>(&text).ok()??;
    (reread == wanted).then_some(text)
}

/// Lets nodes running as the node role join the cluster: an access entry or an aws-auth entry,
/// whichever the cluster's authentication mode reads.
pub(super) struct NodeAccessStep {
    pub(super) ctx: Arc<Ctx>,
    pub(super) kube: Option<kube::Client>,
}

/// Attempts at the aws-auth write before giving up on a busy ConfigMap.
const AWS_AUTH_ATTEMPTS: usize = 5;

impl NodeAccessStep {
    async fn mode(&self) -> Result<NodeAccess, SetupError> {
        Ok(NodeAccess::for_mode(
            self.ctx.cluster().await?.authentication_mode.as_deref(),
        ))
    }

    fn config_maps(&self) -> Result<kube::Api<k8s_openapi::api::core::v1::ConfigMap>, SetupError> {
        match &self.kube {
            Some(client) => Ok(kube::Api::namespaced(client.clone(), AWS_AUTH_NAMESPACE)),
            None => Err(SetupError::Missing {
                resource: "a Kubernetes client".to_owned(),
                hint: format!(
                    "the cluster reads only ConfigMap {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}, which init edits through the Kubernetes API"
                ),
            }),
        }
    }

    /// The ConfigMap (if any) and `mapRoles` as it should be (`None`: already right).
    async fn aws_auth(
        &self,
    ) -> Result<
        (
            Option<k8s_openapi::api::core::v1::ConfigMap>,
            Option<String>,
        ),
        SetupError,
    > {
        let role_arn = self.ctx.role_arn(&self.ctx.options.node_role()).await?;
        let existing = self
            .config_maps()?
            .get_opt(AWS_AUTH_NAME)
            .await
            .map_err(|source| SetupError::Kube {
                action: format!("reading ConfigMap {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}"),
                source,
            })?;
        let map_roles = existing
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("mapRoles"))
            .cloned()
            .unwrap_or_default();
        let wanted = map_node_role(&map_roles, &role_arn).map_err(|e| SetupError::Missing {
            resource: format!("a readable ConfigMap {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}"),
            hint: format!("{e}; fix it by hand, then re-run"),
        })?;
        Ok((existing, wanted))
    }

    async fn access_entry(&self) -> Result<Option<String>, SetupError> {
        let o = &self.ctx.options;
        let role_arn = self.ctx.role_arn(&o.node_role()).await?;
        match self
            .ctx
            .eks
            .describe_access_entry()
            .cluster_name(&o.cluster_name)
            .principal_arn(&role_arn)
            .send()
            .await
        {
            Ok(out) => Ok(Some(
                out.access_entry()
                    .and_then(|e| e.r#type())
                    .unwrap_or("STANDARD")
                    .to_owned(),
            )),
            Err(e) if code(&e) == Some("ResourceNotFoundException") => Ok(None),
            Err(e) => Err(aws_error(
                "eks:DescribeAccessEntry",
                &format!("cluster {}", o.cluster_name),
                e,
            )),
        }
    }
}

impl Step for NodeAccessStep {
    fn name(&self) -> &str {
        "node-access"
    }

    fn describe(&self) -> String {
        format!(
            "let nodes running as {} join the cluster: an EC2_LINUX access entry, or (authentication mode CONFIG_MAP) a mapRoles entry in {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}",
            self.ctx.options.node_role()
        )
    }

    fn check(&self) -> BoxFuture<'_, Result<Status, SetupError>> {
        Box::pin(async move {
            let role = self.ctx.options.node_role();
            match self.mode().await? {
                NodeAccess::AccessEntry => match self.access_entry().await? {
                    Some(kind) if kind == "EC2_LINUX" => Ok(Status::InPlace(format!(
                        "EC2_LINUX access entry for {role}"
                    ))),
                    Some(kind) => Err(SetupError::Missing {
                        resource: format!("an EC2_LINUX access entry for role {role}"),
                        hint: format!(
                            "the role has an access entry of type {kind}, which nodes cannot join with and EKS cannot change; delete it (aws eks delete-access-entry --cluster-name {} --principal-arn ...) and re-run",
                            self.ctx.options.cluster_name
                        ),
                    }),
                    None => Ok(Status::Needed(format!(
                        "create an EC2_LINUX access entry for {role}"
                    ))),
                },
                NodeAccess::AwsAuthConfigMap => Ok(match self.aws_auth().await? {
                    (_, None) => Status::InPlace(format!(
                        "{AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME} maps {role} to {}",
                        NODE_GROUPS.join(", ")
                    )),
                    (None, Some(_)) => Status::Needed(format!(
                        "create ConfigMap {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME} mapping {role} as a node"
                    )),
                    (Some(_), Some(_)) => Status::Needed(format!(
                        "map {role} as a node in {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}, keeping its other entries"
                    )),
                }),
            }
        })
    }

    fn apply(&self) -> BoxFuture<'_, Result<(), SetupError>> {
        Box::pin(async move {
            let o = &self.ctx.options;
            if self.mode().await? == NodeAccess::AccessEntry {
                if self.access_entry().await?.is_some() {
                    return Ok(());
                }
                let role_arn = self.ctx.role_arn(&o.node_role()).await?;
                self.ctx
                    .eks
                    .create_access_entry()
                    .cluster_name(&o.cluster_name)
                    .principal_arn(&role_arn)
                    .r#type("EC2_LINUX")
                    .send()
                    .await
                    .map_err(|e| {
                        aws_error(
                            "eks:CreateAccessEntry",
                            &format!("cluster {}", o.cluster_name),
                            e,
                        )
                    })?;
                return Ok(());
            }
            let api = self.config_maps()?;
            let id = format!("ConfigMap {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}");
            // Read-modify-write with the resourceVersion: a concurrent edit (eksctl, another
            // node group) makes the write conflict, and the entry is added to the new version.
            for attempt in 1..=AWS_AUTH_ATTEMPTS {
                let (existing, Some(map_roles)) = self.aws_auth().await? else {
                    return Ok(());
                };
                let result = match existing {
                    Some(mut config_map) => {
                        config_map
                            .data
                            .get_or_insert_with(Default::default)
                            .insert("mapRoles".to_owned(), map_roles);
                        api.replace(
                            AWS_AUTH_NAME,
                            &kube::api::PostParams::default(),
                            &config_map,
                        )
                        .await
                        .map(drop)
                    }
                    None => {
                        let config_map = k8s_openapi::api::core::v1::ConfigMap {
                            metadata: kube::api::ObjectMeta {
                                name: Some(AWS_AUTH_NAME.to_owned()),
                                namespace: Some(AWS_AUTH_NAMESPACE.to_owned()),
                                ..Default::default()
                            },
                            data: Some([("mapRoles".to_owned(), map_roles)].into()),
                            ..Default::default()
                        };
                        api.create(&kube::api::PostParams::default(), &config_map)
                            .await
                            .map(drop)
                    }
                };
                match result {
                    Ok(()) => return Ok(()),
                    Err(kube::Error::Api(status))
                        if (status.code == 409) && attempt < AWS_AUTH_ATTEMPTS =>
                    {
                        tracing::warn!(
                            attempt,
                            "aws-auth changed while it was edited; reading it again"
                        );
                    }
                    Err(source) => {
                        return Err(SetupError::Kube {
                            action: format!("writing {id}"),
                            source,
                        });
                    }
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_join_through_access_entries_when_the_cluster_reads_them_and_through_aws_auth_otherwise()
     {
        assert_eq!(NodeAccess::for_mode(Some("API")), NodeAccess::AccessEntry);
        assert_eq!(
            NodeAccess::for_mode(Some("API_AND_CONFIG_MAP")),
            NodeAccess::AccessEntry
        );
        assert_eq!(
            NodeAccess::for_mode(Some("CONFIG_MAP")),
            NodeAccess::AwsAuthConfigMap
        );
        assert_eq!(NodeAccess::for_mode(None), NodeAccess::AwsAuthConfigMap);
    }

    const NODE_ARN: &str = "arn:aws:iam::123456789012:role/KarpenterNodeRole-demo";

    fn parse(text: &str) -> Vec<Value> {
        serde_saphyr::from_str(text).unwrap()
    }

    #[test]
    fn the_node_role_is_appended_to_map_roles_keeping_every_entry_byte_for_byte() {
        let existing = "# managed node group\n- rolearn: arn:aws:iam::123456789012:role/ng-1\n  username: system:node:{{EC2PrivateDNSName}}\n  groups:\n    - system:bootstrappers\n    - system:nodes\n";
        let updated = map_node_role(existing, NODE_ARN).unwrap().unwrap();
        assert!(updated.starts_with(existing), "{updated}");
        let entries = parse(&updated);
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[1],
            json!({"rolearn": NODE_ARN, "username": NODE_USERNAME, "groups": NODE_GROUPS})
        );
        assert_eq!(
            map_node_role(&updated, NODE_ARN).unwrap(),
            None,
            "a second run changes nothing"
        );
    }

    #[test]
    fn an_indented_map_roles_gets_the_node_role_at_its_own_indentation() {
        let existing = "  - rolearn: arn:aws:iam::123456789012:role/ng-1\n    username: system:node:{{EC2PrivateDNSName}}\n    groups:\n      - system:bootstrappers\n      - system:nodes\n";
        let updated = map_node_role(existing, NODE_ARN).unwrap().unwrap();
        assert!(updated.starts_with(existing), "{updated}");
        let entries = parse(&updated);
        assert_eq!(entries.len(), 2, "{updated}");
        assert_eq!(entries[1]["rolearn"], NODE_ARN);
        assert_eq!(map_node_role(&updated, NODE_ARN).unwrap(), None);
    }

    #[test]
    fn an_empty_or_flow_style_map_roles_gets_the_node_role_too() {
        assert_eq!(
            parse(&map_node_role("", NODE_ARN).unwrap().unwrap()).len(),
            1
        );
        let flow = r#"[{"rolearn": "arn:aws:iam::1:role/a", "username": "a", "groups": ["g"]}]"#;
        let entries = parse(&map_node_role(flow, NODE_ARN).unwrap().unwrap());
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["rolearn"], "arn:aws:iam::1:role/a");
    }

    #[test]
    fn an_entry_for_the_node_role_without_the_node_groups_gets_them_and_a_broken_map_roles_is_named()
     {
        let partial = format!("- rolearn: {NODE_ARN}\n  username: x\n  groups: [custom]\n");
        let entries = parse(&map_node_role(&partial, NODE_ARN).unwrap().unwrap());
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0]["groups"],
            json!(["custom", "system:bootstrappers", "system:nodes"])
        );
        assert!(map_node_role("rolearn: [unclosed", NODE_ARN).is_err());
    }
}
