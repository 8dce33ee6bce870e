//! GCENodeClass resolution: which images its `imageSelectorTerms` name (by alias, family or id,
//! one per architecture), and the status that amounts to (`status.images`, the `Ready`
//! condition), which the node class status controller (`controllers::nodeclass_status`) writes.
//! Everything else in the spec (service account, tags, disks, subnetwork, metadata, labels) is
//! used as written when an instance is built ([`super::launch`]).

use super::GcpApiError;
use crate::apis::gcenodeclass::{ImageSelectorTerm, ResolvedImage};
use crate::apis::{GCENodeClass, GCENodeClassSpec, GCENodeClassStatus, labels};
use crate::cloud::provider::CloudError;
use google_cloud_compute_v1::client::Images;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

/// An image a node class may boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// What `initializeParams.sourceImage` takes: `projects/P/global/images/NAME`.
    pub source: String,
    /// `amd64` or `arm64`.
    pub arch: String,
}

/// A node class with its images resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedNodeClass {
    pub name: String,
    pub spec: GCENodeClassSpec,
    pub images: Vec<Image>,
}

impl ResolvedNodeClass {
    /// The image for an architecture, if the class has one.
    pub(crate) fn image_for(&self, arch: &str) -> Option<&Image> {
        self.images.iter().find(|i| i.arch == arch)
    }
}

/// Why a node class did not resolve.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The class cannot be used as written (no image matched).
    #[error("{reason}")]
    NotReady { reason: String },
    /// The Compute API failed.
    #[error(transparent)]
    Cloud(#[from] CloudError),
}

/// Where an image selector term looks: (image project, family or name, is_family).
type Lookup = (String, String, bool);

/// The public image projects and families behind each OS family name, per architecture.
fn families(os: &str) -> Option<(&'static str, [(&'static str, &'static str); 2])> {
    match os {
        "ContainerOptimizedOS" => Some((
            "cos-cloud",
            [("cos-stable", "amd64"), ("cos-arm64-stable", "arm64")],
        )),
        "Ubuntu" | "Ubuntu2404" => Some((
            "ubuntu-os-cloud",
            [
                ("ubuntu-2404-lts-amd64", "amd64"),
                ("ubuntu-2404-lts-arm64", "arm64"),
            ],
        )),
        "Ubuntu2204" => Some((
            "ubuntu-os-cloud",
            [
                ("ubuntu-2204-lts", "amd64"),
                ("ubuntu-2204-lts-arm64", "arm64"),
            ],
        )),
        _ => None,
    }
}

/// Where GKE publishes its COS node images, and its Ubuntu ones.
const GKE_COS_PROJECT: &str = "gke-node-images";
const GKE_UBUNTU_PROJECT: &str = "ubuntu-os-gke-cloud";

