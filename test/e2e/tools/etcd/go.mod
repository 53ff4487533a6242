// Pins etcd for the e2e control plane (Debian's 3.4 is too old for the
// kube-apiserver 1.36 watch cache).
module github.com/csi-fence/fence-attacher/test/e2e/tools/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 v3.6.16
