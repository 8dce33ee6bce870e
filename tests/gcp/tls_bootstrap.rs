//! What a GKE kubelet does before it can register its Node: TLS bootstrap. It holds only the
//! node pool's bootstrap credential (user `kubelet-nodepool-bootstrap`, bound to
//! `system:node-bootstrapper` as GKE binds it), asks for its client certificate with a
//! CertificateSigningRequest and waits until someone approves it and kube-controller-manager
//! signs it. GKE approves the VMs of its own instance groups only, so on the rig nothing but the
//! agent approves these: a node whose request the agent does not approve never joins.

use crate::rig::rig;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::Api;
use kube::api::PostParams;

/// The user of GKE's node-pool bootstrap credential.
pub(crate) const BOOTSTRAP_USER: &str = "kubelet-nodepool-bootstrap";

/// A client acting with the node pool's bootstrap credential, allowed what GKE allows it.
pub(crate) async fn bootstrap_client() -> kube::Client {
    static BOUND: std::sync::Once = std::sync::Once::new();
    BOUND.call_once(|| {
        let binding = format!(
            r#"{{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {{"name": "kubelet-bootstrap"}},
                "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"}},
                "subjects": [{{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "{BOOTSTRAP_USER}"}}]}}"#
        );
        let applied = rig().kubectl_with_input(&["apply", "-f", "-"], &binding);
        assert!(
            applied.status.success(),
            "binding the bootstrap user: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
    });
    rig()
        .client_as(BOOTSTRAP_USER, &["system:authenticated"])
        .await
}

/// A PEM certificate request for `CN=common_name, O=organization` with these names.
pub(crate) fn certificate_request(
    common_name: &str,
    organization: &str,
    sans: &[String],
) -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(sans.to_vec()).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, organization);
    params
        .serialize_request(&key)
        .expect("request")
        .pem()
        .expect("pem")
}

/// Creates CertificateSigningRequest `name` through `client` unless it exists.
pub(crate) async fn submit(
    client: &kube::Client,
    name: &str,
    signer: &str,
    usages: &[&str],
    pem: String,
) -> kube::Result<()> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: signer.to_owned(),
            usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
            ..Default::default()
        },
        status: None,
    };
    match api.create(&PostParams::default(), &csr).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The kubelet's part for node `node_name`: asks for its client certificate (once), and says
/// whether it has been issued.
pub(crate) async fn client_certificate_issued(bootstrap: &kube::Client, node_name: &str) -> bool {
    let name = format!("node-csr-{node_name}");
    let api: Api<CertificateSigningRequest> = Api::all(bootstrap.clone());
    if let Ok(Some(csr)) = api.get_opt(&name).await {
        return issued(&csr);
    }
    let pem = certificate_request(&format!("system:node:{node_name}"), "system:nodes", &[]);
    let _ = submit(
        bootstrap,
        &name,
        "kubernetes.io/kube-apiserver-client-kubelet",
        &["digital signature", "client auth"],
        pem,
    )
    .await;
    false
}

/// Whether a request was signed (approved, then issued by kube-controller-manager).
pub(crate) fn issued(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

/// The reason of a request's Approved condition, if it has one.
pub(crate) fn approval(csr: &CertificateSigningRequest) -> Option<String> {
    csr.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Approved" && c.status == "True")
        .map(|c| c.reason.clone().unwrap_or_default())
}