/// The cluster's own node image for an OS family, as its node-pool template boots it
/// (`template_image`, `projects/P/global/images/NAME`), with its sibling for the other
/// architecture: GKE names them alike (`gke-1334-gke1000000-cos-121-…-c-pre` and
/// `gke-1334-gke1000000-cos-arm64-121-…-c-pre`; `ubuntu-gke-2404-1-34-amd64-v…` and
/// `…-arm64-v…`). These carry the kubelet and GKE's node bootstrap for the cluster's own
/// version, which the public `cos-cloud` and `ubuntu-os-cloud` families do not. `None` when the
/// template boots no GKE image of that family.
///
/// The GCP Karpenter provider (cloudpilot-ai, `imagefamily/containeroptimizedos.go`) resolves
/// `ContainerOptimizedOS@latest` the same way, to a `gke-node-images` image of the cluster's
/// version with an arm64 sibling by name; it finds the version from the cluster and scans the
/// image catalogue, where the node-pool template names the exact image GKE itself boots.
fn gke_images(os: &str, template_image: Option<&str>) -> Option<Vec<Lookup>> {
    let path = template_image?;
    let path = path.split("/compute/v1/").nth(1).unwrap_or(path);
    let ["projects", image_project, "global", "images", name] =
        path.split('/').collect::<Vec<_>>()[..]
    else {
        return None;
    };
    let (other, release) = match (os, image_project) {
        ("ContainerOptimizedOS", GKE_COS_PROJECT) if name.contains("-cos-arm64-") => {
            (name.replacen("-cos-arm64-", "-cos-", 1), None)
        }
        ("ContainerOptimizedOS", GKE_COS_PROJECT) if name.contains("-cos-") => {
            (name.replacen("-cos-", "-cos-arm64-", 1), None)
        }
        ("Ubuntu" | "Ubuntu2404" | "Ubuntu2204", GKE_UBUNTU_PROJECT) => {
            let release = match os {
                "Ubuntu2204" => Some("ubuntu-gke-2204-"),
                "Ubuntu2404" => Some("ubuntu-gke-2404-"),
                _ => None,
            };
            let other = if name.contains("-amd64-") {
                name.replacen("-amd64-", "-arm64-", 1)
            } else if name.contains("-arm64-") {
                name.replacen("-arm64-", "-amd64-", 1)
            } else {
                return None;
            };
            (other, release)
        }
        _ => return None,
    };
    if release.is_some_and(|r| !name.starts_with(r)) {
        return None;
    }
    Some(
        [name.to_owned(), other]
            .into_iter()
            .map(|n| (image_project.to_owned(), n, false))
            .collect(),
    )
}

/// What to look up for one term; `project` is where bare image ids live, `template_image` the
/// boot image of the cluster's node-pool template (see [`gke_images`]).
pub fn lookups(
    term: &ImageSelectorTerm,
    default_family: Option<&str>,
    project: &str,
    template_image: Option<&str>,
) -> Result<Vec<Lookup>, String> {
    if let Some(id) = &term.id {
        let path = id.split("/compute/v1/").nth(1).unwrap_or(id);
        let parts: Vec<&str> = path.split('/').collect();
        return Ok(vec![match parts.as_slice() {
            ["projects", p, "global", "images", "family", f] => {
                ((*p).to_owned(), (*f).to_owned(), true)
            }
            ["projects", p, "global", "images", name] => {
                ((*p).to_owned(), (*name).to_owned(), false)
            }
            ["global", "images", name] | [name] => (project.to_owned(), (*name).to_owned(), false),
            _ => {
                return Err(format!(
                    "image id {id:?} is not an image name or projects/P/global/images/NAME"
                ));
            }
        }]);
    }
    let (os, version) = match (&term.alias, &term.family) {
        (Some(alias), _) => {
            let (os, version) = alias
                .split_once('@')
                .ok_or_else(|| format!("alias {alias:?} is not FAMILY@VERSION"))?;
            (os.to_owned(), Some(version.to_owned()))
        }
        (None, Some(family)) => (family.clone(), term.version.clone()),
        (None, None) => match default_family {
            Some(family) => (family.to_owned(), term.version.clone()),
            None => return Err("an image selector term names no alias, family or id".to_owned()),
        },
    };
    let (image_project, per_arch) =
        families(&os).ok_or_else(|| format!("image family {os:?} is not supported"))?;
    Ok(match version.as_deref() {
        None | Some("latest" | "") => match gke_images(&os, template_image) {
            Some(gke) => gke,
            None => {
                tracing::info!(
                    family = %os,
                    template_image = template_image.unwrap_or("none"),
                    "the node template boots no GKE {os} image; using the public {image_project} images, which may lack GKE's node bootstrap"
                );
                per_arch
                    .iter()
                    .map(|(f, _)| (image_project.to_owned(), (*f).to_owned(), true))
                    .collect()
            }
        },
        Some(pinned) => pinned_images(&os, pinned, template_image)?,
    })
}

