// Package failover is the controller-side automatic failover of
// csi-fence-attacher (DESIGN.md section 5): for a pod stuck Terminating on a
// node that is not Ready, it quarantines the node, fences the pod's volumes
// through the driver, and only then force-deletes the pod, so that the
// replacement can attach its volume elsewhere without two nodes ever writing
// it. It also follows KEP-2268's out-of-service taint, the Node Fencing
// conditions and FencingRequests, and lifts the quarantine once the node is
// back and cleaned.
//
// One failover, in order: sync (controller.go) reads the node, decides with
// the pure functions of this file, then runs the steps of steps.go:
// quarantine -> fence -> force-delete -> release volumesInUse; and, when the
// node is back, release.
package failover

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// Reasons label metrics and events; they name the rule that allowed a
// force-delete.
const (
	ReasonSafeDetach      = "safe-detach"
	ReasonOutOfService    = "out-of-service"
	ReasonFencingComplete = "fencing-complete"
)

// PodVolume is one CSI volume of a pod, resolved from its PVC and PV.
type PodVolume struct {
	Driver       string
	VolumeHandle string
	PVName       string
	RWX          bool
}

// Eligibility is the decision about one Terminating pod.
type Eligibility struct {
	// SafeDetach: every volume may be fenced and force-deleted once fenced.
	SafeDetach bool
	// Why not, for logs and events.
	Reason  string
	Volumes []PodVolume
}

// SafeDetachEligible decides whether a pod may take the SafeDetach path:
// every PVC is bound to a CSI PV whose driver is annotated safe-detach, no
// volume is ReadWriteMany (another node may legitimately use it), and our own
// driver can fence. Volumes that are not PVCs (emptyDir, configMap...) are
// node-local and do not matter. resolve maps a claim name to its volume.
func SafeDetachEligible(pod *v1.Pod, resolve func(claim string) (*PodVolume, error), safeDetach func(driver string) bool, ourDriver string, canFence bool) Eligibility {
	var vols []PodVolume
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil && vol.Ephemeral == nil {
			if vol.CSI != nil {
				return Eligibility{Reason: fmt.Sprintf("inline CSI volume %s cannot be fenced", vol.Name)}
			}
			continue
		}
		claim := ""
		if vol.PersistentVolumeClaim != nil {
			claim = vol.PersistentVolumeClaim.ClaimName
		} else {
			claim = pod.Name + "-" + vol.Name
		}
		pv, err := resolve(claim)
		if err != nil {
			return Eligibility{Reason: err.Error()}
		}
		if pv.RWX {
			return Eligibility{Reason: fmt.Sprintf("volume %s is ReadWriteMany", pv.PVName)}
		}
		if !safeDetach(pv.Driver) {
			return Eligibility{Reason: fmt.Sprintf("driver %s of volume %s is not SafeDetach", pv.Driver, pv.PVName)}
		}
		if pv.Driver == ourDriver && !canFence {
			return Eligibility{Reason: fmt.Sprintf("driver %s does not advertise UNPUBLISH_FENCE", pv.Driver)}
		}
		vols = append(vols, *pv)
	}
	return Eligibility{SafeDetach: true, Volumes: vols}
}

// AllFenced reports whether every volume is recorded as fenced on the node.
func AllFenced(fr *fencingv1alpha1.FencingRequest, vols []PodVolume) bool {
	for _, v := range vols {
		if !fencerecord.IsQuarantined(fr, v.Driver, v.VolumeHandle) {
			return false
		}
	}
	return true
}

// Tolerates reports whether the pod tolerates the taint forever (a
// toleration with tolerationSeconds never takes effect past its time).
func Tolerates(pod *v1.Pod, taint v1.Taint) bool {
	for _, t := range pod.Spec.Tolerations {
		if t.ToleratesTaint(klog.Background(), &taint, false) && t.TolerationSeconds == nil {
			return true
		}
	}
	return false
}

// NodeReady reports the node's Ready condition.
func NodeReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// Taint returns the node's taint with key, or nil.
func Taint(n *v1.Node, key string) *v1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == key {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

// IsControlPlane reports control-plane nodes, which are never fenced
// automatically.
func IsControlPlane(n *v1.Node) bool {
	_, ok := n.Labels["node-role.kubernetes.io/control-plane"]
	return ok
}

// StormGuard says whether one more node may be fenced: at most max nodes
// (0: no absolute limit) and at most percent of all nodes may be quarantined
// at once (invariant S5). already is true when this node is quarantined
// already: continuing its fencing never counts against the limit.
func StormGuard(quarantined, total, max, percent int, already bool) (bool, string) {
	if already {
		return true, ""
	}
	if max > 0 && quarantined >= max {
		return false, fmt.Sprintf("%d nodes are fenced already (limit %d)", quarantined, max)
	}
	if percent > 0 && total > 0 && (quarantined+1)*100 > total*percent {
		return false, fmt.Sprintf("fencing one more node would fence %d of %d nodes (limit %d%%)", quarantined+1, total, percent)
	}
	return true, ""
}

// Release decides whether a node that is Ready again may leave quarantine:
// every volume fenced on it (all drivers) is cleaned, and no
// VolumeAttachment of those volumes remains on it. It never decides by time.
func Release(fr *fencingv1alpha1.FencingRequest, vas []*storagev1.VolumeAttachment, pvHandle func(pv string) (driver, handle string)) (bool, string) {
	if fr != nil {
		for _, v := range fr.Status.Volumes {
			if v.FencedTime != nil && v.CleanedTime == nil {
				msg := fmt.Sprintf("volume %s of driver %s is not cleaned up on the node yet", v.VolumeHandle, v.Driver)
				if v.CleanupError != "" {
					msg += ": " + v.CleanupError
				}
				return false, msg
			}
		}
	}
	for _, va := range vas {
		if va.Spec.Source.PersistentVolumeName == nil || fr == nil {
			continue
		}
		d, h := pvHandle(*va.Spec.Source.PersistentVolumeName)
		if fencerecord.Find(fr, d, h) != nil {
			return false, fmt.Sprintf("VolumeAttachment %s of a fenced volume is still on the node", va.Name)
		}
	}
	return true, ""
}
