//! What a kubelet's certificate request asks for, read from the PEM-encoded PKCS#10 in a
//! CertificateSigningRequest's `spec.request`: the subject's common name and organizations, the
//! subject alternative names, and the public key. The API server checked the request's
//! signature when the object was created, so this reads and does not verify.

use std::net::IpAddr;
use x509_cert::der::asn1::ObjectIdentifier;
use x509_cert::der::{Decode, DecodePem, oid::AssociatedOid};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::request::{CertReq, ExtensionReq};

/// The subject's common name (2.5.4.3) and organization (2.5.4.10).
const COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const ORGANIZATION: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");

/// A certificate request, as far as approving it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CertificateRequest {
    pub common_name: Option<String>,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    /// E-mail addresses, URIs and other kinds of names, which no kubelet certificate carries.
    pub other_names: Vec<String>,
    /// The DER of the subject's public key, to tell one key from another.
    pub public_key: Vec<u8>,
}

/// Why `spec.request` could not be read.
#[derive(Debug, thiserror::Error)]
#[error("spec.request is not a PEM-encoded PKCS#10 certificate request: {0}")]
pub(crate) struct RequestError(String);

impl CertificateRequest {
    /// Reads the PEM `CERTIFICATE REQUEST` block of `spec.request`. GKE's kubelets add more
    /// blocks after it (`VM IDENTITY`, `ATTESTATION DATA`, `ATTESTATION SIGNATURE`: the TPM
    /// attestation GKE's own approver checks), which are skipped.
    pub(crate) fn from_pem(pem: &[u8]) -> Result<Self, RequestError> {
        const BEGIN: &[u8] = b"-----BEGIN CERTIFICATE REQUEST-----";
        const END: &[u8] = b"-----END CERTIFICATE REQUEST-----";
        let find = |needle: &[u8], from: usize| {
            pem.get(from..)?
                .windows(needle.len())
                .position(|w| w == needle)
                .map(|at| at + from)
        };
        let block = find(BEGIN, 0)
            .and_then(|start| Some((start, find(END, start)? + END.len())))
            .map(|(start, end)| &pem[start..end])
            .ok_or_else(|| RequestError("no CERTIFICATE REQUEST block".to_owned()))?;
        let request = CertReq::from_pem(block).map_err(|e| RequestError(e.to_string()))?;
        let bad = |e: x509_cert::der::Error| RequestError(e.to_string());
        let mut common_name = None;
        let mut organizations = Vec::new();
        for attribute in request.info.subject.iter() {
            let text = || -> Result<String, RequestError> {
                let value: x509_cert::ext::pkix::name::DirectoryString =
                    attribute.value.decode_as().map_err(bad)?;
                Ok(value.value().into_owned())
            };
            if attribute.oid == COMMON_NAME {
                // Two common names would let a request say two things at once.
                if common_name.replace(text()?).is_some() {
                    return Err(RequestError("the subject has two common names".to_owned()));
                }
            } else if attribute.oid == ORGANIZATION {
                organizations.push(text()?);
            }
        }
        let mut dns_names = Vec::new();
        let mut ip_addresses = Vec::new();
        let mut other_names = Vec::new();
        for attribute in request.info.attributes.iter() {
            if attribute.oid != ExtensionReq::OID {
                continue;
            }
            for value in attribute.values.iter() {
                let extensions: ExtensionReq = value.decode_as().map_err(bad)?;
                for extension in extensions.0 {
                    if extension.extn_id != SubjectAltName::OID {
                        continue;
                    }
                    let names =
                        SubjectAltName::from_der(extension.extn_value.as_bytes()).map_err(bad)?;
                    for name in names.0 {
                        match name {
                            GeneralName::DnsName(dns) => dns_names.push(dns.to_string()),
                            GeneralName::IpAddress(octets) => {
                                let bytes = octets.as_bytes();
                                let ip = match bytes.len() {
                                    4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
                                    16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
                                    _ => None,
                                };
                                match ip {
                                    Some(ip) => ip_addresses.push(ip),
                                    None => other_names.push(format!("IP {bytes:?}")),
                                }
                            }
                            GeneralName::Rfc822Name(mail) => {
                                other_names.push(format!("email {mail}"))
                            }
                            GeneralName::UniformResourceIdentifier(uri) => {
                                other_names.push(format!("URI {uri}"))
                            }
                            other => other_names.push(format!("{other:?}")),
                        }
                    }
                }
            }
        }
        let public_key = x509_cert::der::Encode::to_der(&request.info.public_key).map_err(bad)?;
        Ok(Self {
            common_name,
            organizations,
            dns_names,
            ip_addresses,
            other_names,
            public_key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as a kubelet makes one, with rcgen (which signs with aws-lc-rs).
    pub(crate) fn kubelet_request(
        common_name: &str,
        organization: &str,
        sans: &[&str],
        key: &rcgen::KeyPair,
    ) -> String {
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, organization);
        params
            .serialize_request(key)
            .expect("request")
            .pem()
            .expect("pem")
    }

    #[test]
    fn a_kubelet_client_request_names_its_node_and_group_and_nothing_else() {
        let key = rcgen::KeyPair::generate().expect("key");
        let pem = kubelet_request("system:node:demo-a", "system:nodes", &[], &key);
        let request = CertificateRequest::from_pem(pem.as_bytes()).expect("parse");
        assert_eq!(request.common_name.as_deref(), Some("system:node:demo-a"));
        assert_eq!(request.organizations, ["system:nodes"]);
        assert!(request.dns_names.is_empty() && request.ip_addresses.is_empty());
        assert!(request.other_names.is_empty());
        assert_eq!(
            request.public_key,
            rcgen::PublicKeyData::subject_public_key_info(&key)
        );
    }

    #[test]
    fn a_gke_request_with_its_attestation_blocks_after_the_request_is_read() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut pem = kubelet_request("system:node:demo-a", "system:nodes", &[], &key);
        for block in ["VM IDENTITY", "ATTESTATION DATA", "ATTESTATION SIGNATURE"] {
            pem.push_str(&format!(
                "-----BEGIN {block}-----\nAAAA\n-----END {block}-----\n"
            ));
        }
        let request = CertificateRequest::from_pem(pem.as_bytes()).expect("parse");
        assert_eq!(request.common_name.as_deref(), Some("system:node:demo-a"));
    }

    #[test]
    fn a_serving_request_carries_its_host_names_and_addresses() {
        let key = rcgen::KeyPair::generate().expect("key");
        let pem = kubelet_request(
            "system:node:demo-a",
            "system:nodes",
            &["demo-a", "10.128.0.7", "2600:1900::1"],
            &key,
        );
        let request = CertificateRequest::from_pem(pem.as_bytes()).expect("parse");
        assert_eq!(request.dns_names, ["demo-a"]);
        let ips: Vec<String> = request
            .ip_addresses
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(ips, ["10.128.0.7", "2600:1900::1"]);
    }

    #[test]
    fn an_email_name_is_kept_so_the_request_can_be_refused_for_it() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = vec![rcgen::SanType::Rfc822Name(
            "root@example.com".try_into().expect("ia5"),
        )];
        let pem = params
            .serialize_request(&key)
            .expect("request")
            .pem()
            .expect("pem");
        let request = CertificateRequest::from_pem(pem.as_bytes()).expect("parse");
        assert_eq!(request.other_names, ["email root@example.com"]);
    }

    #[test]
    fn text_that_is_not_a_certificate_request_is_an_error_not_a_panic() {
        for junk in [
            &b""[..],
            b"hello",
            b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        ] {
            assert!(CertificateRequest::from_pem(junk).is_err());
        }
    }
}