/// The images of a pinned version, as the GCP provider finds them (`containeroptimizedos.go`,
/// `ubuntu.go`): the GKE node image the cluster's node pool boots, with its version part
/// swapped for the pin (COS `121-18867-90-4` for `125.19216.104.126`; Ubuntu `-v20251101` for
/// `-v20260416`), and its Arm sibling. Without a GKE node image to start from, a COS pin is the
/// public `cos-cloud` image of that version; an Ubuntu pin cannot be found.
fn pinned_images(
    os: &str,
    pinned: &str,
    template_image: Option<&str>,
) -> Result<Vec<Lookup>, String> {
    let cos = os == "ContainerOptimizedOS";
    let rendered = pinned.trim_start_matches('v').replace('.', "-");
    let swap = |name: &str| -> Option<String> {
        if cos {
            // gke-1334-gke1000000-cos[-arm64]-121-18867-90-4-c-pre
            let (head, rest) = name.split_once("-cos-")?;
            let arch = if rest.starts_with("arm64-") {
                "arm64-"
            } else {
                ""
            };
            rest.ends_with("-c-pre")
                .then(|| format!("{head}-cos-{arch}{rendered}-c-pre"))
        } else {
            // ubuntu-gke-2404-1-34-amd64-v20251101
            let at = name.rfind("-v")?;
            let date = &name[at + 2..];
            let digits = date.find('-').map_or(date, |end| &date[..end]);
            (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| format!("{}-{pinned}{}", &name[..at], &date[digits.len()..]))
        }
    };
    if let Some(gke) = gke_images(os, template_image) {
        let swapped: Option<Vec<Lookup>> = gke
            .into_iter()
            .map(|(project, name, is_family)| swap(&name).map(|n| (project, n, is_family)))
            .collect();
        if let Some(swapped) = swapped {
            return Ok(swapped);
        }
    }
    if cos {
        return Ok(vec![
            ("cos-cloud".to_owned(), format!("cos-{rendered}"), false),
            (
                "cos-cloud".to_owned(),
                format!("cos-arm64-{rendered}"),
                false,
            ),
        ]);
    }
    Err(format!(
        "{os} version {pinned} is pinned on the GKE node image the cluster's node pools boot, and the node template boots none"
    ))
}

fn arch_of(image: &google_cloud_compute_v1::model::Image) -> String {
    let named = image
        .architecture
        .as_ref()
        .and_then(|a| a.name())
        .unwrap_or_default();
    let name = image.name.as_deref().unwrap_or_default();
    if named == "ARM64" || (named.is_empty() && name.contains("arm64")) {
        "arm64"
    } else {
        "amd64"
    }
    .to_owned()
}

/// Resolves the images of a node class; images that do not exist are skipped, and none at all
/// makes the class not ready.
pub async fn resolve(
    images: &Images,
    class: &GCENodeClass,
    project: &str,
    template_image: Option<&str>,
) -> Result<ResolvedNodeClass, ResolveError> {
    let mut found: Vec<Image> = Vec::new();
    let mut problems = Vec::new();
    for term in &class.spec.image_selector_terms {
        let wanted = lookups(
            term,
            class.spec.image_family.as_deref(),
            project,
            template_image,
        )
        .map_err(|reason| ResolveError::NotReady { reason })?;
        for (image_project, what, is_family) in wanted {
            let result = if is_family {
                images
                    .get_from_family()
                    .set_project(&image_project)
                    .set_family(&what)
                    .send()
                    .await
            } else {
                images
                    .get()
                    .set_project(&image_project)
                    .set_image(&what)
                    .send()
                    .await
            };
            match result {
                Ok(image) => {
                    let name = image.name.clone().unwrap_or(what);
                    let resolved = Image {
                        source: format!("projects/{image_project}/global/images/{name}"),
                        arch: arch_of(&image),
                    };
                    if !found.iter().any(|i| i.arch == resolved.arch) {
                        found.push(resolved);
                    }
                }
                Err(e) if e.http_status_code() == Some(404) => {
                    problems.push(format!(
                        "{image_project}/{}{what}",
                        if is_family { "family/" } else { "" }
                    ));
                }
                Err(e) => {
                    return Err(CloudError::api("reading images", GcpApiError::from(e)).into());
                }
            }
        }
    }
    if found.is_empty() {
        return Err(ResolveError::NotReady {
            reason: format!(
                "no image matched imageSelectorTerms (not found: {})",
                problems.join(", ")
            ),
        });
    }
    Ok(ResolvedNodeClass {
        name: class.name_any(),
        spec: class.spec.clone(),
        images: found,
    })
}

