// The upstream releases whose CRDs this project's must match (tests/crd_parity.rs reads them
// through ./crd-dirs). Nothing here is built.
module github.com/kubectl-karpenter/upstream-crds

go 1.26.9

require (
	github.com/aws/karpenter-provider-aws v1.15.0
	sigs.k8s.io/karpenter v1.15.0
)
