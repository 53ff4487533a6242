// Pins KWOK, which simulates the nodes and pods of the e2e cluster.
module github.com/csi-fence/fence-attacher/test/e2e/tools/kwok

go 1.26.0

require sigs.k8s.io/kwok v0.8.0
