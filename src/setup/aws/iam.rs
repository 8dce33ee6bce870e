//! IAM: the node role and its instance profile, the spot service-linked role, the cluster's
//! OIDC provider (IRSA), and the controller role with its trust policy and inline policy (whose
//! document is [`super::policy`]'s).

use super::policy::CONTROLLER_POLICY_NAME;
use super::{Auth, Ctx, aws_error, code};
use crate::setup::{SetupError, Status};
use aws_sdk_ec2::error::ProvideErrorMetadata;
use futures::future::BoxFuture;
use serde_json::{Value, json};

/// The node role's AWS-managed policies.
pub const NODE_POLICIES: [&str; 4] = [
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonSSMManagedInstanceCore",
];
/// IAM returns policy documents URL-encoded; moto sometimes does not.
fn decode_policy(text: &str) -> Option<Value> {
    serde_json::from_str(text).ok().or_else(|| {
        // `+` is a space as in form encoding (an encoded `+` is `%2B`), so it is replaced before
        // the percent-escapes are decoded.
        let spaced = text.replace('+', " ");
        let decoded = percent_encoding::percent_decode_str(&spaced).decode_utf8_lossy();
        serde_json::from_str(&decoded).ok()
    })
}

impl Ctx {
    pub(super) async fn oidc_provider_arn(&self) -> Result<Option<(String, String)>, SetupError> {
        let Some(issuer) = self.cluster().await?.oidc_issuer.clone() else {
            return Ok(None);
        };
        let host = issuer.trim_start_matches("https://").to_owned();
        let arn = format!(
            "arn:{}:iam::{}:oidc-provider/{host}",
            self.partition(),
            self.account().await?
        );
        Ok(Some((arn, host)))
    }

    /// The controller role's trust policy.
    pub(super) async fn trust_policy(&self) -> Result<Value, SetupError> {
        let o = &self.options;
        Ok(match o.auth {
            Auth::Irsa => {
                let Some((arn, host)) = self.oidc_provider_arn().await? else {
                    return Err(SetupError::Missing {
                        resource: format!("the OIDC issuer of cluster {}", o.cluster_name),
                        hint: "the cluster has no OIDC issuer; use --auth pod-identity".to_owned(),
                    });
                };
                json!({"Version": "2012-10-17", "Statement": [{
                    "Effect": "Allow", "Principal": {"Federated": arn}, "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {"StringEquals": {
                        format!("{host}:aud"): "sts.amazonaws.com",
                        format!("{host}:sub"): format!("system:serviceaccount:{}:{}", o.namespace, o.service_account),
                    }},
                }]})
            }
            Auth::PodIdentity => json!({"Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": ["sts:AssumeRole", "sts:TagSession"],
            }]}),
        })
    }
}

async fn role_exists(
    ctx: &Ctx,
    name: &str,
) -> Result<Option<aws_sdk_iam::types::Role>, SetupError> {
    match ctx.iam.get_role().role_name(name).send().await {
        Ok(out) => Ok(out.role().cloned()),
        Err(e) if code(&e) == Some("NoSuchEntity") => Ok(None),
        Err(e) => Err(aws_error("iam:GetRole", &format!("role {name}"), e)),
    }
}

async fn attached_policies(ctx: &Ctx, role: &str) -> Result<Vec<String>, SetupError> {
    let out = ctx
        .iam
        .list_attached_role_policies()
        .role_name(role)
        .send()
        .await
        .map_err(|e| aws_error("iam:ListAttachedRolePolicies", &format!("role {role}"), e))?;
    Ok(out
        .attached_policies()
        .iter()
        .filter_map(|p| p.policy_name().map(str::to_owned))
        .collect())
}

pub(super) fn check_node_role(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let name = ctx.options.node_role();
        if role_exists(ctx, &name).await?.is_none() {
            return Ok(Status::Needed(format!(
                "create role {name} and attach {}",
                NODE_POLICIES.join(", ")
            )));
        }
        let attached = attached_policies(ctx, &name).await?;
        let missing: Vec<&str> = NODE_POLICIES
            .iter()
            .copied()
            .filter(|p| !attached.iter().any(|a| a == p))
            .collect();
        Ok(if missing.is_empty() {
            Status::InPlace(format!("role {name} with {} policies", NODE_POLICIES.len()))
        } else {
            Status::Needed(format!("attach {} to role {name}", missing.join(", ")))
        })
    })
}