fn condition(
    ready: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    previous: &[Condition],
) -> Condition {
    let status = if ready { "True" } else { "False" }.to_owned();
    let since = previous
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == status)
        .map_or_else(
            || Time(k8s_openapi::jiff::Timestamp::now()),
            |c| c.last_transition_time.clone(),
        );
    Condition {
        type_: "Ready".to_owned(),
        status,
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: since,
        observed_generation: generation,
    }
}

/// The status a resolution gives the class.
pub fn status(
    result: &Result<ResolvedNodeClass, String>,
    generation: Option<i64>,
    previous: &GCENodeClassStatus,
) -> GCENodeClassStatus {
    match result {
        Ok(resolved) => GCENodeClassStatus {
            images: resolved
                .images
                .iter()
                .map(|i| ResolvedImage {
                    source_image: i.source.clone(),
                    requirements: vec![NodeSelectorRequirement {
                        key: labels::ARCH.to_owned(),
                        operator: "In".to_owned(),
                        values: Some(vec![i.arch.clone()]),
                    }],
                })
                .collect(),
            conditions: vec![condition(
                true,
                "Ready",
                "",
                generation,
                &previous.conditions,
            )],
        },
        Err(reason) => GCENodeClassStatus {
            images: Vec::new(),
            conditions: vec![condition(
                false,
                "ImagesNotFound",
                reason,
                generation,
                &previous.conditions,
            )],
        },
    }
}

/// What resolving a GCENodeClass came to (see the shared
/// [`NodeClassResolution`](crate::cloud::node_class_resolution::NodeClassResolution)).
pub(crate) type NodeClassResolution =
    crate::cloud::node_class_resolution::NodeClassResolution<ResolvedNodeClass, GCENodeClassStatus>;

