//! Which kubelet certificate requests the agent approves, as pure rules over the request and
//! what the cloud says of the machine that made it.
//!
//! The shapes follow Kubernetes' own recognisers (`pkg/apis/certificates/v1/helpers.go`,
//! `IsKubeletClientCSR` / `IsKubeletServingCSR`, used by kube-controller-manager's
//! `csrapproving` controller): a kubelet client certificate is `CN=system:node:<name>`,
//! `O=system:nodes`, no subject alternative names, usages digital signature + client auth
//! (key encipherment allowed for RSA keys); a serving certificate has the same subject, at least
//! one DNS name or IP address and no e-mail or URI names, and usages digital signature + server
//! auth. Who may ask follows that controller too: a renewal (or a serving certificate) comes from
//! the node itself (`username == CN`, in `system:nodes`); a first client certificate comes from
//! a bootstrap identity.
//!
//! The machine check follows GKE's own approver (cloud-provider-gcp,
//! `cmd/gcp-controller-manager/node_csr_approver.go`): it approves a kubelet client certificate
//! only with a TPM attestation from the VM's Shielded VM identity and, when it verifies cluster
//! membership, only for a VM in one of the cluster's instance groups (found through the VM's
//! `created-by` metadata); a serving certificate once `instances.get` finds the VM and every DNS
//! name is the VM's name or internal DNS name and every IP one of its addresses. The agent's
//! VMs are in no instance group, so the agent checks them itself, the same way: the node must be
//! one of its own NodeClaims' machines, the cloud must say that machine exists under that name,
//! is running and was created before the request, and every name and address a serving
//! certificate carries must be the machine's. (The GCP Karpenter provider, cloudpilot-ai
//! `pkg/controllers/csr/csr.go`, approves every pending request to the two kubelet signers with
//! client usages, whoever asked and for whatever node: exactly what this refuses to do.) A
//! request the rules do not cover is left for someone else; the agent never denies one.

use super::request::CertificateRequest;
use crate::cloud::KubeletIdentity;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeSet;

/// The signer of kubelets' client certificates.
pub(crate) const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelets' serving certificates.
pub(crate) const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// The group every kubelet's certificate names.
const NODES_GROUP: &str = "system:nodes";
/// The prefix of a kubelet's user name.
const NODE_USER_PREFIX: &str = "system:node:";
/// The group of bootstrap tokens (`system:bootstrappers`, and its per-token subgroups).
const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";
/// Users whose credential only lets a new kubelet ask for its first client certificate: GKE's
/// node-pool bootstrap certificate (in the node-pool template's `kube-env`), and the name kubeadm
/// and most guides give a bootstrap user.
const BOOTSTRAP_USERS: [&str; 2] = ["kubelet-nodepool-bootstrap", "kubelet-bootstrap"];

/// What a CertificateSigningRequest asks for and who asked, as the API server recorded it.
#[derive(Clone, Debug)]
pub(crate) struct Csr<'a> {
    pub signer: &'a str,
    pub username: &'a str,
    pub groups: &'a [String],
    pub usages: &'a [String],
    pub request: &'a CertificateRequest,
    pub created: Option<Timestamp>,
}

/// Which kind of kubelet certificate a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A kubelet's first client certificate, asked for with a bootstrap credential.
    BootstrapClient,
    /// A kubelet renewing its client certificate with the one it has.
    RenewedClient,
    /// A kubelet's serving certificate.
    Serving,
}

/// A request recognised as a kubelet's, for the node it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Recognised {
    pub node_name: String,
    pub kind: Kind,
}

