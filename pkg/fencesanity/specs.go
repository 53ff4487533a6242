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

package fencesanity

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/kubernetes-csi/csi-test/v5/utils"
	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL reads as prose
	. "github.com/onsi/gomega"    //nolint:revive
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// Messages of the skipped specs.
const (
	NoFenceMessage    = "the driver does not advertise UNPUBLISH_FENCE (ControllerServiceCapability type 1000): fence specs do not apply"
	NoPublishMessage  = "the driver does not advertise PUBLISH_UNPUBLISH_VOLUME: nothing to fence"
	NoForceMessage    = "the node plugin does not advertise FORCE_UNPUBLISH (NodeServiceCapability type 1000): a fenced volume cannot be cleaned up on the node"
	NoIOCheckMessage  = "no I/O checker configured (fencesanity.Config.IOChecker, csi-fence-sanity --fence.io-check-cmd): whether a fence cuts the node's I/O is NOT checked, and a driver whose fence leaves the node writing passes"
	NoOtherNodeMesage = "no second node plugin configured (fencesanity.Config.OtherNodeAddress, csi-fence-sanity --fence.other-node-endpoint)"
	NoListMessage     = "the driver does not advertise LIST_VOLUMES_PUBLISHED_NODES"
)

// Deprecated capability values csi-test still accepts (VOLUME_CONDITION,
// removed from the spec in v1.13.0).
const (
	deprecatedControllerVolumeCondition csi.ControllerServiceCapability_RPC_Type = 11
	deprecatedNodeVolumeCondition       csi.NodeServiceCapability_RPC_Type       = 4
)

type controllerCaps map[csi.ControllerServiceCapability_RPC_Type]bool
type nodeCaps map[csi.NodeServiceCapability_RPC_Type]bool

func getControllerCaps(c csi.ControllerClient) ([]csi.ControllerServiceCapability_RPC_Type, controllerCaps) {
	GinkgoHelper()
	rsp, err := c.ControllerGetCapabilities(context.Background(), &csi.ControllerGetCapabilitiesRequest{})
	Expect(err).NotTo(HaveOccurred())
	var list []csi.ControllerServiceCapability_RPC_Type
	set := controllerCaps{}
	for _, cp := range rsp.GetCapabilities() {
		Expect(cp.GetRpc()).NotTo(BeNil(), "a controller capability without RPC type")
		list = append(list, cp.GetRpc().GetType())
		set[cp.GetRpc().GetType()] = true
	}
	return list, set
}

func getNodeCaps(c csi.NodeClient) ([]csi.NodeServiceCapability_RPC_Type, nodeCaps) {
	GinkgoHelper()
	rsp, err := c.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
	Expect(err).NotTo(HaveOccurred())
	var list []csi.NodeServiceCapability_RPC_Type
	set := nodeCaps{}
	for _, cp := range rsp.GetCapabilities() {
		Expect(cp.GetRpc()).NotTo(BeNil(), "a node capability without RPC type")
		list = append(list, cp.GetRpc().GetType())
		set[cp.GetRpc().GetType()] = true
	}
	return list, set
}

// The replacements of csi-test's capability specs: every value the spec
// names (and the deprecated ones csi-test accepts) plus the extension's.
var _ = sanity.DescribeSanity("Capabilities with the fence extension", func(sc *sanity.TestContext) {
	It("ControllerGetCapabilities should return appropriate capabilities, the extension's included", func() {
		list, _ := getControllerCaps(csi.NewControllerClient(sc.ControllerConn))
		for _, t := range list {
			_, named := csi.ControllerServiceCapability_RPC_Type_name[int32(t)]
			known := (named && t != csi.ControllerServiceCapability_RPC_UNKNOWN) || t == deprecatedControllerVolumeCondition || t == fence.ControllerUnpublishFence
			Expect(known).To(BeTrue(), "unknown controller capability %v", t)
		}
	})
	It("NodeGetCapabilities should return appropriate capabilities, the extension's included", func() {
		list, _ := getNodeCaps(csi.NewNodeClient(sc.Conn))
		for _, t := range list {
			_, named := csi.NodeServiceCapability_RPC_Type_name[int32(t)]
			known := named || t == deprecatedNodeVolumeCondition || t == fence.NodeForceUnpublish
			Expect(known).To(BeTrue(), "unknown node capability %v", t)
		}
	})
})

