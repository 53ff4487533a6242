module github.com/csi-fence/fence-attacher/hack/tools/capi

go 1.26.0

// Cluster API's core manager, built by hack/capi-binaries.sh. Its module
// replaces its api module by a local directory, which a dependent module
// does not inherit: the served api module of the same release stands in.
require (
	sigs.k8s.io/cluster-api v1.14.2
	sigs.k8s.io/cluster-api/api v1.14.2
)
