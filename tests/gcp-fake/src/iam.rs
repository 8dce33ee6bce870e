//! IAM v1 (`/v1/projects/{project}/serviceAccounts…` and `/v1/projects/{project}/roles…`):
//! service accounts (create, get), their keys (create, list, delete), their IAM policy
//! (`:getIamPolicy`, `:setIamPolicy`, where Workload Identity bindings go), and project-level
//! custom roles (create, get, patch).
//!
//! Faithful to the points the official client and `init gcp` depend on (`cloud-test-servers.md`
//! §2.4): a duplicate account or role is 409 ALREADY_EXISTS, a missing one 404, `etag` and
//! `privateKeyData` are base64, `uniqueId` is a 21-digit string, keys.create on a missing account
//! is 404, an empty keys.create body means a JSON credentials file, and a stale policy etag is 409
//! ABORTED. Requests carry enums as ints (`enum-encoding=int`); responses send their names.
//! Permission denials come from [`crate::resourcemanager::Denials`].

use crate::resourcemanager::{Policy, project_number};
use crate::wire::{
    ApiResult, GoogleError, base64, new_etag, now_rfc3339, ok, parse_body, query, random_hex,
};
use crate::{Shared, State, lock};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State as Ext};
use axum::http::Uri;
use axum::routing::{delete, get};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// IAM's part of the fake's state.
#[derive(Debug, Default)]
pub struct Iam {
    /// Service accounts by email.
    pub service_accounts: BTreeMap<String, ServiceAccount>,
    /// Custom roles by name (`projects/p/roles/id`), as the API returns them.
    pub roles: BTreeMap<String, Value>,
}

/// A service account, its keys and its IAM policy.
#[derive(Debug, Clone)]
pub struct ServiceAccount {
    pub project: String,
    pub unique_id: String,
    pub display_name: String,
    pub description: String,
    /// Keys by id (40 hex digits): the key file JSON each was created with.
    pub keys: BTreeMap<String, Value>,
    pub policy: Policy,
}

impl ServiceAccount {
    fn to_json(&self, email: &str) -> Value {
        let mut body = json!({
            "name": format!("projects/{}/serviceAccounts/{email}", self.project),
            "projectId": self.project,
            "uniqueId": self.unique_id,
            "email": email,
            "etag": new_etag(),
            "oauth2ClientId": self.unique_id,
        });
        if !self.display_name.is_empty() {
            body["displayName"] = json!(self.display_name);
        }
        if !self.description.is_empty() {
            body["description"] = json!(self.description);
        }
        body
    }
}

impl Iam {
    /// The account with this email, if any.
    pub fn account(&self, email: &str) -> Option<&ServiceAccount> {
        self.service_accounts.get(email)
    }
}

/// IAM's routes.
pub fn router() -> Router<Shared> {
    Router::new()
        .route(
            "/v1/projects/{project}/serviceAccounts",
            get(list_accounts).post(create_account),
        )
        .route(
            "/v1/projects/{project}/serviceAccounts/{account}",
            get(get_account).post(account_action),
        )
        .route(
            "/v1/projects/{project}/serviceAccounts/{account}/keys",
            get(list_keys).post(create_key),
        )
        .route(
            "/v1/projects/{project}/serviceAccounts/{account}/keys/{key}",
            delete(delete_key),
        )
        .route(
            "/v1/projects/{project}/roles",
            axum::routing::post(create_role),
        )
        .route(
            "/v1/projects/{project}/roles/{role}",
            get(get_role).patch(update_role),
        )
}

fn account_not_found(project: &str, account: &str) -> GoogleError {
    GoogleError::not_found(format!(
        "Unknown service account: projects/{project}/serviceAccounts/{account}"
    ))
}

/// The email an account path names (`email`, or a unique id), or 404.
fn resolve(state: &State, project: &str, account: &str) -> Result<String, GoogleError> {
    if state.iam.service_accounts.contains_key(account) {
        return Ok(account.to_owned());
    }
    state
        .iam
        .service_accounts
        .iter()
        .find(|(_, sa)| sa.unique_id == account)
        .map(|(email, _)| email.clone())
        .ok_or_else(|| account_not_found(project, account))
}