// placement is a volume on one node, and how far it got there.
type placement struct {
	nodeID    string
	node      csi.NodeClient
	nodeSide  bool // stage/publish on the node too
	stage     bool // the node plugin stages
	force     bool // the node plugin honours force
	staging   string
	target    string
	published bool // ControllerPublishVolume done
	staged    bool
	mounted   bool
	fenced    bool
}

// volume is one volume of a spec, with its placements.
type volume struct {
	id  string
	cap *csi.VolumeCapability
	on  []*placement
}

// env holds what a fence spec works with.
type env struct {
	sc    *sanity.TestContext
	r     *sanity.Resources
	ctl   csi.ControllerClient
	ccaps controllerCaps
	this  *placement // template of this node
	other *placement // template of the other node, nil if none configured
	vols  []*volume
}

func (e *env) ctx() context.Context { return context.Background() }

func (e *env) createVolume(name string, mode csi.VolumeCapability_AccessMode_Mode) *volume {
	GinkgoHelper()
	req := sanity.MakeCreateVolumeReq(e.sc, sanity.UniqueString(name))
	c := sanity.TestVolumeCapabilityWithAccessType(e.sc, mode)
	req.VolumeCapabilities = []*csi.VolumeCapability{c}
	rsp := e.r.MustCreateVolume(e.ctx(), req)
	v := &volume{id: rsp.GetVolume().GetVolumeId(), cap: c}
	e.vols = append(e.vols, v)
	return v
}

func (e *env) publishReq(v *volume, nodeID string) *csi.ControllerPublishVolumeRequest {
	return &csi.ControllerPublishVolumeRequest{VolumeId: v.id, NodeId: nodeID, VolumeCapability: v.cap, Secrets: e.sc.Secrets.ControllerPublishVolumeSecret}
}

// place publishes v to the node of tmpl: ControllerPublishVolume, then (if
// tmpl.nodeSide) NodeStageVolume and NodePublishVolume.
func (e *env) place(v *volume, tmpl *placement) *placement {
	GinkgoHelper()
	p := *tmpl
	v.on = append(v.on, &p)
	By(fmt.Sprintf("publishing %s to node %s", v.id, p.nodeID))
	rsp, err := e.ctl.ControllerPublishVolume(e.ctx(), e.publishReq(v, p.nodeID))
	Expect(err).NotTo(HaveOccurred(), "ControllerPublishVolume to node %s", p.nodeID)
	p.published = true
	if !p.nodeSide {
		return &p
	}
	if p.stage {
		Expect(os.MkdirAll(p.staging, 0o755)).To(Succeed())
		_, err := p.node.NodeStageVolume(e.ctx(), &csi.NodeStageVolumeRequest{
			VolumeId: v.id, PublishContext: rsp.GetPublishContext(), StagingTargetPath: p.staging, VolumeCapability: v.cap,
			Secrets: e.sc.Secrets.NodeStageVolumeSecret,
		})
		Expect(err).NotTo(HaveOccurred(), "NodeStageVolume on node %s", p.nodeID)
		p.staged = true
	}
	req := &csi.NodePublishVolumeRequest{
		VolumeId: v.id, PublishContext: rsp.GetPublishContext(), TargetPath: p.target, VolumeCapability: v.cap,
		Secrets: e.sc.Secrets.NodePublishVolumeSecret,
	}
	if p.stage {
		req.StagingTargetPath = p.staging
	}
	_, err = p.node.NodePublishVolume(e.ctx(), req)
	Expect(err).NotTo(HaveOccurred(), "NodePublishVolume on node %s", p.nodeID)
	p.mounted = true
	return &p
}

