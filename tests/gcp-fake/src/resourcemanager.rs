//! Cloud Resource Manager v3 (`/v3/projects/{project}`, `:getIamPolicy`, `:setIamPolicy`), and
//! the IAM policy and permission-denial machinery the IAM and Service Usage modules share.
//!
//! Faithful to what `init gcp` depends on (`cloud-test-servers.md` §2.4): policies carry a base64
//! `etag` that changes on every write, and a `setIamPolicy` with a stale etag is 409 `ABORTED`,
//! so the read-modify-write loop and its retry get tested. Tests can make the next writes lose a
//! race ([`ResourceManager::concurrent_writes`]) and deny any permission ([`Denials`]), which
//! answers 403 `PERMISSION_DENIED` naming the permission, as Google does.
//!
//! A project exists for this API once seeded here or in Compute (`compute.seed_project`).

use crate::wire::{ApiResult, GoogleError, new_etag, ok, parse_body};
use crate::{Shared, State, lock};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State as Ext};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Permissions the fake refuses, on every resource.
#[derive(Debug, Default)]
pub struct Denials {
    denied: BTreeSet<String>,
}

impl Denials {
    /// Calls needing `permission` (e.g. `iam.roles.create`) answer 403 PERMISSION_DENIED.
    pub fn deny(&mut self, permission: &str) {
        self.denied.insert(permission.to_owned());
    }
    /// Every permission is granted again.
    pub fn allow_all(&mut self) {
        self.denied.clear();
    }
    /// `Err(403)` if `permission` is denied, naming it and the resource as Google does.
    pub fn check(&self, permission: &str, resource: &str) -> Result<(), GoogleError> {
        if self.denied.contains(permission) {
            return Err(GoogleError::permission_denied(format!(
                "Permission '{permission}' denied on resource '{resource}' (or it may not exist)."
            )));
        }
        Ok(())
    }
}

/// An IAM policy as stored: bindings kept as the client sent them (role, members, condition).
#[derive(Debug, Clone)]
pub struct Policy {
    pub version: i64,
    pub etag: String,
    pub bindings: Vec<Value>,
}

impl Default for Policy {
    fn default() -> Self {
        // Google's etag of a never-written policy.
        Self {
            version: 1,
            etag: "ACAB".to_owned(),
            bindings: Vec::new(),
        }
    }
}

impl Policy {
    /// The policy as the API returns it.
    pub fn to_json(&self) -> Value {
        let mut body = json!({"version": self.version, "etag": self.etag});
        if !self.bindings.is_empty() {
            body["bindings"] = Value::Array(self.bindings.clone());
        }
        body
    }