fn account_resource(project: &str, account: &str) -> String {
    format!("projects/{project}/serviceAccounts/{account}")
}

async fn list_accounts(Ext(state): Ext<Shared>, Path(project): Path<String>) -> ApiResult {
    let state = lock(&state);
    state
        .resource_manager
        .denials
        .check("iam.serviceAccounts.list", &format!("projects/{project}"))?;
    project_number(&state, &project)?;
    let accounts: Vec<Value> = state
        .iam
        .service_accounts
        .iter()
        .filter(|(_, sa)| sa.project == project)
        .map(|(email, sa)| sa.to_json(email))
        .collect();
    ok(if accounts.is_empty() {
        json!({})
    } else {
        json!({"accounts": accounts})
    })
}

async fn create_account(
    Ext(state): Ext<Shared>,
    Path(project): Path<String>,
    body: Bytes,
) -> ApiResult {
    let mut state = lock(&state);
    state
        .resource_manager
        .denials
        .check("iam.serviceAccounts.create", &format!("projects/{project}"))?;
    project_number(&state, &project)?;
    let request: Value = parse_body(&body)?;
    let id = request["accountId"].as_str().unwrap_or_default();
    let valid = (6..=30).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !id.ends_with('-');
    if !valid {
        return Err(GoogleError::invalid(format!(
            "Invalid value for field 'accountId': '{id}'. Must match regex [a-z]([-a-z0-9]*[a-z0-9])? and be 6-30 characters."
        )));
    }
    let email = format!("{id}@{project}.iam.gserviceaccount.com");
    if state.iam.service_accounts.contains_key(&email) {
        return Err(GoogleError::already_exists(format!(
            "Service account {id} already exists within project projects/{project}."
        )));
    }
    let details = &request["serviceAccount"];
    let unique_id = format!(
        "1{}",
        (0..20)
            .map(|_| char::from(b'0' + rand::random_range(0..10u8)))
            .collect::<String>()
    );
    let account = ServiceAccount {
        project: project.clone(),
        unique_id,
        display_name: details["displayName"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        description: details["description"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        keys: BTreeMap::new(),
        policy: Policy::default(),
    };
    let body = account.to_json(&email);
    state.iam.service_accounts.insert(email, account);
    ok(body)
}

async fn get_account(
    Ext(state): Ext<Shared>,
    Path((project, account)): Path<(String, String)>,
) -> ApiResult {
    let state = lock(&state);
    state.resource_manager.denials.check(
        "iam.serviceAccounts.get",
        &account_resource(&project, &account),
    )?;
    let email = resolve(&state, &project, &account)?;
    let sa = state
        .iam
        .service_accounts
        .get(&email)
        .ok_or_else(|| account_not_found(&project, &account))?;
    ok(sa.to_json(&email))
}

/// `POST …/serviceAccounts/{email}:getIamPolicy|:setIamPolicy` (axum sees `{account}` as
/// `email:getIamPolicy`).
async fn account_action(
    Ext(state): Ext<Shared>,
    Path((project, target)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let Some((account, action)) = target.rsplit_once(':') else {
        return Err(GoogleError::not_found(format!(
            "The requested URL POST /v1/projects/{project}/serviceAccounts/{target} was not found on this server."
        )));
    };
    let mut state = lock(&state);
    let resource = account_resource(&project, account);
    match action {
        "getIamPolicy" => {
            state
                .resource_manager
                .denials
                .check("iam.serviceAccounts.getIamPolicy", &resource)?;
            let email = resolve(&state, &project, account)?;
            let sa = state
                .iam
                .service_accounts
                .get(&email)
                .ok_or_else(|| account_not_found(&project, account))?;
            ok(sa.policy.to_json())
        }
        "setIamPolicy" => {
            state
                .resource_manager
                .denials
                .check("iam.serviceAccounts.setIamPolicy", &resource)?;
            let email = resolve(&state, &project, account)?;
            let request: Value = parse_body(&body)?;
            let concurrent = state.resource_manager.concurrent_writes > 0;
            if concurrent {
                state.resource_manager.concurrent_writes -= 1;
            }
            let sa = state
                .iam
                .service_accounts
                .get_mut(&email)
                .ok_or_else(|| account_not_found(&project, account))?;
            if concurrent {
                sa.policy.touch();
            }
            ok(sa.policy.set(&request)?)
        }
        other => Err(GoogleError::not_found(format!(
            "Method {other} not found for serviceAccounts."
        ))),
    }
}

fn key_json(name: &str) -> Value {
    json!({
        "name": name,
        "validAfterTime": now_rfc3339(),
        "validBeforeTime": "9999-12-31T23:59:59Z",
        "keyAlgorithm": "KEY_ALG_RSA_2048",
        "keyOrigin": "GOOGLE_PROVIDED",
        "keyType": "USER_MANAGED",
    })
}

async fn create_key(
    Ext(state): Ext<Shared>,
    Path((project, account)): Path<(String, String)>,
) -> ApiResult {
    let mut state = lock(&state);
    state.resource_manager.denials.check(
        "iam.serviceAccountKeys.create",
        &account_resource(&project, &account),
    )?;
    let email = resolve(&state, &project, &account)?;
    let sa = state
        .iam
        .service_accounts
        .get_mut(&email)
        .ok_or_else(|| account_not_found(&project, &account))?;
    let id = random_hex(40);
    // A credentials file shaped like Google's (the private key is not a real key).
    let file = json!({
        "type": "service_account",
        "project_id": sa.project,
        "private_key_id": id,
        "private_key": format!("-----BEGIN PRIVATE KEY-----\nFAKE{}\n-----END PRIVATE KEY-----\n", random_hex(64)),
        "client_email": email,
        "client_id": sa.unique_id,
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": "https://oauth2.googleapis.com/token",
        "universe_domain": "googleapis.com",
    });
    let name = format!("projects/{}/serviceAccounts/{email}/keys/{id}", sa.project);
    let mut body = key_json(&name);
    body["privateKeyType"] = json!("TYPE_GOOGLE_CREDENTIALS_FILE");
    body["privateKeyData"] = json!(base64(file.to_string().as_bytes()));
    sa.keys.insert(id, file);
    ok(body)
}

async fn list_keys(
    Ext(state): Ext<Shared>,
    Path((project, account)): Path<(String, String)>,
    uri: Uri,
) -> ApiResult {
    let state = lock(&state);
    state.resource_manager.denials.check(
        "iam.serviceAccountKeys.list",
        &account_resource(&project, &account),
    )?;
    let email = resolve(&state, &project, &account)?;
    let sa = state
        .iam
        .service_accounts
        .get(&email)
        .ok_or_else(|| account_not_found(&project, &account))?;
    // keyTypes=SYSTEM_MANAGED (2) alone lists nothing: the fake has only user-managed keys.
    let only_system = query(&uri)
        .get("keyTypes")
        .is_some_and(|t| t == "2" || t == "SYSTEM_MANAGED");
    let keys: Vec<Value> = if only_system {
        Vec::new()
    } else {
        sa.keys
            .keys()
            .map(|id| {
                key_json(&format!(
                    "projects/{}/serviceAccounts/{email}/keys/{id}",
                    sa.project
                ))
            })
            .collect()
    };
    ok(if keys.is_empty() {
        json!({})
    } else {
        json!({"keys": keys})
    })
}

async fn delete_key(
    Ext(state): Ext<Shared>,
    Path((project, account, key)): Path<(String, String, String)>,
) -> ApiResult {
    let mut state = lock(&state);
    state.resource_manager.denials.check(
        "iam.serviceAccountKeys.delete",
        &account_resource(&project, &account),
    )?;
    let email = resolve(&state, &project, &account)?;
    let sa = state
        .iam
        .service_accounts
        .get_mut(&email)
        .ok_or_else(|| account_not_found(&project, &account))?;
    if sa.keys.remove(&key).is_none() {
        return Err(GoogleError::not_found(format!(
            "Service account key {key} does not exist."
        )));
    }
    ok(json!({}))
}

fn stage_name(stage: &Value) -> &'static str {
    match stage {
        Value::Number(n) => match n.as_i64() {
            Some(1) => "BETA",
            Some(2) => "GA",
            Some(4) => "DEPRECATED",
            Some(5) => "DISABLED",
            Some(6) => "EAP",
            _ => "ALPHA",
        },
        Value::String(s) => match s.as_str() {
            "BETA" => "BETA",
            "GA" => "GA",
            "DEPRECATED" => "DEPRECATED",
            "DISABLED" => "DISABLED",
            "EAP" => "EAP",
            _ => "ALPHA",
        },
        _ => "ALPHA",
    }
}

/// A role from a request's role object, as stored and returned.
fn role_json(name: &str, role: &Value) -> Value {
    let permissions: Vec<Value> = role["includedPermissions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    json!({
        "name": name,
        "title": role["title"].as_str().unwrap_or_default(),
        "description": role["description"].as_str().unwrap_or_default(),
        "includedPermissions": permissions,
        "stage": stage_name(&role["stage"]),
        "etag": new_etag(),
    })
}

async fn create_role(
    Ext(state): Ext<Shared>,
    Path(project): Path<String>,
    body: Bytes,
) -> ApiResult {
    let mut state = lock(&state);
    state
        .resource_manager
        .denials
        .check("iam.roles.create", &format!("projects/{project}"))?;
    project_number(&state, &project)?;
    let request: Value = parse_body(&body)?;
    let id = request["roleId"].as_str().unwrap_or_default();
    if !(3..=64).contains(&id.len())
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        return Err(GoogleError::invalid(format!(
            "The role_id ({id}) is invalid. It must match [a-zA-Z0-9_\\.]{{3,64}}."
        )));
    }
    let name = format!("projects/{project}/roles/{id}");
    if state.iam.roles.contains_key(&name) {
        return Err(GoogleError::already_exists(format!(
            "A role named {id} in projects/{project} already exists."
        )));
    }
    let role = role_json(&name, &request["role"]);
    state.iam.roles.insert(name, role.clone());
    ok(role)
}