// retryForNow calls fn until it succeeds, fails with another code than
// FAILED_PRECONDITION or UNAVAILABLE (what a driver answers while it cannot
// do it yet), or config.FenceTimeout has passed.
func retryForNow(what string, fn func() error) error {
	deadline := time.Now().Add(config.FenceTimeout)
	delay := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		c := status.Code(err)
		if (c != codes.FailedPrecondition && c != codes.Unavailable) || time.Now().After(deadline) {
			return err
		}
		By(fmt.Sprintf("the driver refuses %s for now (%v); retrying in %v", what, err, delay))
		time.Sleep(delay)
		delay = min(2*delay, 2*time.Second)
	}
}

// fence calls ControllerUnpublishVolume with fence=true, retrying while the
// driver refuses for now (it cannot yet prove the node stopped).
func (e *env) fence(v *volume, nodeID string) error {
	err := retryForNow("the fence", func() error {
		req := &csi.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: nodeID, Secrets: e.sc.Secrets.ControllerUnpublishVolumeSecret}
		fence.SetFence(req, true)
		_, err := e.ctl.ControllerUnpublishVolume(e.ctx(), req)
		return err
	})
	if err != nil {
		return err
	}
	for _, p := range v.on {
		if p.nodeID == nodeID {
			p.fenced, p.published = true, false
		}
	}
	return nil
}

func (e *env) mustFence(v *volume, nodeID string) {
	GinkgoHelper()
	By(fmt.Sprintf("fencing %s on node %s", v.id, nodeID))
	Expect(e.fence(v, nodeID)).To(Succeed(), "ControllerUnpublishVolume(fence=true) of %s on node %s", v.id, nodeID)
}

func (e *env) canWrite(v *volume, p *placement) bool {
	GinkgoHelper()
	target := ""
	if p.mounted {
		target = p.target
	}
	ok, err := config.IOChecker.CanWrite(e.ctx(), IOTarget{NodeID: p.nodeID, VolumeID: v.id, TargetPath: target})
	Expect(err).NotTo(HaveOccurred(), "checking I/O of node %s on %s", p.nodeID, v.id)
	return ok
}

func (e *env) nodeUnpublish(v *volume, p *placement, force bool) error {
	req := &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: p.target}
	fence.SetNodeUnpublishForce(req, force)
	_, err := p.node.NodeUnpublishVolume(e.ctx(), req)
	if err == nil {
		p.mounted = false
	}
	return err
}

func (e *env) nodeUnstage(v *volume, p *placement, force bool) error {
	req := &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: p.staging}
	fence.SetNodeUnstageForce(req, force)
	_, err := p.node.NodeUnstageVolume(e.ctx(), req)
	if err == nil {
		p.staged = false
		os.Remove(p.staging) // the CO's part; the driver may have done it
	}
	return err
}

func (e *env) unpublish(v *volume, nodeID string) error {
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: nodeID, Secrets: e.sc.Secrets.ControllerUnpublishVolumeSecret}
	fence.SetFence(req, false)
	_, err := e.ctl.ControllerUnpublishVolume(e.ctx(), req)
	return err
}

// publishedNodes lists the nodes ListVolumes reports for v.
func (e *env) publishedNodes(v *volume) []string {
	GinkgoHelper()
	token := ""
	for {
		rsp, err := e.ctl.ListVolumes(e.ctx(), &csi.ListVolumesRequest{StartingToken: token})
		Expect(err).NotTo(HaveOccurred())
		for _, en := range rsp.GetEntries() {
			if en.GetVolume().GetVolumeId() == v.id {
				return en.GetStatus().GetPublishedNodeIds()
			}
		}
		if token = rsp.GetNextToken(); token == "" {
			return nil
		}
	}
}

