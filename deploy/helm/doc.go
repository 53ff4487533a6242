// Package helm holds the tests of the csi-fence Helm chart (csi-fence/):
// linted and rendered with Helm's own Go library, and compared with the
// kustomize build of deploy/kubernetes for the same features.
package helm