    /// Applies a `setIamPolicy` request body: a stale etag is ABORTED, a missing etag
    /// overwrites (as Google allows), and the stored policy gets a new etag.
    pub fn set(&mut self, request: &Value) -> Result<Value, GoogleError> {
        let policy = &request["policy"];
        if let Some(etag) = policy["etag"].as_str().filter(|e| !e.is_empty())
            && etag != self.etag
        {
            return Err(GoogleError::aborted(
                "There were concurrent policy changes. Please retry the whole read-modify-write with exponential backoff.",
            ));
        }
        let bindings: Vec<Value> = policy["bindings"]
            .as_array()
            .map(|b| {
                b.iter()
                    .filter(|b| b["members"].as_array().is_some_and(|m| !m.is_empty()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        self.bindings = bindings;
        self.version = policy["version"].as_i64().unwrap_or(1).max(1);
        self.etag = new_etag();
        Ok(self.to_json())
    }

    /// Whether `member` holds `role` (unconditionally).
    pub fn has(&self, role: &str, member: &str) -> bool {
        self.bindings.iter().any(|b| {
            b["role"] == role
                && b.get("condition").is_none_or(Value::is_null)
                && b["members"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|x| x == member))
        })
    }

    /// Someone else writes the policy: the etag changes, the bindings stay.
    pub fn touch(&mut self) {
        self.etag = new_etag();
    }
}

/// Resource Manager's part of the fake's state.
#[derive(Debug, Default)]
pub struct ResourceManager {
    /// Project numbers by id, for projects seeded here (Compute's projects count too).
    pub projects: BTreeMap<String, u64>,
    /// Project IAM policies by project id.
    pub policies: BTreeMap<String, Policy>,
    /// The next N `setIamPolicy` calls find that someone else wrote the policy since it was
    /// read (its etag moved), so they answer ABORTED.
    pub concurrent_writes: u32,
    /// Permissions refused across Resource Manager, IAM and Service Usage.
    pub denials: Denials,
}

impl ResourceManager {
    /// A project with this id and number.
    pub fn seed_project(&mut self, project: &str, number: u64) {
        self.projects.insert(project.to_owned(), number);
    }

    /// The project's IAM policy (empty if never written).
    pub fn policy(&self, project: &str) -> Policy {
        self.policies.get(project).cloned().unwrap_or_default()
    }
}

/// The number of project `id` (seeded here or in Compute), or 404.
pub fn project_number(state: &State, project: &str) -> Result<u64, GoogleError> {
    state
        .resource_manager
        .projects
        .get(project)
        .copied()
        .or_else(|| state.compute.projects.get(project).map(|p| p.number))
        .ok_or_else(|| {
            GoogleError::permission_denied(format!(
                // Google answers 403, not 404, for a project that does not exist or is not yours.
                "Permission denied on resource project {project} (or it may not exist)."
            ))
        })
}

/// Resource Manager's routes.
pub fn router() -> Router<Shared> {
    Router::new().route(
        "/v3/projects/{project}",
        get(get_project).post(project_action),
    )
}

async fn get_project(Ext(state): Ext<Shared>, Path(project): Path<String>) -> ApiResult {
    let state = lock(&state);
    let resource = format!("projects/{project}");
    state
        .resource_manager
        .denials
        .check("resourcemanager.projects.get", &resource)?;
    let number = project_number(&state, &project)?;
    ok(json!({
        "name": format!("projects/{number}"),
        "projectId": project,
        "state": "ACTIVE",
        "displayName": project,
        "etag": format!("W/\"{}\"", new_etag()),
        "createTime": "2024-01-01T00:00:00.000Z",
    }))
}

/// `POST /v3/projects/{project}:getIamPolicy|:setIamPolicy` (axum sees `{project}` as
/// `demo:getIamPolicy`).
async fn project_action(
    Ext(state): Ext<Shared>,
    Path(target): Path<String>,
    body: Bytes,
) -> ApiResult {
    let Some((project, action)) = target.split_once(':') else {
        return Err(GoogleError::not_found(format!(
            "The requested URL POST /v3/projects/{target} was not found on this server."
        )));
    };
    let mut state = lock(&state);
    let resource = format!("projects/{project}");
    project_number(&state, project)?;
    match action {
        "getIamPolicy" => {
            state
                .resource_manager
                .denials
                .check("resourcemanager.projects.getIamPolicy", &resource)?;
            ok(state.resource_manager.policy(project).to_json())
        }
        "setIamPolicy" => {
            state
                .resource_manager
                .denials
                .check("resourcemanager.projects.setIamPolicy", &resource)?;
            let request: Value = parse_body(&body)?;
            let crm = &mut state.resource_manager;
            let policy = crm.policies.entry(project.to_owned()).or_default();
            if crm.concurrent_writes > 0 {
                crm.concurrent_writes -= 1;
                policy.touch();
            }
            ok(policy.set(&request)?)
        }
        other => Err(GoogleError::not_found(format!(
            "Method {other} not found for projects."
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_etag_is_aborted_and_a_fresh_one_writes_with_a_new_etag() {
        let mut policy = Policy::default();
        let binding =
            json!({"role": "roles/x", "members": ["serviceAccount:a@p.iam.gserviceaccount.com"]});
        let written = policy
            .set(&json!({"policy": {"etag": "ACAB", "bindings": [binding]}}))
            .unwrap();
        assert_ne!(written["etag"], "ACAB");
        assert!(policy.has("roles/x", "serviceAccount:a@p.iam.gserviceaccount.com"));
        let stale = policy
            .set(&json!({"policy": {"etag": "ACAB", "bindings": []}}))
            .unwrap_err();
        assert_eq!((stale.code, stale.status), (409, "ABORTED"));
    }

    #[test]
    fn a_denied_permission_is_named_in_the_error() {
        let mut denials = Denials::default();
        denials.deny("iam.roles.create");
        let error = denials.check("iam.roles.create", "projects/p").unwrap_err();
        assert_eq!((error.code, error.status), (403, "PERMISSION_DENIED"));
        assert!(error.message.contains("'iam.roles.create'"));
        assert!(denials.check("iam.roles.get", "projects/p").is_ok());
    }
}