// cleanup undoes every placement: forced on fenced nodes when the node
// plugin can, in the order a CO would; then it deletes the volumes. A driver
// may refuse a delete for a while after a node's last I/O (the specs' I/O
// checks write as a workload no node plugin knows of, and a plain unpublish
// leaves such a node connected until it goes quiet): the delete is retried
// as a CO retries it, not left to csi-test's cleanup, which tries once.
func (e *env) cleanup() {
	GinkgoHelper()
	var errs []error
	for _, v := range e.vols {
		for _, p := range v.on {
			force := p.fenced && p.force
			if p.mounted {
				if err := e.nodeUnpublish(v, p, force); err != nil {
					errs = append(errs, fmt.Errorf("NodeUnpublishVolume(force=%v) of %s on %s: %w", force, v.id, p.nodeID, err))
				}
			}
			if p.staged {
				if err := e.nodeUnstage(v, p, force); err != nil {
					errs = append(errs, fmt.Errorf("NodeUnstageVolume(force=%v) of %s on %s: %w", force, v.id, p.nodeID, err))
				}
			}
			if p.published {
				if err := e.unpublish(v, p.nodeID); err != nil {
					errs = append(errs, fmt.Errorf("ControllerUnpublishVolume of %s on %s: %w", v.id, p.nodeID, err))
				}
			}
		}
	}
	for _, v := range e.vols {
		err := retryForNow("DeleteVolume of "+v.id, func() error {
			_, err := e.ctl.DeleteVolume(e.ctx(), &csi.DeleteVolumeRequest{VolumeId: v.id, Secrets: e.sc.Secrets.DeleteVolumeSecret})
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("DeleteVolume of %s: %w", v.id, err))
		}
	}
	e.vols = nil
	Expect(errs).To(BeEmpty(), "cleaning up the fence specs' volumes")
}

var otherNode struct {
	sync.Mutex
	addr string
	conn *grpc.ClientConn
}

// otherNodeClient connects to the second node plugin once per process, as
// sanity does for the first.
func otherNodeClient() csi.NodeClient {
	GinkgoHelper()
	otherNode.Lock()
	defer otherNode.Unlock()
	if otherNode.conn == nil || otherNode.addr != config.OtherNodeAddress {
		if otherNode.conn != nil {
			otherNode.conn.Close()
		}
		opts := config.OtherNodeDialOptions
		if len(opts) == 0 {
			opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost")}
		}
		conn, err := utils.Connect(config.OtherNodeAddress, opts...)
		Expect(err).NotTo(HaveOccurred(), "connecting to the second node plugin at %s", config.OtherNodeAddress)
		otherNode.conn, otherNode.addr = conn, config.OtherNodeAddress
	}
	return csi.NewNodeClient(otherNode.conn)
}

func closeOtherNode() {
	otherNode.Lock()
	defer otherNode.Unlock()
	if otherNode.conn != nil {
		otherNode.conn.Close()
		otherNode.conn = nil
	}
}

func nodeTemplate(nc csi.NodeClient, staging, target string) *placement {
	GinkgoHelper()
	info, err := nc.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	Expect(err).NotTo(HaveOccurred())
	Expect(info.GetNodeId()).NotTo(BeEmpty())
	_, caps := getNodeCaps(nc)
	p := &placement{nodeID: info.GetNodeId(), node: nc, stage: caps[csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME], force: caps[fence.NodeForceUnpublish], staging: staging, target: target}
	// Without force, a fenced volume could not be cleaned off the node: such
	// specs publish on the controller side only.
	p.nodeSide = p.force
	return p
}

