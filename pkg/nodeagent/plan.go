/*
Copyright 2026 The fence-attacher Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package nodeagent

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
)

// stepKind is one kind of cleanup step.
type stepKind int

const (
	// stepUnpublish is NodeUnpublishVolume(path).
	stepUnpublish stepKind = iota
	// stepUnstage is NodeUnstageVolume(path).
	stepUnstage
	// stepRemovePodVolume removes a filesystem publish directory.
	stepRemovePodVolume
	// stepRemoveStaged removes a filesystem staging directory.
	stepRemoveStaged
	// stepRemoveBlockPod removes a block volume's per-pod leftovers.
	stepRemoveBlockPod
	// stepRemoveBlockVolume removes a block volume's directories.
	stepRemoveBlockVolume
)

// step is one CSI call or one removal. Which fields are set depends on kind.
type step struct {
	kind      stepKind
	path      string                     // stepUnpublish, stepUnstage
	podVolume kubeletlayout.PodVolume    // stepRemovePodVolume
	staged    kubeletlayout.StagedVolume // stepRemoveStaged
	specName  string                     // stepRemoveBlock*
	podUID    string                     // stepRemoveBlockPod
}

func (s step) String() string {
	switch s.kind {
	case stepUnpublish:
		return "NodeUnpublishVolume " + s.path
	case stepUnstage:
		return "NodeUnstageVolume " + s.path
	case stepRemovePodVolume:
		return "remove " + s.podVolume.Dir
	case stepRemoveStaged:
		return "remove " + s.staged.Dir
	case stepRemoveBlockPod:
		return fmt.Sprintf("remove block leftovers of %s for pod %s", s.specName, s.podUID)
	case stepRemoveBlockVolume:
		return "remove block volume " + s.specName
	}
	return "unknown step"
}

// planCleanup lists, in order, what cleans up the leftovers m of vol on a
// node, the way the kubelet tears a volume down: every publish path is
// unpublished (and its directory removed) before the volume is unstaged
// (and its staging directories removed). It only plans; it touches nothing.
//
//   - Publish directories attributed by their vol_data.json get
//     NodeUnpublishVolume on their target path; block volumes (attributed by
//     metadata or, having none, by PV name, which is unique) get it on each
//     pod's publish path.
//   - Publish directories without metadata named after the PV get no CSI
//     call (the kubelet writes the metadata before it publishes, so none
//     went through them, and an inline volume of another driver may share
//     the name); they are only removed, which fails while anything in them
//     is mounted.
//   - With STAGE_UNSTAGE_VOLUME, NodeUnstageVolume is called on every staging
//     path found; if none was found, on the path the kubelet would have used
//     for this volume: the plugin may still hold state of a stage whose
//     directories are gone, and a forced unstage of a volume that was never
//     staged is a no-op by the spec's idempotency rules. This is what lifts
//     the quarantine of a volume fenced before it was staged.
func planCleanup(l kubeletlayout.Layout, vol kubeletlayout.Volume, m kubeletlayout.Match, canStage bool) []step {
	var steps []step
	for _, p := range m.PodVolumes {
		steps = append(steps,
			step{kind: stepUnpublish, path: p.TargetPath},
			step{kind: stepRemovePodVolume, podVolume: p})
	}
	for _, b := range m.Block {
		for _, uid := range b.PodUIDs {
			steps = append(steps,
				step{kind: stepUnpublish, path: l.BlockPublishPath(b.SpecName, uid)},
				step{kind: stepRemoveBlockPod, specName: b.SpecName, podUID: uid})
		}
	}
	for _, p := range m.UnverifiedPodVolumes {
		steps = append(steps, step{kind: stepRemovePodVolume, podVolume: p})
	}
	if canStage {
		var staging []string
		for _, s := range m.Staged {
			staging = append(staging, s.StagingPath)
		}
		for _, b := range m.Block {
			staging = append(staging, l.BlockStagingPath(b.SpecName))
		}
		if len(staging) == 0 {
			staging = []string{l.StagingPath(vol.Driver, vol.VolumeHandle)}
		}
		for _, p := range staging {
			steps = append(steps, step{kind: stepUnstage, path: p})
		}
	}
	// Without STAGE_UNSTAGE_VOLUME the kubelet still creates an (empty)
	// staging directory; it is removed like any other.
	for _, s := range m.Staged {
		steps = append(steps, step{kind: stepRemoveStaged, staged: s})
	}
	for _, b := range m.Block {
		steps = append(steps, step{kind: stepRemoveBlockVolume, specName: b.SpecName})
	}
	return steps
}

// blockUsers maps each block volume of m to the pods of exist, which still
// exist on this node, that map it. While one does, the volume's directory
// (volumeDevices/<specName>, with data/vol_data.json) is the kubelet's to
// remove: its block unmapper (NewBlockVolumeUnmapper) reads that file to
// unmap the pod and to unstage the volume after it, as the filesystem
// unmounter reads the publish directory's (Agent.livePods).
func blockUsers(m kubeletlayout.Match, exist sets.Set[string]) map[string]sets.Set[string] {
	users := map[string]sets.Set[string]{}
	for _, b := range m.Block {
		for _, uid := range b.PodUIDs {
			if !exist.Has(uid) {
				continue
			}
			if users[b.SpecName] == nil {
				users[b.SpecName] = sets.New[string]()
			}
			users[b.SpecName].Insert(uid)
		}
	}
	return users
}

// leaveToKubelet drops from steps the removal of what the kubelet still
// needs to tear down the volumes of the pods in exist, which still exist on
// this node (Agent.livePods): a filesystem volume's publish directory with
// its vol_data.json, and the directory of a block volume one of them maps
// (users, from blockUsers) or that the kubelet still holds (held, from
// Agent.kubeletHolds), with its own. Every NodeUnpublishVolume and
// NodeUnstageVolume stays: the forced calls cut the node off the volume
// either way. So does the removal of a block volume's per-pod entries (the
// pod's device symlink, its entry under the global map path, its publish
// path): the kubelet's unmap takes each one missing as done. On a real node
// the entry under the global map path of a pod that runs is the kubelet's
// bind mount of the device, which the agent does not unmount in force mode:
// its removal then fails as still mounted, and the volume waits for the pod
// to go (the node's release with it).
func leaveToKubelet(steps []step, exist sets.Set[string], users map[string]sets.Set[string], held sets.Set[string]) []step {
	return slices.DeleteFunc(steps, func(s step) bool {
		switch s.kind {
		case stepRemovePodVolume:
			return s.podVolume.Data != nil && exist.Has(s.podVolume.PodUID)
		case stepRemoveBlockVolume:
			return users[s.specName].Len() > 0 || held.Has(s.specName)
		}
		return false
	})
}

// heldBlock returns the block volumes of m that the kubelet still holds.
func heldBlock(m kubeletlayout.Match, held sets.Set[string]) []string {
	var specs []string
	for _, b := range m.Block {
		if held.Has(b.SpecName) {
			specs = append(specs, b.SpecName)
		}
	}
	return specs
}

// kubeletKept splits from m, found after the cleanup, what leaveToKubelet
// kept for pods that exist and are not being deleted: the publish
// directories of filesystem volumes (kept) and the directories of block
// volumes that only such pods map (keptBlock, once the per-pod entries are
// gone). The volume may be recorded clean with those in place, once nothing
// is mounted in them (Agent.checkKeptUnmounted). What is left in rest must
// be gone before it is; that includes what pods being deleted still need.
//
// Why the two differ. A pod being deleted is one the kubelet tears down now
// (within its grace period, or as soon as the node is back): waiting for it
// to remove the directory costs little and keeps the rule that a volume is
// recorded clean only once a fresh scan finds nothing of it. A pod that is
// not being deleted (an admin's fence of a Ready node under running pods)
// may run for months: waiting for the kubelet would hold the node's
// quarantine, and the admin's release, as long as it runs. What the
// quarantine waits for is that the node can no longer reach the volume
// through anything the fence left behind: the forced NodeUnpublishVolume
// (and NodeUnstageVolume) returned and nothing is mounted there any more.
// The directory holds no data, only the kubelet's record of the pod's
// volume: the kubelet's teardown when the pod goes unpublishes an unmounted
// path (NodeUnpublishVolume is idempotent in CSI) and removes it. A kubelet
// that restarts meanwhile reconstructs the volume from it as uncertain, then
// tears it down for a deleted pod, or mounts it again for a running one, as
// it would without the directory (the pod still wants the volume); while the
// node is quarantined, that publish goes to a volume fenced there (real
// kubelet 1.36, filesystem volume: TestRealNodesManualFence, "kubelet
// restart, then drain").
func kubeletKept(m kubeletlayout.Match, pods nodePods, users map[string]sets.Set[string]) (rest kubeletlayout.Match, kept []kubeletlayout.PodVolume, keptBlock []kubeletlayout.BlockVolume) {
	rest = m
	rest.PodVolumes, rest.Block = nil, nil
	for _, p := range m.PodVolumes {
		if p.Data != nil && pods.exist.Has(p.PodUID) && !pods.deleting.Has(p.PodUID) {
			kept = append(kept, p)
			continue
		}
		rest.PodVolumes = append(rest.PodVolumes, p)
	}
	for _, b := range m.Block {
		u := users[b.SpecName]
		if b.Data != nil && len(b.PodUIDs) == 0 && u.Len() > 0 && u.Intersection(pods.deleting).Len() == 0 {
			keptBlock = append(keptBlock, b)
			continue
		}
		rest.Block = append(rest.Block, b)
	}
	return rest, kept, keptBlock
}

// kubeletsToRemove returns the pods in deleting whose publish directories,
// with their vol_data.json, remain in m, or which map a block volume whose
// directory remains in m.
func kubeletsToRemove(m kubeletlayout.Match, deleting sets.Set[string], users map[string]sets.Set[string]) []string {
	pods := sets.New[string]()
	for _, p := range m.PodVolumes {
		if deleting.Has(p.PodUID) {
			pods.Insert(p.PodUID)
		}
	}
	for _, b := range m.Block {
		pods = pods.Union(users[b.SpecName].Intersection(deleting))
	}
	return sets.List(pods)
}