async fn get_role(
    Ext(state): Ext<Shared>,
    Path((project, role)): Path<(String, String)>,
) -> ApiResult {
    let state = lock(&state);
    let name = format!("projects/{project}/roles/{role}");
    state
        .resource_manager
        .denials
        .check("iam.roles.get", &name)?;
    state.iam.roles.get(&name).cloned().map_or_else(
        || {
            Err(GoogleError::not_found(format!(
                "The role named {name} was not found."
            )))
        },
        ok,
    )
}

async fn update_role(
    Ext(state): Ext<Shared>,
    Path((project, role)): Path<(String, String)>,
    uri: Uri,
    body: Bytes,
) -> ApiResult {
    let mut state = lock(&state);
    let name = format!("projects/{project}/roles/{role}");
    state
        .resource_manager
        .denials
        .check("iam.roles.update", &name)?;
    let request: Value = parse_body(&body)?;
    let Some(stored) = state.iam.roles.get_mut(&name) else {
        return Err(GoogleError::not_found(format!(
            "The role named {name} was not found."
        )));
    };
    if let Some(etag) = request["etag"].as_str().filter(|e| !e.is_empty())
        && stored["etag"] != etag
    {
        return Err(GoogleError::aborted(
            "The role was changed concurrently. Please retry.",
        ));
    }
    // Without updateMask every field given is written.
    let mask = query(&uri)
        .get("updateMask")
        .cloned()
        .unwrap_or_else(|| "title,description,includedPermissions,stage".to_owned());
    let fields: Vec<&str> = mask.split(',').map(str::trim).collect();
    let updated = role_json(&name, &request);
    for field in ["title", "description", "includedPermissions", "stage"] {
        if fields.contains(&field)
            && (request.get(field).is_some() || field == "includedPermissions")
        {
            stored[field] = updated[field].clone();
        }
    }
    stored["etag"] = json!(new_etag());
    ok(stored.clone())
}