var _ = sanity.DescribeSanity("Fence [Controller Server]", func(sc *sanity.TestContext) {
	var e *env

	BeforeEach(func() {
		e = &env{sc: sc, ctl: csi.NewControllerClient(sc.ControllerConn)}
		e.r = &sanity.Resources{Context: sc, ControllerClient: e.ctl, NodeClient: csi.NewNodeClient(sc.Conn)}
		_, e.ccaps = getControllerCaps(e.ctl)
		if !e.ccaps[fence.ControllerUnpublishFence] {
			Skip(NoFenceMessage)
		}
		e.this = nodeTemplate(csi.NewNodeClient(sc.Conn), sc.StagingPath, filepath.Join(sc.TargetPath, "target"))
	})

	// e is nil, or a previous spec's, when a BeforeEach before ours (csi-test's
	// setup) failed: then there is nothing of this spec to clean up.
	AfterEach(func() {
		if e == nil {
			return
		}
		defer func() { e = nil }()
		e.cleanup()
		e.r.Cleanup()
	})

	needForce := func() {
		if !e.this.force {
			Skip(NoForceMessage)
		}
	}
	needIO := func() {
		if config.IOChecker == nil {
			Skip(NoIOCheckMessage)
		}
	}
	needList := func() {
		if !e.ccaps[csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES] {
			Skip(NoListMessage)
		}
	}

	Describe("capabilities", func() {
		It("advertises UNPUBLISH_FENCE with PUBLISH_UNPUBLISH_VOLUME, each once, the same on every call", func() {
			Expect(e.ccaps[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME]).To(BeTrue(), "UNPUBLISH_FENCE without PUBLISH_UNPUBLISH_VOLUME")
			first, _ := getControllerCaps(e.ctl)
			second, _ := getControllerCaps(e.ctl)
			Expect(second).To(Equal(first), "ControllerGetCapabilities changed between calls")
			seen := controllerCaps{}
			for _, t := range first {
				Expect(seen[t]).To(BeFalse(), "controller capability %v advertised twice", t)
				seen[t] = true
			}
			nfirst, _ := getNodeCaps(e.this.node)
			nsecond, _ := getNodeCaps(e.this.node)
			Expect(nsecond).To(Equal(nfirst), "NodeGetCapabilities changed between calls")
			if !e.this.force {
				AddReportEntry("warning", "the controller fences but the node plugin does not advertise FORCE_UNPUBLISH: "+
					"a fenced volume can only be cleaned off the node by an unforced NodeUnpublishVolume/NodeUnstageVolume")
			}
		})
	})

	Describe("on a single-node volume published to this node", func() {
		var v *volume
		var here *placement

		BeforeEach(func() {
			v = e.createVolume("sanity-fence", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
			here = e.place(v, e.this)
		})

		It("fence=true cuts the node's I/O before it returns", func() {
			needIO()
			Expect(e.canWrite(v, here)).To(BeTrue(), "node %s cannot write to %s before the fence", here.nodeID, v.id)
			e.mustFence(v, here.nodeID)
			Expect(e.canWrite(v, here)).To(BeFalse(), "node %s can still write to %s after ControllerUnpublishVolume(fence=true) succeeded", here.nodeID, v.id)
		})

		It("fence=true is idempotent", func() {
			n := max(sc.Config.IdempotentCount, 2)
			for i := 0; i < n; i++ {
				e.mustFence(v, here.nodeID)
			}
		})

		It("does not publish a fenced volume to the same node again", func() {
			e.mustFence(v, here.nodeID)
			_, err := e.ctl.ControllerPublishVolume(e.ctx(), e.publishReq(v, here.nodeID))
			here.published = here.published || err == nil
			Expect(err).To(HaveOccurred(), "ControllerPublishVolume of %s to node %s, where it is quarantined, succeeded", v.id, here.nodeID)
			By(fmt.Sprintf("refused with %v", status.Code(err)))
		})

		It("does not list a fenced node among the volume's published nodes", func() {
			needList()
			Expect(e.publishedNodes(v)).To(ContainElement(here.nodeID))
			e.mustFence(v, here.nodeID)
			Expect(e.publishedNodes(v)).NotTo(ContainElement(here.nodeID))
		})

		It("succeeds forced NodeUnpublishVolume and NodeUnstageVolume after a fence, idempotently", func() {
			needForce()
			e.mustFence(v, here.nodeID)
			for i := 0; i < 2; i++ {
				Expect(e.nodeUnpublish(v, here, true)).To(Succeed(), "NodeUnpublishVolume(force=true) #%d after a fence", i+1)
			}
			if here.stage {
				for i := 0; i < 2; i++ {
					Expect(e.nodeUnstage(v, here, true)).To(Succeed(), "NodeUnstageVolume(force=true) #%d after a fence", i+1)
				}
			}
		})

		It("publishes the volume to the node again only after forced cleanup", func() {
			needForce()
			e.mustFence(v, here.nodeID)
			Expect(e.nodeUnpublish(v, here, true)).To(Succeed())
			if here.stage {
				_, err := e.ctl.ControllerPublishVolume(e.ctx(), e.publishReq(v, here.nodeID))
				here.published = here.published || err == nil
				Expect(err).To(HaveOccurred(), "published to node %s while the volume is still staged there after a fence", here.nodeID)
				Expect(e.nodeUnstage(v, here, true)).To(Succeed())
			}
			By("publishing it again after the cleanup")
			again := e.place(v, e.this)
			if config.IOChecker != nil {
				Expect(e.canWrite(v, again)).To(BeTrue(), "node %s cannot write to %s after it was cleaned up and published again", again.nodeID, v.id)
			}
		})

		It("fence=false behaves as plain CSI", func() {
			if here.mounted {
				Expect(e.nodeUnpublish(v, here, false)).To(Succeed())
			}
			if here.staged {
				Expect(e.nodeUnstage(v, here, false)).To(Succeed())
			}
			for i := 0; i < 2; i++ {
				Expect(e.unpublish(v, here.nodeID)).To(Succeed(), "ControllerUnpublishVolume(fence=false) #%d", i+1)
			}
			here.published = false
			if e.ccaps[csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES] {
				Expect(e.publishedNodes(v)).NotTo(ContainElement(here.nodeID))
			}
			By("publishing it to the same node again: nothing is quarantined")
			e.place(v, e.this)
		})
	})

	Describe("without a publication", func() {
		It("fence=true of a volume not published to the node succeeds and quarantines nothing", func() {
			v := e.createVolume("sanity-fence-unpublished", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
			e.mustFence(v, e.this.nodeID)
			e.place(v, e.this)
		})

		It("fence=true of an unknown volume succeeds (or says NotFound)", func() {
			v := &volume{id: sc.Config.IDGen.GenerateUniqueValidVolumeID()}
			err := e.fence(v, e.this.nodeID)
			if err != nil {
				Expect(status.Code(err)).To(Equal(codes.NotFound), "fence of an unknown volume: %v", err)
			}
		})
	})

	Describe("with a second node", func() {
		BeforeEach(func() {
			if config.OtherNodeAddress == "" {
				Skip(NoOtherNodeMesage)
			}
			e.other = nodeTemplate(otherNodeClient(), sc.StagingPath+"-other-node", filepath.Join(sc.TargetPath, "other-node-target"))
			Expect(e.other.nodeID).NotTo(Equal(e.this.nodeID), "the second node plugin reports the same node ID as the first")
		})

		It("publishes a fenced single-node volume to the other node, and only that node writes", func() {
			v := e.createVolume("sanity-fence-move", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
			here := e.place(v, e.this)
			if config.IOChecker != nil {
				Expect(e.canWrite(v, here)).To(BeTrue())
			}
			e.mustFence(v, here.nodeID)
			there := e.place(v, e.other)
			if config.IOChecker != nil {
				Expect(e.canWrite(v, there)).To(BeTrue(), "the new node %s cannot write to %s", there.nodeID, v.id)
				Expect(e.canWrite(v, here)).To(BeFalse(), "the fenced node %s still writes to %s after it moved to %s", here.nodeID, v.id, there.nodeID)
			}
		})

		It("leaves the other nodes of a multi-node volume alone", func() {
			v := e.createVolume("sanity-fence-rwx", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
			here := e.place(v, e.this)
			there := e.place(v, e.other)
			e.mustFence(v, here.nodeID)
			if config.IOChecker != nil {
				Expect(e.canWrite(v, there)).To(BeTrue(), "node %s lost its access to the multi-node volume %s when node %s was fenced", there.nodeID, v.id, here.nodeID)
				Expect(e.canWrite(v, here)).To(BeFalse(), "the fenced node %s still writes to %s", here.nodeID, v.id)
			}
			if e.ccaps[csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES] {
				nodes := e.publishedNodes(v)
				Expect(nodes).To(ContainElement(there.nodeID))
				Expect(nodes).NotTo(ContainElement(here.nodeID))
			}
			if there.mounted {
				Expect(e.nodeUnpublish(v, there, false)).To(Succeed(), "unforced NodeUnpublishVolume on the node that was not fenced")
			}
		})
	})
})