/// Whether `status` says something `previous` does not (transition times aside).
pub(super) fn status_changed(status: &GCENodeClassStatus, previous: &GCENodeClassStatus) -> bool {
    status.images != previous.images
        || status
            .conditions
            .iter()
            .map(|c| (&c.status, &c.reason, &c.message))
            .ne(previous
                .conditions
                .iter()
                .map(|c| (&c.status, &c.reason, &c.message)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(alias: Option<&str>, family: Option<&str>, id: Option<&str>) -> ImageSelectorTerm {
        ImageSelectorTerm {
            alias: alias.map(Into::into),
            family: family.map(Into::into),
            id: id.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn aliases_families_and_ids_name_the_images_to_look_up() {
        let cos = lookups(
            &term(Some("ContainerOptimizedOS@latest"), None, None),
            None,
            "p",
            None,
        )
        .unwrap();
        assert_eq!(cos[0], ("cos-cloud".into(), "cos-stable".into(), true));
        assert_eq!(cos[1].1, "cos-arm64-stable");
        let pinned = lookups(
            &term(Some("ContainerOptimizedOS@125.19216.104.126"), None, None),
            None,
            "p",
            None,
        )
        .unwrap();
        assert_eq!(
            pinned,
            vec![
                ("cos-cloud".into(), "cos-125-19216-104-126".into(), false),
                (
                    "cos-cloud".into(),
                    "cos-arm64-125-19216-104-126".into(),
                    false
                )
            ]
        );
        let ubuntu = lookups(&term(None, Some("Ubuntu2204"), None), None, "p", None).unwrap();
        assert_eq!(ubuntu[1].1, "ubuntu-2204-lts-arm64");
        let url = lookups(
            &term(
                None,
                None,
                Some("https://www.googleapis.com/compute/v1/projects/x/global/images/img"),
            ),
            None,
            "p",
            None,
        )
        .unwrap();
        assert_eq!(url, vec![("x".into(), "img".into(), false)]);
        assert_eq!(
            lookups(&term(None, None, Some("img")), None, "p", None).unwrap()[0].0,
            "p"
        );
        assert!(lookups(&term(Some("Windows@latest"), None, None), None, "p", None).is_err());
    }

    #[test]
    fn cos_at_latest_boots_the_gke_image_the_clusters_node_pool_boots_and_its_arm_sibling() {
        let template = "https://www.googleapis.com/compute/v1/projects/gke-node-images/global/images/gke-1334-gke1000000-cos-121-18867-90-4-c-pre";
        let latest = term(Some("ContainerOptimizedOS@latest"), None, None);
        let found = lookups(&latest, None, "p", Some(template)).unwrap();
        assert_eq!(
            found,
            vec![
                (
                    "gke-node-images".into(),
                    "gke-1334-gke1000000-cos-121-18867-90-4-c-pre".into(),
                    false
                ),
                (
                    "gke-node-images".into(),
                    "gke-1334-gke1000000-cos-arm64-121-18867-90-4-c-pre".into(),
                    false
                ),
            ]
        );
        // The family with no version is the same as @latest.
        let family = term(None, Some("ContainerOptimizedOS"), None);
        assert_eq!(lookups(&family, None, "p", Some(template)).unwrap(), found);
        // A pinned version is the template's GKE image at that COS version.
        let pinned = ImageSelectorTerm {
            family: Some("ContainerOptimizedOS".into()),
            version: Some("125.19216.104.126".into()),
            ..Default::default()
        };
        assert_eq!(
            lookups(&pinned, None, "p", Some(template)).unwrap(),
            vec![
                (
                    "gke-node-images".into(),
                    "gke-1334-gke1000000-cos-125-19216-104-126-c-pre".into(),
                    false
                ),
                (
                    "gke-node-images".into(),
                    "gke-1334-gke1000000-cos-arm64-125-19216-104-126-c-pre".into(),
                    false
                ),
            ]
        );
        // A template booting Ubuntu says nothing about COS: the public family it is.
        let ubuntu_template =
            "projects/ubuntu-os-gke-cloud/global/images/ubuntu-gke-2404-1-34-amd64-v20251101";
        assert_eq!(
            lookups(&latest, None, "p", Some(ubuntu_template)).unwrap()[0],
            ("cos-cloud".into(), "cos-stable".into(), true)
        );
        assert_eq!(lookups(&latest, None, "p", None).unwrap()[0].0, "cos-cloud");
    }

    #[test]
    fn ubuntu_at_latest_boots_the_gke_ubuntu_image_of_the_same_release_only() {
        let template =
            "projects/ubuntu-os-gke-cloud/global/images/ubuntu-gke-2404-1-34-amd64-v20251101";
        let found = lookups(
            &term(Some("Ubuntu@latest"), None, None),
            None,
            "p",
            Some(template),
        )
        .unwrap();
        assert_eq!(found[0].1, "ubuntu-gke-2404-1-34-amd64-v20251101");
        assert_eq!(found[1].1, "ubuntu-gke-2404-1-34-arm64-v20251101");
        let jammy = lookups(
            &term(Some("Ubuntu2204@latest"), None, None),
            None,
            "p",
            Some(template),
        )
        .unwrap();
        assert_eq!(
            jammy[0],
            ("ubuntu-os-cloud".into(), "ubuntu-2204-lts".into(), true)
        );
        let pinned = ImageSelectorTerm {
            family: Some("Ubuntu2404".into()),
            version: Some("v20260416".into()),
            ..Default::default()
        };
        let found = lookups(&pinned, None, "p", Some(template)).unwrap();
        assert_eq!(found[0].1, "ubuntu-gke-2404-1-34-amd64-v20260416");
        assert_eq!(found[1].1, "ubuntu-gke-2404-1-34-arm64-v20260416");
        let error = lookups(&pinned, None, "p", None).unwrap_err();
        assert!(error.contains("node template boots none"), "{error}");
    }
}