/// Recognises a kubelet's certificate request. `Ok(None)`: not a kubelet's request at all
/// (another signer, another subject), left alone without a word. `Err`: a request for a
/// kubelet's certificate that breaks a rule, which the agent refuses to approve (and says why,
/// once the node turns out to be one of its own).
pub(crate) fn recognise(csr: &Csr<'_>) -> Result<Option<Recognised>, Refusal> {
    let serving = match csr.signer {
        CLIENT_SIGNER => false,
        SERVING_SIGNER => true,
        _ => return Ok(None),
    };
    let Some(node_name) = csr
        .request
        .common_name
        .as_deref()
        .and_then(|cn| cn.strip_prefix(NODE_USER_PREFIX))
        .filter(|name| !name.is_empty())
    else {
        return Ok(None);
    };
    let refuse = |why: String| Err(Refusal { why });
    if csr.request.organizations != [NODES_GROUP] {
        return refuse(format!(
            "the certificate's organizations are {:?}, not exactly [\"{NODES_GROUP}\"]",
            csr.request.organizations
        ));
    }
    let usages: BTreeSet<&str> = csr.usages.iter().map(String::as_str).collect();
    let purpose = if serving {
        "server auth"
    } else {
        "client auth"
    };
    let required = BTreeSet::from(["digital signature", purpose]);
    let allowed = BTreeSet::from(["digital signature", "key encipherment", purpose]);
    if !required.is_subset(&usages) || !usages.is_subset(&allowed) {
        return refuse(format!(
            "the usages {:?} are not a kubelet {} certificate's (digital signature and {purpose}, key encipherment allowed)",
            csr.usages,
            if serving { "serving" } else { "client" },
        ));
    }
    if !csr.request.other_names.is_empty() {
        return refuse(format!(
            "the certificate would name {}, which no kubelet certificate carries",
            csr.request.other_names.join(", ")
        ));
    }
    let has_addresses = !csr.request.dns_names.is_empty() || !csr.request.ip_addresses.is_empty();
    let from_the_node = csr.username == format!("{NODE_USER_PREFIX}{node_name}")
        && csr.groups.iter().any(|g| g == NODES_GROUP);
    let kind = if serving {
        if !has_addresses {
            return refuse("a serving certificate must name a host name or address".to_owned());
        }
        if !from_the_node {
            return refuse(format!(
                "a serving certificate for node {node_name} was asked for by {}, not by the node",
                csr.username
            ));
        }
        Kind::Serving
    } else {
        if has_addresses {
            return refuse("a client certificate must not name host names or addresses".to_owned());
        }
        if from_the_node {
            Kind::RenewedClient
        } else if BOOTSTRAP_USERS.contains(&csr.username)
            || csr
                .groups
                .iter()
                .any(|g| g == BOOTSTRAPPERS_GROUP || g.starts_with("system:bootstrappers:"))
        {
            Kind::BootstrapClient
        } else {
            return refuse(format!(
                "{} is neither node {node_name} nor a bootstrap identity",
                csr.username
            ));
        }
    };
    Ok(Some(Recognised {
        node_name: node_name.to_owned(),
        kind,
    }))
}

/// Why a kubelet's request is not approved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub why: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// What else the cluster says about the node a recognised request names.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeFacts<'a> {
    /// Whether a Node of that name is registered already.
    pub registered: bool,
    /// The public keys of other bootstrap client requests for that node already approved.
    pub approved_bootstrap_keys: Vec<&'a [u8]>,
}