pub(super) fn apply_node_role(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let name = ctx.options.node_role();
        if role_exists(ctx, &name).await?.is_none() {
            let trust = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]});
            ctx.iam
                .create_role()
                .role_name(&name)
                .assume_role_policy_document(trust.to_string())
                .description(format!(
                    "Nodes launched by kubectl-karpenter in EKS cluster {}",
                    ctx.options.cluster_name
                ))
                .send()
                .await
                .map_err(|e| aws_error("iam:CreateRole", &format!("role {name}"), e))?;
        }
        let attached = attached_policies(ctx, &name).await?;
        for policy in NODE_POLICIES
            .iter()
            .filter(|p| !attached.iter().any(|a| a == *p))
        {
            let arn = format!("arn:{}:iam::aws:policy/{policy}", ctx.partition());
            ctx.iam
                .attach_role_policy()
                .role_name(&name)
                .policy_arn(&arn)
                .send()
                .await
                .map_err(|e| {
                    aws_error("iam:AttachRolePolicy", &format!("{arn} on role {name}"), e)
                })?;
        }
        Ok(())
    })
}

pub(super) fn check_node_instance_profile(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let (profile, role) = (ctx.options.node_instance_profile(), ctx.options.node_role());
        match ctx
            .iam
            .get_instance_profile()
            .instance_profile_name(&profile)
            .send()
            .await
        {
            Ok(out) => {
                let has_role = out
                    .instance_profile()
                    .is_some_and(|p| p.roles().iter().any(|r| r.role_name() == role));
                Ok(if has_role {
                    Status::InPlace(format!("instance profile {profile} holds {role}"))
                } else {
                    Status::Needed(format!("add role {role} to instance profile {profile}"))
                })
            }
            Err(e) if code(&e) == Some("NoSuchEntity") => Ok(Status::Needed(format!(
                "create instance profile {profile} with role {role}"
            ))),
            Err(e) => Err(aws_error(
                "iam:GetInstanceProfile",
                &format!("instance profile {profile}"),
                e,
            )),
        }
    })
}

pub(super) fn apply_node_instance_profile(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let (profile, role) = (ctx.options.node_instance_profile(), ctx.options.node_role());
        let resource = format!("instance profile {profile}");
        let existing = match ctx
            .iam
            .get_instance_profile()
            .instance_profile_name(&profile)
            .send()
            .await
        {
            Ok(out) => out.instance_profile().cloned(),
            Err(e) if code(&e) == Some("NoSuchEntity") => None,
            Err(e) => return Err(aws_error("iam:GetInstanceProfile", &resource, e)),
        };
        if existing.is_none() {
            ctx.iam
                .create_instance_profile()
                .instance_profile_name(&profile)
                .send()
                .await
                .map_err(|e| aws_error("iam:CreateInstanceProfile", &resource, e))?;
        }
        if !existing.is_some_and(|p| p.roles().iter().any(|r| r.role_name() == role)) {
            ctx.iam
                .add_role_to_instance_profile()
                .instance_profile_name(&profile)
                .role_name(&role)
                .send()
                .await
                .map_err(|e| aws_error("iam:AddRoleToInstanceProfile", &resource, e))?;
        }
        Ok(())
    })
}

pub(super) const SPOT_ROLE: &str = "AWSServiceRoleForEC2Spot";
const SPOT_ROLE_PATH: &str = "/aws-service-role/spot.amazonaws.com/";

pub(super) fn check_spot_role(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        // Found by its path rather than its name, which AWS fixes and look-alikes may not.
        let out = ctx
            .iam
            .list_roles()
            .path_prefix(SPOT_ROLE_PATH)
            .send()
            .await
            .map_err(|e| aws_error("iam:ListRoles", SPOT_ROLE, e))?;
        Ok(match out.roles().first() {
            Some(role) => Status::InPlace(format!("{} exists", role.role_name())),
            None => Status::Needed(format!(
                "create the service-linked role {SPOT_ROLE} (spot.amazonaws.com)"
            )),
        })
    })
}

pub(super) fn apply_spot_role(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        match ctx
            .iam
            .create_service_linked_role()
            .aws_service_name("spot.amazonaws.com")
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if code(&e) == Some("InvalidInput")
                    && e.message().is_some_and(|m| m.contains("taken")) =>
            {
                Ok(())
            }
            Err(e) if code(&e) == Some("EntityAlreadyExists") => Ok(()),
            Err(e) => Err(aws_error("iam:CreateServiceLinkedRole", SPOT_ROLE, e)),
        }
    })
}

async fn oidc_provider_exists(ctx: &Ctx) -> Result<Option<bool>, SetupError> {
    let Some((arn, _)) = ctx.oidc_provider_arn().await? else {
        return Ok(None);
    };
    let out = ctx
        .iam
        .list_open_id_connect_providers()
        .send()
        .await
        .map_err(|e| aws_error("iam:ListOpenIDConnectProviders", "the account", e))?;
    Ok(Some(
        out.open_id_connect_provider_list()
            .iter()
            .any(|p| p.arn() == Some(arn.as_str())),
    ))
}

pub(super) fn check_oidc_provider(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        match oidc_provider_exists(ctx).await? {
            None => Err(SetupError::Missing {
                resource: format!("the OIDC issuer of cluster {}", ctx.options.cluster_name),
                hint: "IRSA needs one; use --auth pod-identity".to_owned(),
            }),
            Some(true) => Ok(Status::InPlace(
                "the cluster's OIDC provider is registered in IAM".to_owned(),
            )),
            Some(false) => Ok(Status::Needed(format!(
                "register {} as an IAM OIDC provider",
                ctx.cluster().await?.oidc_issuer.clone().unwrap_or_default()
            ))),
        }
    })
}

pub(super) fn apply_oidc_provider(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let issuer = ctx.cluster().await?.oidc_issuer.clone().unwrap_or_default();
        match ctx
            .iam
            .create_open_id_connect_provider()
            .url(&issuer)
            .client_id_list("sts.amazonaws.com")
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some("EntityAlreadyExists") => Ok(()),
            Err(e) => Err(aws_error("iam:CreateOpenIDConnectProvider", &issuer, e)),
        }
    })
}

pub(super) fn check_controller_role(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let name = ctx.options.controller_role();
        let Some(role) = role_exists(ctx, &name).await? else {
            return Ok(Status::Needed(format!(
                "create role {name} trusted by {:?}",
                ctx.options.auth
            )));
        };
        let want = ctx.trust_policy().await?;
        let have = role.assume_role_policy_document().and_then(decode_policy);
        Ok(if have.as_ref() == Some(&want) {
            Status::InPlace(format!("role {name}"))
        } else {
            Status::Needed(format!("update the trust policy of role {name}"))
        })
    })
}

pub(super) fn apply_controller_role(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let name = ctx.options.controller_role();
        let trust = ctx.trust_policy().await?.to_string();
        if role_exists(ctx, &name).await?.is_none() {
            ctx.iam
                .create_role()
                .role_name(&name)
                .assume_role_policy_document(trust)
                .description(format!(
                    "The kubectl-karpenter agent of EKS cluster {}",
                    ctx.options.cluster_name
                ))
                .send()
                .await
                .map_err(|e| aws_error("iam:CreateRole", &format!("role {name}"), e))?;
        } else {
            ctx.iam
                .update_assume_role_policy()
                .role_name(&name)
                .policy_document(trust)
                .send()
                .await
                .map_err(|e| aws_error("iam:UpdateAssumeRolePolicy", &format!("role {name}"), e))?;
        }
        Ok(())
    })
}

pub(super) fn check_controller_policy(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let role = ctx.options.controller_role();
        let want = ctx.controller_policy().await?;
        let have = match ctx
            .iam
            .get_role_policy()
            .role_name(&role)
            .policy_name(CONTROLLER_POLICY_NAME)
            .send()
            .await
        {
            Ok(out) => decode_policy(out.policy_document()),
            Err(e) if code(&e) == Some("NoSuchEntity") => None,
            Err(e) => return Err(aws_error("iam:GetRolePolicy", &format!("role {role}"), e)),
        };
        Ok(if have.as_ref() == Some(&want) {
            Status::InPlace(format!("{CONTROLLER_POLICY_NAME} on role {role}"))
        } else if have.is_some() {
            Status::Needed(format!("update {CONTROLLER_POLICY_NAME} on role {role}"))
        } else {
            Status::Needed(format!("put {CONTROLLER_POLICY_NAME} on role {role}"))
        })
    })
}

pub(super) fn apply_controller_policy(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let role = ctx.options.controller_role();
        let document = ctx.controller_policy().await?.to_string();
        ctx.iam
            .put_role_policy()
            .role_name(&role)
            .policy_name(CONTROLLER_POLICY_NAME)
            .policy_document(document)
            .send()
            .await
            .map_err(|e| aws_error("iam:PutRolePolicy", &format!("role {role}"), e))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iam_policy_documents_decode_whether_or_not_they_are_url_encoded() {
        let doc = json!({"Version": "2012-10-17", "Statement": []});
        assert_eq!(decode_policy(&doc.to_string()), Some(doc.clone()));
        let encoded = "%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%5D%7D";
        assert_eq!(decode_policy(encoded), Some(doc));
    }

    #[test]
    fn a_plus_in_an_encoded_policy_is_a_space_and_an_encoded_plus_stays_a_plus() {
        let encoded = "%7B%22Sid%22%3A%22a+b%2Bc%22%7D";
        assert_eq!(decode_policy(encoded), Some(json!({"Sid": "a b+c"})));
    }
}