/// Checks a recognised request against the machine the cloud says stands behind it.
pub(crate) fn check_machine(
    csr: &Csr<'_>,
    recognised: &Recognised,
    machine: Option<&KubeletIdentity>,
    facts: &NodeFacts<'_>,
) -> Result<(), Refusal> {
    let name = &recognised.node_name;
    let refuse = |why: String| Err(Refusal { why });
    let Some(machine) = machine else {
        return refuse(format!("the cloud has no machine {name} of this cluster"));
    };
    if &machine.node_name != name {
        return refuse(format!(
            "the machine registers as node {}, not {name}",
            machine.node_name
        ));
    }
    if !machine.running {
        return refuse(format!("machine {name} is not running"));
    }
    // The API server records a request's creation to the second, the cloud a machine's to the
    // millisecond: a request made in the machine's first second is not older than it.
    if let (Some(machine_created), Some(asked)) = (machine.created, csr.created)
        && machine_created > asked + k8s_openapi::jiff::SignedDuration::from_secs(1)
    {
        return refuse(format!(
            "the request ({asked}) is older than machine {name} ({machine_created})"
        ));
    }
    match recognised.kind {
        Kind::BootstrapClient => {
            // A bootstrap credential is shared by every new node; once a node has joined, or has
            // a client certificate for another key, a second one would let whoever holds the
            // bootstrap credential act as that node.
            if facts.registered {
                return refuse(format!(
                    "node {name} is registered already; it renews its certificate as itself"
                ));
            }
            if facts
                .approved_bootstrap_keys
                .iter()
                .any(|key| *key != csr.request.public_key.as_slice())
            {
                return refuse(format!(
                    "a client certificate for node {name} was approved already, for another key"
                ));
            }
        }
        Kind::RenewedClient => {}
        Kind::Serving => {
            for dns in &csr.request.dns_names {
                if !machine
                    .dns_names
                    .iter()
                    .any(|d| d.eq_ignore_ascii_case(dns))
                {
                    return refuse(format!("machine {name} is not called {dns}"));
                }
            }
            for ip in &csr.request.ip_addresses {
                if !machine.ip_addresses.contains(ip) {
                    return refuse(format!("machine {name} does not have address {ip}"));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cn: &str, org: &[&str], dns: &[&str], ips: &[&str]) -> CertificateRequest {
        CertificateRequest {
            common_name: Some(cn.to_owned()),
            organizations: org.iter().map(|o| (*o).to_owned()).collect(),
            dns_names: dns.iter().map(|d| (*d).to_owned()).collect(),
            ip_addresses: ips.iter().map(|i| i.parse().expect("ip")).collect(),
            other_names: Vec::new(),
            public_key: b"key-1".to_vec(),
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn machine() -> KubeletIdentity {
        KubeletIdentity {
            node_name: "demo-a".to_owned(),
            dns_names: strings(&["demo-a", "demo-a.us-central1-a.c.p.internal"]),
            ip_addresses: vec!["10.128.0.7".parse().expect("ip")],
            created: Some("2026-12-04T10:00:00Z".parse().expect("time")),
            running: true,
        }
    }

    const ASKED: &str = "2026-12-04T10:01:00Z";

    /// Runs both checks over a request, as the loop does.
    fn decide(
        signer: &str,
        username: &str,
        groups: &[&str],
        usages: &[&str],
        request: &CertificateRequest,
        facts: &NodeFacts<'_>,
    ) -> Result<Option<Kind>, Refusal> {
        let groups = strings(groups);
        let usages = strings(usages);
        let csr = Csr {
            signer,
            username,
            groups: &groups,
            usages: &usages,
            request,
            created: Some(ASKED.parse().expect("time")),
        };
        let Some(recognised) = recognise(&csr)? else {
            return Ok(None);
        };
        check_machine(&csr, &recognised, Some(&machine()), facts)?;
        Ok(Some(recognised.kind))
    }

    const CLIENT: &[&str] = &["digital signature", "client auth"];
    const SERVING: &[&str] = &["digital signature", "key encipherment", "server auth"];

    #[test]
    fn a_new_gke_kubelet_gets_its_first_client_certificate() {
        let req = request("system:node:demo-a", &["system:nodes"], &[], &[]);
        let kind = decide(
            CLIENT_SIGNER,
            "kubelet-nodepool-bootstrap",
            &["system:authenticated"],
            CLIENT,
            &req,
            &NodeFacts::default(),
        );
        assert_eq!(kind, Ok(Some(Kind::BootstrapClient)));
    }

    #[test]
    fn a_bootstrap_token_may_ask_too() {
        let req = request("system:node:demo-a", &["system:nodes"], &[], &[]);
        let kind = decide(
            CLIENT_SIGNER,
            "system:bootstrap:abcdef",
            &["system:bootstrappers", "system:authenticated"],
            CLIENT,
            &req,
            &NodeFacts::default(),
        );
        assert_eq!(kind, Ok(Some(Kind::BootstrapClient)));
    }

    #[test]
    fn a_registered_node_gets_no_second_certificate_through_the_bootstrap_credential() {
        let req = request("system:node:demo-a", &["system:nodes"], &[], &[]);
        let facts = NodeFacts {
            registered: true,
            ..NodeFacts::default()
        };
        let refused = decide(
            CLIENT_SIGNER,
            "kubelet-nodepool-bootstrap",
            &[],
            CLIENT,
            &req,
            &facts,
        )
        .expect_err("refused");
        assert!(refused.why.contains("registered already"), "{refused}");
    }

    #[test]
    fn a_second_bootstrap_key_for_one_node_is_refused_but_the_same_key_again_is_not() {
        let req = request("system:node:demo-a", &["system:nodes"], &[], &[]);
        let other = NodeFacts {
            approved_bootstrap_keys: vec![b"key-2"],
            ..NodeFacts::default()
        };
        let refused = decide(
            CLIENT_SIGNER,
            "kubelet-nodepool-bootstrap",
            &[],
            CLIENT,
            &req,
            &other,
        );
        assert!(refused.is_err());
        let same = NodeFacts {
            approved_bootstrap_keys: vec![b"key-1"],
            ..NodeFacts::default()
        };
        let kind = decide(
            CLIENT_SIGNER,
            "kubelet-nodepool-bootstrap",
            &[],
            CLIENT,
            &req,
            &same,
        );
        assert_eq!(kind, Ok(Some(Kind::BootstrapClient)));
    }

    #[test]
    fn a_node_renews_its_own_client_certificate_but_not_another_nodes() {
        let req = request("system:node:demo-a", &["system:nodes"], &[], &[]);
        let facts = NodeFacts {
            registered: true,
            ..NodeFacts::default()
        };
        let own = decide(
            CLIENT_SIGNER,
            "system:node:demo-a",
            &["system:nodes", "system:authenticated"],
            CLIENT,
            &req,
            &facts,
        );
        assert_eq!(own, Ok(Some(Kind::RenewedClient)));
        let other = decide(
            CLIENT_SIGNER,
            "system:node:demo-b",
            &["system:nodes"],
            CLIENT,
            &req,
            &facts,
        );
        assert!(other.is_err(), "{other:?}");
    }

    #[test]
    fn a_serving_certificate_may_name_only_the_machines_own_names_and_addresses() {
        let facts = NodeFacts::default();
        let own = request(
            "system:node:demo-a",
            &["system:nodes"],
            &["demo-a.us-central1-a.c.p.internal"],
            &["10.128.0.7"],
        );
        let ask = |req: &CertificateRequest| {
            decide(
                SERVING_SIGNER,
                "system:node:demo-a",
                &["system:nodes"],
                SERVING,
                req,
                &facts,
            )
        };
        assert_eq!(ask(&own), Ok(Some(Kind::Serving)));
        let foreign_name = request(
            "system:node:demo-a",
            &["system:nodes"],
            &["kubernetes.default.svc"],
            &[],
        );
        assert!(
            ask(&foreign_name)
                .expect_err("refused")
                .why
                .contains("kubernetes.default.svc")
        );
        let foreign_ip = request("system:node:demo-a", &["system:nodes"], &[], &["10.96.0.1"]);
        assert!(
            ask(&foreign_ip)
                .expect_err("refused")
                .why
                .contains("10.96.0.1")
        );
        let nothing = request("system:node:demo-a", &["system:nodes"], &[], &[]);
        assert!(ask(&nothing).is_err());
    }

    #[test]
    fn requests_that_are_not_a_kubelets_are_left_alone() {
        let req = request("system:node:demo-a", &["system:nodes"], &[], &[]);
        let other_signer = decide(
            "kubernetes.io/kube-apiserver-client",
            "kubelet-nodepool-bootstrap",
            &[],
            CLIENT,
            &req,
            &NodeFacts::default(),
        );
        assert_eq!(other_signer, Ok(None));
        let admin = request("admin", &["system:masters"], &[], &[]);
        let other_subject = decide(
            CLIENT_SIGNER,
            "kubelet-nodepool-bootstrap",
            &[],
            CLIENT,
            &admin,
            &NodeFacts::default(),
        );
        assert_eq!(other_subject, Ok(None));
    }

    #[test]
    fn a_kubelet_request_with_extra_powers_is_refused() {
        let facts = NodeFacts::default();
        let masters = request(
            "system:node:demo-a",
            &["system:nodes", "system:masters"],
            &[],
            &[],
        );
        assert!(
            decide(
                CLIENT_SIGNER,
                "kubelet-bootstrap",
                &[],
                CLIENT,
                &masters,
                &facts
            )
            .is_err()
        );
        let req = request("system:node:demo-a", &["system:nodes"], &[], &[]);
        let both = ["digital signature", "client auth", "server auth"];
        assert!(decide(CLIENT_SIGNER, "kubelet-bootstrap", &[], &both, &req, &facts).is_err());
        let mut mail = req.clone();
        mail.other_names = strings(&["email root@example.com"]);
        assert!(
            decide(
                CLIENT_SIGNER,
                "kubelet-bootstrap",
                &[],
                CLIENT,
                &mail,
                &facts
            )
            .is_err()
        );
        let anyone = decide(
            CLIENT_SIGNER,
            "alice",
            &["developers"],
            CLIENT,
            &req,
            &facts,
        );
        assert!(anyone.is_err());
    }

    #[test]
    fn a_request_older_than_the_machine_or_for_a_stopped_machine_is_refused() {
        let req = request("system:node:demo-a", &["system:nodes"], &[], &[]);
        let groups = Vec::new();
        let usages = strings(CLIENT);
        let csr = Csr {
            signer: CLIENT_SIGNER,
            username: "kubelet-bootstrap",
            groups: &groups,
            usages: &usages,
            request: &req,
            created: Some("2026-12-04T09:00:00Z".parse().expect("time")),
        };
        let recognised = recognise(&csr).expect("ok").expect("kubelet's");
        let facts = NodeFacts::default();
        assert!(check_machine(&csr, &recognised, Some(&machine()), &facts).is_err());
        let later = Csr {
            created: Some(ASKED.parse().expect("time")),
            ..csr
        };
        let stopped = KubeletIdentity {
            running: false,
            ..machine()
        };
        assert!(check_machine(&later, &recognised, Some(&stopped), &facts).is_err());
        assert!(check_machine(&later, &recognised, None, &facts).is_err());
        let renamed = KubeletIdentity {
            node_name: "demo-b".to_owned(),
            ..machine()
        };
        assert!(check_machine(&later, &recognised, Some(&renamed), &facts).is_err());
        assert!(check_machine(&later, &recognised, Some(&machine()), &facts).is_ok());
    }
}
